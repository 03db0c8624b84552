#include "graph/aten_schema.h"

#include <algorithm>
#include <cctype>

namespace ff {
namespace {

// Index of the bracket closing the one at `open`, or npos.
size_t closing(std::string_view s, size_t open) {
  int depth = 0;
  char quote = 0;
  for (size_t i = open; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(' || c == '[') {
      ++depth;
    } else if ((c == ')' || c == ']') && --depth == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

// "Tensor(a!) self=None" -> type, alias, name, default. Returns false on malformed text.
bool parse_arg(std::string_view text, bool named, AtenArg* out) {
  size_t eq = std::string_view::npos;
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(' || text[i] == '[') ++depth;
    else if (text[i] == ')' || text[i] == ']') --depth;
    else if (text[i] == '=' && depth == 0) {
      eq = i;
      break;
    }
  }
  if (eq != std::string_view::npos) {
    out->has_default = true;
    out->default_text = std::string(trim(text.substr(eq + 1)));
    text = trim(text.substr(0, eq));
  }
  std::string_view type = text;
  if (named || (!text.empty() && std::isalnum(static_cast<unsigned char>(text.back())))) {
    // The name is the last word outside brackets (a return may have none: "Tensor(a)").
    size_t sp = text.size();
    depth = 0;
    for (size_t i = text.size(); i-- > 0;) {
      if (text[i] == ')' || text[i] == ']') ++depth;
      else if (text[i] == '(' || text[i] == '[') --depth;
      else if (text[i] == ' ' && depth == 0) {
        sp = i;
        break;
      }
    }
    if (sp != text.size()) {
      out->name = std::string(trim(text.substr(sp + 1)));
      type = trim(text.substr(0, sp));
    } else if (named) {
      return false;
    }
  }
  // Strip the alias annotation: Tensor(a!)[] -> Tensor[], alias "a", write.
  size_t open = type.find('(');
  std::string t(type);
  if (open != std::string_view::npos) {
    size_t close = closing(type, open);
    if (close == std::string_view::npos) return false;
    std::string_view ann = type.substr(open + 1, close - open - 1);
    out->write = ann.find('!') != std::string_view::npos;
    size_t arrow = ann.find("->");
    std::string_view set = trim(arrow == std::string_view::npos ? ann : ann.substr(0, arrow));
    std::string alias;
    for (char c : set)
      if (c != '!' && c != ' ') alias += c;
    out->alias = alias;
    t = std::string(type.substr(0, open)) + std::string(type.substr(close + 1));
  }
  out->type = t;
  return !out->type.empty();
}

struct TypeMap {
  ParamType type = ParamType::Any;
  bool optional = false;
  bool ok = true;
  bool generator = false;
};

bool is_int_word(std::string_view w) { return w == "int" || w == "SymInt"; }

TypeMap map_type(std::string_view t) {
  TypeMap m;
  if (!t.empty() && t.back() == '?') {
    m.optional = true;
    t.remove_suffix(1);
  }
  size_t bracket = t.find('[');
  if (bracket != std::string_view::npos) {
    std::string_view elem = t.substr(0, bracket);
    if (elem == "Tensor") m.type = ParamType::TensorList;
    else if (is_int_word(elem)) m.type = ParamType::IntList;
    else if (elem == "Tensor?" || elem == "float" || elem == "bool" || elem == "Scalar") m.type = ParamType::Any;
    else m.ok = false;  // Dimname[], str[], TorchScript's t[] / int[](a!) list ops
    return m;
  }
  if (t == "Tensor") m.type = ParamType::Tensor;
  else if (t == "Scalar") m.type = ParamType::Scalar;
  else if (is_int_word(t)) m.type = ParamType::Int;
  else if (t == "float") m.type = ParamType::Float;
  else if (t == "bool") m.type = ParamType::Bool;
  else if (t == "str") m.type = ParamType::Str;
  else if (t == "ScalarType") m.type = ParamType::ScalarType;
  else if (t == "Layout") m.type = ParamType::Layout;
  else if (t == "Device") m.type = ParamType::Device;
  else if (t == "MemoryFormat") m.type = ParamType::MemoryFormat;
  else if (t == "Generator") m.generator = true;  // NB: Any; only None is a graph constant
  else m.ok = false;                               // Dimname, Storage, Stream, complex ...
  return m;
}

bool is_tensor_type(std::string_view t) { return t.rfind("Tensor", 0) == 0; }

// A default as written in a schema, for a parameter of type `p`.
bool parse_default(std::string_view text, ParamType p, Value* out) {
  bool ok = false;
  Value v = parse_constant(text, &ok);
  if (ok) {
    *out = std::move(v);
    return true;
  }
  if (text == "contiguous_format" || text == "preserve_format" || text == "channels_last") {
    *out = Value::of_memory_format(std::string(text));
    return true;
  }
  if (text == "strided") {
    *out = Value::of_layout("strided");
    return true;
  }
  if (text == "Mean" || text == "Sum") {  // at::Reduction, an int in Python
    *out = Value::of_int(text == "Mean" ? 1 : 2);
    return true;
  }
  if (p == ParamType::ScalarType) {
    if (auto d = dtype_from_name(text == "long" ? "int64" : text)) {
      *out = Value::of_dtype(*d);
      return true;
    }
  }
  return false;
}

// Ops that draw from torch's RNG without a Generator argument in their schema.
bool random_by_name(std::string_view n) {
  for (std::string_view r : {"rand_like", "randn_like", "randint_like", "dropout", "dropout_", "feature_dropout",
                             "feature_dropout_", "alpha_dropout", "alpha_dropout_", "feature_alpha_dropout",
                             "feature_alpha_dropout_", "native_dropout", "rrelu", "rrelu_", "rrelu_with_noise"})
    if (n == r) return true;
  return false;
}

std::string last_component(const std::string& target) {
  size_t dot = target.rfind('.');
  return dot == std::string::npos ? target : target.substr(dot + 1);
}

// Fewer Scalar parameters first: torch.pow(x, y) with a tensor y is the Tensor overload, not the
// Scalar one (a Scalar parameter also takes a tensor here, see ops.def).
int scalar_params(const OpDef& d) {
  int n = 0;
  for (const ParamSpec& p : d.schema.params) n += p.type == ParamType::Scalar;
  return n;
}

}  // namespace

bool AtenSchema::is_out_overload() const {
  return std::any_of(args.begin(), args.end(), [](const AtenArg& a) { return a.kwarg_only && a.write; });
}

bool parse_aten_schema(std::string_view text, AtenSchema* out, std::string* error) {
  text = trim(text);
  size_t colons = text.find("::");
  if (colons == std::string_view::npos || colons == 0 || colons > text.find('(')) {
    *error = "no namespace";
    return false;
  }
  out->ns = std::string(text.substr(0, colons));
  text.remove_prefix(colons + 2);
  size_t open = text.find('(');
  size_t close = open == std::string_view::npos ? open : closing(text, open);
  if (close == std::string_view::npos) {
    *error = "unbalanced parentheses";
    return false;
  }
  std::string_view full = text.substr(0, open);
  size_t dot = full.find('.');
  out->name = std::string(full.substr(0, dot));
  out->overload = dot == std::string_view::npos ? "" : std::string(full.substr(dot + 1));
  bool kwarg_only = false;
  for (std::string_view a : split_top(text.substr(open + 1, close - open - 1))) {
    if (a == "*") {
      kwarg_only = true;
      continue;
    }
    AtenArg arg;
    if (!parse_arg(a, true, &arg)) {
      *error = "cannot read argument '" + std::string(a) + "'";
      return false;
    }
    arg.kwarg_only = kwarg_only;
    out->args.push_back(std::move(arg));
  }
  std::string_view rest = trim(text.substr(close + 1));
  if (rest.rfind("->", 0) != 0) {
    *error = "no '->'";
    return false;
  }
  rest = trim(rest.substr(2));
  std::vector<std::string_view> rets;
  if (!rest.empty() && rest.front() == '(' && closing(rest, 0) == rest.size() - 1) rets = split_top(rest.substr(1, rest.size() - 2));
  else rets.push_back(rest);
  for (std::string_view r : rets) {
    AtenArg ret;
    if (!parse_arg(r, false, &ret)) {
      *error = "cannot read result '" + std::string(r) + "'";
      return false;
    }
    out->returns.push_back(std::move(ret));
  }
  return true;
}

std::vector<OpDef> open_op_defs(const OpenOpSpec& spec, std::vector<std::string>* skipped) {
  std::vector<OpDef> defs;
  auto skip = [&](const AtenSchema& s, const std::string& why) {
    skipped->push_back(s.ns + "::" + s.name + (s.overload.empty() ? "" : "." + s.overload) + ": " + why);
  };
  for (const AtenSchema& s : spec.overloads) {
    if (s.is_out_overload() && !spec.schema_names) continue;  // the `out` keyword of its functional overload
    OpDef d;
    d.target = spec.target;
    d.name = spec.target + (s.overload.empty() ? "" : "." + s.overload);
    d.aten = s.ns + "::" + s.name + (s.overload.empty() ? "" : "." + s.overload);
    d.style = spec.style;
    d.schema.name = last_component(spec.target);
    bool ok = true, random = s.ns == "aten" && random_by_name(s.name);
    for (const std::string& r : spec.random_overloads) random = random || r == s.overload;
    // A method's tensor is `self` wherever the schema has it (aten::polygamma(int n, Tensor self)
    // is x.polygamma(n)): first here, as the method is called.
    std::vector<AtenArg> args = s.args;
    if (spec.style == PrintStyle::Method) {
      auto self = std::find_if(args.begin(), args.end(), [](const AtenArg& a) { return a.name == "self" && !a.kwarg_only; });
      if (self != args.end()) std::rotate(args.begin(), self, self + 1);
    }
    for (size_t i = 0; i < args.size() && ok; ++i) {
      const AtenArg& a = args[i];
      TypeMap m = map_type(a.type);
      if (!m.ok) {
        skip(s, "argument type " + a.type + " is not supported");
        ok = false;
        break;
      }
      if (i == 0 && spec.style == PrintStyle::Method && (a.name != "self" || m.type != ParamType::Tensor)) {
        skip(s, "its first argument is not the tensor");
        ok = false;
        break;
      }
      if (a.write && !(a.name == "self" && !s.returns.empty() && s.returns[0].write && s.returns[0].alias == a.alias)) {
        // NB: torch.ops.aten.add.out(x, y, out=z) and the like are not functionalized.
        skip(s, "it writes its argument '" + a.name + "', which it does not return");
        ok = false;
        break;
      }
      if (a.write) d.traits |= kInplace;
      random = random || m.generator;
      ParamSpec p;
      p.name = a.name == "self" && spec.style == PrintStyle::Function && !spec.schema_names ? "input" : a.name;
      p.type = m.type;
      p.optional = m.optional;
      p.kwarg_only = a.kwarg_only;
      if (a.has_default) {
        p.has_default = parse_default(a.default_text, m.type, &p.default_value);
        if (!p.has_default) {
          skip(s, "default '" + a.default_text + "' of '" + a.name + "' is not supported");
          ok = false;
        }
      }
      d.schema.params.push_back(std::move(p));
    }
    if (!ok) continue;
    // torch's Python binding takes an int list that is the one positional parameter (a method's
    // `self` aside) as varargs too: x.sum_to_size(2, 3), torch.zeros(2, 3) (torch.ops callables do not).
    int positional = 0, list_at = -1;
    for (size_t i = spec.style == PrintStyle::Method ? 1 : 0; i < d.schema.params.size(); ++i) {
      const ParamSpec& p = d.schema.params[i];
      if (p.kwarg_only) continue;
      ++positional;
      if (p.type == ParamType::IntList && !p.optional) list_at = static_cast<int>(i);
    }
    if (positional == 1 && list_at >= 0 && !spec.schema_names) d.schema.params[static_cast<size_t>(list_at)].type = ParamType::IntVarargs;
    // Factory functions take `requires_grad` in Python besides their schema's tensor options.
    if (d.schema.index_of("pin_memory") >= 0 && d.schema.index_of("requires_grad") < 0) {
      ParamSpec rg;
      rg.name = "requires_grad";
      rg.type = ParamType::Bool;
      rg.has_default = true;
      rg.default_value = Value::of_bool(false);
      rg.kwarg_only = true;
      d.schema.params.push_back(std::move(rg));
    }
    bool tensor_result = false;
    for (const AtenArg& r : s.returns) {
      tensor_result = tensor_result || is_tensor_type(r.type);
      if (!r.alias.empty() && !r.write) d.traits |= kView;
    }
    if (!tensor_result) {
      skip(s, "its result is not a tensor");
      continue;
    }
    // out=: the keyword the out overload with the same other arguments adds.
    for (const AtenSchema& o : spec.overloads) {
      if (!o.is_out_overload() || spec.schema_names) continue;
      std::vector<std::string> names, out_names;
      for (const AtenArg& a : o.args) (a.kwarg_only && a.write ? out_names : names).push_back(a.name);
      std::vector<std::string> mine;
      for (const AtenArg& a : s.args) mine.push_back(a.name);
      std::sort(names.begin(), names.end());
      std::sort(mine.begin(), mine.end());
      if (names != mine || d.has(kInplace)) continue;
      ParamSpec out;
      out.name = "out";
      out.type = ParamType::Any;
      out.optional = true;
      out.has_default = true;
      out.kwarg_only = true;
      d.schema.params.push_back(std::move(out));
      break;
    }
    if (random) d.traits |= kRandom;
    if (s.ns == "aten" && (s.name.rfind("empty", 0) == 0 || s.name.rfind("new_empty", 0) == 0)) d.traits |= kNondeterministicOutput;
    defs.push_back(std::move(d));
  }
  std::stable_sort(defs.begin(), defs.end(), [](const OpDef& a, const OpDef& b) { return scalar_params(a) < scalar_params(b); });
  return defs;
}

}  // namespace ff
