// parse_meta (graph/parser.h): the annotation text of graph code ("f32[4, 8][1, 4]cuda:0 rg").
#include <cctype>

#include "graph/parser.h"

namespace ff {
namespace {

struct MetaSyntaxError {
  size_t pos;
  std::string message;
};

struct MetaReader {
  std::string_view s;
  size_t pos = 0;

  [[noreturn]] void fail(const std::string& msg, size_t at) { throw MetaSyntaxError{at, msg}; }
  void ws() {
    while (pos < s.size() && s[pos] == ' ') ++pos;
  }
  bool eat(char c) {
    ws();
    if (pos < s.size() && s[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  std::string_view word() {
    ws();
    size_t start = pos;
    while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == '_')) ++pos;
    return s.substr(start, pos - start);
  }
  std::vector<int64_t> ints() {  // after '['
    std::vector<int64_t> out;
    if (eat(']')) return out;
    while (true) {
      ws();
      size_t start = pos;
      if (pos < s.size() && s[pos] == '-') ++pos;
      while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) ++pos;
      std::string digits(s.substr(start, pos - start));
      if (digits.empty() || digits == "-") fail("expected an integer", start);
      out.push_back(std::stoll(digits));
      if (eat(']')) return out;
      if (!eat(',')) fail("expected ',' or ']'", pos);
    }
  }

  ValueMeta meta() {
    ws();
    size_t start = pos;
    if (eat('(')) {
      std::vector<ValueMeta> items;
      bool trailing_comma = false;
      if (eat(')')) return ValueMeta::tuple({});
      while (true) {
        items.push_back(meta());
        trailing_comma = eat(',');
        if (eat(')')) break;
        if (!trailing_comma) fail("expected ',' or ')'", pos);
      }
      if (items.size() == 1 && !trailing_comma) return std::move(items[0]);  // (x) is x
      return ValueMeta::tuple(std::move(items));
    }
    std::string_view w = word();
    if (w == "int") return ValueMeta::of(ValueMeta::Kind::Int);
    if (w == "float") return ValueMeta::of(ValueMeta::Kind::Float);
    if (w == "bool") return ValueMeta::of(ValueMeta::Kind::Bool);
    if (w == "None") return ValueMeta::of(ValueMeta::Kind::None);
    if (w.empty()) fail("expected a type", start);
    auto dtype = dtype_from_short_name(w);
    if (!dtype) fail("unknown dtype '" + std::string(w) + "'", start);
    TensorMeta t;
    t.dtype = *dtype;
    if (!eat('[')) fail("expected '[' after the dtype", pos);
    t.sizes = ints();
    t.strides = TensorMeta::contiguous_strides(t.sizes);
    if (pos < s.size() && s[pos] == '[') {
      size_t at = pos++;
      t.strides = ints();
      if (t.strides.size() != t.sizes.size())
        fail(std::to_string(t.strides.size()) + " strides for " + std::to_string(t.sizes.size()) + " sizes", at);
    }
    if (pos < s.size() && std::isalpha(static_cast<unsigned char>(s[pos]))) {
      size_t at = pos;
      while (pos < s.size() && (std::isalnum(static_cast<unsigned char>(s[pos])) || s[pos] == ':')) ++pos;
      auto dev = Device::parse(s.substr(at, pos - at));
      if (!dev) fail("unknown device '" + std::string(s.substr(at, pos - at)) + "'", at);
      t.device = *dev;
    }
    size_t before_rg = pos;
    ws();
    if (s.substr(pos, 2) == "rg" && (pos + 2 == s.size() || !std::isalnum(static_cast<unsigned char>(s[pos + 2])))) {
      t.requires_grad = true;
      pos += 2;
    } else {
      pos = before_rg;
    }
    return ValueMeta::of_tensor(std::move(t));
  }
};

}  // namespace

ValueMeta parse_meta(std::string_view text) {
  MetaReader r{text};
  try {
    ValueMeta m = r.meta();
    r.ws();
    if (r.pos != text.size()) r.fail("unexpected '" + std::string(text.substr(r.pos)) + "' in the annotation", r.pos);
    return m;
  } catch (const MetaSyntaxError& e) {
    throw ParseError(1, static_cast<int>(e.pos) + 1, e.message, text);
  }
}

}  // namespace ff
