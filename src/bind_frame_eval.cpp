// Bindings of the frontend: the compiled/disabled callables, reset, counters, and the test-only
// `_C._testing` submodule that runs hand-built captures through the real hook.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "frame_eval/cache.h"
#include "frame_eval/frame_access.h"
#include "frame_eval/guards.h"
#include "frame_eval/hook.h"
#include "frame_eval/py_util.h"
#include "graph/python/graph_calls.h"
#include "graph/python/open_ops.h"
#include "src/base/errors.h"
#include "src/graph_handle.h"

namespace py = pybind11;

namespace ff {

namespace {

// framefuse.graph_break(): a C function the interpreter does not know, so tracing a call to it is
// an unsupported construct (the frame falls back; fullgraph=True raises).
PyObject* graph_break_impl(PyObject*, PyObject*) { Py_RETURN_NONE; }
PyMethodDef g_graph_break_def = {"graph_break", graph_break_impl, METH_NOARGS,
                                 "framefuse.graph_break(): ends the captured graph here (for now the whole calling frame runs eagerly)."};

// ---- test-only captures from Python specs ------------------------------------------------------

SourcePtr source_from_spec(py::handle spec) {
  auto t = spec.cast<py::tuple>();
  std::string kind = t[0].cast<std::string>();
  auto s = std::make_shared<Source>();
  if (kind == "local" || kind == "closure") {
    s->kind = kind == "local" ? Source::Kind::Local : Source::Kind::Closure;
    s->index = t[1].cast<int>();
    s->name = t[2].cast<std::string>();
  } else if (kind == "global" || kind == "builtin") {
    s->kind = kind == "global" ? Source::Kind::Global : Source::Kind::Builtin;
    s->name = t[1].cast<std::string>();
  } else if (kind == "attr") {
    s->kind = Source::Kind::Attr;
    s->base = source_from_spec(t[1]);
    s->name = t[2].cast<std::string>();
  } else if (kind == "item") {
    s->kind = Source::Kind::Item;
    s->base = source_from_spec(t[1]);
    if (py::isinstance<py::str>(t[2])) {
      s->key_is_str = true;
      s->str_key = t[2].cast<std::string>();
    } else {
      s->int_key = t[2].cast<int64_t>();
    }
  } else if (kind == "type") {
    s->kind = Source::Kind::TypeOf;
    s->base = source_from_spec(t[1]);
  } else {
    throw py::value_error("unknown source kind " + kind);
  }
  return s;
}

PyObject* new_ref(py::handle h) { return h.inc_ref().ptr(); }

Guard guard_from_spec(py::handle spec) {
  auto t = spec.cast<py::tuple>();
  std::string kind = t[0].cast<std::string>();
  Guard g;
  if (kind == "global_state") return current_global_state_guard();
  g.source = source_from_spec(t[1]);
  if (kind == "type") g.kind = Guard::Kind::TypeMatch, g.expected = new_ref(t[2]);
  else if (kind == "id") g.kind = Guard::Kind::IdMatch, g.expected = new_ref(t[2]);
  else if (kind == "equals") g.kind = Guard::Kind::EqualsMatch, g.expected = new_ref(t[2]);
  else if (kind == "len") g.kind = Guard::Kind::LenMatch, g.length = t[2].cast<int64_t>();
  else if (kind == "dict_keys") g.kind = Guard::Kind::DictKeys, g.expected = new_ref(py::tuple(t[2]));
  else if (kind == "iter") g.kind = Guard::Kind::IterMatch, g.expected = new_ref(py::tuple(t[2]));
  else if (kind == "tensor") g.kind = Guard::Kind::TensorMatch, g.tensor_meta = meta_from_tensor(t[2].ptr());
  else throw py::value_error("unknown guard kind " + kind);
  return g;
}

OutputPlan plan_from_spec(py::handle spec) {
  auto t = spec.cast<py::tuple>();
  std::string kind = t[0].cast<std::string>();
  OutputPlan p;
  if (kind == "out") {
    p.kind = OutputPlan::Kind::GraphOutput;
    p.index = t[1].cast<int>();
  } else if (kind == "src") {
    p.kind = OutputPlan::Kind::Source;
    p.source = source_from_spec(t[1]);
  } else if (kind == "const") {
    p.kind = OutputPlan::Kind::Constant;
    p.constant = new_ref(t[1]);
  } else if (kind == "tuple" || kind == "list") {
    p.kind = kind == "tuple" ? OutputPlan::Kind::Tuple : OutputPlan::Kind::List;
    for (py::handle item : t[1]) p.items.push_back(plan_from_spec(item));
    if (kind == "tuple" && t.size() > 2 && !t[2].is_none()) p.tuple_type = new_ref(t[2]);
  } else if (kind == "dict") {
    p.kind = OutputPlan::Kind::Dict;
    for (py::handle k : t[1]) p.keys.push_back(new_ref(k));
    for (py::handle item : t[2]) p.items.push_back(plan_from_spec(item));
  } else {
    throw py::value_error("unknown output plan kind " + kind);
  }
  return p;
}

SideEffect effect_from_spec(py::handle spec) {
  auto t = spec.cast<py::tuple>();
  std::string kind = t[0].cast<std::string>();
  SideEffect e;
  if (kind == "setattr") {
    e.kind = SideEffect::Kind::SetAttr, e.target = source_from_spec(t[1]), e.name = t[2].cast<std::string>();
    e.value = plan_from_spec(t[3]);
  } else if (kind == "store_global") {
    e.kind = SideEffect::Kind::StoreGlobal, e.name = t[1].cast<std::string>(), e.value = plan_from_spec(t[2]);
  } else if (kind == "replace_list") {
    e.kind = SideEffect::Kind::ReplaceList, e.target = source_from_spec(t[1]), e.value = plan_from_spec(t[2]);
  } else if (kind == "dict_set") {
    e.kind = SideEffect::Kind::DictSetItem, e.target = source_from_spec(t[1]), e.key = new_ref(t[2]);
    e.value = plan_from_spec(t[3]);
  } else if (kind == "dict_del") {
    e.kind = SideEffect::Kind::DictDelItem, e.target = source_from_spec(t[1]), e.key = new_ref(t[2]);
  } else if (kind == "cell_set") {
    e.kind = SideEffect::Kind::CellSet, e.target = source_from_spec(t[1]), e.value = plan_from_spec(t[2]);
  } else {
    throw py::value_error("unknown side effect kind " + kind);
  }
  return e;
}

// Builds a CaptureResult from a dict spec (see tests/python/framefuse_testing.py).
CaptureResult capture_from_spec(py::handle spec_obj) {
  py::dict spec = spec_obj.cast<py::dict>();
  if (spec.contains("unsupported")) throw Unsupported(spec["unsupported"].cast<std::string>());
  if (spec.contains("internal_error")) throw InternalError(spec["internal_error"].cast<std::string>());
  CaptureResult r;
  r.graph = graph_from_python(spec["graph"], "spec['graph']");
  for (py::handle s : spec["inputs"]) r.inputs.push_back(source_from_spec(s));
  if (spec.contains("guards"))
    for (py::handle s : spec["guards"]) r.guards.push_back(guard_from_spec(s));
  r.output = plan_from_spec(spec["output"]);
  if (spec.contains("side_effects"))
    for (py::handle s : spec["side_effects"]) r.side_effects.push_back(effect_from_spec(s));
  return r;
}

std::shared_ptr<CompileOptions> make_options(py::object backend, bool fullgraph, py::object mode, py::object options,
                                             py::object dynamic) {
  auto o = std::make_shared<CompileOptions>();
  o->backend = backend.inc_ref().ptr();
  o->mode = mode.inc_ref().ptr();
  o->options = options.inc_ref().ptr();
  o->fullgraph = fullgraph;
  o->dynamic = dynamic.is_none() ? -1 : dynamic.cast<bool>() ? 1
                                                             : 0;
  o->backend_name = py::isinstance<py::str>(backend) ? backend.cast<std::string>() : std::string("<callable>");
  return o;
}

}  // namespace

void define_frame_eval(py::module_& m) {
  init_frame_eval_types();
  set_graph_to_python([](const Graph& g) -> PyObject* {
    try {
      return graph_to_python(g).release().ptr();
    } catch (py::error_already_set& e) {
      e.restore();
      return nullptr;
    }
  });
  m.attr("FrameEvalCallable") = py::handle(reinterpret_cast<PyObject*>(frame_eval_callable_type()));
  if (py::hasattr(m, "Unsupported")) set_unsupported_exception(m.attr("Unsupported").ptr());
  m.attr("FRAME_EVAL_SUPPORTED") = py::bool_(ff_frame_supported() != 0);

  m.def("_compile_callable", [](py::object fn, py::object backend, bool fullgraph, py::object mode, py::object options, py::object root_code, py::object dynamic) {
          PyObject* r = make_frame_eval_callable(fn.ptr(), make_options(backend, fullgraph, mode, options, dynamic),
                                                 root_code.is_none() ? nullptr : root_code.ptr(), CallableMode::Compile);
          if (!r) throw py::error_already_set();
          return py::reinterpret_steal<py::object>(r); }, py::arg("fn"), py::arg("backend"), py::arg("fullgraph"), py::arg("mode"), py::arg("options"), py::arg("root_code"), py::arg("dynamic") = py::none(), "A callable that runs fn with framefuse's frame hook active.");
  m.def("_disable_callable", [](py::object fn) {
          PyObject* r = make_frame_eval_callable(fn.ptr(), nullptr, nullptr, CallableMode::Disable);
          if (!r) throw py::error_already_set();
          return py::reinterpret_steal<py::object>(r); }, "A callable that runs fn (and everything it calls) natively.");
  m.def("_reset", [] {
    reset_caches();
    frame_eval_stats() = FrameEvalStats{};
    clear_break_records(); }, "Drop every compiled frame.");
  m.def("_graph_break_records", [] {
    py::list out;
    for (const BreakRecord& r : break_records()) {
      py::dict d;
      d["id"] = r.info.id;
      d["reason"] = r.info.id.empty() ? r.info.reason : "[" + r.info.id + "] " + r.info.reason;
      d["explanation"] = r.info.explanation;
      d["hint"] = r.info.hint;
      d["filename"] = r.info.filename;
      d["lineno"] = r.info.lineno;
      d["user_stack"] = r.info.user_stack;
      d["where"] = r.where;
      d["split"] = r.split;
      out.append(d);
    }
    return out; },
        "Every graph break since the last _reset(): dicts with id, reason, explanation, hint, filename, lineno, "
        "user_stack, where (the frame) and split (False: the frame ran eagerly).");
  m.def("_frame_eval_stats", [] {
    const FrameEvalStats& s = frame_eval_stats();
    py::dict d;
    d["frames_compiled"] = s.frames_compiled;
    d["cache_hits"] = s.cache_hits;
    d["recompiles"] = s.recompiles;
    d["graph_breaks"] = s.graph_breaks;
    d["internal_errors"] = s.internal_errors;
    d["cache_limit_hits"] = s.cache_limit_hits;
    d["eager_frames"] = s.eager_frames;
    d["frames_split"] = s.frames_split;
    d["resume_calls"] = s.resume_calls;
    d["codes_generated"] = s.codes_generated;
    d["compile_seconds"] = s.compile_seconds;
    return d;
  });
  m.def("_hook_installed", &hook_installed);
  m.def("_set_native_module", [](py::object globals) { set_native_module(globals.is_none() ? nullptr : globals.ptr()); }, "Frames of the module with these globals run natively, with everything they call.");
  m.def("_set_frame_substitute", [](py::object code, py::object fn) { set_frame_substitute(code.ptr(), fn.is_none() ? nullptr : fn.ptr()); }, "Inside compiled code, frames of `code` call fn(*positional args, **keyword-only args) instead (NotImplemented: run natively).");
  // framefuse.compiler.substitute_in_graph's table (frame_eval/py_util.h polyfill_table).
  m.def("_polyfills", [] { return py::reinterpret_borrow<py::dict>(polyfill_table()); });
  // framefuse.compiler.allow_in_graph's table (graph/python/open_ops.h allowed_in_graph_table).
  m.def("_allowed_in_graph", [] { return py::reinterpret_borrow<py::dict>(allowed_in_graph_table()); });
  m.def("_code_cache_info", [](py::object code) -> py::object {
    if (!PyCode_Check(code.ptr())) throw py::type_error("expected a code object");
    ExtraState* s = extra_state(reinterpret_cast<PyCodeObject*>(code.ptr()));
    if (!s) return py::none();
    py::dict d;
    d["entries"] = s->entries.size();
    d["strategy"] = s->strategy == CodeStrategy::Compile ? "compile" : s->strategy == CodeStrategy::Skip ? "skip"
                                                                                                         : "cache_limit";
    d["skip_reason"] = s->skip_reason;
    d["frame_id"] = s->frame_id;
    py::list guards;
    for (auto& e : s->entries) guards.append(py::cast(e->runner->guards().describe()));
    d["guards"] = guards;
    return d;
  });
  PyObject* gb = PyCFunction_NewEx(&g_graph_break_def, nullptr, m.attr("__name__").ptr());
  if (!gb) throw py::error_already_set();
  m.attr("graph_break") = py::reinterpret_steal<py::object>(gb);

  py::module_ t = m.def_submodule("_testing", "test-only access to frontend internals");
  t.def("set_tracer", [](py::object fn, bool torch_free) {
          if (fn.is_none()) {
            set_tracer(nullptr);
            return;
          }
          // The Python tracer receives (code, localsplus list) and returns a capture spec dict.
          set_tracer([fn](const FrameView& view) {
            py::gil_scoped_acquire gil;
            py::list locals;
            for (PyObject* v : view.localsplus) locals.append(v ? py::handle(v) : py::handle(Py_None));
            py::object spec = fn(py::handle(reinterpret_cast<PyObject*>(view.code)), locals);
            return capture_from_spec(spec);
          }, torch_free); }, py::arg("fn"), py::arg("torch_free") = false, "Install a tracer returning hand-built capture specs (None restores the interpreter).");
  t.def("num_code_states", [] { return code_state_counts().states; });
  t.def("code_state_counts", [] {
    CodeStateCounts c = code_state_counts();
    py::dict d;
    d["states"] = c.states;
    d["entries"] = c.entries;
    d["break_plans"] = c.break_plans;
    d["resume_codes"] = c.resume_codes;
    d["decoded"] = c.decoded;
    return d; }, "What framefuse keeps per code object, summed over the live code objects (all of it dies with its code).");
}

}  // namespace ff
