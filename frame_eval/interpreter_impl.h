// Internals of the symbolic interpreter, shared by interpreter*.cpp. Not part of the contract.
#pragma once

#include <Python.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "frame_eval/break_registry.h"
#include "frame_eval/interpreter.h"
#include "frame_eval/opcodes.h"
#include "graph/python/graph_calls.h"
#include "src/base/logging.h"
#include "frame_eval/symbolic.h"

namespace ff {

// One decoded instruction. Offsets are in code units; EXTENDED_ARG prefixes are folded into `arg`
// and CACHE units skipped.
struct Instr {
  uint8_t opcode = 0;
  Handler handler = Handler::Unsupported;
  uint8_t flags = 0;
  int arg = 0;
  int offset = 0;  // of the instruction itself (after its EXTENDED_ARG prefixes)
  int jump = -1;   // index of the jump target instruction, for jumps
};

// A code object decoded once (interpreter_decode.cpp; kept in the code's ExtraState, freed with
// the code).
struct DecodedCode {
  std::vector<Instr> instrs;
  std::vector<std::pair<int, int>> handled;  // code unit ranges [first, end) an exception handler covers
  int nlocalsplus = 0;
};
const DecodedCode& decode_code(PyCodeObject* code);

// Python objects the interpreter compares against, resolved once (never released).
struct Known {
  PyObject* torch = nullptr;
  PyObject* tensor_type = nullptr;      // torch.Tensor
  PyObject* module_type = nullptr;      // torch.nn.Module
  PyObject* module_call = nullptr;      // torch.nn.Module.__call__
  PyObject* module_getattr = nullptr;   // torch.nn.Module.__getattr__
  PyObject* module_setattr = nullptr;
  PyObject* no_grad = nullptr;
  PyObject* enable_grad = nullptr;
  PyObject* set_grad_enabled = nullptr;
  PyObject* disable_torch_dispatch = nullptr;  // torch._C._DisableTorchDispatch (NoopCtx)
  PyObject* disable_functorch = nullptr;       // torch._C._DisableFuncTorch (NoopCtx)
  // torch.autocast and its deprecated spellings torch.cpu.amp.autocast, torch.cuda.amp.autocast (AutocastCtx)
  PyObject* autocast_types[3] = {nullptr, nullptr, nullptr};
  PyObject* autocast_exit = nullptr;  // torch.autocast.__exit__ (a function)
  PyObject* logger_type = nullptr;    // logging.Logger
  // torch.autograd.profiler.record_function(name): a NoopCtx of contextlib.nullcontext (compiled code
  // records no profiler ranges of its own, as under torch.compile)
  PyObject* record_function = nullptr;
  PyObject* nullcontext = nullptr;
  PyObject* default_generator = nullptr;       // torch.default_generator (what torch.manual_seed returns)
  PyObject* size_type = nullptr;        // torch.Size
  PyObject* partial_type = nullptr;     // functools.partial
  PyObject* generator_cm_type = nullptr;  // contextlib._GeneratorContextManager (@contextmanager's objects)
  PyObject* ordered_dict_type = nullptr;  // collections.OrderedDict
  PyObject* inspect_signature = nullptr;  // inspect.signature
  PyObject* sequence_iter = nullptr;      // collections.abc.Sequence.__iter__
  PyObject* torch_tensor = nullptr;       // torch.tensor
  PyObject* copy_deepcopy = nullptr;      // copy.deepcopy
  PyObject* itertools_repeat = nullptr;   // itertools.repeat
  PyObject* itertools_chain = nullptr;    // itertools.chain
  PyObject* itertools_islice = nullptr;   // itertools.islice
  PyObject* functools_reduce = nullptr;   // functools.reduce
  PyObject* build_class = nullptr;        // builtins.__build_class__ (LOAD_BUILD_CLASS)
  PyObject* environ_type = nullptr;       // type(os.environ)
  PyObject* mapping_get = nullptr;        // collections.abc.Mapping.get
  PyObject* torch_clone = nullptr;        // torch.clone
  PyObject* operator_mod = nullptr;
  PyObject* builtins = nullptr;
  PyObject* object_getattribute = nullptr;
  PyObject* object_setattr = nullptr;
  PyObject* object_init = nullptr;
  PyObject* object_new = nullptr;
  PyObject* global_hook_dicts = nullptr;  // tuple of torch.nn.modules.module._global_*hooks dicts
  PyObject* graph_break_fn = nullptr;     // framefuse.graph_break, when importable
  std::vector<PyObject*> dtypes;          // DType -> torch.dtype
};
const Known& known();

// The module an IMPORT_NAME of `name` at `level` (0 absolute, else relative to the package of
// `globals`) evaluates to, when it and every name of `fromlist` are loaded already: an import that
// would run a module's code is not traced. A new reference, or nullptr with `why` set.
PyObject* import_loaded(PyObject* globals, PyObject* name, PyObject* fromlist, long level, std::string& why);

struct Frame {
  const DecodedCode* dc = nullptr;
  PyCodeObject* code = nullptr;     // borrowed (dc holds it)
  PyObject* globals = nullptr;      // borrowed (kept alive by the function / frame)
  PyObject* builtins = nullptr;     // borrowed
  SourcePtr globals_source;         // null: the root frame's globals (Source Global)
  bool guard_globals = true;        // false for torch's own modules (treated as constant)
  std::vector<Sym> locals;          // localsplus; null: unbound
  std::vector<Sym> stack;
  Sym closure;                      // Tuple of Cell syms (COPY_FREE_VARS)
  PyRef kw_names;                   // pending KW_NAMES (3.11/3.12)
  // A generator's frame runs lazily: each next() runs it to its next YIELD_VALUE, which stores the
  // value in `yielded` and sets `suspended` (run_frame returns; the next call resumes at `ip`).
  bool generator = false;
  bool suspended = false;
  Sym yielded;
  int ip = 0;                       // index of the instruction being interpreted
  int depth = 0;
};

struct PendingEffect {
  SideEffect::Kind kind;
  SourcePtr target;
  std::string name;
  PyRef key;
  Sym value;
};

using KwArgs = std::vector<std::pair<std::string, Sym>>;

// fn(*args, **kwargs) called now, when every argument is a constant (assume_constant_result);
// null where one is not, the call raised, or its result is a tensor (interpreter_calls.cpp).
Sym constant_result(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs);

// A Python exception raised in traced code (`raise`, a failed attribute lookup, an index out of
// range). It unwinds inlined frames that have no handler at the raise, up to a builtin that catches
// it as Python does: getattr with a default, hasattr and __getattr__ (AttributeError), the
// sequence-iteration protocol (IndexError). Anywhere else it is the graph break it derives from.
class RaisedInTrace : public GraphBreak {
 public:
  RaisedInTrace(BreakInfo info, PyObject* type) : GraphBreak(std::move(info)), type_(PyRef::borrow(type)) {}
  bool matches(PyObject* exc_class) const { return PyErr_GivenExceptionMatches(type_.get(), exc_class) != 0; }

