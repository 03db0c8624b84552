#include "graph/printer.h"

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "graph/op_registry.h"

namespace ff {
namespace {

std::string node_name(const Graph& g, NodeId id) {
  if (id < 0 || static_cast<size_t>(id) >= g.size()) return "<bad node " + std::to_string(id) + ">";
  return g.node(id).name;
}

// A slice inside a subscript: `start:stop` or `start:stop:step`, None parts left empty.
std::string slice_part(const Value& v, const Graph& g) { return v.is_none() ? "" : value_str(v, g); }

std::string subscript_item(const Value& v, const Graph& g) {
  if (v.kind != Value::Kind::Slice || v.items.size() != 3) return value_str(v, g);
  std::string s = slice_part(v.items[0], g) + ":" + slice_part(v.items[1], g);
  if (!v.items[2].is_none()) s += ":" + slice_part(v.items[2], g);
  return s;
}

std::string subscript_index(const Value& v, const Graph& g) {
  if (v.kind != Value::Kind::Tuple || v.items.empty()) return subscript_item(v, g);
  std::string s;
  for (size_t i = 0; i < v.items.size(); ++i) s += (i ? ", " : "") + subscript_item(v.items[i], g);
  if (v.items.size() == 1) s += ",";  // x[0,] indexes with the tuple (0,)
  return s;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// An operand that must bind tighter than a unary or binary operator: `(-2) ** x`, `-(-1)`.
std::string tight(std::string s) { return !s.empty() && (s[0] == '-' || s[0] == '~') ? "(" + s + ")" : s; }

// Python's binary and unary expression operators. Other symbols (in-place `+=`, which is a
// statement in Python) print as a call of the op's target.
bool is_binary_operator(const std::string& s) {
  static const char* const kOps[] = {"+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", "<<", ">>",
                                     "<", ">", "<=", ">=", "==", "!=", "is", "in"};
  for (const char* op : kOps)
    if (s == op) return true;
  return false;
}
bool is_unary_operator(const std::string& s) { return s == "-" || s == "+" || s == "~" || s == "not"; }

std::string call_arg_list(const CallArgs& ca, size_t skip, const Graph& g) {
  std::string s;
  for (size_t i = skip; i < ca.positional.size(); ++i) s += (s.empty() ? "" : ", ") + value_str(*ca.positional[i], g);
  for (const auto& [name, v] : ca.keywords) s += (s.empty() ? "" : ", ") + name + "=" + value_str(*v, g);
  return s;
}

std::string method_name(const OpDef& op) {
  size_t dot = op.target.rfind('.');
  return dot == std::string::npos ? op.target : op.target.substr(dot + 1);
}

std::string call_expr(const Graph& g, const Node& n) {
  if (!is_op(n.op)) return "<bad op " + std::to_string(n.op) + ">()";
  const OpDef& op = op_def(n.op);
  if (n.args.size() != op.schema.params.size()) {
    // Malformed (the verifier reports it): show every argument as it is stored.
    std::string s;
    for (const Value& v : n.args) s += (s.empty() ? "" : ", ") + value_str(v, g);
    return op.target + "(" + s + ")";
  }
  CallArgs ca = call_args(op, n.args);
  const auto& pos = ca.positional;
  bool plain = ca.keywords.empty();
  switch (op.style) {
    case PrintStyle::Infix:
      if (plain && pos.size() == 2 && is_binary_operator(op.symbol))
        return (op.symbol == "**" ? tight(value_str(*pos[0], g)) : value_str(*pos[0], g)) + " " + op.symbol + " " +
               value_str(*pos[1], g);
      break;
    case PrintStyle::Prefix:
      if (plain && pos.size() == 1 && is_unary_operator(op.symbol)) {
        // -(2) and -(-2): bare, `-2` would read back as the constant, not the op.
        std::string operand = value_str(*pos[0], g);
        bool numeric = !operand.empty() && (std::isdigit(static_cast<unsigned char>(operand[0])) || operand[0] == '-');
        std::string sep = std::isalpha(static_cast<unsigned char>(op.symbol[0])) && !numeric ? " " : "";
        return op.symbol + sep + (numeric ? "(" + operand + ")" : tight(operand));
      }
      break;
    case PrintStyle::Subscript:
      if (plain && pos.size() == 2) return tight(value_str(*pos[0], g)) + "[" + subscript_index(*pos[1], g) + "]";
      break;
    case PrintStyle::Method:
      if (!pos.empty()) {
        std::string self = value_str(*pos[0], g);
        if (!is_identifier(self)) self = "(" + self + ")";
        return self + "." + method_name(op) + "(" + call_arg_list(ca, 1, g) + ")";
      }
      break;
    case PrintStyle::Function:
      break;
  }
  // Function style, also the form every other style falls back to: the parser finds the op
  // by its target either way.
  return op.target + "(" + call_arg_list(ca, 0, g) + ")";
}

std::string seq_str(const std::vector<Value>& items, const Graph& g, char open, char close) {
  std::string s(1, open);
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + value_str(items[i], g);
  if (open == '(' && items.size() == 1) s += ",";
  return s + close;
}

}  // namespace

namespace {

// "D.DDDe+XX" from a digit string and a decimal exponent.
std::string sci_text(const std::string& digits, int exp) {
  char tail[16];
  std::snprintf(tail, sizeof tail, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + tail;
}

// The shortest scientific form of `f` that reads back as `f` (Python's repr digits). At each
// precision the correctly rounded candidate and its two decimal neighbours are tried: near a power
// of two the rounded one may not read back while a neighbour does.
std::string shortest_scientific(double f) {
  double a = std::fabs(f);
  std::string sign = std::signbit(f) ? "-" : "";
  char buf[64];
  for (int precision = 0; precision <= 16; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision, a);
    std::string text(buf);
    size_t e = text.find('e');
    std::string digits = text.substr(0, 1) + (precision > 0 ? text.substr(2, e - 2) : "");
    int exp = std::atoi(text.c_str() + e + 1);
    if (std::strtod(text.c_str(), nullptr) == a) return sign + sci_text(digits, exp);
    for (int step : {+1, -1}) {
      std::string d = digits;
      int x = exp;
      int i = static_cast<int>(d.size()) - 1;
      if (step > 0) {
        while (i >= 0 && d[i] == '9') d[i--] = '0';
        if (i >= 0) ++d[i];
        else {
          d = "1" + d.substr(0, d.size() - 1);
          ++x;
        }
      } else {
        while (i >= 0 && d[i] == '0') d[i--] = '9';
        if (i >= 0) --d[i];
        if (d[0] == '0') {
          d = d.substr(1) + "9";
          --x;
        }
      }
      if (d.empty() || d[0] == '0') continue;
      std::string cand = sci_text(d, x);
      if (std::strtod(cand.c_str(), nullptr) == a) return sign + cand;
    }
  }
  std::snprintf(buf, sizeof buf, "%.16e", a);
  return sign + buf;
}

}  // namespace

std::string float_str(double f) {
  if (std::isnan(f)) return "float('nan')";
  if (std::isinf(f)) return f > 0 ? "float('inf')" : "float('-inf')";
  // The shortest digits that round-trip, laid out as Python's repr does: positional notation for
  // decimal exponents -4 .. 15, scientific otherwise (1e-05, 1e+16).
  // NB: the shortest round-tripping digits come from the C library (snprintf/strtod), not from
  // std::to_chars: a module built by one GCC and loaded next to another's libstdc++ (torch's
  // process on the GPU machines) crashed in libstdc++'s floating-point formatting.
  std::string sci = shortest_scientific(f);  // "-1.2345e+16"
  std::string sign = sci[0] == '-' ? "-" : "";
  if (!sign.empty()) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e" + (exp < 0 ? "-" : "+");
    std::string mag = std::to_string(std::abs(exp));
    out += (mag.size() < 2 ? "0" : "") + mag;
  } else if (exp >= 0) {
    size_t int_digits = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_digits) out = digits + std::string(int_digits - digits.size(), '0') + ".0";
    else out = digits.substr(0, int_digits) + "." + digits.substr(int_digits);
  } else {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  }
  return sign + out;
}

