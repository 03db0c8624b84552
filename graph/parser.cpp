#include "graph/parser.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <utility>

#include "graph/op_registry.h"
#include "graph/printer.h"

namespace ff {

ParseError::ParseError(int line, int column, const std::string& message, std::string_view source_line)
    : UserError("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message +
                (source_line.empty() ? std::string()
                                     : "\n" + std::string(source_line) + "\n" +
                                           std::string(static_cast<size_t>(std::max(column - 1, 0)), ' ') + "^")),
      line_(line),
      column_(column),
      message_(message) {}

namespace {

// ---- tokens -----------------------------------------------------------------------------------

enum class Tok { Name,
                 Number,
                 String,
                 Punct,
                 End };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // String: the decoded contents
  size_t begin = 0;  // offsets into the line
  size_t end = 0;
};

constexpr std::string_view kPuncts[] = {"...", "**", "//", "<=", ">=", "==", "!=", "<<", ">>", "(", ")", "[", "]",
                                        ",", ":", "=", ".", "+", "-", "*", "/", "@", "<", ">", "~",
                                        "&", "|", "^", "%"};

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// ---- the parser -------------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(std::string_view text) {
    size_t start = 0;
    while (start <= text.size()) {
      size_t nl = text.find('\n', start);
      std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lines_.push_back(line);
      if (nl == std::string_view::npos) break;
      start = nl + 1;
    }
    // Several ops may share a target or symbol (overloads such as max(x) / max(x, dim)): the
    // first, in registry order, whose schema binds the arguments is the one meant.
    for (const OpDef& op : all_ops()) {
      if (op.style == PrintStyle::Infix) infix_[op.symbol].push_back(op.id);
      if (op.style == PrintStyle::Prefix) prefix_[op.symbol].push_back(op.id);
      if (op.style == PrintStyle::Subscript) subscript_.push_back(op.id);
    }
  }

  Graph run() {
    bool seen_header = false, seen_return = false;
    for (size_t i = 0; i < lines_.size(); ++i) {
      lineno_ = static_cast<int>(i) + 1;
      line_ = lines_[i];
      lex();
      if (toks_.size() == 1) continue;  // blank or comment
      pos_ = 0;
      bool indented = line_[0] == ' ' || line_[0] == '\t';
      if (!seen_header) {
        if (indented) fail(toks_[0], "expected 'def forward(self, ...):' before the body");
        header();
        seen_header = true;
        continue;
      }
      if (!indented) fail(toks_[0], "expected an indented statement of the body of forward()");
      if (seen_return) fail(toks_[0], "statement after return");
      seen_return = statement();
    }
    if (!seen_header) {
      lineno_ = 1;
      line_ = lines_.empty() ? std::string_view() : lines_[0];
      throw ParseError(1, 1, "expected 'def forward(self, ...):'", line_);
    }
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail_at(size_t offset, const std::string& msg) {
    throw ParseError(lineno_, static_cast<int>(offset) + 1, msg, line_);
  }
  [[noreturn]] void fail(const Token& t, const std::string& msg) { fail_at(t.begin, msg); }

  void lex() {
    toks_.clear();
    size_t i = 0;
    while (i < line_.size()) {
      char c = line_[i];
      if (c == ' ' || c == '\t') {
        ++i;
        continue;
      }
      if (c == '#') break;
      Token t;
      t.begin = i;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (i < line_.size() && is_name_char(line_[i])) ++i;
        t.kind = Tok::Name;
        t.text = std::string(line_.substr(t.begin, i - t.begin));
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '.' && i + 1 < line_.size() && std::isdigit(static_cast<unsigned char>(line_[i + 1])))) {
        while (i < line_.size() && (std::isdigit(static_cast<unsigned char>(line_[i])) || line_[i] == '.')) ++i;
        if (i < line_.size() && (line_[i] == 'e' || line_[i] == 'E')) {
          ++i;
          if (i < line_.size() && (line_[i] == '+' || line_[i] == '-')) ++i;
          while (i < line_.size() && std::isdigit(static_cast<unsigned char>(line_[i]))) ++i;
        }
        t.kind = Tok::Number;
        t.text = std::string(line_.substr(t.begin, i - t.begin));
      } else if (c == '\'' || c == '"') {
        t.kind = Tok::String;
        ++i;
        while (true) {
          if (i >= line_.size()) fail_at(t.begin, "unterminated string");
          char d = line_[i++];
          if (d == c) break;
          if (d == '\\' && i < line_.size()) {
            char e = line_[i++];
            t.text += e == 'n' ? '\n' : e == 't' ? '\t'
                                    : e == 'r'   ? '\r'
                                                 : e;
          } else {
            t.text += d;
          }
        }
      } else {
        std::string_view p;
        for (std::string_view cand : kPuncts)
          if (line_.substr(i, cand.size()) == cand) {
            p = cand;
            break;
          }
        if (p.empty()) fail_at(i, std::string("unexpected character '") + c + "'");
        t.kind = Tok::Punct;
        t.text = std::string(p);
        i += p.size();
      }
      t.end = i;
      toks_.push_back(std::move(t));
    }
    Token end;
    end.begin = end.end = line_.size();
    toks_.push_back(std::move(end));
  }

  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  bool is(std::string_view punct, size_t k = 0) const { return peek(k).kind == Tok::Punct && peek(k).text == punct; }
  bool is_name(std::string_view name) const { return peek().kind == Tok::Name && peek().text == name; }
  const Token& expect(std::string_view punct) {
    if (!is(punct)) fail(peek(), "expected '" + std::string(punct) + "'" + found());
    return next();
  }
  const Token& expect_name(std::string_view what) {
    if (peek().kind != Tok::Name) fail(peek(), "expected " + std::string(what) + found());
    return next();
  }
  void expect_end() {
    if (peek().kind != Tok::End) fail(peek(), "unexpected '" + std::string(line_.substr(peek().begin, peek().end - peek().begin)) + "' at the end of the statement");
  }
  std::string found() const {
    if (peek().kind == Tok::End) return ", found the end of the line";
    return ", found '" + std::string(line_.substr(peek().begin, peek().end - peek().begin)) + "'";
  }

  // `def forward(self, x: "f32[4]", ...):`
  void header() {
    if (!is_name("def")) fail(peek(), "expected 'def forward(self, ...):'");
    next();
    if (!is_name("forward")) fail(peek(), "expected 'forward'" + found());
    next();
    expect("(");
    if (!is_name("self")) fail(peek(), "expected 'self' as the first parameter" + found());
    next();
    while (is(",")) {
      next();
      if (is(")")) break;
      const Token& name = expect_name("a parameter name");
      check_new_name(name);
      expect(":");
      ValueMeta meta = annotation();
      g_.add_placeholder(name.text, std::move(meta));
      names_[name.text] = static_cast<NodeId>(g_.size() - 1);
    }
    expect(")");
    expect(":");
    expect_end();
  }

  ValueMeta annotation() {
    const Token& t = peek();
    if (t.kind != Tok::String) fail(t, "expected a quoted type annotation" + found());
    next();
    try {
      return parse_meta(t.text);
    } catch (const ParseError& e) {  // column within the annotation -> column within the line
      fail_at(t.begin + static_cast<size_t>(e.column()), e.message());
    }
  }

  void check_new_name(const Token& name) {
    if (names_.count(name.text)) fail(name, "name '" + name.text + "' is already defined");
    if (Graph::is_reserved_name(name.text)) fail(name, "'" + name.text + "' is reserved and cannot name a node");
  }

  // Returns true for `return ...`.
  bool statement() {
    if (is_name("return")) {
      next();
      Value out = value();
      expect_end();
      g_.set_output(std::move(out));
      return true;
    }
    const Token& name = expect_name("a node name or 'return'");
    check_new_name(name);
    expect(":");
    meta_ = annotation();
    name_ = name.text;
    expect("=");
    NodeId id = rhs();
    expect_end();
    FF_CHECK(g_.node(id).name == name_, "parsed node got another name than written");
    names_[name_] = id;
    return false;
  }

  NodeId add_call(const std::vector<OpId>& candidates, const std::vector<Value>& positional,
                  const std::vector<std::pair<std::string, Value>>& keywords, const Token& at) {
    std::string first_error;
    for (OpId op : candidates) {
      const OpDef& d = op_def(op);
      if (d.positional >= 0) continue;  // a replay variant: the overload it belongs to binds
      std::string error;
      if (auto bound = bind_call(d, positional, keywords, g_, &error)) {
        // An op resolved from torch's schemas replays the positional arguments written.
        if (d.is_open()) op = op_with_positional(op, static_cast<int>(std::min(positional.size(), d.schema.params.size())));
        return g_.add_call(op, std::move(*bound), meta_, name_);
      }
      if (first_error.empty()) first_error = error;
    }
    fail(at, first_error);
  }

  // Hand-written ops first, then ops registered at run time (resolved from torch's schemas when
  // this process has not seen the target yet).
  const std::vector<OpId>* ops_for_target(const std::string& target) {
    auto it = by_target_.find(target);
    if (it == by_target_.end()) it = by_target_.emplace(target, resolve_target(target)).first;
    return it->second.empty() ? nullptr : &it->second;
  }

  // The right-hand side of `name: "meta" = ...`.
  NodeId rhs() {
    const Token& first = peek();
    // Operator symbols are punctuation, or keywords (`not`, `is`) where the registry has such ops.
    if ((first.kind == Tok::Punct || first.kind == Tok::Name) && prefix_.count(first.text) && !names_.count(first.text) &&
        peek(1).kind != Tok::Number) {
      next();
      Value operand = value();
      return add_call(prefix_.at(first.text), {operand}, {}, first);
    }
    if (first.kind == Tok::Name && !names_.count(first.text) && first.text != "float" && first.text != "slice" &&
        first.text != "None" && first.text != "True" && first.text != "False") {
      std::string target = next().text;
      while (is(".")) {
        next();
        target += "." + expect_name("a name").text;
      }
      if (!is("(")) {
        if (target.find('.') == std::string::npos) fail(first, "name '" + target + "' is not defined");
        fail(peek(), "expected '('" + found());
      }
      const std::vector<OpId>* op = ops_for_target(target);
      if (!op) fail(first, "unknown function '" + target + "'");
      std::vector<Value> positional;
      std::vector<std::pair<std::string, Value>> keywords;
      call_args(&positional, &keywords);
      return add_call(*op, positional, keywords, first);
    }
    Value lhs = value();
    const Token& t = peek();
    if (is(".")) {
      next();
      const Token& method = expect_name("a method name");
      const std::vector<OpId>* op = ops_for_target("torch.Tensor." + method.text);
      if (!op) fail(method, "unknown method '" + method.text + "' (no op has the target torch.Tensor." + method.text + ")");
      if (!is("(")) fail(peek(), "expected '('" + found());
      std::vector<Value> positional = {lhs};
      std::vector<std::pair<std::string, Value>> keywords;
      call_args(&positional, &keywords);
      return add_call(*op, positional, keywords, method);
    }
    if (is("[")) {
      next();
      Value index = subscript_index();
      if (lhs.is_node() && g_.node(lhs.node).meta.kind == ValueMeta::Kind::Tuple && index.kind == Value::Kind::Int)
        return tuple_getitem(lhs.node, index.i, t);
      if (subscript_.empty()) fail(t, "no op prints as a subscript");
      return add_call(subscript_, {lhs, index}, {}, t);
    }
    if ((t.kind == Tok::Punct || t.kind == Tok::Name) && infix_.count(t.text)) {
      next();
      Value rhs = value();
      return add_call(infix_.at(t.text), {lhs, rhs}, {}, t);
    }
    if (t.kind == Tok::End) fail(t, "expected an operator, a method call or a subscript after the operand");
    fail(t, "unknown operator '" + std::string(line_.substr(t.begin, t.end - t.begin)) + "'");
  }

  NodeId tuple_getitem(NodeId base, int64_t index, const Token& at) {
    size_t n = g_.node(base).meta.items.size();
    if (index < 0 || static_cast<size_t>(index) >= n)
      fail(at, "index " + std::to_string(index) + " is out of range for '" + g_.node(base).name + "', a tuple of " +
                   std::to_string(n));
    NodeId id = g_.add_getitem(base, index, name_);
    g_.mutable_node(id).meta = meta_;  // the annotation, as for every node; the verifier checks it
    return id;
  }

  // After '(': arguments up to and including ')'.
  void call_args(std::vector<Value>* positional, std::vector<std::pair<std::string, Value>>* keywords) {
    expect("(");
    while (!is(")")) {
      if (peek().kind == Tok::Name && is("=", 1)) {
        std::string name = next().text;
        next();
        for (const auto& kw : *keywords)
          if (kw.first == name) fail(toks_[pos_ - 2], "keyword argument '" + name + "' repeated");
        keywords->emplace_back(name, value());
      } else {
        if (!keywords->empty()) fail(peek(), "positional argument follows keyword argument");
        positional->push_back(value());
      }
      if (!is(",")) break;
      next();
    }
    expect(")");
  }

  // After '[': the index up to and including ']'.
  Value subscript_index() {
    if (is("]")) fail(peek(), "empty subscript");
    std::vector<Value> items;
    bool comma = false;
    while (true) {
      items.push_back(subscript_item());
      if (!is(",")) break;
      next();
      comma = true;
      if (is("]")) break;
    }
    expect("]");
    if (!comma) return std::move(items[0]);
    return Value::tuple(std::move(items));
  }

  Value subscript_item() {
    Value start;
    if (!is(":")) start = value();
    if (!is(":")) return start;
    next();
    Value stop, step;
    if (!is(":") && !is(",") && !is("]")) stop = value();
    if (is(":")) {
      next();
      if (!is(",") && !is("]")) step = value();
    }
    return Value::slice(std::move(start), std::move(stop), std::move(step));
  }

  Value constant(size_t begin, size_t end, const Token& at, const char* what) {
    bool ok = false;
    Value v = parse_constant(line_.substr(begin, end - begin), &ok);
    if (!ok) fail(at, std::string("cannot read ") + what + " '" + std::string(line_.substr(begin, end - begin)) + "'");
    return v;
  }

  // An operand: a node name, a constant, or a list/tuple of operands.
  Value value() {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::End: fail(t, "expected a value, found the end of the line");
      case Tok::Number: next(); return constant(t.begin, t.end, t, "the number");
      case Tok::String: next(); return Value::of_str(t.text);
      case Tok::Punct: {
        if (t.text == "-" && peek(1).kind == Tok::Number) {
          next();
          const Token& num = next();
          return constant(t.begin, num.end, t, "the number");
        }
        if (t.text == "...") {
          next();
          return Value::ellipsis();
        }
        if (t.text == "[") {
          next();
          std::vector<Value> items;
          while (!is("]")) {
            items.push_back(value());
            if (!is(",")) break;
            next();
          }
          expect("]");
          return Value::list(std::move(items));
        }
        if (t.text == "(") {
          next();
          std::vector<Value> items;
          bool comma = false;
          while (!is(")")) {
            items.push_back(value());
            if (!is(",")) break;
            next();
            comma = true;
          }
          expect(")");
          if (items.size() == 1 && !comma) return std::move(items[0]);  // (x) is x
          return Value::tuple(std::move(items));
        }
        fail(t, "expected a value" + found());
      }
      case Tok::Name: break;
    }
    if (auto it = names_.find(t.text); it != names_.end()) {
      next();
      return Value::of_node(it->second);
    }
    if (t.text == "slice" && is("(", 1)) {
      next();
      next();
      Value a = value();
      expect(",");
      Value b = value();
      expect(",");
      Value c = value();
      expect(")");
      return Value::slice(std::move(a), std::move(b), std::move(c));
    }
    // Other constants (None, True, torch.float32, torch.device('cuda:0'), float('inf') ...) are
    // read by parse_constant, so graph code and schema defaults share one syntax.
    next();
    size_t end = t.end;
    bool dotted = false;
    while (is(".") && peek(1).kind == Tok::Name) {
      next();
      end = next().end;
      dotted = true;
    }
    if (is("(")) {
      int depth = 0;
      do {
        if (peek().kind == Tok::End) fail(peek(), "expected ')'" + found());
        if (is("(")) ++depth;
        if (is(")")) --depth;
        end = next().end;
      } while (depth > 0);
    } else if (!dotted && t.text != "None" && t.text != "True" && t.text != "False") {
      fail(t, "name '" + t.text + "' is not defined");
    }
    return constant(t.begin, end, t, "the constant");
  }

  std::vector<std::string_view> lines_;
  std::string_view line_;
  int lineno_ = 0;
  std::vector<Token> toks_;
  size_t pos_ = 0;

  Graph g_;
  std::unordered_map<std::string, NodeId> names_;
  std::unordered_map<std::string, std::vector<OpId>> by_target_, infix_, prefix_;
  std::vector<OpId> subscript_;
  // The statement being read.
  std::string name_;
  ValueMeta meta_;
};

}  // namespace

Graph parse_graph(std::string_view text) { return Parser(text).run(); }

}  // namespace ff
