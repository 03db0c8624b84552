#include "frame_eval/capture.h"

#include <cstdio>

namespace ff {

namespace {

std::string repr_of(PyObject* o) {
  if (!o) return "None";
  PyObject* r = PyObject_Repr(o);
  std::string text = r ? PyUnicode_AsUTF8(r) : "<unprintable>";
  Py_XDECREF(r);
  PyErr_Clear();
  return text;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

std::string Source::str() const {
  switch (kind) {
    case Kind::Local: return "L[" + quoted(name) + "]";
    case Kind::Closure: return "L[" + quoted(name) + "]";
    case Kind::Global: return "G[" + quoted(name) + "]";
    case Kind::Builtin: return "G['__builtins__']." + name;
    case Kind::Attr: return base->str() + "." + name;
    case Kind::Item: return base->str() + "[" + (key_is_str ? quoted(str_key) : std::to_string(int_key)) + "]";
    case Kind::TypeOf: return "type(" + base->str() + ")";
    case Kind::IterRest: return "rest(" + base->str() + ")";
    case Kind::Object: return name;
  }
  return "?";
}

std::string Guard::str() const {
  std::string s = source ? source->str() : "";
  switch (kind) {
    case Kind::TypeMatch:
      return "type(" + s + ") is " + (expected ? reinterpret_cast<PyTypeObject*>(expected)->tp_name : "?");
    case Kind::IdMatch: {
      // NB: objects print as <type at address>: the repr of an nn.Module is its whole tree.
      if (!expected || PyType_Check(expected) || PyFunction_Check(expected) || PyCFunction_Check(expected) ||
          PyModule_Check(expected) || expected == Py_None || PyBool_Check(expected))
        return s + " is " + repr_of(expected);
      char buf[64];
      std::snprintf(buf, sizeof(buf), " at %p>", static_cast<void*>(expected));
      return s + " is <" + Py_TYPE(expected)->tp_name + buf;
    }
    case Kind::EqualsMatch: return s + " == " + repr_of(expected);
    case Kind::TensorMatch: {
      std::string sizes, strides;
      for (size_t i = 0; i < tensor_meta.sizes.size(); ++i) {
        sizes += (i ? ", " : "") + tensor_meta.sizes[i].str();
        strides += (i ? ", " : "") + tensor_meta.strides[i].str();
      }
      return "check_tensor(" + s + ", " + std::string(dtype_name(tensor_meta.dtype)) + ", " +
             tensor_meta.device.str() + ", size=[" + sizes + "], stride=[" + strides +
             "], requires_grad=" + (tensor_meta.requires_grad ? "True" : "False") + ")";
    }
    case Kind::LenMatch: return "len(" + s + ") == " + std::to_string(length);
    case Kind::LenAtLeast: return "len(" + s + ") >= " + std::to_string(length);
    case Kind::SymbolicInt: return "type(" + s + ") is int (symbol s" + std::to_string(length) + ")";
    case Kind::DictKeys: return "list(" + s + ".keys()) == " + repr_of(expected);
    case Kind::IterMatch: return "tuple(" + s + ") == " + repr_of(expected);
    case Kind::NoAttr: return "not hasattr(" + s + ", " + repr_of(expected) + ")";
    case Kind::SameObject: return s + " is " + others.at(0)->str();
    case Kind::Distinct: {
      std::string out = "distinct(";
      for (size_t i = 0; i < others.size(); ++i) out += (i ? ", " : "") + others[i]->str();
      return out + ")";
    }
    case Kind::NoKey: return repr_of(expected) + " not in " + s;
    case Kind::GlobalState:
      return std::string("torch.is_grad_enabled() == ") + (grad_enabled ? "True" : "False") +
             " and torch.get_default_dtype() == torch." + std::string(dtype_name(default_dtype)) +
             (expected ? " and autocast == " + repr_of(expected) : " and not autocast") +
             (deterministic < 0 ? "" : std::string(" and torch.are_deterministic_algorithms_enabled() == ") + (deterministic ? "True" : "False"));
    case Kind::ShapeRelations: {
      std::string out = "shape_relations(";
      for (size_t i = 0; shape_env && i < shape_env->guards().size(); ++i)
        out += (i ? ", " : "") + shape_env->guard_str(shape_env->guards()[i]);
      return out + ")";
    }
  }
  return "?";
}

namespace {
void release_plan(OutputPlan& p) {
  Py_CLEAR(p.constant);
  Py_CLEAR(p.tuple_type);
  for (PyObject*& k : p.keys) Py_CLEAR(k);
  for (OutputPlan& i : p.items) release_plan(i);
}
}  // namespace

CaptureResult::CaptureResult(CaptureResult&& o) noexcept
    : graph(std::move(o.graph)),
      inputs(std::move(o.inputs)),
      guards(std::move(o.guards)),
      output(std::move(o.output)),
      side_effects(std::move(o.side_effects)),
      shape_env(std::move(o.shape_env)),
      brk(std::move(o.brk)),
      num_memos(o.num_memos),
      stats(o.stats) {
  o.guards.clear();
  o.output = OutputPlan{};
  o.side_effects.clear();
}

CaptureResult::~CaptureResult() {
  for (Guard& g : guards) Py_CLEAR(g.expected);
  release_plan(output);
  for (SideEffect& e : side_effects) {
    Py_CLEAR(e.key);
    release_plan(e.value);
  }
}

}  // namespace ff
