// Python bindings of the code generator: _C.inductor. python/framefuse/inductor.py wraps them in
// framefuse.inductor.compile_graph (with the reference-runner fallback).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "inductor/cpu_codegen.h"
#include "inductor/kernel_cache.h"
#include "inductor/loop_ir.h"
#include "inductor/parallel.h"
#include "inductor/python/compiled_graph.h"
#include "inductor/python/replay_inputs.h"
#include "inductor/schedule.h"
#include "src/base/errors.h"
#include "src/graph_handle.h"

namespace py = pybind11;

namespace ff {

namespace {

// Sets the Python error for the exception being handled, through pybind11's registered translators.
void translate_current_exception() {
#if __has_include(<pybind11/detail/exception_translation.h>)
  py::detail::try_translate_exceptions();
#else
  // NB: pybind11 before 2.13 (Debian 12's 2.10) has no try_translate_exceptions: its dispatcher's steps.
  if (py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators)) return;
  if (py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators)) return;
  PyErr_SetString(PyExc_SystemError, "an exception escaped pybind11's exception translators");
#endif
}

// The call slot of CompiledGraph. NB: not a pybind11 `__call__`: its dispatcher (argument
// loaders, an args tuple converted to a vector) costs about as much as running a small graph.
PyObject* call_compiled_graph(PyObject* self, PyObject* args, PyObject* kwargs) {
  if (kwargs && PyDict_GET_SIZE(kwargs) > 0) {
    PyErr_SetString(PyExc_TypeError, "a compiled graph takes its inputs as positional arguments");
    return nullptr;
  }
  try {
    auto& cg = py::handle(self).cast<inductor::CompiledGraph&>();
    return cg.run(&PyTuple_GET_ITEM(args, 0), static_cast<size_t>(PyTuple_GET_SIZE(args)));
  } catch (...) {
    // framefuse's error types and pybind11's, as the bound method would have raised them
    translate_current_exception();
    return nullptr;
  }
}

}  // namespace

void define_inductor(py::module_& m) {
  auto ind = m.def_submodule("inductor", "The fusing code generator (CPU: LLVM ORC JIT)");
  ind.def("codegen_available", &inductor::cpu_codegen_available, "Whether the CPU code generator was built (LLVM found).");
  ind.def("parallel_backend", &inductor::parallel_backend, "The threading runtime CPU kernels use.");
  ind.def("cpu_target", [] { return inductor::cpu_codegen_available() ? inductor::cpu_target_description() : std::string(); });
  ind.def("disk_cache_dir", &inductor::disk_cache_dir);
  ind.def("clear_memory_cache", &inductor::clear_memory_cache);

  py::module_ t = ind.def_submodule("_testing", "test-only access to the disk cache (inductor/kernel_cache.h)");
  t.def("cache_store", [](const std::string& dir, const std::string& name, const std::string& key, py::bytes payload) {
    inductor::cache_store(dir, name, key, std::string(payload));
  });
  t.def("cache_load", [](const std::string& dir, const std::string& name, const std::string& key) -> py::object {
    std::string payload;
    if (!inductor::cache_load(dir, name, key, &payload)) return py::none();
    return py::bytes(payload); }, "The payload of a valid entry, or None.");
  t.def("cache_dir_usable", &inductor::cache_dir_usable);
  t.def("cache_pack", [](const std::string& key, py::bytes payload) { return py::bytes(inductor::cache_pack(key, std::string(payload))); });
  ind.def(
      "loop_ir",
      [](py::handle graph, const std::string& device) {
        if (device != "cpu" && device != "cuda") throw UserError("loop_ir: device must be 'cpu' or 'cuda', not '" + device + "'");
        inductor::EagerDevice like = device == "cuda" ? inductor::EagerDevice::CUDA : inductor::EagerDevice::CPU;
        return loop::program_str(inductor::compile_to_loop_ir(graph_from_python(graph), like));
      },
      py::arg("graph"), py::arg("device") = "cpu",
      "The scheduled loop IR of a graph (text form), without compiling it; `device`: whose eager kernels the lowering follows.");

  py::class_<inductor::CompiledGraph>(ind, "CompiledGraph", py::custom_type_setup([](PyHeapTypeObject* heap_type) {
                                        heap_type->ht_type.tp_call = &call_compiled_graph;
                                      }))
      .def(py::init([](py::handle graph) { return std::make_unique<inductor::CompiledGraph>(graph_from_python(graph)); }),
           "Lower, fuse and JIT-compile a graph. Raises on failure.")
      .def_property_readonly("loop_ir", [](const inductor::CompiledGraph& self) { return loop::program_str(self.compiled().program); })
      .def_property_readonly("num_kernels", [](const inductor::CompiledGraph& self) { return self.compiled().program.kernels.size(); })
      .def_property_readonly("num_externs", [](const inductor::CompiledGraph& self) { return self.compiled().program.externs.size(); })
      .def_property_readonly("from_memory_cache", &inductor::CompiledGraph::from_memory_cache)
      .def_property_readonly("symbolic", &inductor::CompiledGraph::symbolic,
                             "Whether the kernels take sizes as arguments (a graph with symbolic sizes compiled once).")
      .def_property_readonly("instances", &inductor::CompiledGraph::instances,
                             "Sets of sizes a symbolic program has run at (each a specialised copy, no code generation).")
      .def_property_readonly("channels_last", &inductor::CompiledGraph::channels_last,
                             "Whether the graph's 2-d convolutions run channels-last (config cpu_channels_last).")
      .def_property_readonly("packed_linears", &inductor::CompiledGraph::packed_linears,
                             "Linear layers that run MKL's packed GEMM once their weight is stable (config cpu_pack_linear_weights).")
      .def_property_readonly("packed_linear_calls", &inductor::CompiledGraph::packed_linear_calls,
                             "Products those layers ran with packed weights so far.")
      .def_property_readonly("from_disk_cache", [](const inductor::CompiledGraph& self) {
        return self.compiled().module && self.compiled().module->from_disk_cache;
      })
      .def_property_readonly("compile_ms", [](const inductor::CompiledGraph& self) {
        return self.compiled().module ? self.compiled().module->compile_ms : 0.0;
      });

  py::class_<inductor::ReplayInputs>(ind, "ReplayInputs",
                                     "The inputs a CUDA graph was recorded with, checked before each replay "
                                     "(framefuse.cuda.CudaGraphReplay): in-place inputs the same objects at the "
                                     "same addresses, copied tensors of the recorded layout and device, other "
                                     "values equal.")
      .def(py::init([](const py::sequence& inputs, const std::vector<bool>& fixed) {
             std::vector<PyObject*> objs;
             for (py::handle o : inputs) objs.push_back(o.ptr());  // NB: borrowed, `inputs` holds them
             return std::make_unique<inductor::ReplayInputs>(objs, fixed);
           }),
           py::arg("inputs"), py::arg("fixed"))
      .def("matches", [](inductor::ReplayInputs& self, const py::tuple& inputs) {
        int ok = self.matches(&PyTuple_GET_ITEM(inputs.ptr(), 0), static_cast<size_t>(PyTuple_GET_SIZE(inputs.ptr())));
        if (ok < 0) throw py::error_already_set();
        return ok == 1; }, py::arg("inputs"), "Whether these inputs (a tuple) fit the recording.");
}

}  // namespace ff
