#include "graph/dtype.h"

#include <array>

namespace ff {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::string_view short_name;
  int size;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
#define FF_DTYPE_INFO(e, name, short_name, size) {name, short_name, size},
    FF_DTYPES(FF_DTYPE_INFO)
#undef FF_DTYPE_INFO
}};

}  // namespace

std::string_view dtype_name(DType t) { return kInfo[static_cast<int>(t)].name; }
std::string_view dtype_short_name(DType t) { return kInfo[static_cast<int>(t)].short_name; }
int dtype_size(DType t) { return kInfo[static_cast<int>(t)].size; }

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (int i = 0; i < kNumDTypes; ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  // torch's aliases
  if (name == "float") return DType::Float32;
  if (name == "double") return DType::Float64;
  if (name == "half") return DType::Float16;
  if (name == "long") return DType::Int64;
  if (name == "int") return DType::Int32;
  if (name == "short") return DType::Int16;
  return std::nullopt;
}

std::optional<DType> dtype_from_short_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kInfo[i].short_name == name) return static_cast<DType>(i);
  return std::nullopt;
}

bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
bool is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }
bool is_integral(DType t, bool include_bool) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
      return true;
    case DType::Bool:
      return include_bool;
    default:
      return false;
  }
}

bool can_cast(DType from, DType to) {
  if (is_complex(from) && !is_complex(to)) return false;
  if (is_floating(from) && is_integral(to, /*include_bool=*/true)) return false;
  return from == DType::Bool || to != DType::Bool;
}

TypeCategory type_category(DType t) {
  if (t == DType::Bool) return TypeCategory::Bool;
  if (is_complex(t)) return TypeCategory::Complex;
  if (is_floating(t)) return TypeCategory::Floating;
  return TypeCategory::Integral;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // torch's promotion table (c10/core/ScalarType.cpp), rows and columns in FF_DTYPES order:
  // u1 i1 i2 i4 i8 f2 f4 f8 c4 c8 b1 bf
  using D = DType;
  constexpr D u1 = D::UInt8, i1 = D::Int8, i2 = D::Int16, i4 = D::Int32, i8 = D::Int64, f2 = D::Float16,
              f4 = D::Float32, f8 = D::Float64, c4 = D::Complex64, c8 = D::Complex128, b1 = D::Bool,
              bf = D::BFloat16;
  static constexpr D table[kNumDTypes][kNumDTypes] = {
      /* u1 */ {u1, i2, i2, i4, i8, f2, f4, f8, c4, c8, u1, bf},
      /* i1 */ {i2, i1, i2, i4, i8, f2, f4, f8, c4, c8, i1, bf},
      /* i2 */ {i2, i2, i2, i4, i8, f2, f4, f8, c4, c8, i2, bf},
      /* i4 */ {i4, i4, i4, i4, i8, f2, f4, f8, c4, c8, i4, bf},
      /* i8 */ {i8, i8, i8, i8, i8, f2, f4, f8, c4, c8, i8, bf},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f4, f8, c4, c8, f2, f4},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f8, c4, c8, f4, f4},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, c8, c8, f8, f8},
      /* c4 */ {c4, c4, c4, c4, c4, c4, c4, c8, c4, c8, c4, c4},
      /* c8 */ {c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8},
      /* b1 */ {u1, i1, i2, i4, i8, f2, f4, f8, c4, c8, b1, bf},
      /* bf */ {bf, bf, bf, bf, bf, f4, f4, f8, c4, c8, bf, bf},
  };
  return table[static_cast<int>(a)][static_cast<int>(b)];
}

std::string Device::str() const {
  std::string s;
  switch (type) {
    case Type::CPU: s = "cpu"; break;
    case Type::CUDA: s = "cuda"; break;
    case Type::Meta: s = "meta"; break;
  }
  if (index >= 0) s += ":" + std::to_string(index);
  return s;
}

std::optional<Device> Device::parse(std::string_view s) {
  Device d;
  auto colon = s.find(':');
  std::string_view type = s.substr(0, colon);
  if (type == "cpu") d.type = Type::CPU;
  else if (type == "cuda") d.type = Type::CUDA;
  else if (type == "meta") d.type = Type::Meta;
  else return std::nullopt;
  if (colon != std::string_view::npos) {
    std::string_view idx = s.substr(colon + 1);
    if (idx.empty()) return std::nullopt;
    int v = 0;
    for (char c : idx) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    d.index = v;
  }
  return d;
}

}  // namespace ff
