// Element types and devices, mirroring torch's ScalarType and Device without linking torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ff {

// X(enum name, torch attribute name, short form used in printed metadata, bytes per element)
// The order is torch's ScalarType order for the types we support.
#define FF_DTYPES(X)                      \
  X(UInt8, "uint8", "u8", 1)              \
  X(Int8, "int8", "i8", 1)                \
  X(Int16, "int16", "i16", 2)             \
  X(Int32, "int32", "i32", 4)             \
  X(Int64, "int64", "i64", 8)             \
  X(Float16, "float16", "f16", 2)         \
  X(Float32, "float32", "f32", 4)         \
  X(Float64, "float64", "f64", 8)         \
  X(Complex64, "complex64", "c64", 8)     \
  X(Complex128, "complex128", "c128", 16) \
  X(Bool, "bool", "b8", 1)                \
  X(BFloat16, "bfloat16", "bf16", 2)

enum class DType : uint8_t {
#define FF_DTYPE_ENUM(e, name, short_name, size) e,
  FF_DTYPES(FF_DTYPE_ENUM)
#undef FF_DTYPE_ENUM
};

constexpr int kNumDTypes = 12;

std::string_view dtype_name(DType t);        // "float32"
std::string_view dtype_short_name(DType t);  // "f32"
int dtype_size(DType t);
std::optional<DType> dtype_from_name(std::string_view name);        // accepts "float32" or "torch.float32"
std::optional<DType> dtype_from_short_name(std::string_view name);  // "f32"

bool is_floating(DType t);  // f16, bf16, f32, f64
bool is_complex(DType t);
bool is_integral(DType t, bool include_bool);
// torch's canCast(from, to), what an in-place or out= result may be stored as: no complex -> real,
// no floating -> integral, no non-bool -> bool.
bool can_cast(DType from, DType to);

// Type promotion category as torch uses it: bool < integral < floating < complex.
enum class TypeCategory : uint8_t { Bool = 0,
                                    Integral = 1,
                                    Floating = 2,
                                    Complex = 3 };
TypeCategory type_category(DType t);

// torch.promote_types(a, b).
DType promote_types(DType a, DType b);

struct Device {
  enum class Type : uint8_t { CPU,
                              CUDA,
                              Meta };
  Type type = Type::CPU;
  int index = -1;  // -1: no index given ("cuda" rather than "cuda:0")

  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0", "meta"
  static std::optional<Device> parse(std::string_view s);
};

}  // namespace ff
