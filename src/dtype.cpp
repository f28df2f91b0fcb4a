#include "tg/dtype.hpp"

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "tg/helpers.hpp"

namespace tg {

namespace {
struct Info { const char* cname; const char* pyname; int size; };
constexpr Info kInfo[] = {
    {"bool", "bool", 1},      {"char", "char", 1},       {"unsigned char", "uchar", 1}, {"short", "short", 2},
    {"unsigned short", "ushort", 2}, {"int", "int", 4}, {"unsigned int", "uint", 4}, {"long", "long", 8},
    {"unsigned long", "ulong", 8}, {"half", "half", 2}, {"__bf16", "bfloat16", 2}, {"float", "float", 4},
    {"double", "double", 8},  {"void", "void", 0}};
const Info& info(ScalarKind k) { return kInfo[static_cast<int>(k)]; }
}  // namespace

double const_to_double(const ConstType& v) {
  return std::visit([](auto x) { return static_cast<double>(x); }, v);
}
int64_t const_to_int(const ConstType& v) {
  if (auto d = std::get_if<double>(&v)) return std::isfinite(*d) ? static_cast<int64_t>(*d) : 0;
  return std::visit([](auto x) { return static_cast<int64_t>(x); }, v);
}
std::string const_str(const ConstType& v) {
  if (auto b = std::get_if<bool>(&v)) return *b ? "True" : "False";
  if (auto i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  double d = std::get<double>(v);
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  // shortest repr that round-trips, like Python
  for (int prec = 1; prec <= 17; prec++) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

int DType::scalar_size() const { return info(kind).size; }
int DType::itemsize() const { return info(kind).size * count; }
std::string DType::name() const {
  if (count == 1) return info(kind).cname;
  return std::string(info(kind).pyname) + std::to_string(count);
}
std::string DType::str() const {
  std::string s = std::string("dtypes.") + info(kind).pyname;
  if (count > 1) s += ".vec(" + std::to_string(count) + ")";
  if (ptr) s = "PtrDType(" + s + ")";
  return s;
}
bool DType::is_float() const { return kind >= ScalarKind::float16 && kind <= ScalarKind::float64; }
bool DType::is_unsigned() const {
  return kind == ScalarKind::uint8 || kind == ScalarKind::uint16 || kind == ScalarKind::uint32 || kind == ScalarKind::uint64;
}
bool DType::is_int() const { return kind >= ScalarKind::int8 && kind <= ScalarKind::uint64; }
DType DType::vec(int n) const {
  if (n < 2 || count != 1) throw Error("DType.vec: can't vectorize " + str() + " with size " + std::to_string(n));
  return DType(kind, static_cast<uint16_t>(n), ptr, local);
}
bool operator<(const DType& a, const DType& b) {
  if (a.kind != b.kind) return a.kind < b.kind;
  return a.count < b.count;
}

namespace dtypes {
DType default_float() {
  std::string f = getenv_str("DEFAULT_FLOAT", "");
  if (f.empty()) return float32;
  DType d = from_name(f);
  if (!d.is_float()) throw Error("DEFAULT_FLOAT=" + f + " is not a float dtype; use HALF, FLOAT32 or FLOAT64");
  return d;
}
DType default_int() { return int32; }
const DType* all() {
  static const DType a[] = {bool_, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, bfloat16, float32, float64};
  return a;
}
DType from_name(const std::string& n0) {
  std::string n;
  for (char c : n0) n += static_cast<char>(std::tolower(c));
  static const std::pair<const char*, DType> names[] = {
      {"bool", bool_}, {"int8", int8}, {"char", int8}, {"uint8", uint8}, {"uchar", uint8}, {"int16", int16},
      {"short", int16}, {"uint16", uint16}, {"ushort", uint16}, {"int32", int32}, {"int", int32}, {"uint32", uint32},
      {"uint", uint32}, {"int64", int64}, {"long", int64}, {"uint64", uint64}, {"ulong", uint64}, {"float16", float16},
      {"half", float16}, {"bfloat16", bfloat16}, {"float32", float32}, {"float", float32}, {"float64", float64},
      {"double", float64}};
  for (auto& [k, v] : names)
    if (n == k) return v;
  throw Error("dtype: unknown dtype name '" + n0 + "'; use one of bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64");
}

ConstType as_const(const ConstType& v, DType dt) {
  if (dt.is_bool()) return const_to_double(v) != 0;
  if (dt.is_float()) {
    double d = const_to_double(v);
    if (dt.scalar() == float32) return static_cast<double>(static_cast<float>(d));
    return d;
  }
  if (dt.is_int()) {
    int64_t x = const_to_int(v);
    int bits = dt.scalar_size() * 8;
    if (bits == 64) return x;
    uint64_t mask = (uint64_t{1} << bits) - 1;
    uint64_t u = static_cast<uint64_t>(x) & mask;
    if (!dt.is_unsigned() && (u >> (bits - 1))) return static_cast<int64_t>(u | ~mask);
    return static_cast<int64_t>(u);
  }
  return v;
}
ConstType min(DType dt) {
  if (dt.is_int()) return dt.is_unsigned() ? int64_t{0} : static_cast<int64_t>(~uint64_t{0} << (dt.scalar_size() * 8 - 1));
  if (dt.is_float()) return -INFINITY;
  return false;
}
ConstType max(DType dt) {
  if (dt.is_int()) {
    int bits = dt.scalar_size() * 8 - (dt.is_unsigned() ? 0 : 1);
    if (bits == 64) return static_cast<int64_t>(~uint64_t{0});   // uint64 max wraps in int64 storage
    return static_cast<int64_t>((uint64_t{1} << bits) - 1);
  }
  if (dt.is_float()) return INFINITY;
  return true;
}
}  // namespace dtypes

namespace {
// tinygrad 0.9.2's promotion lattice
const std::vector<DType>& parents(DType d) {
  using namespace dtypes;
  static const std::vector<DType> lattice[] = {
      {int8, uint8}, {int16}, {int16, uint16}, {int32}, {int32, uint32}, {int64}, {int64, uint64},
      {float16, bfloat16}, {float16, bfloat16}, {float32}, {float32}, {float64}, {}};
  return lattice[static_cast<int>(d.kind)];
}
void recursive_parents(DType d, std::set<int>& out) {
  out.insert(static_cast<int>(d.kind));
  for (auto p : parents(d)) recursive_parents(p, out);
}
}  // namespace

DType least_upper_dtype(std::initializer_list<DType> ds) {
  std::set<int> common;
  bool first = true;
  for (DType d : ds) {
    if (d.count != 1 || d.kind == ScalarKind::void_) throw Error("least_upper_dtype: needs scalar dtypes, got " + d.str());
    std::set<int> p;
    recursive_parents(d, p);
    if (first) common = p;
    else {
      std::set<int> keep;
      for (int x : common)
        if (p.count(x)) keep.insert(x);
      common = keep;
    }
    first = false;
  }
  if (common.empty()) throw Error("least_upper_dtype: no dtypes given");
  return DType(static_cast<ScalarKind>(*common.begin()));
}
DType least_upper_dtype(DType a, DType b) { return least_upper_dtype({a, b}); }
DType least_upper_float(DType dt) { return dt.is_float() ? dt : least_upper_dtype(dt, dtypes::float32); }
DType sum_acc_dtype(DType dt) {
  if (dt.is_unsigned()) return least_upper_dtype(dt, dtypes::uint32);
  if (dt.is_int() || dt.is_bool()) return least_upper_dtype(dt, dtypes::int32);
  return least_upper_dtype(dt, dtypes::float32);
}

}  // namespace tg
