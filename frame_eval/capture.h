// The contract between the symbolic interpreter (which traces a frame into a CaptureResult) and the
// frame hook / cache (which guards, compiles and runs it).
//
// trace_frame() reads a frame's arguments without running it; everything it learns about Python
// state it depends on becomes a Guard; every tensor it reads becomes a graph input with a Source
// saying how to fetch it again on the next call. Running the capture means: fetch inputs by
// source, run the compiled graph, replay side effects in order, build the return value.
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "src/base/py_ref.h"

namespace ff {

// ---- sources: how to re-fetch a value from a frame ---------------------------------------------

struct Source;
using SourcePtr = std::shared_ptr<const Source>;

struct Source {
  // X(kind, fields used, printed form)
  // clang-format off
#define FF_SOURCE_KINDS(X)                                                   \
  X(Local, "index (localsplus slot), name", "L['name']")                    \
  X(Closure, "index (into func_closure), name: the cell's contents", "L['name']") \
  X(Global, "name", "G['name']")                                            \
  X(Builtin, "name", "G['__builtins__'].name")                              \
  X(Attr, "base, name", "base.name")                                        \
  X(Item, "base, key (a constant: int or str)", "base[key]")               \
  X(TypeOf, "base", "type(base)")                                          \
  X(IterRest, "base: a builtin iterator; what it would still yield, as a tuple, read without consuming it", "rest(base)") \
  X(Object, "object: a fixed object the capture holds (e.g. another module's globals dict)", "name")
  // clang-format on
  enum class Kind : uint8_t {
#define FF_SOURCE_ENUM(k, fields, printed) k,
    FF_SOURCE_KINDS(FF_SOURCE_ENUM)
#undef FF_SOURCE_ENUM
  };

  Kind kind = Kind::Local;
  int index = -1;
  std::string name;
  SourcePtr base;
  int64_t int_key = 0;
  std::string str_key;
  bool key_is_str = false;
  PyRef object;  // Object: strong reference; `name` says what it is (printed form)

  std::string str() const;  // Python-like expression, as in the `guards` log
};

// ---- guards -------------------------------------------------------------------------------------

struct Guard {
  // X(kind, what it checks)
  // clang-format off
#define FF_GUARD_KINDS(X)                                                               \
  X(TypeMatch, "type(source) is expected_type")                                         \
  X(IdMatch, "source is expected (identity)")                                           \
  X(EqualsMatch, "source == expected (int/float/bool/str/None/tuple of those): same types, same values (floats bitwise), same order (frozensets)") \
  X(IterMatch, "tuple(source) == expected: the same elements (as EqualsMatch) in the same iteration order") \
  X(TensorMatch, "isinstance tensor with dtype/device/sizes/strides/requires_grad == tensor_meta (a symbolic size or stride: checked by ShapeRelations)") \
  X(LenMatch, "len(source) == length")                                                  \
  X(LenAtLeast, "len(source) >= length")                                                \
  X(DictKeys, "list(source.keys()) == expected keys, in order")                         \
  X(NoAttr, "not hasattr(source, expected): an attribute the trace found missing")      \
  X(NoKey, "expected not in source (a dict): an instance attribute that would shadow a method") \
  X(SameObject, "source is others[0]: two sources the trace read as one object")         \
  X(Distinct, "the objects of others are pairwise different: mutable values read as separate") \
  X(GlobalState, "grad mode, default dtype and autocast's state as at trace time")     \
  X(SymbolicInt, "type(source) is int: a Python int that varies, symbol `length` (its value is checked by ShapeRelations)") \
  X(ShapeRelations, "the symbolic sizes and strides of every TensorMatch and the value of every SymbolicInt: each symbol (bound where it first appears) is >= 2, every size and stride equals its expression, every guard of shape_env holds")
  // clang-format on
  enum class Kind : uint8_t {
#define FF_GUARD_ENUM(k, doc) k,
    FF_GUARD_KINDS(FF_GUARD_ENUM)
#undef FF_GUARD_ENUM
  };

  Kind kind = Kind::TypeMatch;
  SourcePtr source;            // not used by GlobalState, Distinct
  std::vector<SourcePtr> others;  // SameObject: the other source; Distinct: every source
  PyObject* expected = nullptr;  // strong reference (type, object, constant or tuple of keys); may be null;
                                 // GlobalState: autocast's state where autocast was on (else null: off)
  TensorMeta tensor_meta;      // TensorMatch
  int64_t length = 0;          // LenMatch, LenAtLeast; SymbolicInt: the symbol
  bool grad_enabled = true;    // GlobalState
  DType default_dtype = DType::Float32;  // GlobalState
  int deterministic = -1;      // GlobalState: torch.are_deterministic_algorithms_enabled() as the trace read it (-1: unread)
  std::shared_ptr<const ShapeEnv> shape_env;  // ShapeRelations

