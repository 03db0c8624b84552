#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace ff {

void define_frame_eval(py::module_& m) {
  (void)m;  // nothing bound yet
}

}  // namespace ff
