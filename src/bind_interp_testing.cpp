// Test-only bindings of the symbolic interpreter (framefuse._C._testing): trace a Python function
// on example arguments and inspect the capture, or run it through the reference runner, without
// the frame hook. Also the opcode tables and the break registry, for consistency tests.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <sstream>

#include "frame_eval/break_registry.h"
#include "frame_eval/interpreter.h"
#include "frame_eval/opcodes.h"
#include "frame_eval/py_util.h"
#include "graph/op_registry.h"
#include "graph/python/reference_runner.h"
#include "src/base/errors.h"

namespace py = pybind11;

namespace ff {
namespace {

std::string value_text(const Graph& g, const Value& v) {
  switch (v.kind) {
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: {
      // NB: snprintf, not an ostream: the GPU machines' GCC 13 links libstdc++'s floating-point
      // stream formatting into the module, and it crashes next to torch's libstdc++.
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.f);
      return buf;
    }
    case Value::Kind::Str: return "'" + v.s + "'";
    case Value::Kind::DType: return "torch." + std::string(dtype_name(v.dtype));
    case Value::Kind::Device: return "device('" + v.device.str() + "')";
    case Value::Kind::MemoryFormat:
    case Value::Kind::Layout: return "torch." + v.s;
    case Value::Kind::Ellipsis: return "...";
    case Value::Kind::Slice: {
      auto part = [&](const Value& x) { return x.is_none() ? std::string() : value_text(g, x); };
      std::string s = part(v.items[0]) + ":" + part(v.items[1]);
      if (!v.items[2].is_none()) s += ":" + part(v.items[2]);
      return s;
    }
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      std::string s = v.kind == Value::Kind::List ? "[" : "(";
      for (size_t i = 0; i < v.items.size(); ++i) s += (i ? ", " : "") + value_text(g, v.items[i]);
      if (v.kind == Value::Kind::Tuple && v.items.size() == 1) s += ",";
      return s + (v.kind == Value::Kind::List ? "]" : ")");
    }
    case Value::Kind::Node: return g.node(v.node).name;
  }
  return "?";
}

