// CPython 3.13's opcodes (numbers from Lib/opcode.py of 3.13; checked against `opcode.opmap` and
// `dis._inline_cache_entries` by tests/python/frontend/test_interp_opcodes.py). 3.13 renumbered every
// opcode; its new instructions (TO_BOOL, CALL_KW, CONVERT_VALUE and FORMAT_*, SET_FUNCTION_ATTRIBUTE)
// have their own handlers, the LOAD/STORE_FAST pairs are decoded as two instructions (SplitPair) and
// END_FOR pops one value (POP_TOP).
#include <Python.h>
#if PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000

#include "frame_eval/opcodes.h"

namespace ff {
namespace {

constexpr uint8_t F = kJumpForward, B = kJumpBackward, M = kMayBreak;

// X(name, number, handler, caches, flags)
// clang-format off
#define FF_OPCODES_313(X) \
  X(CACHE, 0, Unsupported, 0, 0)                             \
  X(BEFORE_ASYNC_WITH, 1, Unsupported, 0, 0)                 \
  X(BEFORE_WITH, 2, BeforeWith, 0, M)                        \
  X(BINARY_SLICE, 4, BinarySlice, 0, M)                      \
  X(BINARY_SUBSCR, 5, BinarySubscr, 1, M)                    \
  X(CHECK_EG_MATCH, 6, Unsupported, 0, 0)                    \
  X(CHECK_EXC_MATCH, 7, Unsupported, 0, 0)                   \
  X(CLEANUP_THROW, 8, Unsupported, 0, 0)                     \
  X(DELETE_SUBSCR, 9, DeleteSubscr, 0, M)                    \
  X(END_ASYNC_FOR, 10, Unsupported, 0, 0)                    \
  X(END_FOR, 11, PopTop, 0, 0)                               \
  X(END_SEND, 12, Unsupported, 0, 0)                         \
  X(EXIT_INIT_CHECK, 13, Unsupported, 0, 0)                  \
  X(FORMAT_SIMPLE, 14, FormatSimple, 0, M)                   \
  X(FORMAT_WITH_SPEC, 15, FormatWithSpec, 0, M)              \
  X(GET_AITER, 16, Unsupported, 0, 0)                        \
  X(RESERVED, 17, Unsupported, 0, 0)                         \
  X(GET_ANEXT, 18, Unsupported, 0, 0)                        \
  X(GET_ITER, 19, GetIter, 0, M)                             \
  X(GET_LEN, 20, GetLen, 0, M)                               \
  X(GET_YIELD_FROM_ITER, 21, Unsupported, 0, 0)              \
  X(INTERPRETER_EXIT, 22, Unsupported, 0, 0)                 \
  X(LOAD_ASSERTION_ERROR, 23, LoadAssertionError, 0, 0)      \
  X(LOAD_BUILD_CLASS, 24, LoadBuildClass, 0, 0)              \
  X(LOAD_LOCALS, 25, Unsupported, 0, 0)                      \
  X(MAKE_FUNCTION, 26, MakeFunction, 0, 0)                   \
  X(MATCH_KEYS, 27, Unsupported, 0, 0)                       \
  X(MATCH_MAPPING, 28, Unsupported, 0, 0)                    \
  X(MATCH_SEQUENCE, 29, Unsupported, 0, 0)                   \
  X(NOP, 30, Nop, 0, 0)                                      \
  X(POP_EXCEPT, 31, Unsupported, 0, 0)                       \
  X(POP_TOP, 32, PopTop, 0, 0)                               \
  X(PUSH_EXC_INFO, 33, Unsupported, 0, 0)                    \
  X(PUSH_NULL, 34, PushNull, 0, 0)                           \
  X(RETURN_GENERATOR, 35, ReturnGenerator, 0, M)             \
  X(RETURN_VALUE, 36, ReturnValue, 0, M)                     \
  X(SETUP_ANNOTATIONS, 37, Unsupported, 0, 0)                \
  X(STORE_SLICE, 38, StoreSlice, 0, M)                       \
  X(STORE_SUBSCR, 39, StoreSubscr, 1, M)                     \
  X(TO_BOOL, 40, ToBool, 3, M)                               \
  X(UNARY_INVERT, 41, UnaryInvert, 0, M)                     \
  X(UNARY_NEGATIVE, 42, UnaryNegative, 0, M)                 \
  X(UNARY_NOT, 43, UnaryNot, 0, M)                           \
  X(WITH_EXCEPT_START, 44, Unsupported, 0, 0)                \
  X(BINARY_OP, 45, BinaryOp, 1, M)                           \
  X(BUILD_CONST_KEY_MAP, 46, BuildConstKeyMap, 0, M)         \
  X(BUILD_LIST, 47, BuildList, 0, 0)                         \
  X(BUILD_MAP, 48, BuildMap, 0, M)                           \
  X(BUILD_SET, 49, BuildSet, 0, M)                           \
  X(BUILD_SLICE, 50, BuildSlice, 0, 0)                       \
  X(BUILD_STRING, 51, BuildString, 0, M)                     \
  X(BUILD_TUPLE, 52, BuildTuple, 0, 0)                       \
  X(CALL, 53, Call, 3, M)                                    \
  X(CALL_FUNCTION_EX, 54, CallFunctionEx, 0, M)              \
  X(CALL_INTRINSIC_1, 55, CallIntrinsic1, 0, M)              \
  X(CALL_INTRINSIC_2, 56, Unsupported, 0, 0)                 \
  X(CALL_KW, 57, CallKw, 0, M)                               \
  X(COMPARE_OP, 58, CompareOp, 1, M)                         \
  X(CONTAINS_OP, 59, ContainsOp, 1, M)                       \
  X(CONVERT_VALUE, 60, ConvertValue, 0, M)                   \
  X(COPY, 61, Copy, 0, 0)                                    \
  X(COPY_FREE_VARS, 62, CopyFreeVars, 0, 0)                  \
  X(DELETE_ATTR, 63, DeleteAttr, 0, M)                       \
  X(DELETE_DEREF, 64, Unsupported, 0, 0)                     \
  X(DELETE_FAST, 65, DeleteFast, 0, 0)                       \
  X(DELETE_GLOBAL, 66, Unsupported, 0, 0)                    \
  X(DELETE_NAME, 67, Unsupported, 0, 0)                      \
  X(DICT_MERGE, 68, DictMerge, 0, M)                         \
  X(DICT_UPDATE, 69, DictUpdate, 0, M)                       \
  X(ENTER_EXECUTOR, 70, Unsupported, 0, 0)                   \
  X(EXTENDED_ARG, 71, Nop, 0, 0)                             \
  X(FOR_ITER, 72, ForIter, 1, F | M)                         \
  X(GET_AWAITABLE, 73, Unsupported, 0, 0)                    \
  X(IMPORT_FROM, 74, ImportFrom, 0, M)                       \
  X(IMPORT_NAME, 75, ImportName, 0, M)                       \
  X(IS_OP, 76, IsOp, 0, M)                                   \
  X(JUMP_BACKWARD, 77, JumpBackward, 1, B)                   \
  X(JUMP_BACKWARD_NO_INTERRUPT, 78, JumpBackward, 0, B)      \
  X(JUMP_FORWARD, 79, JumpForward, 0, F)                     \
  X(LIST_APPEND, 80, ListAppend, 0, 0)                       \
  X(LIST_EXTEND, 81, ListExtend, 0, M)                       \
  X(LOAD_ATTR, 82, LoadAttrMethodBit, 9, M)                  \
  X(LOAD_CONST, 83, LoadConst, 0, 0)                         \
  X(LOAD_DEREF, 84, LoadDeref, 0, M)                         \
  X(LOAD_FAST, 85, LoadFast, 0, 0)                           \
  X(LOAD_FAST_AND_CLEAR, 86, LoadFastAndClear, 0, 0)         \
  X(LOAD_FAST_CHECK, 87, LoadFast, 0, 0)                     \
  X(LOAD_FAST_LOAD_FAST, 88, SplitPair, 0, 0)         \
  X(LOAD_FROM_DICT_OR_DEREF, 89, Unsupported, 0, 0)          \
  X(LOAD_FROM_DICT_OR_GLOBALS, 90, Unsupported, 0, 0)        \
  X(LOAD_GLOBAL, 91, LoadGlobal, 4, M)                       \
  X(LOAD_NAME, 92, Unsupported, 0, 0)                        \
  X(LOAD_SUPER_ATTR, 93, LoadSuperAttr, 1, M)                \
  X(MAKE_CELL, 94, MakeCell, 0, 0)                           \
  X(MAP_ADD, 95, MapAdd, 0, M)                               \
  X(MATCH_CLASS, 96, Unsupported, 0, 0)                      \
  X(POP_JUMP_IF_FALSE, 97, PopJumpIfFalse, 1, F | M)         \
  X(POP_JUMP_IF_NONE, 98, PopJumpIfNone, 1, F | M)           \
  X(POP_JUMP_IF_NOT_NONE, 99, PopJumpIfNotNone, 1, F | M)    \
  X(POP_JUMP_IF_TRUE, 100, PopJumpIfTrue, 1, F | M)          \
  X(RAISE_VARARGS, 101, RaiseVarargs, 0, M)                  \
  X(RERAISE, 102, Unsupported, 0, 0)                         \
  X(RETURN_CONST, 103, ReturnConst, 0, M)                    \
  X(SEND, 104, Unsupported, 1, F)                            \
  X(SET_ADD, 105, SetAdd, 0, M)                              \
  X(SET_FUNCTION_ATTRIBUTE, 106, SetFunctionAttribute, 0, 0) \
  X(SET_UPDATE, 107, SetUpdate, 0, M)                        \
  X(STORE_ATTR, 108, StoreAttr, 4, M)                        \
  X(STORE_DEREF, 109, StoreDeref, 0, M)                      \
  X(STORE_FAST, 110, StoreFast, 0, 0)                        \
  X(STORE_FAST_LOAD_FAST, 111, SplitPair, 0, 0)      \
  X(STORE_FAST_STORE_FAST, 112, SplitPair, 0, 0)    \
  X(STORE_GLOBAL, 113, StoreGlobal, 0, M)                    \
  X(STORE_NAME, 114, Unsupported, 0, 0)                      \
  X(SWAP, 115, Swap, 0, 0)                                   \
  X(UNPACK_EX, 116, UnpackEx, 0, M)                          \
  X(UNPACK_SEQUENCE, 117, UnpackSequence, 1, M)              \
  X(YIELD_VALUE, 118, YieldValue, 0, M)                      \
  X(RESUME, 149, Nop, 0, 0)
// clang-format on

}  // namespace

FF_DEFINE_OPCODE_TABLE(FF_OPCODES_313)

int opcode_table_version() { return 313; }
int extended_arg_opcode() { return 71; }
int have_argument() { return 44; }
int compare_op_index(int oparg) { return oparg >> 5; }
bool compare_op_to_bool(int oparg) { return (oparg & 16) != 0; }
int for_iter_exhausted_skip() { return 2; }
bool null_after_callable() { return true; }

}  // namespace ff

#endif
