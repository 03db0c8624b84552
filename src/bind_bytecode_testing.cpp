// Test-only bindings of the bytecode assembler (framefuse._C._testing_bytecode): decode, re-encode
// and verify real code objects, build resume functions, and feed the verifier broken code.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "frame_eval/bytecode.h"
#include "frame_eval/bytecode_resume.h"
#include "src/base/errors.h"

namespace py = pybind11;

namespace ff {
namespace {

py::bytes to_bytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

PyObject* need_code(py::handle h) {
  if (!PyCode_Check(h.ptr())) throw py::type_error("expected a code object");
  return h.ptr();
}

}  // namespace

void define_bytecode_testing(py::module_& m) {
  py::module_ t = m.def_submodule("_testing_bytecode", "test-only access to the bytecode assembler");
  t.def("decode", [](py::handle code) {
    bc::Bytecode b = bc::decode(need_code(code));
    py::list instrs;
    for (const bc::Instr& in : b.instrs) {
      const char* n = bc::opname(in.opcode);
      instrs.append(py::make_tuple(2 * in.offset, n ? n : "?", in.arg, in.target, in.line));
    }
    py::list exc;
    for (const bc::ExcEntry& e : b.exc) exc.append(py::make_tuple(e.start, e.end, e.target, e.depth, e.lasti));
    return py::make_tuple(instrs, exc); }, "(instructions as (byte offset, name, arg, target index, line), exception entries as instruction indices)");
  t.def("roundtrip", [](py::handle code) {
    PyObject* c = need_code(code);
    return py::reinterpret_steal<py::object>(bc::assemble(c, bc::decode(c))); }, "decode, encode and construct again (verified)");
  t.def("stacksize", [](py::handle code) { return bc::compute_stacksize(bc::decode(need_code(code))); });
  t.def("verify", [](py::handle code) { bc::verify_code(need_code(code)); });
  t.def("dis", [](py::handle code) { return bc::disassemble(need_code(code)); });
  t.def("cache_count", &bc::cache_count);
  t.def("is_jump", &bc::is_jump);
  t.def("parse_exception_table", [](py::bytes b) {
    py::list out;
    for (const bc::RawExcEntry& e : bc::parse_exception_table(std::string(b)))
      out.append(py::make_tuple(e.start, e.length, e.target, e.depth, e.lasti));
    return out;
  });
  t.def("write_exception_table", [](const std::vector<std::tuple<int, int, int, int, bool>>& entries) {
    std::vector<bc::RawExcEntry> raw;
    for (auto& [s, l, tg, d, la] : entries) raw.push_back({s, l, tg, d, la});
    return to_bytes(bc::write_exception_table(raw));
  });
  t.def("write_line_table", [](int first, const std::vector<int>& lines, const std::vector<int>& units) {
    return to_bytes(bc::write_line_table(first, lines, units));
  });
  t.def("parse_line_table", [](py::bytes b, int first) { return bc::parse_line_table(std::string(b), first); });
  t.def("make_resume", [](py::handle code, int offset, int stack_depth, const std::vector<std::string>& live, const std::vector<int>& null_slots) {
    if (offset % 2) throw InternalError("resume offset " + std::to_string(offset) + " is not an instruction boundary");
    return py::reinterpret_steal<py::object>(bc::make_resume(need_code(code), offset / 2, stack_depth, live, null_slots)); }, py::arg("code"), py::arg("offset"), py::arg("stack_depth"), py::arg("live_locals"), py::arg("null_slots") = std::vector<int>{}, "a resume code object starting at byte `offset` (see frame_eval/bytecode_resume.h)");
  t.def("live_locals_at", [](py::handle code, int offset) {
    if (offset % 2) throw InternalError("offset " + std::to_string(offset) + " is not an instruction boundary");
    return bc::live_locals_at(need_code(code), offset / 2);
  });
}

}  // namespace ff
