#include "graph/op_schema.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "src/base/errors.h"

namespace ff {
namespace {

// A tiny recursive-descent reader over Python-like constant syntax.
struct Reader {
  std::string_view s;
  size_t pos = 0;

  void skip_ws() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  }
  bool eat(std::string_view tok) {
    skip_ws();
    if (s.substr(pos, tok.size()) == tok) {
      pos += tok.size();
      return true;
    }
    return false;
  }
  bool at_end() {
    skip_ws();
    return pos >= s.size();
  }
  std::string_view ident() {
    skip_ws();
    size_t start = pos;
    while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_' || s[pos] == '.')) ++pos;
    return s.substr(start, pos - start);
  }

  bool constant(Value* out) {
    skip_ws();
    if (pos >= s.size()) return false;
    char c = s[pos];
    if (c == '[' || c == '(') {
      char close = c == '[' ? ']' : ')';
      ++pos;
      std::vector<Value> items;
      bool trailing_comma = false;
      while (!eat(std::string_view(&close, 1))) {
        Value v;
        if (!constant(&v)) return false;
        items.push_back(std::move(v));
        trailing_comma = eat(",");
        if (!trailing_comma) {
          if (!eat(std::string_view(&close, 1))) return false;
          break;
        }
      }
      // (1) is a parenthesised int, (1,) a tuple.
      if (c == '(' && items.size() == 1 && !trailing_comma) *out = std::move(items[0]);
      else *out = c == '[' ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      return true;
    }
    if (c == '\'' || c == '"') {
      size_t end = s.find(c, pos + 1);
      if (end == std::string_view::npos) return false;
      *out = Value::of_str(std::string(s.substr(pos + 1, end - pos - 1)));
      pos = end + 1;
      return true;
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) return number(out);
    std::string_view id = ident();
    if (id == "None") {
      *out = Value::none();
      return true;
    }
    if (id == "True") {
      *out = Value::of_bool(true);
      return true;
    }
    if (id == "False") {
      *out = Value::of_bool(false);
      return true;
    }
    if (id == "inf" || id == "math.inf") {
      *out = Value::of_float(HUGE_VAL);
      return true;
    }
    if (id == "nan" || id == "math.nan") {
      *out = Value::of_float(NAN);
      return true;
    }
    if (id == "...") {
      *out = Value::ellipsis();
      return true;
    }
    if (id == "float" && eat("(")) {  // float('inf'), float('-inf'), float('nan')
      Value str;
      if (!constant(&str) || str.kind != Value::Kind::Str || !eat(")")) return false;
      if (str.s == "inf") *out = Value::of_float(HUGE_VAL);
      else if (str.s == "-inf") *out = Value::of_float(-HUGE_VAL);
      else if (str.s == "nan") *out = Value::of_float(NAN);
      else return false;
      return true;
    }
    if (id == "torch.device" && eat("(")) {
      Value str;
      if (!constant(&str) || str.kind != Value::Kind::Str || !eat(")")) return false;
      auto d = Device::parse(str.s);
      if (!d) return false;
      *out = Value::of_device(*d);
      return true;
    }
    if (id == "slice" && eat("(")) {
      Value a, b, c2;
      if (!constant(&a) || !eat(",") || !constant(&b) || !eat(",") || !constant(&c2) || !eat(")")) return false;
      *out = Value::slice(std::move(a), std::move(b), std::move(c2));
      return true;
    }
    if (id.starts_with("torch.")) {
      std::string_view rest = id.substr(6);
      if (auto t = dtype_from_name(rest)) {
        *out = Value::of_dtype(*t);
        return true;
      }
      if (rest == "contiguous_format" || rest == "channels_last" || rest == "preserve_format" ||
          rest == "channels_last_3d") {
        *out = Value::of_memory_format(std::string(rest));
        return true;
      }
      if (rest == "strided") {
        *out = Value::of_layout("strided");
        return true;
      }
    }
    return false;
  }