std::string string_literal(const std::string& s) {
  char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c == quote) out += '\\';
        out += c;
    }
  }
  return out + quote;
}

std::string tensor_meta_str(const TensorMeta& t) {
  // NB: symbolic sizes print as their expressions ("f32[s0, 8]"); structural comparison: no guards.
  std::string sizes = t.sizes.str(), strides = t.strides.str();
  std::string s = std::string(dtype_short_name(t.dtype)) + sizes;
  if (!t.strides.same_as(TensorMeta::contiguous_strides(t.sizes))) s += strides;
  if (!(t.device == Device{})) s += t.device.str();
  if (t.requires_grad) s += " rg";
  return s;
}

std::string meta_str(const ValueMeta& m) {
  switch (m.kind) {
    case ValueMeta::Kind::Tensor: return tensor_meta_str(m.tensor);
    case ValueMeta::Kind::Tuple: {
      std::string s = "(";
      for (size_t i = 0; i < m.items.size(); ++i) s += (i ? ", " : "") + meta_str(m.items[i]);
      if (m.items.size() == 1) s += ",";
      return s + ")";
    }
    case ValueMeta::Kind::Int: return m.sym ? "Sym(" + m.as_symint().str() + ")" : "int";
    case ValueMeta::Kind::Float: return "float";
    case ValueMeta::Kind::Bool: return "bool";
    case ValueMeta::Kind::None: return "None";
  }
  return "?";
}

