#include "graph/python/reference_runner.h"

#include <algorithm>
#include <string>

#include "graph/op.h"
#include "graph/op_registry.h"
#include "graph/passes/specialize_shapes.h"
#include "graph/python/graph_calls.h"
#include "src/base/errors.h"

namespace ff {
namespace {

// An argument of a step: a constant built once, a slot holding a node's result, or a sequence /
// slice with node results inside (built per run).
// Where a symbolic int argument reads one of its symbols (graph/passes/specialize_shapes.h).
struct SymbolRead {
  SymbolId symbol;
  SymbolSource at;
};

struct Arg {
  enum class Kind : uint8_t { Const,
                              Slot,
                              List,
                              Tuple,
                              Slice,
                              Sym };
  Kind kind = Kind::Const;
  PyObject* obj = nullptr;         // Const: strong reference
  int slot = -1;                   // Slot
  std::vector<Arg> items;          // List / Tuple / Slice (3 items)
  SymExprId expr = 0;              // Sym: a symbolic int, computed from sizes of this run's values
  std::vector<SymbolRead> reads;   // Sym
  size_t num_symbols = 0;          // Sym
};

struct Step {
  NodeKind kind = NodeKind::Call;
  PyObject* fn = nullptr;       // borrowed from the op registry
  std::vector<Arg> args;        // positional then keyword values
  PyObject* kwnames = nullptr;  // strong reference; tuple of keyword names or null
  int out = -1;                 // slot written
  int64_t index = 0;            // GetItem
  std::vector<int> release;     // slots whose last use is this step
  std::string what;             // for error messages: "add = torch.add(...)"
  // add/sub/mul/div of two operands with default keywords: the number protocol reaches the same
  // ATen op as torch.add(a, b) without its overload parser (about 0.15 us less per call).
  binaryfunc number_op = nullptr;
};

void release_arg(Arg& a) {
  Py_CLEAR(a.obj);
  for (Arg& item : a.items) release_arg(item);
}

bool contains_node(const Value& v) {
  bool found = false;
  v.for_each_node([&](NodeId) { found = true; });
  return found;
}

Arg make_arg(const Value& v, const std::vector<SymbolSource>& sources) {
  Arg a;
  if (v.sym) {
    a.kind = Arg::Kind::Sym;
    a.expr = v.sym;
    a.num_symbols = sources.size();
    for (SymbolId s : sym_free_symbols(v.sym)) {
      FF_CHECK(static_cast<size_t>(s) < sources.size() && sources[static_cast<size_t>(s)].node >= 0,
               "symbol s" + std::to_string(s) + " of an argument is bound by no value of the graph");
      a.reads.push_back({s, sources[static_cast<size_t>(s)]});
    }
    return a;
  }
  if (v.is_node()) {
    a.kind = Arg::Kind::Slot;
    a.slot = v.node;
    return a;
  }
  if (!contains_node(v) && !value_symbolic(v)) {
    a.kind = Arg::Kind::Const;
    a.obj = value_to_py(v, nullptr);
    if (!a.obj) throw_internal(__FILE__, __LINE__, "cannot convert a graph constant to Python");
    return a;
  }
  a.kind = v.kind == Value::Kind::List ? Arg::Kind::List : v.kind == Value::Kind::Tuple ? Arg::Kind::Tuple
                                                                                        : Arg::Kind::Slice;
  FF_CHECK(v.is_sequence() || v.kind == Value::Kind::Slice, "node reference or symbolic int inside an unsupported constant kind");
  for (const Value& item : v.items) a.items.push_back(make_arg(item, sources));
  return a;
}

// The int at `at` of this run's values; false with a Python error set.
bool read_symbol(const SymbolSource& at, PyObject* const* slots, int64_t* out) {
  PyObject* v = slots[at.node];
  if (at.item >= 0) v = PyTuple_Check(v) ? PyTuple_GetItem(v, at.item) : nullptr;  // borrowed
  if (!v) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "framefuse: a size's value is not in the graph's results");
    return false;
  }
  PyObject* n = nullptr;
  if (at.dim < 0) {
    n = (Py_INCREF(v), v);
  } else if (PyObject* shape = PyObject_GetAttrString(v, "shape")) {
    n = PySequence_GetItem(shape, at.dim);
    Py_DECREF(shape);
  }
  if (!n) return false;
  *out = PyLong_AsLongLong(n);
  Py_DECREF(n);
  return !(*out == -1 && PyErr_Occurred());
}