  bool number(Value* out) {
    size_t start = pos;
    if (s[pos] == '-' || s[pos] == '+') ++pos;
    if (s.substr(pos, 3) == "inf") {
      pos += 3;
      *out = Value::of_float(s[start] == '-' ? -HUGE_VAL : HUGE_VAL);
      return true;
    }
    bool is_float = false;
    while (pos < s.size()) {
      char c = s[pos];
      if (std::isdigit(static_cast<unsigned char>(c))) ++pos;
      else if (c == '.' || c == 'e' || c == 'E') {
        is_float = true;
        ++pos;
      } else if ((c == '-' || c == '+') && (s[pos - 1] == 'e' || s[pos - 1] == 'E')) ++pos;
      else break;
    }
    std::string text(s.substr(start, pos - start));
    if (text.empty() || text == "-" || text == "+") return false;
    char* end = nullptr;
    if (is_float) {
      double v = std::strtod(text.c_str(), &end);
      if (*end) return false;
      *out = Value::of_float(v);
    } else {
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (*end) return false;
      *out = Value::of_int(v);
    }
    return true;
  }
};

struct TypeName {
  std::string_view text;
  ParamType type;
};
constexpr TypeName kTypeNames[] = {
    {"Tensor[]", ParamType::TensorList},
    {"Tensor...", ParamType::TensorVarargs},
    {"Tensor", ParamType::Tensor},
    {"Scalar", ParamType::Scalar},
    {"int[]", ParamType::IntList},
    {"int...", ParamType::IntVarargs},
    {"int", ParamType::Int},
    {"float", ParamType::Float},
    {"bool", ParamType::Bool},
    {"str", ParamType::Str},
    {"ScalarType", ParamType::ScalarType},
    {"Device", ParamType::Device},
    {"Layout", ParamType::Layout},
    {"MemoryFormat", ParamType::MemoryFormat},
    {"Any", ParamType::Any},
};

}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> parts;
  int depth = 0;
  char quote = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '(' || c == '[') {
      ++depth;
    } else if (c == ')' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 0) {
      parts.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  std::string_view last = trim(s.substr(start));
  if (!last.empty()) parts.push_back(last);
  return parts;
}

Value parse_constant(std::string_view text, bool* ok) {
  Reader r{text};
  Value v;
  *ok = r.constant(&v) && r.at_end();
  return v;
}

int OpSchema::index_of(std::string_view param) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == param) return static_cast<int>(i);
  return -1;
}

OpSchema parse_schema(std::string_view text) {
  OpSchema schema;
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  FF_CHECK(open != std::string_view::npos && close != std::string_view::npos && close > open,
           "malformed schema: " + std::string(text));
  schema.name = std::string(trim(text.substr(0, open)));
  bool kwarg_only = false;
  for (std::string_view part : split_top(text.substr(open + 1, close - open - 1))) {
    if (part == "*") {
      kwarg_only = true;
      continue;
    }
    ParamSpec p;
    p.kwarg_only = kwarg_only;
    std::string_view decl = part;
    size_t eq = part.find('=');
    if (eq != std::string_view::npos) {
      decl = trim(part.substr(0, eq));
      bool ok = false;
      p.default_value = parse_constant(trim(part.substr(eq + 1)), &ok);
      FF_CHECK(ok, "bad default in schema: " + std::string(text));
      p.has_default = true;
    }
    size_t space = decl.rfind(' ');
    FF_CHECK(space != std::string_view::npos, "parameter without a type in schema: " + std::string(text));
    std::string_view type = trim(decl.substr(0, space));
    p.name = std::string(trim(decl.substr(space + 1)));
    if (type.ends_with("?")) {
      p.optional = true;
      type.remove_suffix(1);
    }
    bool found = false;
    for (const TypeName& tn : kTypeNames) {
      if (tn.text == type) {
        p.type = tn.type;
        found = true;
        break;
      }
    }
    FF_CHECK(found, "unknown type '" + std::string(type) + "' in schema: " + std::string(text));
    schema.params.push_back(std::move(p));
  }
  return schema;
}

std::string OpSchema::str() const {
  std::string s = name + "(";
  bool first = true, star = false;
  for (const ParamSpec& p : params) {
    if (!first) s += ", ";
    first = false;
    if (p.kwarg_only && !star) {
      s += "*, ";
      star = true;
    }
    for (const TypeName& tn : kTypeNames)
      if (tn.type == p.type) {
        s += tn.text;
        break;
      }
    if (p.optional) s += "?";
    s += " " + p.name;
    if (p.has_default) s += "=<default>";
  }
  return s + ")";
}

}  // namespace ff
