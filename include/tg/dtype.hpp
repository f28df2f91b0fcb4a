// Data types and tinygrad 0.9.2's promotion lattice.
#pragma once
#include <cstdint>
#include <string>
#include <variant>

namespace tg {

// A Python-like scalar: bool, int or float (tinygrad's ConstType).
using ConstType = std::variant<bool, int64_t, double>;
double const_to_double(const ConstType& v);
int64_t const_to_int(const ConstType& v);
std::string const_str(const ConstType& v);   // Python repr: True, 3, 2.0, inf, nan

// Scalar kinds in tinygrad's priority order (the enum value is the priority).
enum class ScalarKind : uint8_t { bool_, int8, uint8, int16, uint16, int32, uint32, int64, uint64,
                                  float16, bfloat16, float32, float64, void_ };

struct DType {
  ScalarKind kind = ScalarKind::void_;
  uint16_t count = 1;   // vector width (float4 has count 4)
  bool ptr = false;     // pointer to this type (buffers in kernels)
  bool local = false;   // pointer into local/shared memory

  constexpr DType() = default;
  constexpr DType(ScalarKind k, uint16_t c = 1, bool p = false, bool l = false) : kind(k), count(c), ptr(p), local(l) {}

  int priority() const { return static_cast<int>(kind); }
  int itemsize() const;              // bytes, times count
  int scalar_size() const;           // bytes of one element
  std::string name() const;          // C name as tinygrad: "float", "unsigned char", "float4"
  std::string str() const;           // "dtypes.float", "dtypes.float.vec(4)", "PtrDType(dtypes.float)"
  bool is_float() const;
  bool is_int() const;               // signed or unsigned
  bool is_unsigned() const;
  bool is_bool() const { return kind == ScalarKind::bool_; }
  DType scalar() const { return DType(kind); }
  DType vec(int n) const;            // throws when n < 2 or already a vector
  DType ptr_to(bool local = false) const { return DType(kind, count, true, local); }
  DType base() const { return DType(kind, count); }   // drops the pointer

  friend bool operator==(const DType& a, const DType& b) {
    return a.kind == b.kind && a.count == b.count && a.ptr == b.ptr && a.local == b.local;
  }
  friend bool operator!=(const DType& a, const DType& b) { return !(a == b); }
  friend bool operator<(const DType& a, const DType& b);   // tinygrad's (priority, itemsize, ...) order
  size_t hash() const { return (size_t(kind) << 20) ^ (size_t(count) << 2) ^ (ptr << 1) ^ local; }
};

namespace dtypes {
inline constexpr DType bool_{ScalarKind::bool_};
inline constexpr DType int8{ScalarKind::int8}, uint8{ScalarKind::uint8};
inline constexpr DType int16{ScalarKind::int16}, uint16{ScalarKind::uint16};
inline constexpr DType int32{ScalarKind::int32}, uint32{ScalarKind::uint32};
inline constexpr DType int64{ScalarKind::int64}, uint64{ScalarKind::uint64};
inline constexpr DType float16{ScalarKind::float16}, bfloat16{ScalarKind::bfloat16};
inline constexpr DType float32{ScalarKind::float32}, float64{ScalarKind::float64};
inline constexpr DType void_{ScalarKind::void_};
// aliases
inline constexpr DType half = float16, float_ = float32, double_ = float64;
inline constexpr DType char_ = int8, uchar = uint8, short_ = int16, ushort = uint16;
inline constexpr DType int_ = int32, uint = uint32, long_ = int64, ulong = uint64;

DType default_float();   // float32 unless DEFAULT_FLOAT says otherwise
DType default_int();     // int32
DType from_name(const std::string& name);   // "float32", "float", "half", ...; throws tg::Error
const DType* all();      // the 13 scalar dtypes in priority order
inline constexpr int num_dtypes = 13;

// The value as the dtype's Python type: int for ints (wrapped to the width), float for floats, bool.
ConstType as_const(const ConstType& v, DType dt);
ConstType min(DType dt);   // -inf for floats, False for bool
ConstType max(DType dt);
}  // namespace dtypes

DType least_upper_dtype(std::initializer_list<DType> ds);
DType least_upper_dtype(DType a, DType b);
DType least_upper_float(DType dt);
DType sum_acc_dtype(DType dt);

}  // namespace tg