 private:
  PyRef type_;
};

// interpreter_shapes.cpp: opcodes whose handlers keep symbolic ints on the stack (any other first
// specialises the stack), and the ops whose meta rules take symbolic int arguments.
bool keeps_symints(Handler h);
bool symint_op(std::optional<OpId> op);

class SymbolicTracer {
 public:
  SymbolicTracer(const FrameView& view, const TraceOptions& options);
  CaptureResult trace();

  // ---- interpreter.cpp: the frame loop ----
  Sym run_frame(Frame& f);
  void step(Frame& f, const Instr& ins);
  [[noreturn]] void brk(BreakKind kind, const std::string& detail);
  BreakInfo break_info(BreakKind kind, const std::string& detail);
  [[noreturn]] void raise_attribute_error(const Sym& obj, const std::string& name);
  [[noreturn]] void raise_in_trace(PyObject* exc_class, const std::string& detail);

  // ---- interpreter_values.cpp: wrapping real state, guards, attributes, globals ----
  Sym wrap(PyObject* obj, SourcePtr src);  // obj borrowed
  NodeId add_input(ValueMeta meta, const SourcePtr& src);  // a placeholder fetched from src
  // Gives the dimensions options_.dynamic picks a symbol each (meta: the tensor's, static).
  void make_dynamic(PyObject* tensor, const Source& src, TensorMeta* meta);  // tensor borrowed
  // A Python int read from frame state as a symbol (a graph input), where options_.dynamic picks
  // it; nullptr: it stays a constant (guarded by value). obj borrowed, an exact int.
  Sym dynamic_int(PyObject* obj, const SourcePtr& src);
  // Turns every SymInt in v (containers and objects included) into its hint, guarded.
  void specialize_ints(const Sym& v);
  void specialize_stack(Frame& f);  // every value on f's stack
  // Arithmetic and comparisons of ints where one is a SymInt; nullptr when that is not the case.
  Sym symint_binary(int nb, const Sym& a, const Sym& b);
  Sym symint_compare(int cmp, const Sym& a, const Sym& b);
  // Whether a call of `fn` may receive SymInts as they are (inlined Python code, torch ops).
  bool keeps_symint_args(const Sym& fn);
  Sym size_of(const SymInt& v);  // make_size, counted
  void note_instance_dict(PyObject* obj);
  void read_set(const Sym& s, PyObject* obj, const SourcePtr& src);  // s becomes the Set read from obj   // breaks if another wrapped object shares its __dict__
  void guard(Guard::Kind kind, const SourcePtr& src, PyObject* expected = nullptr, int64_t length = 0);
  Sym load_attr(const Sym& base, const std::string& name);
  Sym try_load_attr(const Sym& base, const std::string& name);  // nullptr: AttributeError
  Sym lookup_attr(const Sym& base, const std::string& name);    // __getattribute__'s part of it
  Sym generic_object_attr(const Sym& base, const std::string& name);
  Sym builtin_attr(const Sym& base, const std::string& name);
  Sym missing_attr(const Sym& base, const std::string& name);  // nullptr, guarded to stay missing
  void not_in_instance_dict(const Sym& base, const std::string& name);  // guards that obj.__dict__ lacks it
  Sym instance_dict(const Sym& base);                         // obj.__dict__, linked to obj's attributes
  Sym owner_of_instance_dict(const Sym& dict);                // the Object whose __dict__ it is, if any
  void set_object_attr(const Sym& obj, const std::string& name, Sym value);  // the tracer's view only
  // object.__getattribute__ / object.__setattr__ on an object the trace made (no custom hooks).
  Sym new_object_attr(const Sym& base, const std::string& name);  // nullptr: AttributeError
  void new_object_store(const Sym& base, const std::string& name, Sym value);
  // The mapping contents (a Dict) of an object the trace made from a dict or OrderedDict subclass,
  // where `dunder` on its class is still the builtin base's; nullptr otherwise.
  Sym mapping_part(const Sym& v, const char* dunder);
  // An object the trace made keeps its own attributes in `attrs`, or, once the trace read its
  // __dict__, in that Dict (`origin`): these read and write whichever holds them.
  Sym own_attr(const Sym& obj, const std::string& name);  // nullptr: none
  // __build_class__(body, name, *bases): a ClassDef, or a break where building it might be seen.
  Sym class_def(const std::vector<Sym>& args, const KwArgs& kwargs);
  void set_own_attr(const Sym& obj, const std::string& name, Sym value);
  bool del_own_attr(const Sym& obj, const std::string& name);  // false: none
  // A builtin method of dict / OrderedDict called on such an object (nullptr: not such a call).
  Sym call_mapping_method(PyObject* descr, std::vector<Sym>& args, KwArgs& kwargs);
  Sym object_mapping(const Sym& v);
  Sym object_iter(const Sym& v);
  // copy.deepcopy(v) of what the trace can copy: constants, containers, plain objects (reduced as
  // object.__reduce_ex__ does: a new instance of the class holding copies of the attributes).
  Sym deep_copy(const Sym& v, std::unordered_map<const SymValue*, Sym>& memo);
  // os.environ[key] read now and guarded (nullptr: not there, guarded to stay absent).
  Sym environ_item(const Sym& env, const Sym& key);
  bool is_environ(const Sym& v) const;  // iter() of an object by its class's protocol; nullptr: none modelled  // a dict subclass's instance passed in: its contents, read once
  Sym read_dict(PyObject* obj, const SourcePtr& src);  // a dict (or subclass) passed in, guarded
  void store_attr(const Sym& base, const std::string& name, Sym value);
  void delete_attr(const Sym& base, const std::string& name);
  // The generator of a @contextlib.contextmanager object the trace made (nullptr for anything else).
  Sym generator_cm_gen(const Sym& mgr);
  Sym load_global(Frame& f, PyObject* name);
  void store_global(Frame& f, PyObject* name, Sym value);
  Sym cell_contents(const Sym& cell);
  Sym tensor_sym(NodeId node);
  Sym scalar_sym(NodeId node);  // a Scalar for a float- or int-valued node (x.item() and arithmetic on it)
  // Arithmetic of a Scalar with a number or another Scalar, as a node; breaks where Python's
  // result is not the graph's (see SymKind::Scalar).
  Sym scalar_binary(int nb, const Sym& a, const Sym& b);
  // float(v) of a Scalar (v itself) or of a floating tensor (its item()) under config
  // capture_scalar_outputs; nullptr otherwise.
  Sym float_of(const Sym& v);
  // Breaks where a Scalar is an argument of a call other than a pointwise or creation op of the
  // registry (whose meta rules read only a scalar's type), or sits inside a container; and at
  // Tensor.item() itself while config capture_scalar_outputs is off.
  void check_scalar_args(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs, const std::string& what);
  PyObject* dtype_object(DType t);
  Sym module_child(const Sym& module, const char* dict_name, PyObject* value, const std::string& key);