std::string meta_text(const ValueMeta& m) {
  if (m.kind != ValueMeta::Kind::Tensor) return "?";
  std::string s = std::string(dtype_short_name(m.tensor.dtype)) + "[";
  for (size_t i = 0; i < m.tensor.sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(m.tensor.sizes[i]);
  return s + "]";
}

// A compact, stable text form for tests: one line per node, args as bound to the op's schema
// with parameters at their defaults left out.
std::string graph_text(const Graph& g) {
  std::string out;
  for (const Node& n : g.nodes()) {
    switch (n.kind) {
      case NodeKind::Placeholder:
        out += n.name + ": " + meta_text(n.meta) + "\n";
        break;
      case NodeKind::Call: {
        const OpDef& def = op_def(n.op);
        CallArgs ca = call_args(def, n.args);
        std::string args;
        for (const Value* v : ca.positional) args += (args.empty() ? "" : ", ") + value_text(g, *v);
        for (const auto& [k, v] : ca.keywords) args += (args.empty() ? "" : ", ") + k + "=" + value_text(g, *v);
        out += n.name + " = " + def.name + "(" + args + ")\n";
        break;
      }
      case NodeKind::GetItem:
        out += n.name + " = " + value_text(g, n.args[0]) + "[" + value_text(g, n.args[1]) + "]\n";
        break;
      case NodeKind::Output:
        out += "return " + value_text(g, n.args[0]) + "\n";
        break;
    }
  }
  return out;
}

std::string plan_text(const OutputPlan& p) {
  switch (p.kind) {
    case OutputPlan::Kind::GraphOutput: return "out[" + std::to_string(p.index) + "]";
    case OutputPlan::Kind::Source: return p.source->str();
    case OutputPlan::Kind::Constant: return py::repr(p.constant).cast<std::string>();
    case OutputPlan::Kind::Tuple:
    case OutputPlan::Kind::List: {
      std::string s = p.kind == OutputPlan::Kind::List ? "[" : "(";
      for (size_t i = 0; i < p.items.size(); ++i) s += (i ? ", " : "") + plan_text(p.items[i]);
      if (p.kind == OutputPlan::Kind::Tuple && p.items.size() == 1) s += ",";
      s += p.kind == OutputPlan::Kind::List ? "]" : ")";
      if (p.tuple_type) s = reinterpret_cast<PyTypeObject*>(p.tuple_type)->tp_name + s;
      return s;
    }
    case OutputPlan::Kind::Dict: {
      std::string s = "{";
      for (size_t i = 0; i < p.items.size(); ++i)
        s += (i ? ", " : "") + py::repr(p.keys[i]).cast<std::string>() + ": " + plan_text(p.items[i]);
      return s + "}";
    }
    default: break;  // NB: the other kinds (Set, Attr, Call, Cell, Function, Iterator, ...) print as "?"
  }
  return "?";
}

struct BoundFrame {
  FrameView view;
  py::object fn, args_tuple, locals_keepalive;
};

BoundFrame bind_frame(py::handle fn, py::tuple args, py::dict kwargs) {
  if (!PyFunction_Check(fn.ptr())) throw py::type_error("trace() needs a Python function");
  BoundFrame b;
  b.fn = py::reinterpret_borrow<py::object>(fn);
  auto* f = reinterpret_cast<PyFunctionObject*>(fn.ptr());
  auto* code = reinterpret_cast<PyCodeObject*>(f->func_code);
  py::object sig = py::module_::import("inspect").attr("signature")(fn);
  py::object bound = sig.attr("bind")(*args, **kwargs);
  bound.attr("apply_defaults")();
  py::dict arguments = py::dict(bound.attr("arguments"));
  int nargs = code->co_argcount + code->co_kwonlyargcount + ((code->co_flags & CO_VARARGS) ? 1 : 0) +
              ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  py::list keep;
  b.view.code = code;
  b.view.globals = f->func_globals;
  b.view.builtins = PyEval_GetBuiltins();
  b.view.closure = f->func_closure;
  b.view.localsplus.assign(PyTuple_GET_SIZE(code->co_localsplusnames), nullptr);
  for (int i = 0; i < nargs; ++i) {
    py::str name = py::reinterpret_borrow<py::str>(PyTuple_GET_ITEM(code->co_localsplusnames, i));
    if (!arguments.contains(name)) continue;
    py::object v = arguments[name];
    keep.append(v);
    b.view.localsplus[static_cast<size_t>(i)] = v.ptr();
  }
  b.locals_keepalive = keep;
  return b;
}

// Fetches a source's value for the given bound frame (new reference).
py::object eval_source(const Source& s, const BoundFrame& b) {
  switch (s.kind) {
    case Source::Kind::Local: return py::reinterpret_borrow<py::object>(b.view.localsplus.at(static_cast<size_t>(s.index)));
    case Source::Kind::Closure:
      return py::reinterpret_borrow<py::object>(PyCell_GET(PyTuple_GET_ITEM(b.view.closure, s.index)));
    case Source::Kind::Global: return py::reinterpret_borrow<py::dict>(b.view.globals)[py::str(s.name)];
    case Source::Kind::Builtin: return py::module_::import("builtins").attr(s.name.c_str());
    case Source::Kind::Attr: return eval_source(*s.base, b).attr(s.name.c_str());
    case Source::Kind::Item: {
      py::object base = eval_source(*s.base, b);
      if (s.key_is_str) return base[py::str(s.str_key)];
      return base[py::int_(s.int_key)];
    }
    case Source::Kind::TypeOf: return py::type::of(eval_source(*s.base, b));
    case Source::Kind::IterRest: return py::reinterpret_steal<py::object>(iterator_rest(eval_source(*s.base, b).ptr()));
    case Source::Kind::Object: return py::reinterpret_borrow<py::object>(s.object.get());
  }
  throw std::runtime_error("unknown source");
}

py::object build(const OutputPlan& p, py::tuple outs, const BoundFrame& b) {
  switch (p.kind) {
    case OutputPlan::Kind::GraphOutput: return outs[static_cast<size_t>(p.index)];
    case OutputPlan::Kind::Source: return eval_source(*p.source, b);
    case OutputPlan::Kind::Constant: return py::reinterpret_borrow<py::object>(p.constant);
    case OutputPlan::Kind::Tuple: {
      py::list items;
      for (const OutputPlan& i : p.items) items.append(build(i, outs, b));
      py::tuple t(items);
      if (!p.tuple_type) return t;
      py::handle type(p.tuple_type);
      if (py::hasattr(type, "_make")) return type.attr("_make")(t);
      return type(t);
    }
    case OutputPlan::Kind::List: {
      py::list items;
      for (const OutputPlan& i : p.items) items.append(build(i, outs, b));
      return items;
    }
    case OutputPlan::Kind::Dict: {
      py::dict d;
      for (size_t i = 0; i < p.items.size(); ++i) d[py::handle(p.keys[i])] = build(p.items[i], outs, b);
      return d;
    }
    case OutputPlan::Kind::Set: {
      py::set s;
      for (const OutputPlan& i : p.items) s.add(build(i, outs, b));
      return s;
    }
    case OutputPlan::Kind::Attr: return build(p.items[0], outs, b).attr(py::handle(p.constant));
    case OutputPlan::Kind::Call: {
      py::list args;
      for (size_t i = 1; i < p.items.size(); ++i) args.append(build(p.items[i], outs, b));
      return build(p.items[0], outs, b)(*py::tuple(args));
    }
    default:
      break;
  }
  throw std::runtime_error("unknown plan");
}

py::dict break_dict(const BreakInfo& info) {
  py::dict d;
  d["id"] = info.id;
  d["reason"] = info.reason;
  d["explanation"] = info.explanation;
  d["hint"] = info.hint;
  d["filename"] = info.filename;
  d["lineno"] = info.lineno;
  d["user_stack"] = info.user_stack;
  return d;
}

py::dict capture_dict(const CaptureResult& cr) {
  py::dict d;
  d["graph"] = graph_text(cr.graph);
  py::list guards, inputs, effects;
  for (const Guard& g : cr.guards) guards.append(g.str());
  for (const SourcePtr& s : cr.inputs) inputs.append(s->str());
  for (const SideEffect& e : cr.side_effects) {
    static const char* kinds[] = {"SetAttr", "StoreGlobal", "ReplaceList", "DictSetItem",
                                  "DictDelItem", "CellSet", "CallMethod", "Advance"};
    static_assert(sizeof(kinds) / sizeof(kinds[0]) == static_cast<size_t>(SideEffect::Kind::Advance) + 1);
    std::string text = std::string(kinds[static_cast<int>(e.kind)]) + "(" + (e.target ? e.target->str() : "") +
                       (e.name.empty() ? "" : ", '" + e.name + "'") +
                       (e.key ? ", " + py::repr(e.key).cast<std::string>() : "") + ", " + plan_text(e.value) + ")";
    effects.append(text);
  }
  d["guards"] = guards;
  d["inputs"] = inputs;
  d["output"] = plan_text(cr.output);
  d["side_effects"] = effects;
  py::dict stats;
  stats["instructions"] = cr.stats.instructions;
  stats["inlined_calls"] = cr.stats.inlined_calls;
  stats["frames"] = cr.stats.frames;
  int calls = 0;
  for (const Node& n : cr.graph.nodes()) calls += n.kind == NodeKind::Call;
  stats["ops"] = calls;
  d["stats"] = stats;
  d["break"] = py::none();
  return d;
}

}  // namespace

