#define PY_SSIZE_T_CLEAN
// Bindings shared by every area: error types, logging, config.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

namespace py = pybind11;

namespace ff {
namespace {

PyObject* g_py_sink = nullptr;  // strong reference to framefuse._logging's emit function

void python_sink(std::string_view logger, int level, std::string_view msg) {
  if (!g_py_sink) return;
  PyObject* r = PyObject_CallFunction(g_py_sink, "s#is#", logger.data(), static_cast<Py_ssize_t>(logger.size()), level,
                                      msg.data(), static_cast<Py_ssize_t>(msg.size()));
  if (!r) PyErr_WriteUnraisable(g_py_sink);  // a broken handler must not break compilation
  Py_XDECREF(r);
}

}  // namespace

void define_common(py::module_& m) {
  // Errors: framefuse.UserError > framefuse.Unsupported; framefuse.InternalError.
  static py::exception<UserError> user_error(m, "UserError", PyExc_RuntimeError);
  static py::exception<Unsupported> unsupported(m, "Unsupported", user_error.ptr());
  static py::exception<InternalError> internal_error(m, "InternalError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Unsupported& e) {
      PyErr_SetString(unsupported.ptr(), e.what());
    } catch (const UserError& e) {
      PyErr_SetString(user_error.ptr(), e.what());
    } catch (const InternalError& e) {
      PyErr_SetString(internal_error.ptr(), e.what());
    }
  });

  py::module_ log = m.def_submodule("logging", "FRAMEFUSE_LOGS");
  log.def("set_spec", [](const std::string& spec) { set_log_spec(spec); }, "Apply a TORCH_LOGS-style spec (raises UserError on unknown names).");
  log.def("component_names", &log_component_names);
  log.def("artifact_names", &log_artifact_names);
  log.def("enabled_artifacts", [] {
    std::vector<std::string> out;
    for (int a = 0; a < static_cast<int>(LogArtifact::kCount); ++a)
      if (log_enabled(static_cast<LogArtifact>(a))) out.emplace_back(log_artifact_name(static_cast<LogArtifact>(a)));
    return out;
  });
  log.def("component_levels", [] {
    py::dict out;
    for (int c = 0; c < static_cast<int>(LogComponent::kCount); ++c)
      out[py::str(std::string(log_component_name(static_cast<LogComponent>(c))))] =
          static_cast<int>(g_log_settings.component_level[c]);
    return out;
  });
  log.def("set_sink", [](py::object fn) {
    Py_XDECREF(g_py_sink);
    g_py_sink = fn.is_none() ? nullptr : fn.inc_ref().ptr();
    set_log_sink(g_py_sink ? &python_sink : nullptr);
  });
  log.def("emit", [](const std::string& artifact, const std::string& msg) {
    for (int a = 0; a < static_cast<int>(LogArtifact::kCount); ++a)
      if (log_artifact_name(static_cast<LogArtifact>(a)) == artifact) {
        if (log_enabled(static_cast<LogArtifact>(a))) log_emit(static_cast<LogArtifact>(a), msg);
        return;
      }
    throw UserError("unknown log artifact '" + artifact + "'"); }, "Emit a record on an artifact if it is enabled (used by the Python layer).");
  log.def("warn", [](const std::string& component, const std::string& msg) {
    for (int c = 0; c < static_cast<int>(LogComponent::kCount); ++c)
      if (log_component_name(static_cast<LogComponent>(c)) == component) {
        log_emit(static_cast<LogComponent>(c), LogLevel::Warning, msg);
        return;
      }
    throw UserError("unknown log component '" + component + "'"); }, "Emit a warning of a component: shown whatever the log settings (stderr without a sink).");
  log.def("set_compile_tag", [](int frame_id, int compile_id) { set_compile_tag({frame_id, compile_id}); });
  log.def("compile_tag", [] {
    CompileTag t = current_compile_tag();
    return py::make_tuple(t.frame_id, t.compile_id); }, "(frame_id, compile_id) of the compile in progress; -1 outside one.");

  py::module_ cfg = m.def_submodule("config", "framefuse.config storage");
  py::list knobs;
  // clang-format off
#define FF_CONFIG_KNOB(kind, name, default_value, doc)                                        \
  {                                                                                           \
    py::dict k;                                                                               \
    k["name"] = #name;                                                                        \
    k["type"] = kind;                                                                         \
    k["default"] = default_value;                                                             \
    k["doc"] = doc;                                                                           \
    knobs.append(k);                                                                          \
  }
// clang-format on
#define FF_CONFIG_BOOL(name, default_value, doc) FF_CONFIG_KNOB("bool", name, default_value, doc)
#define FF_CONFIG_INT(name, default_value, doc) FF_CONFIG_KNOB("int", name, default_value, doc)
#define FF_CONFIG_STR(name, default_value, doc) FF_CONFIG_KNOB("str", name, std::string(default_value), doc)
#include "src/base/config.def"
#undef FF_CONFIG_BOOL
#undef FF_CONFIG_INT
#undef FF_CONFIG_STR
#undef FF_CONFIG_KNOB
  cfg.attr("KNOBS") = knobs;
  cfg.def("get", [](const std::string& name) -> py::object {
#define FF_CONFIG_BOOL(n, d, doc) \
  if (name == #n) return py::bool_(config().n);
#define FF_CONFIG_INT(n, d, doc) \
  if (name == #n) return py::int_(config().n);
#define FF_CONFIG_STR(n, d, doc) \
  if (name == #n) return py::str(config().n);
#include "src/base/config.def"
#undef FF_CONFIG_BOOL
#undef FF_CONFIG_INT
#undef FF_CONFIG_STR
    throw py::attribute_error("framefuse.config has no knob '" + name + "'");
  });
  cfg.def("set", [](const std::string& name, py::object value) {
#define FF_CONFIG_BOOL(n, d, doc)    \
  if (name == #n) {                  \
    config().n = value.cast<bool>(); \
    return;                          \
  }
#define FF_CONFIG_INT(n, d, doc)        \
  if (name == #n) {                     \
    config().n = value.cast<int64_t>(); \
    return;                             \
  }
#define FF_CONFIG_STR(n, d, doc)            \
  if (name == #n) {                         \
    config().n = value.cast<std::string>(); \
    return;                                 \
  }
#include "src/base/config.def"
#undef FF_CONFIG_BOOL
#undef FF_CONFIG_INT
#undef FF_CONFIG_STR
    throw py::attribute_error("framefuse.config has no knob '" + name + "'");
  });
}

}  // namespace ff