  // ---- interpreter_calls.cpp: calls and inlining ----
  Sym call(const Sym& fn, std::vector<Sym> args, KwArgs kwargs);
  Sym inline_call(PyCodeObject* code, PyObject* globals, const SourcePtr& fn_source, const Sym& defaults,
                  const Sym& kwdefaults, const Sym& closure, std::vector<Sym> args, KwArgs kwargs);
  Sym call_python_function(PyObject* fn, const SourcePtr& fn_source, std::vector<Sym> args, KwArgs kwargs);
  Sym call_module(const Sym& module, std::vector<Sym> args, KwArgs kwargs);
  Sym construct(PyObject* cls, std::vector<Sym> args, KwArgs kwargs);
  void walk_modules(const Sym& module, const std::string& prefix, bool recurse, std::vector<Sym>* seen,
                    std::vector<std::pair<std::string, Sym>>* out);

  // ---- interpreter_builtins.cpp: builtins, torch calls, operators ----
  Sym call_const(const Sym& fn, std::vector<Sym>& args, KwArgs& kwargs);
  Sym call_builtin(PyObject* fn, const std::string& name, std::vector<Sym>& args, KwArgs& kwargs);
  Sym call_method(const Sym& method, std::vector<Sym>& args, KwArgs& kwargs);
  Sym call_tensor_method(const Sym& self, const std::string& name, std::vector<Sym>& args, KwArgs& kwargs,
                         PyObject* descr = nullptr);  // descr: the C method to call (borrowed), else looked up
  Sym torch_call(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs, const std::string& what);
  static PyObject* structseq_type_of(PyObject* fn, size_t n);
  Sym unchanged_self(const Node& n, const std::vector<Sym>& args);
  Sym fold(PyObject* fn, const std::vector<Sym>& args, const KwArgs& kwargs, const std::string& what);
  Sym typing_call(PyObject* fn, const std::vector<Sym>& args);  // fn(*args) of typing, evaluated now
  Sym binary_op(int nb_op, const Sym& a, const Sym& b);
  Sym compare_op(int cmp, const Sym& a, const Sym& b);
  Sym unary_op(const char* op_name, const Sym& a);
  Sym subscript(const Sym& container, const Sym& index);
  void store_subscript(const Sym& container, const Sym& index, Sym value);
  void delete_subscript(const Sym& container, const Sym& index);
  bool truth(const Sym& v);
  // f-string pieces: `conv` 1 str, 2 repr, 3 ascii; then format(value, spec) when `format`.
  Sym format_value(const Sym& v, int conv, const Sym& spec, bool format);
  Sym contains(const Sym& container, const Sym& item);
  Sym is_same(const Sym& a, const Sym& b);
  std::vector<Sym> iterate(const Sym& v);   // all items of an iterable
  Sym get_iter(const Sym& v);
  Sym iter_next(const Sym& it);             // nullptr when exhausted
  PyObject* type_of(const Sym& v);          // borrowed; nullptr when unknown
  Value to_value(const Sym& v);             // a graph operand
  Sym len_of(const Sym& v);
  std::vector<Sym> iterate_or_self(const Sym& s);
  // Sequential / ModuleList / ModuleDict iterated as their base class does (children, or a
  // ModuleDict's keys), guarded on the keys; nullopt for other objects.
  std::optional<std::vector<Sym>> module_container_items(const Sym& v);

