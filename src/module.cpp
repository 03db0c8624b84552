// The extension module framefuse._C. Each area binds itself in one define_<area>(m).
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace ff {
void define_common(py::module_& m);      // src/bind_common.cpp: logging, config, errors
void define_graph(py::module_& m);       // src/bind_graph.cpp: graph IR, op registry, runner
void define_frame_eval(py::module_& m);  // src/bind_frame_eval.cpp: hook, caches, guards
void define_inductor(py::module_& m);    // src/bind_inductor.cpp: code generation
void define_interp_testing(py::module_& m);  // src/bind_interp_testing.cpp: interpreter internals (_testing)
void define_cuda(py::module_& m);        // src/bind_cuda.cpp: CUDA code generation
void define_bytecode_testing(py::module_& m);  // src/bind_bytecode_testing.cpp: bytecode assembler (_testing_bytecode)
}  // namespace ff

PYBIND11_MODULE(_C, m) {
  m.doc() = "framefuse C++ engine";
  m.attr("__version__") = FRAMEFUSE_VERSION;
#ifdef FRAMEFUSE_HAVE_LLVM
  m.attr("HAVE_LLVM") = true;
#else
  m.attr("HAVE_LLVM") = false;
#endif
#ifdef FRAMEFUSE_LLVM_STATIC
  m.attr("LLVM_STATIC") = true;  // LLVM's archives linked in, their symbols local (FRAMEFUSE_LLVM_STATIC)
#else
  m.attr("LLVM_STATIC") = false;
#endif
#ifdef FRAMEFUSE_HAVE_CUDA
  m.attr("HAVE_CUDA_CODEGEN") = true;
#else
  m.attr("HAVE_CUDA_CODEGEN") = false;
#endif
#ifdef FRAMEFUSE_HAVE_TORCH_NATIVE
  m.attr("HAVE_TORCH_NATIVE") = true;  // framefuse._torch_native was built (it may still refuse this torch)
#else
  m.attr("HAVE_TORCH_NATIVE") = false;
#endif
  ff::define_common(m);
  ff::define_graph(m);
  ff::define_frame_eval(m);
  ff::define_inductor(m);
  ff::define_interp_testing(m);
  ff::define_cuda(m);
  ff::define_bytecode_testing(m);
}