void define_interp_testing(py::module_& m) {
  py::module_ t = py::hasattr(m, "_testing") ? py::module_(m.attr("_testing"))
                                             : m.def_submodule("_testing", "test-only access to C++ internals");
  t.def(
      "trace",
      [](py::handle fn, py::tuple args, py::dict kwargs) -> py::dict {
        BoundFrame b = bind_frame(fn, args, kwargs);
        try {
          CaptureResult cr = trace_frame(b.view);
          return capture_dict(cr);
        } catch (const GraphBreak& e) {
          py::dict d;
          d["break"] = break_dict(e.info());
          return d;
        }
      },
      py::arg("fn"), py::arg("args") = py::tuple(), py::arg("kwargs") = py::dict(),
      "Trace fn(*args, **kwargs) symbolically. Returns graph text, guards, inputs, output plan, side "
      "effects and stats, or {'break': record} on a graph break.");
  t.def(
      "run",
      [](py::handle fn, py::tuple args, py::dict kwargs) -> py::tuple {
        BoundFrame b = bind_frame(fn, args, kwargs);
        CaptureResult cr = [&] {
          try {
            return trace_frame(b.view);
          } catch (const GraphBreak& e) {
            throw py::value_error(std::string("graph break: ") + e.what());
          }
        }();
        std::vector<py::object> inputs;
        std::vector<PyObject*> raw;
        for (const SourcePtr& s : cr.inputs) {
          inputs.push_back(eval_source(*s, b));
          raw.push_back(inputs.back().ptr());
        }
        ReferenceRunner runner(cr.graph);
        PyObject* outs = runner.run(raw.data(), raw.size());
        if (!outs) throw py::error_already_set();
        py::tuple out_tuple = py::reinterpret_steal<py::tuple>(outs);
        py::object result = build(cr.output, out_tuple, b);
        for (const SideEffect& e : cr.side_effects) {
          py::object value = build(e.value, out_tuple, b);
          switch (e.kind) {
            case SideEffect::Kind::SetAttr: py::setattr(eval_source(*e.target, b), e.name.c_str(), value); break;
            case SideEffect::Kind::StoreGlobal: py::reinterpret_borrow<py::dict>(b.view.globals)[py::str(e.name)] = value; break;
            case SideEffect::Kind::ReplaceList: {
              py::object target = eval_source(*e.target, b);
              PyList_SetSlice(target.ptr(), 0, PY_SSIZE_T_MAX, value.ptr());
              break;
            }
            case SideEffect::Kind::DictSetItem: eval_source(*e.target, b)[py::handle(e.key)] = value; break;
            case SideEffect::Kind::DictDelItem: PyObject_DelItem(eval_source(*e.target, b).ptr(), e.key); break;
            case SideEffect::Kind::CellSet: PyCell_Set(eval_source(*e.target, b).ptr(), value.ptr()); break;
            case SideEffect::Kind::CallMethod:
              eval_source(*e.target, b).attr(e.name.c_str())(*py::reinterpret_borrow<py::tuple>(value));
              break;
            case SideEffect::Kind::Advance: {
              py::object it = eval_source(*e.target, b);
              for (Py_ssize_t i = PyLong_AsSsize_t(e.key); i > 0; --i) py::module_::import("builtins").attr("next")(it);
              break;
            }
          }
        }
        return py::make_tuple(result, capture_dict(cr));
      },
      py::arg("fn"), py::arg("args") = py::tuple(), py::arg("kwargs") = py::dict(),
      "Trace fn and run the capture on the reference runner (fetch inputs by source, run the graph, "
      "build the result, replay side effects). Returns (result, capture info).");
  t.def(
      "capture_seconds",
      [](py::handle fn, py::tuple args, py::dict kwargs, int repeat) -> double {
        BoundFrame b = bind_frame(fn, args, kwargs);
        double best = 1e30;
        for (int i = 0; i < repeat; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          try {
            CaptureResult cr = trace_frame(b.view);
          } catch (const GraphBreak& e) {
            throw py::value_error(std::string("graph break: ") + e.what());
          }
          best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
      },
      py::arg("fn"), py::arg("args") = py::tuple(), py::arg("kwargs") = py::dict(), py::arg("repeat") = 1,
      "Best wall time in seconds of trace_frame on fn(*args, **kwargs) over `repeat` runs (capture only).");
  t.def("unsupported_opcodes", &unsupported_opcodes_report);
  t.def("opcode_table", [] {
    py::list out;
    const OpcodeInfo* table = opcode_table();
    for (int op = 0; op < 256; ++op)
      if (table[op].name)
        out.append(py::make_tuple(table[op].name, op, handler_name(table[op].handler), table[op].caches,
                                  (table[op].flags & kJumpForward) != 0, (table[op].flags & kJumpBackward) != 0));
    return out;
  });
  t.def("opcode_table_version", &opcode_table_version);
  t.def("break_registry", [] {
    py::list out;
    for (const BreakReason& r : all_break_reasons())
      out.append(py::make_tuple(r.id, r.reason, r.explanation, r.hint));
    return out;
  });
}

}  // namespace ff
