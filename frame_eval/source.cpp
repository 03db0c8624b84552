// Printed forms of sources and guards: the Python expressions shown by the `guards` and
// `recompiles` logs. Cold path only (needs the GIL for reprs).
#include <string>

#include "frame_eval/capture.h"
#include "frame_eval/py_util.h"

namespace ff {
namespace {

std::string join_ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string src_str(const SourcePtr& s) { return s ? s->str() : std::string("<no source>"); }

}  // namespace

std::string Source::str() const {
  switch (kind) {
    case Kind::Local:
    case Kind::Closure: return "L['" + name + "']";
    case Kind::Global: return "G['" + name + "']";
    case Kind::Builtin: return "G['__builtins__']." + name;
    case Kind::Attr: return src_str(base) + "." + name;
    case Kind::Item: return src_str(base) + "[" + (key_is_str ? "'" + str_key + "'" : std::to_string(int_key)) + "]";
    case Kind::TypeOf: return "type(" + src_str(base) + ")";
  }
  return "<unknown source>";
}

std::string Guard::str() const {
  const std::string s = src_str(source);
  switch (kind) {
    case Kind::TypeMatch: return "type(" + s + ") is " + py_type_name(expected);
    case Kind::IdMatch: return s + " is " + py_short_repr(expected);
    case Kind::EqualsMatch: return s + " == " + py_short_repr(expected);
    case Kind::TensorMatch:
      return "check_tensor(" + s + ", dtype=torch." + std::string(dtype_name(tensor_meta.dtype)) + ", device=" +
             tensor_meta.device.str() + ", requires_grad=" + (tensor_meta.requires_grad ? "True" : "False") +
             ", size=" + join_ints(tensor_meta.sizes) + ", stride=" + join_ints(tensor_meta.strides) + ")";
    case Kind::LenMatch: return "len(" + s + ") == " + std::to_string(length);
    case Kind::DictKeys: return "list(" + s + ".keys()) == " + py_short_repr(expected);
    case Kind::GlobalState:
      return std::string("torch.is_grad_enabled() == ") + (grad_enabled ? "True" : "False") +
             " and torch.get_default_dtype() == torch." + std::string(dtype_name(default_dtype));
  }
  return "<unknown guard>";
}

}  // namespace ff