  void note_list_mutation(const Sym& list);
  // An Appendable's contents, read now (guarded): it becomes a List or Set. No-op on other kinds.
  const Sym& materialize(const Sym& v);
  void note_appended(const Sym& v);

  // ---- interpreter_containers.cpp: sets, dict views, builtin container methods ----
  Sym call_container_method(const Sym& self, const std::string& name, std::vector<Sym>& args, KwArgs& kwargs);
  Sym new_set(PyObject* shadow);              // steals `shadow`, a set only the trace holds
  PyRef set_key(const Sym& v);                // what a value is in a set: constants by value, objects by identity
  Sym set_element(PyObject* key);             // the Sym of a set element (borrowed key)
  PyObject* set_operand(const Sym& v);        // new ref: a set/frozenset/tuple a set method can take
  std::vector<Sym> set_elements(const Sym& set);  // in eager's iteration order
  void set_add(const Sym& set, const Sym& v);
  // `set` changed by set.<method>(*args) (args: a tuple of Python objects); a set passed in gets
  // the same calls, in order, at the end (its table, hence its iteration order, then is eager's).
  void note_set_mutation(const Sym& set, const char* method, PyRef args);
  Sym set_binary_op(int nb_op, bool inplace, const Sym& a, const Sym& b);  // nullptr: not a set operation
  Sym dict_view(const Sym& dict, const char* which);
  void delete_dict_key(const Sym& dict, int index);  // replayed on a dict passed in

