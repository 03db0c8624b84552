// framefuse._C.cuda: compile graphs for CUDA and run them (python/framefuse/cuda.py wraps these).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <exception>

#include "inductor/cuda/cuda_api.h"
#include "inductor/cuda/graph_launch_api.h"
#include "graph/printer.h"
#include "graph/passes/channels_last.h"
#include "inductor/cuda/python/cuda_runner.h"
#include "src/base/logging.h"
#include "src/graph_handle.h"

namespace py = pybind11;

namespace ff {

namespace {

int graph_launch(int device, void* exec, void* stream, char* err, size_t err_len) {
  try {
    std::string why;
    const cuda::DriverApi* d = cuda::driver_api(&why);
    if (!d) {
      std::snprintf(err, err_len, "%s", why.c_str());
      return 1;
    }
    cuda::ensure_context(device);
    cuda::CUresult r = d->cuGraphLaunch(static_cast<cuda::CUgraphExec>(exec), static_cast<cuda::CUstream>(stream));
    if (r == 0) return 0;
    std::snprintf(err, err_len, "cuGraphLaunch failed: %s", cuda::driver_error_string(r).c_str());
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "%s", e.what());
  }
  return 1;
}

const ff_graph_launch_api kGraphLaunchApi = {FF_GRAPH_LAUNCH_ABI, sizeof(ff_graph_launch_api), graph_launch};

}  // namespace

