// CPython 3.11's opcodes (numbers from Lib/opcode.py of 3.11; checked against `opcode.opmap` and
// `dis._inline_cache_entries` by tests/python/frontend/test_interp_opcodes.py).
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000

#include "frame_eval/opcodes.h"

namespace ff {
namespace {

constexpr uint8_t F = kJumpForward, B = kJumpBackward, M = kMayBreak, S = kNoStackCheck;

// X(name, number, handler, caches, flags)
// clang-format off
#define FF_OPCODES_311(X)                                         \
  X(CACHE, 0, Unsupported, 0, 0)                                  \
  X(POP_TOP, 1, PopTop, 0, 0)                                     \
  X(PUSH_NULL, 2, PushNull, 0, 0)                                 \
  X(NOP, 9, Nop, 0, 0)                                            \
  X(UNARY_POSITIVE, 10, UnaryPositive, 0, M)                      \
  X(UNARY_NEGATIVE, 11, UnaryNegative, 0, M)                      \
  X(UNARY_NOT, 12, UnaryNot, 0, M)                                \
  X(UNARY_INVERT, 15, UnaryInvert, 0, M)                          \
  X(BINARY_SUBSCR, 25, BinarySubscr, 4, M)                        \
  X(GET_LEN, 30, GetLen, 0, M)                                    \
  X(MATCH_MAPPING, 31, Unsupported, 0, 0)                         \
  X(MATCH_SEQUENCE, 32, Unsupported, 0, 0)                        \
  X(MATCH_KEYS, 33, Unsupported, 0, 0)                            \
  X(PUSH_EXC_INFO, 35, Unsupported, 0, 0)                         \
  X(CHECK_EXC_MATCH, 36, Unsupported, 0, 0)                       \
  X(CHECK_EG_MATCH, 37, Unsupported, 0, 0)                        \
  X(WITH_EXCEPT_START, 49, Unsupported, 0, 0)                     \
  X(GET_AITER, 50, Unsupported, 0, 0)                             \
  X(GET_ANEXT, 51, Unsupported, 0, 0)                             \
  X(BEFORE_ASYNC_WITH, 52, Unsupported, 0, 0)                     \
  X(BEFORE_WITH, 53, BeforeWith, 0, M)                            \
  X(END_ASYNC_FOR, 54, Unsupported, 0, 0)                         \
  X(STORE_SUBSCR, 60, StoreSubscr, 1, M)                          \
  X(DELETE_SUBSCR, 61, DeleteSubscr, 0, M)                        \
  X(GET_ITER, 68, GetIter, 0, M)                                  \
  X(GET_YIELD_FROM_ITER, 69, Unsupported, 0, 0)                   \
  X(PRINT_EXPR, 70, Unsupported, 0, 0)                            \
  X(LOAD_BUILD_CLASS, 71, LoadBuildClass, 0, 0)                      \
  X(LOAD_ASSERTION_ERROR, 74, LoadAssertionError, 0, 0)           \
  X(RETURN_GENERATOR, 75, ReturnGenerator, 0, M)                  \
  X(LIST_TO_TUPLE, 82, ListToTuple, 0, 0)                         \
  X(RETURN_VALUE, 83, ReturnValue, 0, M)                          \
  X(IMPORT_STAR, 84, Unsupported, 0, 0)                           \
  X(SETUP_ANNOTATIONS, 85, Unsupported, 0, 0)                     \
  X(YIELD_VALUE, 86, YieldValue, 0, M)                            \
  X(ASYNC_GEN_WRAP, 87, Unsupported, 0, 0)                        \
  X(PREP_RERAISE_STAR, 88, Unsupported, 0, 0)                     \
  X(POP_EXCEPT, 89, Unsupported, 0, 0)                            \
  X(STORE_NAME, 90, Unsupported, 0, 0)                            \
  X(DELETE_NAME, 91, Unsupported, 0, 0)                           \
  X(UNPACK_SEQUENCE, 92, UnpackSequence, 1, M)                    \
  X(FOR_ITER, 93, ForIter, 0, F | M)                              \
  X(UNPACK_EX, 94, UnpackEx, 0, M)                                \
  X(STORE_ATTR, 95, StoreAttr, 4, M)                              \
  X(DELETE_ATTR, 96, DeleteAttr, 0, M)                             \
  X(STORE_GLOBAL, 97, StoreGlobal, 0, M)                          \
  X(DELETE_GLOBAL, 98, Unsupported, 0, 0)                         \
  X(SWAP, 99, Swap, 0, 0)                                         \
  X(LOAD_CONST, 100, LoadConst, 0, 0)                             \
  X(LOAD_NAME, 101, Unsupported, 0, 0)                            \
  X(BUILD_TUPLE, 102, BuildTuple, 0, 0)                           \
  X(BUILD_LIST, 103, BuildList, 0, 0)                             \
  X(BUILD_SET, 104, BuildSet, 0, M)                               \
  X(BUILD_MAP, 105, BuildMap, 0, M)                               \
  X(LOAD_ATTR, 106, LoadAttr, 4, M)                               \
  X(COMPARE_OP, 107, CompareOp, 2, M)                             \
  X(IMPORT_NAME, 108, ImportName, 0, M)                           \
  X(IMPORT_FROM, 109, ImportFrom, 0, M)                           \
  X(JUMP_FORWARD, 110, JumpForward, 0, F)                         \
  X(JUMP_IF_FALSE_OR_POP, 111, JumpIfFalseOrPop, 0, F | M)        \
  X(JUMP_IF_TRUE_OR_POP, 112, JumpIfTrueOrPop, 0, F | M)          \
  X(POP_JUMP_FORWARD_IF_FALSE, 114, PopJumpIfFalse, 0, F | M)     \
  X(POP_JUMP_FORWARD_IF_TRUE, 115, PopJumpIfTrue, 0, F | M)       \
  X(LOAD_GLOBAL, 116, LoadGlobal, 5, M)                           \
  X(IS_OP, 117, IsOp, 0, M)                                       \
  X(CONTAINS_OP, 118, ContainsOp, 0, M)                           \
  X(RERAISE, 119, Unsupported, 0, 0)                              \
  X(COPY, 120, Copy, 0, 0)                                        \
  X(BINARY_OP, 122, BinaryOp, 1, M)                               \
  X(SEND, 123, Unsupported, 0, F)                                 \
  X(LOAD_FAST, 124, LoadFast, 0, 0)                               \
  X(STORE_FAST, 125, StoreFast, 0, 0)                             \
  X(DELETE_FAST, 126, DeleteFast, 0, 0)                           \
  X(POP_JUMP_FORWARD_IF_NOT_NONE, 128, PopJumpIfNotNone, 0, F | M) \
  X(POP_JUMP_FORWARD_IF_NONE, 129, PopJumpIfNone, 0, F | M)       \
  X(RAISE_VARARGS, 130, RaiseVarargs, 0, M)                       \
  X(GET_AWAITABLE, 131, Unsupported, 0, 0)                        \
  X(MAKE_FUNCTION, 132, MakeFunction, 0, 0)                       \
  X(BUILD_SLICE, 133, BuildSlice, 0, 0)                           \
  X(JUMP_BACKWARD_NO_INTERRUPT, 134, JumpBackward, 0, B)          \
  X(MAKE_CELL, 135, MakeCell, 0, 0)                               \
  X(LOAD_CLOSURE, 136, LoadClosure, 0, 0)                         \
  X(LOAD_DEREF, 137, LoadDeref, 0, M)                             \
  X(STORE_DEREF, 138, StoreDeref, 0, M)                           \
  X(DELETE_DEREF, 139, Unsupported, 0, 0)                         \
  X(JUMP_BACKWARD, 140, JumpBackward, 0, B)                       \
  X(CALL_FUNCTION_EX, 142, CallFunctionEx, 0, M)                  \
  X(EXTENDED_ARG, 144, Nop, 0, 0)                                 \
  X(LIST_APPEND, 145, ListAppend, 0, 0)                           \
  X(SET_ADD, 146, SetAdd, 0, M)                                   \
  X(MAP_ADD, 147, MapAdd, 0, M)                                   \
  X(LOAD_CLASSDEREF, 148, Unsupported, 0, 0)                      \
  X(COPY_FREE_VARS, 149, CopyFreeVars, 0, 0)                      \
  X(RESUME, 151, Nop, 0, 0)                                       \
  X(MATCH_CLASS, 152, Unsupported, 0, 0)                          \
  X(FORMAT_VALUE, 155, FormatValue, 0, M)                         \
  X(BUILD_CONST_KEY_MAP, 156, BuildConstKeyMap, 0, M)             \
  X(BUILD_STRING, 157, BuildString, 0, M)                         \
  X(LOAD_METHOD, 160, LoadMethod, 10, M)                          \
  X(LIST_EXTEND, 162, ListExtend, 0, M)                           \
  X(SET_UPDATE, 163, SetUpdate, 0, M)                             \
  X(DICT_MERGE, 164, DictMerge, 0, M)                             \
  X(DICT_UPDATE, 165, DictUpdate, 0, M)                           \
  X(PRECALL, 166, Precall, 1, S)                                  \
  X(CALL, 171, Call, 4, M | S)                                    \
  X(KW_NAMES, 172, KwNames, 0, 0)                                 \
  X(POP_JUMP_BACKWARD_IF_NOT_NONE, 173, PopJumpIfNotNone, 0, B | M) \
  X(POP_JUMP_BACKWARD_IF_NONE, 174, PopJumpIfNone, 0, B | M)      \
  X(POP_JUMP_BACKWARD_IF_FALSE, 175, PopJumpIfFalse, 0, B | M)    \
  X(POP_JUMP_BACKWARD_IF_TRUE, 176, PopJumpIfTrue, 0, B | M)
// clang-format on

}  // namespace

FF_DEFINE_OPCODE_TABLE(FF_OPCODES_311)

int opcode_table_version() { return 311; }
int extended_arg_opcode() { return 144; }
int have_argument() { return 90; }
int compare_op_index(int oparg) { return oparg; }
bool compare_op_to_bool(int) { return false; }
int for_iter_exhausted_skip() { return 0; }
bool null_after_callable() { return false; }

}  // namespace ff

#endif
