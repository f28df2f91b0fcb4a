// The conformance harness: data generation, running both sides, comparison, the summary line.
#include "harness.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <random>
#include <sstream>

namespace conf {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

namespace {

struct Counts { int passed = 0, failed = 0, skipped = 0; };
Counts& counts() { static Counts c; return c; }

// Prints the suite-wide summary once all TESTs ran (also with --gtest_filter).
class Summary : public testing::Environment {
 public:
  void TearDown() override {
    auto& c = counts();
    std::cout << "conformance: " << c.passed << " passed, " << c.failed << " failed, " << c.skipped << " skipped"
              << std::endl;
  }
};
const bool summary_registered = (testing::AddGlobalTestEnvironment(new Summary), true);

bool is_float(Kind k) { return k == Kind::F32 || k == Kind::F16; }

// Host data for one input: fixed values, or random ones from a seed derived from the case name,
// so a case's data doesn't depend on which other cases ran.
std::vector<double> host_data(const std::string& name, size_t idx, const In& in) {
  int64_t n = 1;
  for (int64_t s : in.shape) n *= s;
  if (!in.vals.empty()) {
    if (static_cast<int64_t>(in.vals.size()) != n)
      throw std::logic_error("case " + name + ": input " + std::to_string(idx) + " has " +
                             std::to_string(in.vals.size()) + " values for shape " + shape_str(in.shape));
    return in.vals;
  }
  std::mt19937_64 rng(std::hash<std::string>{}(name) * 31 + idx);
  std::vector<double> v(static_cast<size_t>(n));
  if (is_float(in.kind)) {
    std::uniform_real_distribution<double> d(in.lo, in.hi);
    for (auto& x : v) x = static_cast<float>(d(rng));
  } else if (in.kind == Kind::Bool) {
    std::bernoulli_distribution d(0.5);
    for (auto& x : v) x = d(rng) ? 1 : 0;
  } else {
    std::uniform_int_distribution<int64_t> d(static_cast<int64_t>(in.lo), static_cast<int64_t>(in.hi));
    for (auto& x : v) x = static_cast<double>(d(rng));
  }
  return v;
}

template <class T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

torch::Tensor make_torch(const std::vector<double>& v, const In& in, bool grad) {
  std::vector<int64_t> shape(in.shape.begin(), in.shape.end());
  torch::Tensor t;
  switch (in.kind) {
    case Kind::F32: t = torch::tensor(as<float>(v), torch::kFloat32).reshape(shape); break;
    // half inputs: torch computes in float32 on the half-rounded values (CPU half kernels are sparse in 1.13)
    case Kind::F16: t = torch::tensor(as<float>(v), torch::kFloat32).to(torch::kHalf).to(torch::kFloat32).reshape(shape); break;
    case Kind::I32: t = torch::tensor(as<int32_t>(v), torch::kInt32).reshape(shape); break;
    case Kind::Idx: t = torch::tensor(as<int64_t>(v), torch::kInt64).reshape(shape); break;
    case Kind::Bool: t = torch::tensor(as<int32_t>(v), torch::kInt32).to(torch::kBool).reshape(shape); break;
    case Kind::U8: t = torch::tensor(as<int32_t>(v), torch::kInt32).to(torch::kUInt8).reshape(shape); break;
  }
  t = t.clone();
  if (grad) t.requires_grad_(true);
  return t;
}

tg::Tensor make_tg(const std::vector<double>& v, const In& in, bool grad) {
  tg::Opts o;
  if (grad) o.requires_grad = true;
  switch (in.kind) {
    case Kind::F32: return tg::Tensor::from(as<float>(v), in.shape, o);
    case Kind::F16: return tg::Tensor::from(as<float>(v), in.shape).cast(tg::dtypes::float16);
    case Kind::I32:
    case Kind::Idx: return tg::Tensor::from(as<int32_t>(v), in.shape);
    case Kind::U8: return tg::Tensor::from(as<uint8_t>(v), in.shape);
    case Kind::Bool: {
      std::vector<bool> b;
      for (double x : v) b.push_back(x != 0);
      return tg::Tensor::from(b, in.shape);
    }
  }
  throw std::logic_error("make_tg: unknown input kind");
}

// dtype classes: tinygrad's default int is int32 where torch's is int64, so compare classes only
const char* tg_class(tg::DType d) { return d.is_float() ? "float" : d.is_bool() ? "bool" : "int"; }
const char* torch_class(const torch::Tensor& t) {
  return t.is_floating_point() ? "float" : t.scalar_type() == torch::kBool ? "bool" : "int";
}

// Compares one tensor pair; returns "" when they agree, else what differed.
std::string compare(const std::string& what, const std::vector<int64_t>& tshape, const char* tcls,
                    const std::vector<double>& tv, const torch::Tensor& ref, double atol, double rtol) {
  std::vector<int64_t> rshape(ref.sizes().begin(), ref.sizes().end());
  std::ostringstream os;
  if (tshape != rshape) {
    os << what << ": shape mismatch tg=" << shape_str(tshape) << " torch=" << shape_str(rshape);
    return os.str();
  }
  if (std::strcmp(tcls, torch_class(ref)) != 0) {
    os << what << ": dtype class mismatch tg=" << tcls << " torch=" << torch_class(ref) << " (" << ref.scalar_type() << ")";
    return os.str();
  }
  std::vector<double> rv = torch_values(ref);
  double max_err = 0;
  int64_t bad = 0, first_bad = -1;
  for (size_t i = 0; i < rv.size(); i++) {
    double a = tv[i], b = rv[i];
    bool ok;
    if (std::isnan(b) || std::isnan(a)) ok = std::isnan(a) && std::isnan(b);
    else if (std::isinf(b) || std::isinf(a)) ok = a == b;
    else {
      double err = std::fabs(a - b);
      max_err = std::max(max_err, err);
      ok = err <= atol + rtol * std::fabs(b);
    }
    if (!ok && bad++ == 0) first_bad = static_cast<int64_t>(i);
  }
  if (bad == 0) return "";
  os << what << " shape " << shape_str(rshape) << ": " << bad << "/" << rv.size() << " values differ, max abs err "
     << max_err << " (atol " << atol << ", rtol " << rtol << "), first at flat index " << first_bad << ": tg "
     << tv[first_bad] << " vs torch " << rv[first_bad];
  return os.str();
}

std::string ins_str(const std::vector<In>& ins) {
  static const char* kn[] = {"f32", "f16", "i32", "idx", "bool", "u8"};
  std::string r;
  for (size_t i = 0; i < ins.size(); i++)
    r += (i ? " " : "") + shape_str(ins[i].shape) + kn[static_cast<int>(ins[i].kind)];
  return r;
}

// Runs one case; returns "" on success, else the failure description.
std::string run_case(const Case& c) {
  std::vector<torch::Tensor> ts;
  std::vector<tg::Tensor> gs;
  std::vector<bool> grads;
  for (size_t i = 0; i < c.ins.size(); i++) {
    std::vector<double> v = host_data(c.name, i, c.ins[i]);
    bool g = !c.forward_only && c.ins[i].grad && c.ins[i].kind == Kind::F32;
    grads.push_back(g);
    ts.push_back(make_torch(v, c.ins[i], g));
    gs.push_back(make_tg(v, c.ins[i], g));
  }
  torch::Tensor ref;
  try {
    ref = c.th(ts);
  } catch (const std::exception& e) {
    return std::string("torch side threw (case definition bug): ") + e.what();
  }
  std::optional<tg::Tensor> res;
  std::vector<double> ov;
  try {
    res = c.tg(gs);
    res->realize();
    ov = tg_values(*res);
  } catch (const std::exception& e) {
    return std::string("tg forward threw: ") + e.what();
  }
  const tg::Tensor& out = *res;
  std::vector<int64_t> oshape(out.shape().begin(), out.shape().end());
  std::string err = compare("forward", oshape, tg_class(out.dtype()), ov, ref.detach(), c.atol, c.rtol);
  if (!err.empty()) return err;

  bool any_grad = false;
  for (bool g : grads) any_grad |= g;
  if (!any_grad || !ref.is_floating_point() || !ref.requires_grad()) return "";
  try {
    (ref + 1).pow(2).mean().backward();
  } catch (const std::exception& e) {
    return std::string("torch backward threw (case definition bug): ") + e.what();
  }
  try {
    ((out + 1).square()).mean().backward();
  } catch (const std::exception& e) {
    return std::string("tg backward threw: ") + e.what();
  }
  for (size_t i = 0; i < gs.size(); i++) {
    if (!grads[i]) continue;
    torch::Tensor rg = ts[i].grad().defined() ? ts[i].grad() : torch::zeros_like(ts[i]);
    std::vector<double> gv;
    tg::Tensor gt = gs[i];
    try {
      std::optional<tg::Tensor> g = gs[i].grad();
      gt = g ? *g : gs[i].zeros_like();   // an input the output doesn't depend on gets no grad
      gt.realize();
      gv = tg_values(gt);
    } catch (const std::exception& e) {
      return "tg grad of input " + std::to_string(i) + " threw: " + e.what();
    }
    std::vector<int64_t> gshape(gt.shape().begin(), gt.shape().end());
    err = compare("grad of input " + std::to_string(i), gshape, tg_class(gt.dtype()), gv, rg, c.grad_atol, c.grad_rtol);
    if (!err.empty()) return err;
  }
  return "";
}

}  // namespace

std::string check_case(const Case& c) {
  try {
    return run_case(c);
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
}

std::vector<double> tg_values(const tg::Tensor& t) {
  tg::DType d = t.dtype();
  auto conv = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
  if (d.is_float()) {
    if (d == tg::dtypes::float64) return t.tolist<double>();
    return conv(t.cast(tg::dtypes::float32).tolist<float>());
  }
  if (d.is_bool()) return conv(t.tolist<bool>());
  if (d == tg::dtypes::int64) return conv(t.tolist<int64_t>());
  if (d == tg::dtypes::uint64) return conv(t.tolist<uint64_t>());
  if (d == tg::dtypes::uint32) return conv(t.tolist<uint32_t>());
  return conv(t.cast(tg::dtypes::int32).tolist<int32_t>());
}

std::vector<double> torch_values(const torch::Tensor& t) {
  torch::Tensor d = t.detach().to(torch::kFloat64).contiguous();
  const double* p = d.data_ptr<double>();
  return std::vector<double>(p, p + d.numel());
}

int run_cases(const std::string& family, const std::vector<Case>& cases) {
  const char* filter = std::getenv("CONFORMANCE_FILTER");
  bool verbose = std::getenv("CONFORMANCE_VERBOSE") != nullptr;
  int failed = 0;
  torch::manual_seed(0);
  for (const Case& c : cases) {
    if (filter && c.name.find(filter) == std::string::npos) continue;
    if (!c.skip.empty()) {
      counts().skipped++;
      if (verbose) std::cout << "[ SKIP ] " << family << "/" << c.name << ": " << c.skip << "\n";
      continue;
    }
    if (verbose) std::cout << "[ RUN  ] " << family << "/" << c.name << " " << ins_str(c.ins) << std::endl;
    std::string err = check_case(c);
    if (err.empty()) {
      counts().passed++;
    } else {
      counts().failed++;
      failed++;
      std::cout << "[ FAIL ] " << family << "/" << c.name << " inputs " << ins_str(c.ins) << ": " << err << std::endl;
    }
  }
  return failed;
}

}  // namespace conf