  // ---- interpreter_iterators.cpp: lazy iterators ----
  Sym make_iterator(IterKind kind, std::vector<Sym> items, Sym origin = nullptr);
  // itertools.repeat(...), itertools.chain(...) and chain.from_iterable(...) when `callee` is one of
  // them, else nullptr.
  Sym itertools_call(PyObject* callee, std::vector<Sym>& args, KwArgs& kwargs);
  Sym islice_call(std::vector<Sym>& args, KwArgs& kwargs);
  Sym checkpoint_call(std::vector<Sym> args, KwArgs kwargs);
  Sym autocast_getter(std::string_view name, const std::vector<Sym>& args, const KwArgs& kwargs);
  // torch.autocast (or a deprecated spelling of it) and capturable on this torch.
  bool is_autocast_type(PyObject* type) const;
  // The AutocastCtx of a real torch.autocast object (its resolved device, dtype and enabled flag).
  Sym autocast_ctx(PyObject* manager);
  // The __exit__ of a real torch.autocast object entered before the frame (a break split its block):
  // the state it restores from here on; the object leaves after the graph.
  Sym autocast_exit(std::vector<Sym> args, KwArgs kwargs);
  Sym reversed_of(const Sym& v);
  bool native_iterator_container_changed(const Sym& it);

  // ---- state ----
  FrameView view_;
  TraceOptions options_;
  CaptureResult out_;
  std::shared_ptr<ShapeEnv> shape_env_ = std::make_shared<ShapeEnv>();
  int symints_made_ = 0;  // SymInts made so far: none, and nothing needs specialising
  std::vector<Frame*> frames_;
  bool grad_enabled_ = true;
  AutocastState autocast_;  // torch.autocast where the traced code runs (its casts go in the graph)
  std::vector<AutocastState> autocast_outside_;  // the states outside each autocast block the trace entered
  std::vector<PendingEffect> effects_;
  std::vector<Sym> generators_;  // generators made by the trace (their frames may be suspended)
  std::vector<Sym> mutated_containers_;  // real lists and sets whose contents changed (replayed at the end)
  struct SetCall {
    Sym set;
    std::string method;
    PyRef args;
  };
  std::vector<SetCall> set_calls_;  // the changes of sets passed in, in order
  std::unordered_map<PyObject*, Sym> by_identity_;  // Objects / Lists / Dicts / Cells of real state
  std::unordered_map<PyObject*, PyObject*> owner_of_dict_;  // an instance __dict__ -> its object
  std::unordered_map<NodeId, PyObject*> input_tensors_;     // placeholder -> the tensor read (borrowed)
  std::unordered_set<std::string> guard_keys_;      // dedup of installed guards
  std::unordered_map<std::string, Sym> int_symbols_;  // dynamic_int's by source text: one symbol each
  std::unordered_map<PyObject*, Sym> globals_cache_;  // root globals by name object
  std::vector<int> root_visits_;  // per root instruction: how many times the trace reached it
  // FRAMEFUSE_LOGS=+frontend: each instruction interpreted, with its line and the stack's top
  const bool trace_instructions_ = log_enabled(LogComponent::frontend, LogLevel::Debug);
  void log_instruction(const Frame& f, const Instr& ins);
};

// interpreter_output.cpp: the Python values a capture rebuilds after its graph ran (return value,
// side-effect values, a graph break's state) as OutputPlans.
struct OutputBuilder {
  SymbolicTracer& t;
  std::vector<Value> outputs;
  std::unordered_map<NodeId, int> index_of;
  bool break_state = false;  // building a graph break's state: more kinds, inputs passed by source
  std::unordered_map<const SymValue*, int> memo_of;
  std::unordered_set<const SymValue*> in_progress;  // a value that contains itself cannot be planned