void define_cuda(py::module_& m) {
  py::module_ c = m.def_submodule("cuda", "CUDA code generation through NVRTC");
  c.attr("_GRAPH_LAUNCH") = py::capsule(const_cast<ff_graph_launch_api*>(&kGraphLaunchApi), FF_GRAPH_LAUNCH_CAPSULE);
  using cuda::CudaGraphModule;

  // Where pip wheels put libnvrtc: asked of framefuse.cuda._nvrtc_dirs only when the usual places
  // fail, whichever way the first compile was reached. NB: captures no Python object, so nothing
  // is released after the interpreter has gone.
  cuda::set_nvrtc_dir_provider([]() -> std::vector<std::string> {
    py::gil_scoped_acquire gil;
    try {
      return py::module_::import("framefuse.cuda").attr("_nvrtc_dirs")().cast<std::vector<std::string>>();
    } catch (py::error_already_set&) {
      return {};
    }
  });

  c.def("set_nvrtc_dir_provider", [](py::function fn) {
    // NB: the provider object is leaked on purpose: the loader's std::function is destroyed with
    // the process's statics, after the interpreter is gone, when a decref would crash.
    PyObject* raw = fn.release().ptr();
    cuda::set_nvrtc_dir_provider([raw]() {
      py::gil_scoped_acquire gil;
      return py::reinterpret_borrow<py::function>(raw)().cast<std::vector<std::string>>();
    });
  });
  c.def("nvrtc_status", [] {
    std::string why;
    const cuda::NvrtcApi* api = cuda::nvrtc_api(&why);
    py::dict d;
    d["available"] = api != nullptr;
    d["path"] = api ? api->path : "";
    d["version"] = api ? std::to_string(api->major) + "." + std::to_string(api->minor) : "";
    d["error"] = why;
    return d;
  });
  c.def("driver_status", [] {
    std::string why;
    const cuda::DriverApi* api = cuda::driver_api(&why);
    py::dict d;
    d["available"] = api != nullptr;
    d["version"] = api ? api->version : 0;
    d["error"] = why;
    return d;
  });
  c.def("perf_hint", [](const std::string& msg) {
    if (log_enabled(LogArtifact::perf_hints)) log_emit(LogArtifact::perf_hints, msg);
  });
  c.def("cache_dir", &cuda::cuda_cache_dir);
  c.def("_tf32_attention_source", &cuda::tf32_attention_source, py::arg("head_dims"),
        "The CUDA source of the TF32 attention kernels for these head dims (tests).");
  // One whole source as a single NVRTC program (through the disk cache): for tests and timing.
  c.def("compile_source", [](const std::string& source, const std::string& arch) {
    cuda::CompileStats st;
    std::string cubin = cuda::compile_cubin(source, arch, &st);
    py::dict d;
    d["nvrtc_ms"] = st.nvrtc_ms;
    d["disk_hit"] = st.disk_hit;
    d["cubin_bytes"] = cubin.size();
    return d; }, py::arg("source"), py::arg("arch") = "sm_90");

  py::class_<CudaGraphModule>(c, "CompiledGraph")
      .def_property_readonly("source", &CudaGraphModule::source)
      .def_property_readonly("program", &CudaGraphModule::program_text)
      .def_property_readonly("arch", &CudaGraphModule::arch)
      .def_property_readonly("device", &CudaGraphModule::device)
      .def_property_readonly("writes_inputs", &CudaGraphModule::writes_inputs)
      .def_property_readonly("compile_ms", &CudaGraphModule::compile_ms)
      .def_property_readonly("nvrtc_ms", [](const CudaGraphModule& g) { return g.compile_stats().nvrtc_ms; })
      .def_property_readonly("disk_hit", [](const CudaGraphModule& g) { return g.compile_stats().disk_hit; })
      .def_property_readonly("programs", [](const CudaGraphModule& g) { return g.compile_stats().programs; })
      .def_property_readonly("compiled_functions", [](const CudaGraphModule& g) { return g.compile_stats().functions; })
      .def("kernels", &CudaGraphModule::kernels)
      .def_property_readonly("channels_last_why", &CudaGraphModule::channels_last_why)
      .def_property_readonly("layout_copies", &CudaGraphModule::layout_copies)
      .def_property_readonly("symbolic", &CudaGraphModule::symbolic,
                             "Dynamic shapes: the kernels take the sizes as arguments (one compile for every set of sizes).")
      .def_property_readonly("instances", &CudaGraphModule::instances)
      .def_property_readonly("compiled_instances", &CudaGraphModule::compiled_instances,
                             "Sets of sizes the symbolic program's kernels could not serve, compiled on their own.")
      .def_property_readonly("packed_weights", &CudaGraphModule::packed_weights,
                             "Input positions of the conv weights packed into NHWC in each call (config cuda_keep_nhwc_weights).")
      .def_property_readonly("derived_sources", &CudaGraphModule::derived_sources)
      .def_property_readonly("tf32_attention", &CudaGraphModule::tf32_attention,
                             "Names of the attention calls framefuse's TF32 kernel runs while torch runs float32 matmuls in TF32.")
      .def("run", [](CudaGraphModule& g, py::args args) {
        std::vector<py::object> inputs;
        for (py::handle a : args) inputs.push_back(py::reinterpret_borrow<py::object>(a));
        return g.run(inputs);
      });

  // Tests: the channels-last rewrite of a graph as graph code (to check it on the CPU code
  // generator): (code, input indices to pass channels-last, those of them feeding convs with NCHW
  // inputs, why not).
  c.def("_channels_last_code", [](py::handle graph) -> py::tuple {
    std::string why;
    auto cl = to_channels_last(graph_from_python(graph), &why);
    if (!cl) return py::make_tuple(std::string(), std::vector<int>{}, std::vector<int>{}, why);
    return py::make_tuple(graph_code(cl->graph), cl->inputs, cl->nchw_fed, why);
  });

  // graph: a framefuse.graph.Graph or _C.graph.Graph (src/graph_handle.h); the C++ graph is copied.
  c.def(
      "compile",
      [](py::handle graph, const std::string& mode, const std::string& arch, bool assume_cuda, bool host_emulation) {
        const Graph& g = graph_from_python(graph);
        cuda::CudaCompileOptions opts;
        opts.mode = mode;
        opts.arch = arch;
        opts.assume_cuda = assume_cuda;
        opts.host_emulation = host_emulation;
        return std::make_unique<CudaGraphModule>(g, opts);
      },
      py::arg("graph"), py::arg("mode") = "default", py::arg("arch") = "", py::arg("assume_cuda") = false,
      py::arg("_host_emulation") = false);
}

}  // namespace ff
