#include "graph/op_registry.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "graph/meta_rules.h"
#include "graph/op.h"
#include "src/base/errors.h"

namespace ff {
namespace {

std::vector<OpDef> build_ops() {
  std::vector<OpDef> ops;
#define FF_OP(name_, target_, style_, symbol_, schema_, meta_, traits_) \
  {                                                                     \
    OpDef d;                                                            \
    d.id = static_cast<OpId>(ops.size());                               \
    d.name = #name_;                                                    \
    d.target = target_;                                                 \
    d.style = PrintStyle::style_;                                       \
    d.symbol = symbol_;                                                 \
    d.schema = parse_schema(schema_);                                   \
    d.meta = meta_;                                                     \
    d.traits = traits_;                                                 \
    ops.push_back(std::move(d));                                        \
  }
#include "graph/ops.def"
#undef FF_OP
  return ops;
}

struct Tables {
  std::vector<OpDef> ops = build_ops();
  std::unordered_map<std::string, OpId> by_name;
  std::unordered_map<std::string, OpId> by_target;
  Tables() {
    // graph/op.h numbers `enum class Op` from the same list.
    FF_CHECK(ops.size() == kOpCount, "graph/ops.def and enum class Op disagree");
    for (const OpDef& d : ops) {
      FF_CHECK(by_name.emplace(d.name, d.id).second, "duplicate op name " + d.name);
      by_target.emplace(d.target, d.id);  // first op with a target is its canonical owner
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// The ops registered at run time. NB: a fixed array of pointers, filled in order and published by
// `count`, so op_def() of a registered id needs no lock and an OpDef never moves; the maps are
// only read and written under `mu`.
struct OpenOps {
  std::unique_ptr<std::unique_ptr<const OpDef>[]> defs{new std::unique_ptr<const OpDef>[kMaxOpenOps]};
  std::atomic<size_t> count{0};
  std::mutex mu;
  std::unordered_map<std::string, OpId> by_name;
  std::unordered_map<std::string, std::vector<OpId>> by_target;
  OpResolver resolver = nullptr;
};

OpenOps& open_ops() {
  static OpenOps* o = new OpenOps();  // NB: leaked on purpose; op ids outlive static destruction
  return *o;
}

const char* type_word(ParamType t) {
  switch (t) {
    case ParamType::Tensor: return "a tensor";
    case ParamType::TensorList:
    case ParamType::TensorVarargs: return "a list of tensors";
    case ParamType::Scalar: return "a number or tensor";
    case ParamType::Int: return "an int";
    case ParamType::IntList:
    case ParamType::IntVarargs: return "a list of ints";
    case ParamType::Float: return "a float";
    case ParamType::Bool: return "a bool";
    case ParamType::Str: return "a str";
    case ParamType::ScalarType: return "a dtype";
    case ParamType::Device: return "a device";
    case ParamType::Layout: return "a layout";
    case ParamType::MemoryFormat: return "a memory format";
    case ParamType::Any: return "anything";
  }
  return "?";
}

bool is_tensor_value(const Value& v, const Graph& g) {
  return v.is_node() && g.node(v.node).meta.is_tensor();
}
bool is_int_value(const Value& v, const Graph& g) {
  if (v.kind == Value::Kind::Int) return true;
  return v.is_node() && g.node(v.node).meta.kind == ValueMeta::Kind::Int;
}

// Does `v` fit parameter type `p`? (Values are converted where torch converts: a tuple for int[].)
bool accepts(const ParamSpec& p, const Value& v, const Graph& g) {
  if (v.is_none()) return p.optional || p.type == ParamType::Any;
  switch (p.type) {
    case ParamType::Any: return true;
    case ParamType::Tensor: return is_tensor_value(v, g);
    case ParamType::TensorList:
    case ParamType::TensorVarargs:
      if (!v.is_sequence()) return false;
      for (const Value& item : v.items)
        if (!is_tensor_value(item, g)) return false;
      return true;
    case ParamType::Scalar:
      return v.is_number() || (v.is_node() && g.node(v.node).meta.kind != ValueMeta::Kind::Tuple);
    case ParamType::Int: return is_int_value(v, g) || v.kind == Value::Kind::Bool;
    case ParamType::IntList:
    case ParamType::IntVarargs:
      if (is_int_value(v, g)) return true;  // torch accepts a single int for int[] parameters
      if (!v.is_sequence()) return false;
      for (const Value& item : v.items)
        if (!is_int_value(item, g)) return false;
      return true;
    case ParamType::Float: return v.is_number();
    case ParamType::Bool: return v.kind == Value::Kind::Bool;
    case ParamType::Str: return v.kind == Value::Kind::Str;
    case ParamType::ScalarType: return v.kind == Value::Kind::DType;
    case ParamType::Device: return v.kind == Value::Kind::Device || v.kind == Value::Kind::Str;
    case ParamType::Layout: return v.kind == Value::Kind::Layout;
    case ParamType::MemoryFormat: return v.kind == Value::Kind::MemoryFormat;
  }
  return false;
}

// Canonical form of an accepted value: int[] parameters hold Lists. An int passed for a float
// parameter becomes a float, except for ops resolved through torch's schemas: their callable is
// torch's overloaded one, which picks its overload (and result dtype) by the Python type
// (torch.tensor(5) is int64, torch.tensor(5.0) float32).
Value canonical(const OpDef& op, const ParamSpec& p, Value v) {
  if ((p.type == ParamType::IntList || p.type == ParamType::IntVarargs) && !v.is_none() && !v.is_sequence())
    return Value::list({std::move(v)});
  if ((p.type == ParamType::IntList || p.type == ParamType::IntVarargs || p.type == ParamType::TensorList ||
       p.type == ParamType::TensorVarargs) &&
      v.kind == Value::Kind::Tuple)
    v.kind = Value::Kind::List;
  if (p.type == ParamType::Float && v.kind == Value::Kind::Int && !op.is_open()) return Value::of_float(double(v.i));
  // A device given as a string ('cpu', 'cuda:0') is one: the meta fallback replaces devices.
  if (p.type == ParamType::Device && v.kind == Value::Kind::Str)
    if (auto d = Device::parse(v.s)) return Value::of_device(*d);
  return v;
}

}  // namespace

const std::vector<OpDef>& all_ops() { return tables().ops; }

size_t op_count() { return tables().ops.size() + open_ops().count.load(std::memory_order_acquire); }

bool is_op(OpId id) { return id >= 0 && static_cast<size_t>(id) < op_count(); }

const OpDef& op_def(OpId id) {
  const auto& ops = tables().ops;
  if (id >= 0 && static_cast<size_t>(id) < ops.size()) return ops[static_cast<size_t>(id)];
  FF_CHECK(is_op(id), "bad op id " + std::to_string(id));
  return *open_ops().defs[static_cast<size_t>(id) - ops.size()];
}

std::optional<OpId> op_by_name(std::string_view name) {
  auto it = tables().by_name.find(std::string(name));
  if (it != tables().by_name.end()) return it->second;
  OpenOps& o = open_ops();
  std::lock_guard<std::mutex> lock(o.mu);
  auto dyn = o.by_name.find(std::string(name));
  if (dyn == o.by_name.end()) return std::nullopt;
  return dyn->second;
}

std::optional<OpId> op_by_target(std::string_view target) {
  std::vector<OpId> ops = ops_with_target(target);
  if (ops.empty()) return std::nullopt;
  return ops.front();
}

std::vector<OpId> ops_with_target(std::string_view target) {
  std::vector<OpId> out;
  for (const OpDef& d : tables().ops)
    if (d.target == target) out.push_back(d.id);
  OpenOps& o = open_ops();
  std::lock_guard<std::mutex> lock(o.mu);
  auto it = o.by_target.find(std::string(target));
  if (it != o.by_target.end()) out.insert(out.end(), it->second.begin(), it->second.end());
  return out;
}

namespace {

// Registers `def`; an op of the same name already registered is returned instead when
// `reuse_existing` (and is an error otherwise).
OpId register_open_op(OpDef def, bool reuse_existing) {
  OpenOps& o = open_ops();
  std::lock_guard<std::mutex> lock(o.mu);
  if (auto it = o.by_name.find(def.name); it != o.by_name.end() && reuse_existing) return it->second;
  FF_CHECK(!tables().by_name.count(def.name) && !o.by_name.count(def.name), "duplicate op name " + def.name);
  size_t n = o.count.load(std::memory_order_relaxed);
  if (n == kMaxOpenOps) throw Unsupported("framefuse's op registry is full (" + std::to_string(kMaxOpenOps) + " ops registered at run time)");
  def.id = static_cast<OpId>(tables().ops.size() + n);
  o.by_name.emplace(def.name, def.id);
  o.by_target[def.target].push_back(def.id);
  OpId id = def.id;
  o.defs[n] = std::make_unique<const OpDef>(std::move(def));
  o.count.store(n + 1, std::memory_order_release);
  return id;
}

}  // namespace

OpId register_op(OpDef def) { return register_open_op(std::move(def), false); }

OpId op_with_positional(OpId op, int count) {
  const OpDef& base = op_def(op);
  FF_CHECK(base.is_open() && base.positional < 0, "op_with_positional of " + base.name);
  OpDef variant = base;
  variant.name = base.name + "/" + std::to_string(count);
  variant.positional = count;
  variant.overload = op;
  return register_open_op(std::move(variant), true);
}

void set_op_resolver(OpResolver resolver) {
  OpenOps& o = open_ops();
  std::lock_guard<std::mutex> lock(o.mu);
  o.resolver = resolver;
}

std::vector<OpId> resolve_target(std::string_view target) {
  std::vector<OpId> ops = ops_with_target(target);
  if (!ops.empty()) return ops;
  OpResolver resolver;
  {
    OpenOps& o = open_ops();
    std::lock_guard<std::mutex> lock(o.mu);
    resolver = o.resolver;
  }
  return resolver ? resolver(target) : ops;
}

const Value& MetaContext::arg(std::string_view name) const {
  int i = op.schema.index_of(name);
  FF_CHECK(i >= 0, "op " + op.name + " has no parameter " + std::string(name));
  return args[static_cast<size_t>(i)];
}

const TensorMeta& MetaContext::tensor(std::string_view name) const {
  const Value& v = arg(name);
  if (!v.is_node() || !graph.node(v.node).meta.is_tensor())
    throw MetaError(op.name + "(): argument '" + std::string(name) + "' must be a tensor");
  return graph.node(v.node).meta.tensor;
}

std::optional<std::vector<Value>> bind_call(const OpDef& op, const std::vector<Value>& positional,
                                            const std::vector<std::pair<std::string, Value>>& keywords,
                                            const Graph& graph, std::string* error) {
  const auto& params = op.schema.params;
  std::vector<std::optional<Value>> bound(params.size());
  size_t pi = 0;
  for (size_t ai = 0; ai < positional.size(); ++ai) {
    if (pi >= params.size() || params[pi].kwarg_only) {
      *error = op.name + "() takes " + std::to_string(pi) + " positional arguments but " +
               std::to_string(positional.size()) + " were given";
      return std::nullopt;
    }
    const ParamSpec& p = params[pi];
    if (p.type == ParamType::IntVarargs || p.type == ParamType::TensorVarargs) {
      // x.view(2, 3) and x.view((2, 3)) are the same call (so are einsum(eq, a, b) and einsum(eq, [a, b])).
      if (ai + 1 == positional.size() && positional[ai].is_sequence()) {
        bound[pi] = positional[ai];
      } else {
        std::vector<Value> rest(positional.begin() + static_cast<long>(ai), positional.end());
        bound[pi] = Value::list(std::move(rest));
      }
      ++pi;
      break;
    }
    bound[pi++] = positional[ai];
  }
  for (const auto& [name, value] : keywords) {
    int i = op.schema.index_of(name);
    if (i < 0) {
      *error = op.name + "() got an unexpected keyword argument '" + name + "'";
      return std::nullopt;
    }
    if (bound[static_cast<size_t>(i)].has_value()) {
      *error = op.name + "() got multiple values for argument '" + name + "'";
      return std::nullopt;
    }
    bound[static_cast<size_t>(i)] = value;
  }
  std::vector<Value> out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    if (!bound[i].has_value()) {
      if (!p.has_default) {
        *error = op.name + "() missing required argument '" + p.name + "'";
        return std::nullopt;
      }
      out.push_back(p.default_value);
      continue;
    }
    if (!accepts(p, *bound[i], graph)) {
      *error = op.name + "(): argument '" + p.name + "' must be " + type_word(p.type);
      return std::nullopt;
    }
    out.push_back(canonical(op, p, std::move(*bound[i])));
  }
  return out;
}

CallArgs call_args(const OpDef& op, const std::vector<Value>& bound) {
  CallArgs ca;
  const auto& params = op.schema.params;
  bool positional = true;
  // NB: a reduction's keepdim is passed with its dim, None included: torch picks the overload by
  // the names it is given (torch.sum(x, keepdim=True) matches none of sum's; with dim=None it is
  // sum.dim_IntList).
  int dim_left_out = -1;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    bool is_default = p.has_default && bound[i] == p.default_value;
    if (op.positional >= 0) {
      positional = static_cast<int>(i) < op.positional;
      if (positional) is_default = false;
    }
    if (p.kwarg_only || is_default) positional = false;
    if (positional) {
      ca.positional.push_back(&bound[i]);
    } else if (!is_default) {
      if (p.name == "keepdim" && dim_left_out >= 0) ca.keywords.emplace_back("dim", &bound[static_cast<size_t>(dim_left_out)]);
      ca.keywords.emplace_back(p.name, &bound[i]);
    } else if (p.name == "dim" && !p.kwarg_only && bound[i].is_none()) {
      dim_left_out = static_cast<int>(i);
    }
  }
  return ca;
}

std::optional<ValueMeta> infer_meta(const OpDef& op, const std::vector<Value>& bound, const Graph& graph) {
  if (op.meta == nullptr) return std::nullopt;
  MetaContext ctx{op, bound, graph};
  return op.meta(ctx);
}

}  // namespace ff