  OutputPlan plan(const Sym& v);  // GraphBreak (EscapingObject) for values it cannot rebuild

 private:
  OutputPlan plan_value(const Sym& v);
  int memo(const Sym& v);
  OutputPlan constant(PyObject* o);
  OutputPlan optional(const Sym& v);
  OutputPlan plan_break_only(const Sym& v);
  OutputPlan plan_iterator(const Sym& v);
  OutputPlan plan_iterator_value(const Sym& v);
  OutputPlan attr_plan(OutputPlan base, const char* name);
  OutputPlan call_plan(OutputPlan callee, std::vector<OutputPlan> args);
};
// A read-only view that folding produced (inspect.signature(f).parameters, its keys(), values(),
// items()): nothing in the trace can change it, so it is read for real like a constant.
bool is_frozen_view(const Sym& s);
// An object's attribute list (NewObject::attrs, Object overlays): the entry or nullptr; set or add.
Sym find_attr(std::vector<std::pair<std::string, Sym>>& attrs, const std::string& name);
void set_attr(std::vector<std::pair<std::string, Sym>>& attrs, const std::string& name, Sym v);
// Class attribute `desc` read through `self` (of type `type`) where it binds (functions, builtin
// methods, classmethods, staticmethods); nullptr for any other.
Sym bind_class_attr(const Sym& self, PyObject* desc, PyObject* type);
// A slot of a class whose instances have no __dict__ (dataclass(slots=True)): an object the trace
// made keeps its value among its attributes (interpreter_objects.cpp).
bool is_slot(PyTypeObject* cls, PyObject* desc);
// `name` looked up on a type's MRO as Python does (borrowed; nullptr: absent, no error set).
PyObject* type_lookup(PyTypeObject* t, const char* name);
// The root frame's state at a partial trace's stop (CaptureResult::BreakState), as one tuple plan.
OutputPlan plan_break_state(Frame& root, OutputBuilder& ob);

// Source helpers.
SourcePtr attr_source(const SourcePtr& base, const std::string& name);
SourcePtr item_source(const SourcePtr& base, PyObject* key);  // int or str key; nullptr otherwise
SourcePtr object_source(PyObject* obj, const std::string& printed);

}  // namespace ff
