// CPython 3.12's opcodes (numbers from Lib/opcode.py of 3.12; checked against `opcode.opmap` and
// `dis._inline_cache_entries` by tests/python/frontend/test_interp_opcodes.py).
#include <Python.h>
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000

#include "frame_eval/opcodes.h"

namespace ff {
namespace {

constexpr uint8_t F = kJumpForward, B = kJumpBackward, M = kMayBreak;

// X(name, number, handler, caches, flags)
// clang-format off
#define FF_OPCODES_312(X)                                     \
  X(CACHE, 0, Unsupported, 0, 0)                              \
  X(POP_TOP, 1, PopTop, 0, 0)                                 \
  X(PUSH_NULL, 2, PushNull, 0, 0)                             \
  X(INTERPRETER_EXIT, 3, Unsupported, 0, 0)                   \
  X(END_FOR, 4, EndFor, 0, 0)                                 \
  X(END_SEND, 5, Unsupported, 0, 0)                           \
  X(NOP, 9, Nop, 0, 0)                                        \
  X(UNARY_NEGATIVE, 11, UnaryNegative, 0, M)                  \
  X(UNARY_NOT, 12, UnaryNot, 0, M)                            \
  X(UNARY_INVERT, 15, UnaryInvert, 0, M)                      \
  X(RESERVED, 17, Unsupported, 0, 0)                          \
  X(BINARY_SUBSCR, 25, BinarySubscr, 1, M)                    \
  X(BINARY_SLICE, 26, BinarySlice, 0, M)                      \
  X(STORE_SLICE, 27, StoreSlice, 0, M)                        \
  X(GET_LEN, 30, GetLen, 0, M)                                \
  X(MATCH_MAPPING, 31, Unsupported, 0, 0)                     \
  X(MATCH_SEQUENCE, 32, Unsupported, 0, 0)                    \
  X(MATCH_KEYS, 33, Unsupported, 0, 0)                        \
  X(PUSH_EXC_INFO, 35, Unsupported, 0, 0)                     \
  X(CHECK_EXC_MATCH, 36, Unsupported, 0, 0)                   \
  X(CHECK_EG_MATCH, 37, Unsupported, 0, 0)                    \
  X(WITH_EXCEPT_START, 49, Unsupported, 0, 0)                 \
  X(GET_AITER, 50, Unsupported, 0, 0)                         \
  X(GET_ANEXT, 51, Unsupported, 0, 0)                         \
  X(BEFORE_ASYNC_WITH, 52, Unsupported, 0, 0)                 \
  X(BEFORE_WITH, 53, BeforeWith, 0, M)                        \
  X(END_ASYNC_FOR, 54, Unsupported, 0, 0)                     \
  X(CLEANUP_THROW, 55, Unsupported, 0, 0)                     \
  X(STORE_SUBSCR, 60, StoreSubscr, 1, M)                      \
  X(DELETE_SUBSCR, 61, DeleteSubscr, 0, M)                    \
  X(GET_ITER, 68, GetIter, 0, M)                              \
  X(GET_YIELD_FROM_ITER, 69, Unsupported, 0, 0)               \
  X(LOAD_BUILD_CLASS, 71, LoadBuildClass, 0, 0)                  \
  X(LOAD_ASSERTION_ERROR, 74, LoadAssertionError, 0, 0)       \
  X(RETURN_GENERATOR, 75, ReturnGenerator, 0, M)              \
  X(RETURN_VALUE, 83, ReturnValue, 0, M)                      \
  X(SETUP_ANNOTATIONS, 85, Unsupported, 0, 0)                 \
  X(LOAD_LOCALS, 87, Unsupported, 0, 0)                       \
  X(POP_EXCEPT, 89, Unsupported, 0, 0)                        \
  X(STORE_NAME, 90, Unsupported, 0, 0)                        \
  X(DELETE_NAME, 91, Unsupported, 0, 0)                       \
  X(UNPACK_SEQUENCE, 92, UnpackSequence, 1, M)                \
  X(FOR_ITER, 93, ForIter, 1, F | M)                          \
  X(UNPACK_EX, 94, UnpackEx, 0, M)                            \
  X(STORE_ATTR, 95, StoreAttr, 4, M)                          \
  X(DELETE_ATTR, 96, DeleteAttr, 0, M)                         \
  X(STORE_GLOBAL, 97, StoreGlobal, 0, M)                      \
  X(DELETE_GLOBAL, 98, Unsupported, 0, 0)                     \
  X(SWAP, 99, Swap, 0, 0)                                     \
  X(LOAD_CONST, 100, LoadConst, 0, 0)                         \
  X(LOAD_NAME, 101, Unsupported, 0, 0)                        \
  X(BUILD_TUPLE, 102, BuildTuple, 0, 0)                       \
  X(BUILD_LIST, 103, BuildList, 0, 0)                         \
  X(BUILD_SET, 104, BuildSet, 0, M)                           \
  X(BUILD_MAP, 105, BuildMap, 0, M)                           \
  X(LOAD_ATTR, 106, LoadAttrMethodBit, 9, M)                           \
  X(COMPARE_OP, 107, CompareOp, 1, M)                         \
  X(IMPORT_NAME, 108, ImportName, 0, M)                       \
  X(IMPORT_FROM, 109, ImportFrom, 0, M)                       \
  X(JUMP_FORWARD, 110, JumpForward, 0, F)                     \
  X(POP_JUMP_IF_FALSE, 114, PopJumpIfFalse, 0, F | M)         \
  X(POP_JUMP_IF_TRUE, 115, PopJumpIfTrue, 0, F | M)           \
  X(LOAD_GLOBAL, 116, LoadGlobal, 4, M)                       \
  X(IS_OP, 117, IsOp, 0, M)                                   \
  X(CONTAINS_OP, 118, ContainsOp, 0, M)                       \
  X(RERAISE, 119, Unsupported, 0, 0)                          \
  X(COPY, 120, Copy, 0, 0)                                    \
  X(RETURN_CONST, 121, ReturnConst, 0, M)                     \
  X(BINARY_OP, 122, BinaryOp, 1, M)                           \
  X(SEND, 123, Unsupported, 1, F)                             \
  X(LOAD_FAST, 124, LoadFast, 0, 0)                           \
  X(STORE_FAST, 125, StoreFast, 0, 0)                         \
  X(DELETE_FAST, 126, DeleteFast, 0, 0)                       \
  X(LOAD_FAST_CHECK, 127, LoadFast, 0, 0)                     \
  X(POP_JUMP_IF_NOT_NONE, 128, PopJumpIfNotNone, 0, F | M)    \
  X(POP_JUMP_IF_NONE, 129, PopJumpIfNone, 0, F | M)           \
  X(RAISE_VARARGS, 130, RaiseVarargs, 0, M)                   \
  X(GET_AWAITABLE, 131, Unsupported, 0, 0)                    \
  X(MAKE_FUNCTION, 132, MakeFunction, 0, 0)                   \
  X(BUILD_SLICE, 133, BuildSlice, 0, 0)                       \
  X(JUMP_BACKWARD_NO_INTERRUPT, 134, JumpBackward, 0, B)      \
  X(MAKE_CELL, 135, MakeCell, 0, 0)                           \
  X(LOAD_CLOSURE, 136, LoadClosure, 0, 0)                     \
  X(LOAD_DEREF, 137, LoadDeref, 0, M)                         \
  X(STORE_DEREF, 138, StoreDeref, 0, M)                       \
  X(DELETE_DEREF, 139, Unsupported, 0, 0)                     \
  X(JUMP_BACKWARD, 140, JumpBackward, 0, B)                   \
  X(LOAD_SUPER_ATTR, 141, LoadSuperAttr, 1, M)                \
  X(CALL_FUNCTION_EX, 142, CallFunctionEx, 0, M)              \
  X(LOAD_FAST_AND_CLEAR, 143, LoadFastAndClear, 0, 0)         \
  X(EXTENDED_ARG, 144, Nop, 0, 0)                             \
  X(LIST_APPEND, 145, ListAppend, 0, 0)                       \
  X(SET_ADD, 146, SetAdd, 0, M)                               \
  X(MAP_ADD, 147, MapAdd, 0, M)                               \
  X(COPY_FREE_VARS, 149, CopyFreeVars, 0, 0)                  \
  X(YIELD_VALUE, 150, YieldValue, 0, M)                       \
  X(RESUME, 151, Nop, 0, 0)                                   \
  X(MATCH_CLASS, 152, Unsupported, 0, 0)                      \
  X(FORMAT_VALUE, 155, FormatValue, 0, M)                     \
  X(BUILD_CONST_KEY_MAP, 156, BuildConstKeyMap, 0, M)         \
  X(BUILD_STRING, 157, BuildString, 0, M)                     \
  X(LIST_EXTEND, 162, ListExtend, 0, M)                       \
  X(SET_UPDATE, 163, SetUpdate, 0, M)                         \
  X(DICT_MERGE, 164, DictMerge, 0, M)                         \
  X(DICT_UPDATE, 165, DictUpdate, 0, M)                       \
  X(CALL, 171, Call, 3, M)                                    \
  X(KW_NAMES, 172, KwNames, 0, 0)                             \
  X(CALL_INTRINSIC_1, 173, CallIntrinsic1, 0, M)              \
  X(CALL_INTRINSIC_2, 174, Unsupported, 0, 0)                 \
  X(LOAD_FROM_DICT_OR_GLOBALS, 175, Unsupported, 0, 0)        \
  X(LOAD_FROM_DICT_OR_DEREF, 176, Unsupported, 0, 0)
// clang-format on

}  // namespace

FF_DEFINE_OPCODE_TABLE(FF_OPCODES_312)

int opcode_table_version() { return 312; }
int extended_arg_opcode() { return 144; }
int have_argument() { return 90; }
int compare_op_index(int oparg) { return oparg >> 4; }
bool compare_op_to_bool(int) { return false; }
int for_iter_exhausted_skip() { return 1; }
bool null_after_callable() { return false; }

}  // namespace ff

#endif
