// One opcode table per CPython version (opcodes_311.cpp, opcodes_312.cpp, opcodes_313.cpp; only the one matching
// the Python this module is built for is compiled in). Each entry declares an opcode once: its
// name, the version-independent handler that interprets it, its inline CACHE units, how its jump
// is encoded and whether it may graph-break. The stack effect comes from CPython itself
// (PyCompile_OpcodeStackEffectWithJump) and is checked after every instruction; the
// "unsupported opcodes" report is derived from the table.
#pragma once

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ff {

// Version-independent handlers. Several opcodes of one version may share a handler; an opcode
// whose handler is Unsupported graph-breaks when reached.
// clang-format off
#define FF_HANDLERS(X)                                                                           \
  X(Unsupported) X(Nop) X(PopTop) X(PushNull) X(Copy) X(Swap) X(LoadConst) X(LoadFast)          \
  X(LoadFastAndClear) X(StoreFast) X(DeleteFast) X(LoadGlobal) X(StoreGlobal) X(LoadAttr)       \
  X(LoadMethod) X(LoadAttrMethodBit) X(StoreAttr) X(DeleteAttr) X(LoadSuperAttr) X(LoadDeref) X(StoreDeref) X(LoadClosure)         \
  X(MakeCell) X(CopyFreeVars) X(BinaryOp) X(UnaryNegative) X(UnaryNot) X(UnaryInvert)            \
  X(UnaryPositive) X(CompareOp) X(IsOp) X(ContainsOp) X(BinarySubscr) X(StoreSubscr)            \
  X(DeleteSubscr) X(BinarySlice) X(StoreSlice) X(BuildTuple) X(BuildList) X(BuildSet)          \
  X(BuildMap) X(BuildConstKeyMap) X(BuildString) X(BuildSlice) X(ListAppend) X(SetAdd)          \
  X(MapAdd) X(ListExtend) X(SetUpdate) X(DictUpdate) X(DictMerge) X(ListToTuple)                \
  X(CallIntrinsic1) X(UnpackSequence) X(UnpackEx) X(GetIter) X(ForIter) X(EndFor)               \
  X(JumpForward) X(JumpBackward) X(PopJumpIfFalse) X(PopJumpIfTrue) X(PopJumpIfNone)            \
  X(PopJumpIfNotNone) X(JumpIfFalseOrPop) X(JumpIfTrueOrPop) X(KwNames) X(Precall) X(Call)      \
  X(CallFunctionEx) X(MakeFunction) X(BeforeWith) X(FormatValue) X(ReturnValue)                 \
  X(ReturnConst) X(ReturnGenerator) X(YieldValue) X(LoadAssertionError) X(LoadBuildClass) X(RaiseVarargs)         \
  X(ImportName) X(ImportFrom) X(GetLen) X(ToBool) X(SplitPair) X(CallKw) X(ConvertValue)         \
  X(FormatSimple) X(FormatWithSpec) X(SetFunctionAttribute)
// clang-format on

enum class Handler : uint8_t {
#define FF_HANDLER_ENUM(h) h,
  FF_HANDLERS(FF_HANDLER_ENUM)
#undef FF_HANDLER_ENUM
};
const char* handler_name(Handler h);

enum OpcodeFlag : uint8_t {
  kJumpForward = 1u << 0,   // oparg is a forward jump from the instruction after the caches
  kJumpBackward = 1u << 1,  // oparg is a backward jump
  kMayBreak = 1u << 2,      // the handler may graph-break (calls, branches, attribute writes ...)
  kNoStackCheck = 1u << 3,  // CPython's stack effect does not match the handler's (3.11 PRECALL/CALL split)
};

struct OpcodeInfo {
  const char* name = nullptr;  // null: not an opcode of this version
  Handler handler = Handler::Unsupported;
  uint8_t caches = 0;
  uint8_t flags = 0;
};

// The table for the running CPython version, indexed by opcode number (256 entries).
const OpcodeInfo* opcode_table();

// Defines opcode_table() from a version's X(name, number, handler, caches, flags) list
// (opcodes_31x.cpp).
// clang-format off
#define FF_OPCODE_ENTRY(name, num, handler, caches, flags) \
  entries[num] = OpcodeInfo{#name, Handler::handler, caches, static_cast<uint8_t>(flags)};
#define FF_DEFINE_OPCODE_TABLE(LIST)           \
  const OpcodeInfo* opcode_table() {           \
    static const struct Table {                \
      OpcodeInfo entries[256];                 \
      Table() { LIST(FF_OPCODE_ENTRY) }        \
    } table;                                   \
    return table.entries;                      \
  }
// clang-format on
int opcode_table_version();  // 311, 312 or 313
int extended_arg_opcode();   // EXTENDED_ARG's number (144 on 3.11/3.12, 71 on 3.13)
int have_argument();         // opcodes from this number on use their argument (90; 3.13: 44)

// COMPARE_OP's operator index (0..5: < <= == != > >=) from its oparg.
int compare_op_index(int oparg);
// COMPARE_OP converts its result to a bool (3.13's bit 16, set where a branch consumes it).
bool compare_op_to_bool(int oparg);
// FOR_ITER: instructions from the jump target to where the exhausted loop resumes (3.12 skips
// END_FOR; 3.13 skips END_FOR and the POP_TOP after it).
int for_iter_exhausted_skip();
// Where a call's NULL sits: 3.11/3.12 push it below the callable (`[NULL|meth, callable|self,
// args]`, also LOAD_GLOBAL's and LOAD_ATTR's low bit), 3.13 above it (`[callable, NULL|self, args]`).
bool null_after_callable();

// 3.13's pair instructions (LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST, STORE_FAST_STORE_FAST: two
// 4-bit slots in one oparg, `first << 4 | second`) are decoded as the two plain instructions they
// stand for, both at the pair's offset, by the interpreter and the assembler alike (so their
// instruction indices agree): true with the halves' opcodes for such an opcode.
bool split_pair(int op, int* first, int* second);
// This version's number of the opcode called `name`, or -1 where it has none.
int opcode_number(const char* name);
// LOAD_ATTR's low bit asks for a method and a NULL or self beside it (3.12+; 3.11 has LOAD_METHOD).
bool load_attr_method_bit();

// The pair instruction standing for `first` then `second`; -1 where there is none.
int fused_pair(int first, int second);

// Opcodes of this version whose handler is Unsupported, as "NAME (number)" lines.
std::vector<std::string> unsupported_opcodes_report();

}  // namespace ff