  std::string str() const;  // the check as a Python expression, e.g. "L['x'].size()[0] == 8"
};

// ---- what the compiled code does after the graph ran ------------------------------------------

// How to build a Python value after the graph ran.
struct OutputPlan {
  // Cell: a fresh cell (items: its contents, or none); ClosureCell: the frame's closure cell
  // `index`; Function: constant = code, items = defaults, kwdefaults, closure (None: absent)
  // [, globals: where they are not the frame's]; Iterator: iter(items[0]) past its first `index` items;
  // Context: constant() (torch.no_grad, enable_grad, _DisableTorchDispatch ...); ContextExit: the same entered, its bound
  // __exit__; Method: items[1] bound to items[0]; Set: a set of items, added in order; Call:
  // items[0](*items[1:]); Object: an instance of the class `constant` made without __init__, its
  // attributes keys[i] = items[i] written to its __dict__, and where index == 1 (a dict or
  // OrderedDict subclass) the last item a Dict plan of its mapping contents, stored in order
  // through the builtin base's __setitem__.
  enum class Kind : uint8_t {
    GraphOutput,
    Source,
    Constant,
    Tuple,
    List,
    Dict,
    Cell,
    ClosureCell,
    Function,
    Iterator,
    Context,
    ContextExit,
    Method,
    Attr,  // getattr(items[0], constant)
    Set,
    Call,
    Object,
    SymInt,  // a Python int that varies: expression `expr` (graph/symint.h) at this call's symbols
  };
  Kind kind = Kind::Constant;
  int index = -1;               // GraphOutput: index into the graph's output tuple
  SourcePtr source;             // Source: an existing object fetched again (e.g. `return self`)
  PyObject* constant = nullptr; // Constant: strong reference
  std::vector<OutputPlan> items;  // Tuple/List; Dict: items are values, `keys` the keys
  std::vector<PyObject*> keys;    // Dict; Object: attribute names. Strong references
  PyObject* tuple_type = nullptr; // Tuple: a namedtuple type to rebuild, or null for a plain tuple
  int memo = -1;                  // >= 0: built once per run; every plan with this id is the same object
  SymExprId expr = 0;             // SymInt
};

// A mutation of Python state the traced code performed, replayed in order after the graph ran.
struct SideEffect {
  enum class Kind : uint8_t {
    SetAttr,       // setattr(target, name, value)
    StoreGlobal,   // globals[name] = value
    ReplaceList,   // target[:] = value (the list's final contents)
    DictSetItem,   // target[key] = value
    DictDelItem,   // del target[key]
    CellSet,       // target cell contents = value
    CallMethod,    // getattr(target, name)(*value), value a Tuple plan (set.update ...)
    Advance,       // next(target) `key` (an int) times: items the trace took from an iterator passed in
  };
  Kind kind = Kind::SetAttr;
  SourcePtr target;
  std::string name;
  PyObject* key = nullptr;  // strong reference
  OutputPlan value;
};

// A construct that could not be captured (a graph break reason), with the user's location.
struct BreakInfo {
  std::string id;           // stable id from the break registry, e.g. "FF0003"
  std::string reason;       // short: "call to print"
  std::string explanation;  // why framefuse cannot capture it
  std::string hint;         // what the user can do
  std::string filename;
  int lineno = 0;
  std::vector<std::string> user_stack;  // "file:line in func" frames, outermost first
  // Where the root frame was: the decoded index of the instruction (the first of its call group)
  // and how many times the trace had reached it; -1 when the break is not at a root instruction.
  int root_index = -1;
  int root_visit = 0;
};

struct CaptureResult {
  Graph graph;
  std::vector<SourcePtr> inputs;  // one per placeholder, in order
  std::vector<Guard> guards;
  OutputPlan output;
  std::vector<SideEffect> side_effects;
  // What the trace relied on about symbolic sizes (graph/symint.h); null when every size is static.
  std::shared_ptr<const ShapeEnv> shape_env;
  // A partial capture (TraceOptions::stop_index): `output` is the tuple
  // (stack values non-NULL bottom first..., live locals..., fresh cells of the code's cellvars...).
  struct BreakState {
    bool active = false;
    int index = -1;                 // decoded instruction index the trace stopped before
    int depth = 0;                  // stack depth there
    std::vector<int> null_slots;    // stack positions holding NULL
    std::vector<std::string> live;  // the locals passed, in order
    int ncells = 0;
  } brk;
  int num_memos = 0;  // OutputPlan memo ids in use
  // Counters for tests and logs: what the trace did.
  struct Stats {
    int instructions = 0;   // bytecode instructions interpreted, inlined frames included
    int inlined_calls = 0;  // user functions / methods / forwards inlined
    int frames = 0;         // code objects interpreted (the root included)
  } stats;
  CaptureResult() = default;
  // NB: guards and plans hold raw strong references, so a CaptureResult moves (the source is left
  // empty) and never copies.
  CaptureResult(CaptureResult&& o) noexcept;
  CaptureResult& operator=(CaptureResult&&) = delete;
  CaptureResult(const CaptureResult&) = delete;
  ~CaptureResult();  // releases the strong references held in guards / plans
};

// A read-only view of a frame that has not started running (arguments bound, cells not yet made).
struct FrameView {
  PyCodeObject* code = nullptr;  // borrowed
  PyObject* globals = nullptr;   // borrowed
  PyObject* builtins = nullptr;  // borrowed
  PyObject* closure = nullptr;   // borrowed tuple of cells (func_closure) or null
  std::vector<PyObject*> localsplus;  // borrowed; arguments bound, other slots null
};

}  // namespace ff
