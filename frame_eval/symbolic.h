// Symbolic values: what the interpreter's stack and locals hold while tracing.
//
// A Sym is either a Python object known at capture time (Const; guarded through its Source when it
// came from frame state), a graph value (Tensor), a container of Syms, or one of the few kinds of
// objects whose behaviour the interpreter models itself (objects with pending attribute writes,
// functions and cells made during tracing, iterators, bound methods, context managers ...).
#pragma once

#include <Python.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frame_eval/capture.h"
#include "graph/ir.h"

namespace ff {

struct SymValue;
using Sym = std::shared_ptr<SymValue>;
struct Frame;  // interpreter_impl.h: an interpreted frame (a generator's, held by its iterator)

// X(kind, fields used)
// clang-format off
#define FF_SYM_KINDS(X)                                                                          \
  X(Null, "the NULL CPython pushes below callables / an unbound local (LOAD_FAST_AND_CLEAR)")    \
  X(Const, "obj: a Python object known at capture time; source: where it was read, if anywhere") \
  X(SymInt, "sint: a Python int that is a symbolic size (graph/symint.h): arithmetic, comparisons " \
            "and the ops listed in symint_op() keep it symbolic; any other use specialises it to its " \
            "hint first (a guard), turning it into a Const in place")                                 \
  X(Tensor, "node, meta; obj: the tensor's Python type (torch.Tensor / nn.Parameter)")          \
  X(Scalar, "node: a Python float or int the graph computes, read from a tensor by .item() "      \
            "(config capture_scalar_outputs) or computed from one; obj: float or int. Arithmetic " \
            "with numbers and pointwise ops keep it in the graph; a use that needs its value breaks")  \
  X(Tuple, "items; obj: the namedtuple / structseq / torch.Size type or null for a plain tuple")  \
  X(List, "items; obj: the real list when read from frame state (mutations become side effects)") \
  X(Dict, "keys (Const) and items; obj: the real dict when read from frame state")               \
  X(Set, "obj: a private set that every operation is replayed on in eager's order (its iteration " \
         "order is eager's); source: where a set passed in was read, keys: its elements in its "   \
         "own order then, flag: changed since (its changes are replayed on it after the graph)")    \
  X(Object, "obj: a real object (user object, nn.Module); attribute writes overlay in the tracer") \
  X(NewObject, "obj: the class; attrs: attributes of an object created while tracing; items[0]: " \
               "its mapping contents (a Dict) when the class derives from dict or OrderedDict; " \
               "origin: its __dict__ once read (a Dict holding the attributes from then on)")    \
  X(Function, "a function made by MAKE_FUNCTION: obj code, globals, items[0] defaults, items[1] kwdefaults, items[2] closure") \
  X(BoundMethod, "items[0] self, items[1] function; name: set for a logging.Logger's "         \
                 "functools.lru_cache method (warning_once), whose calls are left for after the graph") \
  X(Cell, "items[0] contents (absent: empty); obj: the real cell, source: of the contents")       \
  X(Iterator, "iter: which iterator (IterKind); the fields it uses are documented there")        \
  X(Slice, "items: start, stop, step")                                                           \
  X(Method, "items[0] self, name: a builtin method of a symbolic value (list.append, t.size ...)") \
  X(Super, "items[0] self; obj: the class to start the MRO search after")                        \
  X(ClassDef, "a class statement run in the trace, its class not built yet: items[0] the body "   \
              "(a Function), items[1] the name, items[2...] the bases (Consts). Any use breaks; "  \
              "where it outlives the trace (returned, across a break) __build_class__ builds it "  \
              "then. Its body only names functions (class_def), so when it runs is not visible")   \
  X(GradCtx, "torch.no_grad()/enable_grad()/set_grad_enabled(b): flag = grad mode inside")      \
  X(NoopCtx, "obj: a class made with no arguments whose objects change nothing compiled code "   \
             "can see, as context managers or while they live (torch._C._DisableTorchDispatch: "  \
             "compiled code runs only where no dispatch mode or torch.func transform is active, " \
             "eager_context_active; record_function(name) as contextlib.nullcontext: compiled "     \
             "code records no profiler ranges); `with` only where obj has __enter__ (torch >= 2.0)") \
  X(AutocastCtx, "torch.autocast(...) made in the trace, or a real one a with-statement enters: "  \
                 "name: its device type (cpu or cuda), flag: enabled, pos: its dtype (a DType), obj: " \
                 "a functools.partial making a fresh one (entered where a break splits its block)")   \
  X(Partial, "functools.partial: items[0] func, items[1] args (Tuple), items[2] kwargs (Dict)")  \
  X(DictView, "dict.keys() / values() / items(): items[0] the Dict (read live), name: which")    \
  X(Appendable, "a list or set passed in (obj, source) whose contents the trace has not read: "   \
                "items are what it appended / added, in order; any other use reads it first "      \
                "(it becomes a List or Set, guarded on its contents: materialize())")
// clang-format on

enum class SymKind : uint8_t {
#define FF_SYM_ENUM(k, doc) k,
  FF_SYM_KINDS(FF_SYM_ENUM)
#undef FF_SYM_ENUM
};
const char* sym_kind_name(SymKind k);

// The iterators the interpreter models. Each reads its source lazily, as CPython's does, so that
// mutating a list while looping over it, or a consumer that stops early, behaves as in eager.
// X(kind, fields used)
// clang-format off
#define FF_ITER_KINDS(X)                                                                          \
  X(Range, "start, stop, step; pos: the next value")                                             \
  X(Seq, "origin: a List or Tuple read at pos when next() is called (list_iterator)")            \
  X(Reversed, "origin: a List or Tuple read at pos, counting down (list_reverseiterator)")       \
  X(Items, "items from pos: a fixed sequence (a set's elements, a generator's values ...)")     \
  X(DictKeys, "origin: a Dict read at pos; stop: its key version when made (a change raises)")  \
  X(DictValues, "as DictKeys")                                                                   \
  X(DictItems, "as DictKeys")                                                                    \
  X(Enumerate, "items[0]: the inner iterator; pos: the next count")                             \
  X(Zip, "items: the inner iterators; flag: strict=True")                                        \
  X(Map, "items[0]: the function; items[1..]: the inner iterators")                             \
  X(Filter, "items[0]: the function (None: truth itself); items[1]: the inner iterator")          \
  X(Generator, "frame: the generator function's frame, run to its next yield by each next()")     \
  X(Repeat, "items[0]: the value of itertools.repeat; stop: how many times (-1: forever); pos: given") \
  X(Chain, "items: the iterables of itertools.chain, read from pos; origin: the iterator of the one " \
           "being read; flag: chain.from_iterable (items[0] the outer iterator, pos unused)")     \
  X(Islice, "items[0]: the inner iterator of itertools.islice; pos: items taken from it; start: the " \
            "index of the next item given; stop: where it ends (-1: no end); step")                \
  X(Protocol, "origin: an object read by origin[pos] at each next() until IndexError (Sequence's "   \
              "__iter__; flag: the old protocol of a class with only __getitem__, StopIteration too)") \
  X(Native, "obj: a builtin iterator passed in (source); pos: items taken, read through "         \
            "rest(source) without consuming it (the real one is advanced after the graph)")
// clang-format on

enum class IterKind : uint8_t {
#define FF_ITER_ENUM(k, doc) k,
  FF_ITER_KINDS(FF_ITER_ENUM)
#undef FF_ITER_ENUM
};

struct SymValue {
  SymKind kind = SymKind::Null;
  bool flag = false;       // GradCtx: grad mode inside; List/Dict: mutated; Set, Iterator: see above
  bool exhausted = false;  // Iterator: next() returned StopIteration once (CPython's stay exhausted)
  IterKind iter = IterKind::Items;  // Iterator
  PyRef obj;
  SourcePtr source;
  NodeId node = -1;
  TensorMeta meta;         // Tensor
  SymInt sint;             // SymInt
  std::vector<Sym> items;
  std::vector<Sym> keys;   // Dict keys; Set: its elements when read from frame state
  std::string name;        // Method name; DictView: keys / values / items
  PyRef globals;           // Function
  int64_t pos = 0, start = 0, stop = 0, step = 1;  // Iterator
  uint32_t version = 0;    // Dict: bumped when a key is added or removed (iterators check it)
  std::vector<std::pair<std::string, Sym>> attrs;  // NewObject attributes, in assignment order
  Sym origin;              // Iterator: the List / Tuple / Dict it reads
  std::shared_ptr<Frame> frame;  // Iterator (Generator): its suspended frame

  explicit SymValue(SymKind k) : kind(k) {}
  bool is(SymKind k) const { return kind == k; }
};

inline Sym make_sym(SymKind k) { return std::make_shared<SymValue>(k); }
Sym make_const(PyObject* borrowed, SourcePtr source = nullptr);
// A size read by the trace: a SymInt when symbolic, else an int Const.
Sym make_size(const SymInt& v);
Sym make_const_steal(PyObject* new_ref);  // nullptr in: throws InternalError with the Python error
Sym make_tuple(std::vector<Sym> items, PyObject* tuple_type = nullptr);
Sym make_list(std::vector<Sym> items);
Sym make_null();

// A Python object for a Sym built only from constants (Const, and Tuple/List/Dict/Set/Slice of
// constants). New reference, or nullptr (no Python error set) when the Sym is not constant.
PyObject* sym_to_const(const Sym& s);

// Plain constants: values whose operations are pure and cheap (numbers, str, bytes, None,
// Ellipsis, ranges, slices, dtypes, devices, and tuples / frozensets of these).
bool is_plain_const(PyObject* o);

// A short description for error messages: "a tensor", "list", "int 3", "function f" ...
std::string describe_sym(const Sym& s);

}  // namespace ff
