// Cold-path helpers of the hook: which code is framefuse's or torch's own, graph text for logs,
// and handing a capture to its backend.
#include <pybind11/pybind11.h>

#include <cctype>
#include <string>

#include "frame_eval/hook.h"
#include "frame_eval/hook_internal.h"
#include "frame_eval/py_util.h"
#include "graph/passes/specialize_shapes.h"
#include "src/base/config.h"
#include "src/base/errors.h"
#include "src/base/logging.h"

#if __has_include("graph/printer.h")
#include "graph/printer.h"
#define FF_HAVE_GRAPH_PRINTER 1
#endif

namespace py = pybind11;

namespace ff {

namespace {

GraphToPython g_graph_to_python = nullptr;  // set once by the bindings, under the GIL

// The directory of an already imported package ("" if it is not imported). NB: never imports: this
// runs inside the frame hook, and an import would run Python frames.
std::string package_dir(const char* module) {
  PyRef name = PyRef::steal(PyUnicode_FromString(module));
  PyRef m = name ? PyRef::steal(PyImport_GetModule(name.get())) : PyRef();
  PyRef file = m ? PyRef::steal(PyObject_GetAttrString(m.get(), "__file__")) : PyRef();
  const char* f = file && PyUnicode_Check(file.get()) ? PyUnicode_AsUTF8(file.get()) : nullptr;
  PyErr_Clear();
  if (!f) return "";
  std::string path = f;
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

bool has_prefix(std::string_view s, const std::string& prefix) {
  return !prefix.empty() && s.substr(0, prefix.size()) == prefix;
}

// Installed packages torch itself imports and calls (lazily, often from inside a user's compiled
// region: F.max_unpool1d's first call imports sympy) that never run tensor code worth a graph:
// tracing their frames only costs time (mpmath's import alone reached the recompile limit in eight
// frames). pytest's too: its import hook and its capture of stdout run inside a test's compiled
// region (an import or a print there). `top`: a top-level module name.
bool skipped_package(std::string_view top) {
  for (std::string_view p : {"sympy", "mpmath", "networkx", "numpy", "jinja2", "markupsafe", "filelock", "fsspec",
                             "typing_extensions", "triton", "setuptools", "pkg_resources", "_distutils_hack",
                             "importlib_metadata", "yaml", "tqdm", "packaging", "optree", "_pytest", "pluggy"})
    if (top == p) return true;
  return false;
}

// A file of one of those packages: the folder (or module file) right after "-packages/".
bool in_skipped_package(std::string_view file) {
  size_t at = file.find("-packages/");
  if (at == std::string_view::npos) return false;
  std::string_view top = file.substr(at + 10);
  top = top.substr(0, top.find('/'));
  if (top.ends_with(".py")) top.remove_suffix(3);
  return skipped_package(top);
}

}  // namespace

void set_graph_to_python(GraphToPython fn) { g_graph_to_python = fn; }

bool in_skipped_module(PyObject* globals) {
  PyObject* name = globals && PyDict_Check(globals) ? PyDict_GetItemString(globals, "__name__") : nullptr;
  const char* n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : nullptr;
  if (!n) {
    PyErr_Clear();
    return false;
  }
  std::string_view top(n);
  top = top.substr(0, top.find('.'));
  // NB: torch's own code made by exec() (dataclasses' __init__ of torch.fx's classes) is torch's; a
  // namedtuple's __new__ (collections makes it with exec, in a namespace `namedtuple_<name>`) is the
  // standard library's (torch's tensor printing calls one: it broke the graph on tuple.__new__).
  return top == "torch" || skipped_package(top) || top.rfind("namedtuple_", 0) == 0;
}

std::string break_docs_link(const std::string& id) {
  static std::string dir;
  if (dir.empty()) dir = package_dir("framefuse");
  if (id.empty() || dir.empty()) return "";
  std::string anchor = id;
  for (char& c : anchor) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return dir + "graph_breaks.md#" + anchor;
}

bool is_internal_code(PyCodeObject* code) {
  // Resolved once the packages are imported (torch may be imported after framefuse's extension).
  // The standard library counts too: a user frame that runs natively calls into it all the time,
  // and tracing `copy` or `logging` on their own captures nothing. Installed packages do not,
  // except the few torch depends on that never hold tensor code (in_skipped_package).
  static std::string torch_dir, framefuse_dir, stdlib_dir;
  if (torch_dir.empty()) torch_dir = package_dir("torch");
  if (framefuse_dir.empty()) framefuse_dir = package_dir("framefuse");
  if (stdlib_dir.empty()) stdlib_dir = package_dir("os");
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) {
    PyErr_Clear();
    return false;
  }
  std::string_view f(file);
  if (f.substr(0, 8) == "<frozen ") return true;  // frozen standard-library modules
  if (has_prefix(f, torch_dir) || has_prefix(f, framefuse_dir) || in_skipped_package(f)) return true;
  return has_prefix(f, stdlib_dir) && f.find("-packages/") == std::string_view::npos;
}

std::string graph_code_text(const Graph& g) {
#ifdef FF_HAVE_GRAPH_PRINTER
  return graph_code(g);
#else
  (void)g;
  return "";
#endif
}

void compile_backend(const CompileOptions& options, CaptureRunner& runner, const FrameValues& values, bool training) {
  // NB: a graph with symbolic sizes goes through the backends' module even for "eager": the
  // reference runner runs it specialised to each call's sizes (backends._PerSizes).
  if (options.backend_name == "eager" && !has_symbolic_shapes(runner.capture().graph)) return;
  // Graphs that need autograd reach the inductor backend where AOT autograd compiles them (config
  // aot_autograd, framefuse._autograd) or under mode="reduce-overhead", which records their forward
  // and backward in CUDA graphs (framefuse.cuda.TrainingGraphReplay).
  bool reduce_overhead = options.mode && PyUnicode_Check(options.mode) &&
                         PyUnicode_CompareWithASCIIString(options.mode, "reduce-overhead") == 0;
  if (options.backend_name == "inductor" && training && !reduce_overhead && !config().aot_autograd &&
      !has_symbolic_shapes(runner.capture().graph)) {
    if (log_enabled(LogArtifact::perf_hints))
      log_emit(LogArtifact::perf_hints, "backend=inductor: graphs that need autograd run on the reference runner (eager torch ops)");
    return;
  }
  // "inductor" or a Python callable: backend(graph, example_inputs) -> callable, through framefuse.backends,
  // which wraps the graph in the public framefuse.graph.Graph.
  PyRef examples = PyRef::steal(runner.example_inputs(values));
  if (!examples) throw InternalError("could not read the example inputs: " + fetch_py_error_text());
  PyObject* compiled = nullptr;
  try {
    if (!g_graph_to_python) throw InternalError("no graph_to_python registered (framefuse._C not initialized)");
    PyObject* graph_ref = g_graph_to_python(runner.capture().graph);
    if (!graph_ref) throw py::error_already_set();
    py::object graph = py::reinterpret_steal<py::object>(graph_ref);
    py::object call_backend = py::module_::import("framefuse.backends").attr("_call_backend");
    // "inductor" is resolved in Python (framefuse.backends) so that builds without the code
    // generator fall back there, with their perf_hints line.
    py::object result = call_backend(py::handle(options.backend), graph, py::handle(examples.get()),
                                     py::handle(options.mode ? options.mode : Py_None),
                                     py::handle(options.options ? options.options : Py_None), training);
    compiled = result.release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    throw PythonErrorPending();
  }
  runner.set_compiled(compiled);
}

}  // namespace ff