// New reference, or null with a Python error set.
PyObject* build(const Arg& a, PyObject* const* slots) {
  switch (a.kind) {
    case Arg::Kind::Const: Py_INCREF(a.obj); return a.obj;
    case Arg::Kind::Sym: {
      std::vector<int64_t> bindings(a.num_symbols, 0);
      for (const SymbolRead& r : a.reads)
        if (!read_symbol(r.at, slots, &bindings[static_cast<size_t>(r.symbol)])) return nullptr;
      try {
        return PyLong_FromLongLong(sym_evaluate(a.expr, bindings));
      } catch (const std::exception& e) {
        PyErr_Format(PyExc_RuntimeError, "framefuse: computing the argument %s: %s", sym_str(a.expr).c_str(), e.what());
        return nullptr;
      }
    }
    case Arg::Kind::Slot: Py_INCREF(slots[a.slot]); return slots[a.slot];
    case Arg::Kind::Slice: {
      PyObject* p[3] = {nullptr, nullptr, nullptr};
      for (int i = 0; i < 3; ++i)
        if (!(p[i] = build(a.items[static_cast<size_t>(i)], slots))) break;
      PyObject* s = (p[0] && p[1] && p[2]) ? PySlice_New(p[0], p[1], p[2]) : nullptr;
      for (PyObject* x : p) Py_XDECREF(x);
      return s;
    }
    case Arg::Kind::List:
    case Arg::Kind::Tuple: {
      bool list = a.kind == Arg::Kind::List;
      Py_ssize_t n = static_cast<Py_ssize_t>(a.items.size());
      PyObject* seq = list ? PyList_New(n) : PyTuple_New(n);
      if (!seq) return nullptr;
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = build(a.items[static_cast<size_t>(i)], slots);
        if (!item) {
          Py_DECREF(seq);
          return nullptr;
        }
        if (list) PyList_SET_ITEM(seq, i, item);
        else PyTuple_SET_ITEM(seq, i, item);
      }
      return seq;
    }
  }
  return nullptr;
}

void note_uses(const Arg& a, std::vector<int>& last_use, int step) {
  if (a.kind == Arg::Kind::Slot) last_use[static_cast<size_t>(a.slot)] = step;
  for (const SymbolRead& r : a.reads) last_use[static_cast<size_t>(r.at.node)] = std::max(last_use[static_cast<size_t>(r.at.node)], step);
  for (const Arg& item : a.items) note_uses(item, last_use, step);
}

}  // namespace

struct ReferenceRunner::Plan {
  size_t num_slots = 0;
  std::vector<int> input_slots;
  std::vector<Step> steps;
  Arg output;

  ~Plan() {
    for (Step& s : steps) {
      for (Arg& a : s.args) release_arg(a);
      Py_CLEAR(s.kwnames);
    }
    release_arg(output);
  }
};

ReferenceRunner::ReferenceRunner(const Graph& graph) : plan_(std::make_unique<Plan>()) {
  Plan& p = *plan_;
  const std::vector<SymbolSource> sources = has_symbolic_int_args(graph) ? symbol_sources(graph) : std::vector<SymbolSource>{};
  p.num_slots = graph.size();
  for (NodeId id = 0; id < static_cast<NodeId>(graph.size()); ++id) {
    const Node& n = graph.node(id);
    switch (n.kind) {
      case NodeKind::Placeholder: p.input_slots.push_back(id); break;
      case NodeKind::Output: p.output = make_arg(n.args.at(0), sources); break;
      case NodeKind::GetItem: {
        Step s;
        s.kind = NodeKind::GetItem;
        s.args.push_back(make_arg(n.args.at(0), sources));
        s.index = n.args.at(1).i;
        s.out = id;
        p.steps.push_back(std::move(s));
        break;
      }
      case NodeKind::Call: {
        const OpDef& def = op_def(n.op);
        Step s;
        s.kind = NodeKind::Call;
        s.fn = op_callable(n.op);
        if (!s.fn) throw Unsupported(def.target + " is not available in the installed torch");
        s.out = id;
        s.what = n.name + " = " + def.target + "(...)";
        CallArgs ca = call_args(def, n.args);
        for (const Value* v : ca.positional) s.args.push_back(make_arg(*v, sources));
        if (!ca.keywords.empty()) {
          s.kwnames = PyTuple_New(static_cast<Py_ssize_t>(ca.keywords.size()));
          for (size_t i = 0; i < ca.keywords.size(); ++i) {
            s.args.push_back(make_arg(*ca.keywords[i].second, sources));
            PyTuple_SET_ITEM(s.kwnames, static_cast<Py_ssize_t>(i), PyUnicode_FromString(ca.keywords[i].first.c_str()));
          }
        }
        if (!s.kwnames && s.args.size() == 2) {
          const Op kind = op_kind(def.id);
          if (kind == Op::add) s.number_op = PyNumber_Add;
          else if (kind == Op::sub) s.number_op = PyNumber_Subtract;
          else if (kind == Op::mul) s.number_op = PyNumber_Multiply;
          else if (kind == Op::div || kind == Op::true_divide) s.number_op = PyNumber_TrueDivide;
        }
        p.steps.push_back(std::move(s));
        break;
      }
    }
  }
  // Free each intermediate right after its last use, as eager would.
  std::vector<int> last_use(p.num_slots, -1);
  for (size_t i = 0; i < p.steps.size(); ++i)
    for (const Arg& a : p.steps[i].args) note_uses(a, last_use, static_cast<int>(i));
  std::vector<int> in_output(p.num_slots, 0);
  note_uses(p.output, in_output, 1);
  for (size_t slot = 0; slot < p.num_slots; ++slot)
    if (last_use[slot] >= 0 && !in_output[slot]) p.steps[static_cast<size_t>(last_use[slot])].release.push_back(static_cast<int>(slot));
}