std::string value_str(const Value& v, const Graph& g) {
  switch (v.kind) {
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return v.sym ? v.as_symint().str() : std::to_string(v.i);
    case Value::Kind::Float: return float_str(v.f);
    case Value::Kind::Str: return string_literal(v.s);
    case Value::Kind::DType: return "torch." + std::string(dtype_name(v.dtype));
    case Value::Kind::Device: return "torch.device(" + string_literal(v.device.str()) + ")";
    case Value::Kind::MemoryFormat:
    case Value::Kind::Layout: return "torch." + v.s;
    case Value::Kind::Ellipsis: return "...";
    case Value::Kind::Slice: return seq_str(v.items, g, '(', ')').insert(0, "slice");
    case Value::Kind::List: return seq_str(v.items, g, '[', ']');
    case Value::Kind::Tuple: return seq_str(v.items, g, '(', ')');
    case Value::Kind::Node: return node_name(g, v.node);
  }
  return "?";
}

std::string node_expr(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  switch (n.kind) {
    case NodeKind::Placeholder: return n.name;
    case NodeKind::Call: return call_expr(g, n);
    case NodeKind::GetItem:
      if (n.args.size() == 2) return tight(value_str(n.args[0], g)) + "[" + value_str(n.args[1], g) + "]";
      break;
    case NodeKind::Output:
      if (n.args.size() == 1) return value_str(n.args[0], g);
      break;
  }
  return "<malformed " + std::string(node_kind_name(n.kind)) + ">";
}

std::string graph_code(const Graph& g) {
  std::string head = "def forward(self";
  std::string body;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    NodeId id = static_cast<NodeId>(i);
    switch (n.kind) {
      case NodeKind::Placeholder: head += ", " + n.name + ": \"" + meta_str(n.meta) + "\""; break;
      case NodeKind::Output: body += "    return " + node_expr(g, id) + "\n"; break;
      default: body += "    " + n.name + ": \"" + meta_str(n.meta) + "\" = " + node_expr(g, id) + "\n"; break;
    }
  }
  return head + "):\n" + body;
}

std::string graph_table(const Graph& g) {
  struct Row {
    std::string cells[5];
  };
  std::vector<Row> rows = {{{"kind", "name", "target", "args", "meta"}}};
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    Row r;
    r.cells[0] = node_kind_name(n.kind);
    r.cells[1] = n.name;
    if (n.kind == NodeKind::Call && is_op(n.op)) {
      const OpDef& op = op_def(n.op);
      r.cells[2] = op.target;
      if (n.args.size() == op.schema.params.size()) r.cells[3] = "(" + call_arg_list(call_args(op, n.args), 0, g) + ")";
      else r.cells[3] = seq_str(n.args, g, '(', ')');
    } else if (n.kind == NodeKind::Output && n.args.size() == 1) {
      r.cells[3] = value_str(n.args[0], g);
    } else if (n.kind != NodeKind::Placeholder) {
      r.cells[3] = seq_str(n.args, g, '(', ')');
    }
    if (n.kind != NodeKind::Output) r.cells[4] = meta_str(n.meta);
    rows.push_back(std::move(r));
  }
  size_t width[5] = {};
  for (const Row& r : rows)
    for (int c = 0; c < 5; ++c) width[c] = std::max(width[c], r.cells[c].size());
  std::string out;
  for (const Row& r : rows) {
    std::string line;
    for (int c = 0; c < 5; ++c) {
      line += r.cells[c];
      if (c < 4) line += std::string(width[c] - r.cells[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace ff