ReferenceRunner::~ReferenceRunner() = default;

size_t ReferenceRunner::num_inputs() const { return plan_->input_slots.size(); }

PyObject* ReferenceRunner::run(PyObject* const* inputs, size_t n_inputs) {
  const Plan& p = *plan_;
  if (n_inputs != p.input_slots.size()) {
    PyErr_Format(PyExc_TypeError, "compiled graph expects %zd inputs, got %zd", p.input_slots.size(), n_inputs);
    return nullptr;
  }
  constexpr size_t kInline = 64;
  PyObject* inline_slots[kInline];
  std::vector<PyObject*> heap_slots;
  PyObject** slots = inline_slots;
  if (p.num_slots > kInline) {
    heap_slots.resize(p.num_slots);
    slots = heap_slots.data();
  }
  for (size_t i = 0; i < p.num_slots; ++i) slots[i] = nullptr;
  for (size_t i = 0; i < n_inputs; ++i) {
    Py_INCREF(inputs[i]);
    slots[p.input_slots[i]] = inputs[i];
  }
  PyObject* result = nullptr;
  bool ok = true;
  for (const Step& s : p.steps) {
    if (s.kind == NodeKind::GetItem) {
      PyObject* seq = slots[s.args[0].slot];
      PyObject* idx = PyLong_FromLongLong(s.index);
      slots[s.out] = idx ? PyObject_GetItem(seq, idx) : nullptr;
      Py_XDECREF(idx);
    } else {
      constexpr size_t kMaxArgs = 16;
      PyObject* argv_inline[kMaxArgs + 1];
      std::vector<PyObject*> argv_heap;
      PyObject** argv = argv_inline;
      if (s.args.size() > kMaxArgs) {
        argv_heap.resize(s.args.size() + 1);
        argv = argv_heap.data();
      }
      size_t built = 0;
      for (; built < s.args.size(); ++built)
        if (!(argv[built + 1] = build(s.args[built], slots))) break;
      if (built == s.args.size()) {
        size_t npos = s.args.size() - (s.kwnames ? static_cast<size_t>(PyTuple_GET_SIZE(s.kwnames)) : 0);
        // NB: only a tensor on the left: `1 + t` would dispatch on the int first.
        PyObject* lhs = argv[1];
        if (s.number_op && !PyLong_Check(lhs) && !PyFloat_Check(lhs) && !PyComplex_Check(lhs))
          slots[s.out] = s.number_op(lhs, argv[2]);
        else
          slots[s.out] = PyObject_Vectorcall(s.fn, argv + 1, npos | PY_VECTORCALL_ARGUMENTS_OFFSET, s.kwnames);
      }
      for (size_t i = 0; i < built; ++i) Py_DECREF(argv[i + 1]);
    }
    if (!slots[s.out]) {
      ok = false;
      break;
    }
    for (int r : s.release) Py_CLEAR(slots[r]);
  }
  if (ok) result = build(p.output, slots);
  for (size_t i = 0; i < p.num_slots; ++i) Py_XDECREF(slots[i]);
  return result;
}

}  // namespace ff
