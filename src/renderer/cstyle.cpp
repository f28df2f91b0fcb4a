// C-like renderers: the shared walk (CStyleLanguage::render) and the C and CUDA dialects.
#include "renderer/cstyle.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <unordered_map>

#include "cpu_threads.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {
using Strs = std::vector<std::string>;
std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); i++) out += (i ? sep : "") + v[i];
  return out;
}
// Python's str.find: -1 when absent
long pyfind(const std::string& s, char c) { auto p = s.find(c); return p == std::string::npos ? -1 : static_cast<long>(p); }
bool is_fp16ish(DType dt) { return dt == dtypes::half || dt == dtypes::bfloat16; }
int64_t const_int(const UOp& u) { return const_to_int(u->op == Ops::CONST ? u.const_value() : u.vmax()); }
}  // namespace

std::string strip_parens(const std::string& s) {
  if (s.size() < 2 || s.front() != '(' || s.back() != ')') return s;
  std::string inner = s.substr(1, s.size() - 2);
  return pyfind(inner, '(') <= pyfind(inner, ')') ? inner : s;
}

bool is_parallel_range(const UOp& u) {
  if (u->op != Ops::RANGE) return false;
  const auto& a = u->as<std::vector<int64_t>>();
  return a.size() >= 3 && a[2] == 1;
}

// ------------------------------------------------------------------ the shared dialect

CStyleLanguage::CStyleLanguage() {
  auto un = [](const char* f) { return [f](const Strs& o, DType) { return std::string(f) + "(" + o[0] + ")"; }; };
  auto bin = [](const char* op) { return [op](const Strs& o, DType) { return "(" + o[0] + op + o[1] + ")"; }; };
  code_for_op = {
      {UnaryOps::NEG, [](const Strs& o, DType dt) { return dt == dtypes::bool_ ? "(!" + o[0] + ")" : "(-" + o[0] + ")"; }},
      {UnaryOps::SQRT, un("sqrt")}, {UnaryOps::EXP2, un("exp2")}, {UnaryOps::LOG2, un("log2")}, {UnaryOps::SIN, un("sin")},
      {UnaryOps::RECIP, [](const Strs& o, DType) { return "(1/" + o[0] + ")"; }},
      {BinaryOps::ADD, bin("+")}, {BinaryOps::MUL, bin("*")}, {BinaryOps::IDIV, bin("/")}, {BinaryOps::MOD, bin("%")},
      {BinaryOps::MAX, [](const Strs& o, DType) { return "max(" + o[0] + "," + o[1] + ")"; }},
      {BinaryOps::CMPLT, bin("<")}, {BinaryOps::CMPNE, bin("!=")}, {BinaryOps::XOR, bin("^")},
      {BinaryOps::AND, bin("&")}, {BinaryOps::OR, bin("|")}, {BinaryOps::SHL, bin("<<")}, {BinaryOps::SHR, bin(">>")},
      {TernaryOps::WHERE, [](const Strs& o, DType) { return "(" + o[0] + "?" + o[1] + ":" + o[2] + ")"; }},
      {TernaryOps::MULACC, [](const Strs& o, DType) { return "((" + o[0] + "*" + o[1] + ")+" + o[2] + ")"; }},
  };
}

std::string CStyleLanguage::render_dtype(DType dt) const {
  auto it = type_map.find(dt.kind);
  if (it != type_map.end()) return it->second + (dt.count > 1 ? std::to_string(dt.count) : "");
  return dt.base().name();   // "float", "unsigned char", vectors as "float4", "uchar4"
}

std::string CStyleLanguage::render_cast(const std::string& x, DType dt, bool bitcast) const {
  if (bitcast) return "(*((" + buffer_prefix + render_dtype(dt) + "*)&" + x + "))";
  return "(" + render_dtype(dt) + ")(" + x + ")";
}

std::string CStyleLanguage::render_vectorize(const std::vector<std::string>& x, DType dt) const {
  TG_ASSERT(x.size() == dt.count, "vectorize is wrong size " + std::to_string(x.size()) + " != " + std::to_string(dt.count));
  TG_ASSERT(float4.has_value(), "vectorized cast is not supported on " + device);
  std::string ctor = *float4;
  ctor.replace(ctor.find("float4"), 6, render_dtype(dt));
  bool braces = device == "CPU" || device == "CLANG";
  return ctor + (braces ? "{" : "(") + join(x, ",") + (braces ? "}" : ")");
}

std::string CStyleLanguage::render_const(const ConstType& x, DType dt) const {
  TG_ASSERT(dt.count == 1, "consts should be scalar, got " + dt.str());
  // floats print as given (Python's repr), ints wrap to the dtype's width
  ConstType v = dt.is_float() ? ConstType(const_to_double(x)) : dtypes::as_const(x, dt);
  std::string val;
  double d = const_to_double(v);
  if (std::isnan(d)) val = nan;
  else if (std::isinf(d)) val = (d < 0 ? "-" : "") + infinity;
  else if (dt == dtypes::bool_) val = std::get<bool>(v) ? "1" : "0";
  else if (dt == dtypes::float32) val = const_str(v) + "f";
  else if (dt == dtypes::uint64) val = std::to_string(static_cast<uint64_t>(std::get<int64_t>(v))) + "ULL";
  else val = const_str(v);
  bool plain = dt == dtypes::float32 || dt == dtypes::int32 || dt == dtypes::bool_;
  return plain ? val : render_cast(val, dt);
}

std::string CStyleLanguage::render_load(DType out, const std::string& buf, DType buf_dtype, const std::string& idx, bool local) const {
  if (out.count > 1)
    return "*((" + (local && smem_prefix_for_cast ? smem_prefix : buffer_prefix) + render_dtype(out) + "*)(" + buf + "+" + idx + "))";
  return buf + "[" + idx + "]";
}

std::string CStyleLanguage::render_store(const std::string& buf, DType buf_dtype, const std::string& var, DType var_dtype,
                                         const std::string& idx, bool local) const {
  if (var_dtype.count > 1)
    return "*((" + (local && smem_prefix_for_cast ? smem_prefix : buffer_prefix) + render_dtype(var_dtype) + "*)(" + buf + "+" +
           idx + ")) = " + var + ";";
  return buf + "[" + idx + "] = " + var + ";";
}

std::string CStyleLanguage::render_local(const std::string& name, DType dt, int64_t size) const {
  return smem_align + smem_prefix + render_dtype(dt.base()) + " " + name + "[" + std::to_string(size) + "];";
}

std::string CStyleLanguage::render_range(const UOp& u, const std::string& type, const std::string& var, const std::string& start,
                                         const std::string& end) const {
  return "for (" + type + " " + var + " = " + start + "; " + var + " < " + end + "; " + var + "++) {";
}

std::unordered_set<const UOpNode*> index_only_uops(const std::vector<UOp>& uops) {
  std::unordered_map<const UOpNode*, std::vector<std::pair<const UOpNode*, size_t>>> uses;
  for (const UOp& u : uops)
    for (size_t i = 0; i < u->src.size(); i++) uses[u->src[i].get()].push_back({u.get(), i});
  std::unordered_set<const UOpNode*> out;
  auto index_use = [&](const UOpNode* c, size_t i) {
    if (out.count(c)) return true;
    switch (c->op) {
      case Ops::LOAD: case Ops::STORE: case Ops::PREFETCH: return i == 1;
      case Ops::RANGE: case Ops::ENDRANGE: case Ops::DEFINE_ACC: return true;
      case Ops::ALU: return c->dtype == dtypes::bool_;   // a compare
      default: return false;
    }
  };
  // users come after their sources in the linearized list: one backward pass sees every user first
  for (auto it = uops.rbegin(); it != uops.rend(); ++it) {
    const UOp& u = *it;
    if ((u->op != Ops::RANGE && u->op != Ops::ALU) || u->dtype != dtypes::int32) continue;
    const auto& us = uses[u.get()];
    if (std::all_of(us.begin(), us.end(), [&](const auto& cu) { return index_use(cu.first, cu.second); })) out.insert(u.get());
  }
  return out;
}

std::vector<CStyleLanguage::KernelParam> CStyleLanguage::kernel_params(const std::vector<UOp>& uops) {
  std::vector<KernelParam> params;
  std::unordered_map<const UOpNode*, size_t> where;
  std::set<std::string> seen_vars;
  for (const UOp& u : uops) {
    if (u->op == Ops::DEFINE_GLOBAL) {
      where[u.get()] = params.size();
      params.push_back({"data" + std::to_string(u->as<int64_t>()), u->dtype, false, true});
    } else if (u->op == Ops::DEFINE_VAR) {
      const std::string& nm = u->as<std::string>();
      TG_ASSERT(seen_vars.insert(nm).second, "duplicate variable " + nm);
      TG_ASSERT(u->dtype == dtypes::int32, "DEFINE_VAR " + nm + " must be int, got " + u->dtype.str());
      params.push_back({nm, u->dtype, false, false});
    } else if (u->op == Ops::STORE && where.count(u->src[0].get())) {
      params[where[u->src[0].get()]].is_mutable = true;
    }
  }
  // Runtimes pass buffers by index, then variable values by name (Program::vars); the linearized
  // order compares args as strings (data10 before data2), so it can't be the signature's order.
  auto index = [](const KernelParam& p) { return std::stoll(p.name.substr(4)); };
  std::stable_sort(params.begin(), params.end(), [&](const KernelParam& a, const KernelParam& b) {
    if (a.is_buffer != b.is_buffer) return a.is_buffer;
    return a.is_buffer ? index(a) < index(b) : a.name < b.name;
  });
  // a buffer whose loads were all folded away still takes its argument slot
  for (size_t i = 0; i < params.size() && params[i].is_buffer; i++)
    if (index(params[i]) != int64_t(i))
      params.insert(params.begin() + std::ptrdiff_t(i), {"data" + std::to_string(i), dtypes::uint8.ptr_to(), false, true});
  return params;
}

std::string CStyleLanguage::render_kernel(const std::string& function_name, const std::vector<std::string>& kernel,
                                          const std::vector<KernelParam>& params, const std::vector<UOp>& uops,
                                          const std::optional<std::vector<std::string>>& prefix) const {
  std::vector<std::string> args;
  for (const KernelParam& p : params) {
    std::string t = p.is_buffer ? (p.is_mutable ? "" : "const ") + buffer_prefix + render_dtype(p.dtype.base()) + "*" + buffer_suffix
                                : arg_int_prefix;
    args.push_back(t + " " + p.name);
  }
  for (const std::string& a : kernel_extra_args(uops)) args.push_back(a);
  std::string prg = kernel_prefix + "void " + get_kernel_modifier(uops) + function_name + "(" + join(args, ", ") + ") {\n" +
                    join(kernel, "\n") + "\n}";
  return prefix ? join(*prefix, "\n") + "\n" + prg : prg;
}

// One pass over the linearized list. Values used once are inlined as expressions; loads,
// accumulators and multi-use values become named locals.
std::string CStyleLanguage::render(const std::string& name, const std::vector<UOp>& uops) const {
  std::vector<std::string> kernel;
  int depth = 1;
  auto kk = [&](const std::string& s) { kernel.push_back(std::string(2 * depth, ' ') + s); };
  std::unordered_map<std::string, int> counter;
  std::unordered_map<const UOpNode*, std::string> r;
  auto ssa = [&](const std::string& prefix, const UOp* u) {
    std::string ret = prefix + std::to_string(counter[prefix]++);
    if (u) r[u->get()] = ret;
    return ret;
  };
  auto R = [&](const UOp& u) -> const std::string& {
    auto it = r.find(u.get());
    TG_ASSERT(it != r.end(), "renderer: " + to_string(u->op) + " used before it was rendered");
    return it->second;
  };
  std::unordered_map<const UOpNode*, int> child_count;
  for (const UOp& u : uops)
    for (const UOp& s : u->src) child_count[s.get()]++;
  const bool expand_ssa = getenv("EXPAND_SSA") != 0;
  std::vector<KernelParam> params = kernel_params(uops);
  // only under a register tile of vector accumulators (the GEMM/conv micro-kernels, whose broadcast loads' addresses
  // int32 sign-extends one by one); clang vectorizes the scalar kernels itself, and its gathers take 16 int32
  // indices but only 8 int64 ones (a batchnorm backward kernel: 9.1 -> 13.4 ms with long indices)
  const bool tiled = std::any_of(uops.begin(), uops.end(), [](const UOp& u) { return u->op == Ops::DEFINE_ACC && u->dtype.count > 1; });
  const std::unordered_set<const UOpNode*> wide = wide_index_type.empty() || !tiled ? std::unordered_set<const UOpNode*>{} : index_only_uops(uops);
  auto int_type = [&](const UOp& u) { return wide.count(u.get()) ? wide_index_type : render_dtype(u->dtype); };

  for (const UOp& u : uops) {
    const auto& src = u->src;
    DType dt = u->dtype;
    switch (u->op) {
      case Ops::IF: kk("if (" + R(src[0]) + ") {"); depth++; break;
      case Ops::BARRIER: kk(barrier); break;
      case Ops::ENDRANGE: case Ops::ENDIF: depth--; kk("}"); break;
      case Ops::STORE: {
        std::string st = render_store(R(src[0]), src[0]->dtype, R(src[2]), src[2]->dtype, strip_parens(R(src[1])),
                                      src[0]->op == Ops::DEFINE_LOCAL);
        kk(src.size() > 3 ? "if (" + R(src[3]) + ") { " + st + " }" : st);
        break;
      }
      case Ops::PREFETCH: kk("__builtin_prefetch(" + R(src[0]) + "+" + strip_parens(R(src[1])) + ");"); break;
      case Ops::RANGE: kk(render_range(u, int_type(u), ssa("ridx", &u), R(src[0]), R(src[1]))); depth++; break;
      case Ops::ALU: {
        std::vector<std::string> operands;
        for (const UOp& v : src) {
          bool same_assoc = v->op == Ops::ALU && v->arg == u->arg && u->is<BinaryOps>() &&
                            (u->as<BinaryOps>() == BinaryOps::ADD || u->as<BinaryOps>() == BinaryOps::MUL || u->as<BinaryOps>() == BinaryOps::XOR);
          bool is_max = u->is<BinaryOps>() && u->as<BinaryOps>() == BinaryOps::MAX;
          if (same_assoc) operands.push_back(strip_parens(R(v)));
          else if (is_max && v->op == Ops::CONST) operands.push_back(render_cast(R(v), v->dtype));
          else operands.push_back(R(v));
        }
        AluOp op = u->is<UnaryOps>() ? AluOp(u->as<UnaryOps>()) : u->is<BinaryOps>() ? AluOp(u->as<BinaryOps>()) : AluOp(u->as<TernaryOps>());
        auto fn = code_for_op.find(op);
        TG_ASSERT(fn != code_for_op.end(), device + " renderer has no code for " + arg_str(u->arg));
        std::string val = fn->second(operands, dt);
        TG_ASSERT(child_count[u.get()] != 0, "childless ALU op found " + u.str());
        // MAX gets a name: the C dialect's ternary MAX would repeat a nested expression
        bool is_max = u->is<BinaryOps>() && u->as<BinaryOps>() == BinaryOps::MAX;
        // a vector compare (C) is a lane mask whose int type follows its operands
        const std::string type = dt.count > 1 && dt.scalar() == dtypes::bool_ ? "__typeof__(" + val + ")" : int_type(u);
        if (child_count[u.get()] <= 1 && !is_max && !expand_ssa) r[u.get()] = val;
        else kk(type + " " + ssa("alu", &u) + " = " + val + ";");
        break;
      }
      case Ops::SPECIAL: {
        const std::string& nm = u->as<std::string>();
        auto wi = code_for_workitem.find(nm[0]);
        TG_ASSERT(wi != code_for_workitem.end(), device + " renderer has no work item for SPECIAL " + nm);
        std::string size = src.at(0)->op == Ops::CONST ? const_str(src[0].const_value()) : src[0].render();
        kk("int " + nm + " = " + wi->second(nm.back() - '0') + "; /* " + size + " */");
        r[u.get()] = nm;
        break;
      }
      case Ops::DEFINE_VAR: r[u.get()] = u->as<std::string>(); break;
      case Ops::LOAD: {
        std::string val = render_load(dt, R(src[0]), src[0]->dtype, strip_parens(R(src[1])), src[0]->op == Ops::DEFINE_LOCAL);
        // the gated load must not happen in the unselected branch: C's ?: guarantees that (also for a vector load
        // under its scalar gate, codegen/vectorizer.cpp; the CPU's vector WHERE selects bitwise after loading)
        if (src.size() > 3 && src[3]->dtype == dtypes::bool_) val = "(" + R(src[3]) + "?" + val + ":" + R(src[2]) + ")";
        kk(render_dtype(dt) + " " + ssa("val", &u) + " = " + val + ";");
        break;
      }
      case Ops::PHI: kk(R(src[0]) + " = " + R(src[1]) + ";"); r[u.get()] = R(src[0]); break;
      case Ops::CAST: case Ops::BITCAST: case Ops::VECTORIZE: {
        std::string val;
        if (u->op == Ops::BITCAST) {
          std::string precast = ssa("precast", nullptr);
          kk(render_dtype(src[0]->dtype) + " " + precast + " = " + R(src[0]) + ";");
          val = render_cast(precast, dt, true);
        } else if (u->op == Ops::CAST) {
          val = render_cast(R(src[0]), dt, false);
        } else {
          std::vector<std::string> xs;
          for (const UOp& x : src) xs.push_back(R(x));
          val = render_vectorize(xs, dt);
        }
        if (child_count[u.get()] <= 1) r[u.get()] = val;
        else kk(render_dtype(dt) + " " + ssa("cast", &u) + " = " + val + ";");
        break;
      }
      case Ops::DEFINE_LOCAL: {
        const std::string& nm = u->as<std::string>();
        kk(render_local(nm, dt, const_int(src.at(0))));
        r[u.get()] = nm;
        break;
      }
      case Ops::DEFINE_GLOBAL: r[u.get()] = "data" + std::to_string(u->as<int64_t>()); break;
      case Ops::WMMA: {
        auto* w = u->is<ArgObjPtr>() ? dynamic_cast<const WMMAArg*>(u->as<ArgObjPtr>().get()) : nullptr;
        TG_ASSERT(w && src.size() == 3, "WMMA needs a WMMAArg and (a, b, c): " + u.str());
        kk(render_dtype(dt) + " " + ssa("wmma", &u) + " = __" + w->name + "(" + R(src[0]) + ", " + R(src[1]) + ", " + R(src[2]) + ");");
        break;
      }
      case Ops::DEFINE_ACC: kk(render_dtype(dt) + " " + ssa("acc", &u) + " = " + R(src[0]) + ";"); break;
      case Ops::CONST: {
        ConstType v = u.const_value();
        std::string c = render_const(v, dt);
        r[u.get()] = const_to_double(v) >= 0 ? c : "(" + c + ")";   // nan and negatives get parens
        break;
      }
      case Ops::GEP: {
        int64_t i = u->as<int64_t>();
        size_t big = (device == "CUDA" || device == "NV") ? 8 : 4;
        bool index = src[0]->dtype.count > big || device == "CPU" || device == "CLANG";
        r[u.get()] = R(src[0]) + (index ? "[" + std::to_string(i) + "]" : std::string(".") + "xyzwabcd"[i]);
        break;
      }
      default: TG_ASSERT(false, "failed to render " + u.str());
    }
  }
  return render_kernel(name, kernel, params, uops, std::nullopt);
}

// ------------------------------------------------------------------ C for the CPU

ClangRenderer::ClangRenderer(const std::string& half_type) {
  device = "CPU";
  float4 = "(float4)";
  has_local = false;
  cpu_threads = true;
  vector_bytes = 64;   // C vectors up to 64 bytes; narrower machines split them (cpu_register_bytes)
  register_bytes = cpu_register_bytes();
  vector_registers = register_bytes == 64 ? 32 : 16;
  global_max.clear();
  local_max.clear();
  infinity = "__builtin_inff()";
  nan = "__builtin_nanf(\"\")";
  buffer_suffix = " restrict";
  wide_index_type = "long";
  type_map = {{ScalarKind::bool_, "_Bool"}, {ScalarKind::float16, half_type}};
  // builtins need no headers; float64 uses the double versions, half computes in float
  auto builtin = [](const char* f) {
    return [f](const Strs& o, DType dt) { return std::string("__builtin_") + f + (dt == dtypes::float64 ? "" : "f") + "(" + o[0] + ")"; };
  };
  code_for_op[UnaryOps::SQRT] = builtin("sqrt");
  code_for_op[UnaryOps::SIN] = builtin("sin");
  // EXP2 and LOG2 have no code, as in tinygrad's clang renderer: the transcendental rewrites make
  // them from +, *, where and bit casts, which the vectorizer turns into vector code (libm's exp2f is
  // a scalar call per lane: softmax ran 19x its memory-bound time)
  code_for_op.erase(UnaryOps::EXP2);
  code_for_op.erase(UnaryOps::LOG2);
  // vectors (from the vectorizer): compares give lane masks of the operands' width, all ones where
  // true; MAX and WHERE select bitwise through them (C has no ?: on vectors)
  auto select = [](const std::string& m, const std::string& a, const std::string& b, DType dt) {
    const std::string mt = vector_mask_dtype(dt).name(), t = dt.name();
    return "((" + t + ")((" + m + " & (" + mt + ")(" + a + ")) | (~" + m + " & (" + mt + ")(" + b + "))))";
  };
  code_for_op[BinaryOps::MAX] = [select](const Strs& o, DType dt) {
    if (dt.count > 1) return select("(" + o[0] + ">" + o[1] + ")", o[0], o[1], dt);
    return "((" + o[0] + ">" + o[1] + ")?" + o[0] + ":" + o[1] + ")";
  };
  code_for_op[TernaryOps::WHERE] = [select](const Strs& o, DType dt) {
    return dt.count > 1 ? select(o[0], o[1], o[2], dt) : "(" + o[0] + "?" + o[1] + ":" + o[2] + ")";
  };
}

// the signed int vector that C's compares of dt's lanes return
DType vector_mask_dtype(DType dt) {
  const size_t w = dt.scalar().itemsize();
  DType m = w == 1 ? dtypes::int8 : w == 2 ? dtypes::int16 : w == 8 ? dtypes::int64 : dtypes::int32;
  return m.vec(dt.count);
}

// vector loads and stores by memcpy: the address need not be aligned to the vector's size
std::string ClangRenderer::render_load(DType out, const std::string& buf, DType buf_dtype, const std::string& idx, bool local) const {
  if (out.count == 1) return CStyleLanguage::render_load(out, buf, buf_dtype, idx, local);
  const std::string t = render_dtype(out);
  return "({" + t + " v_; __builtin_memcpy(&v_, " + buf + "+" + idx + ", sizeof(v_)); v_;})";
}
std::string ClangRenderer::render_store(const std::string& buf, DType buf_dtype, const std::string& var, DType var_dtype,
                                        const std::string& idx, bool local) const {
  if (var_dtype.count == 1) return CStyleLanguage::render_store(buf, buf_dtype, var, var_dtype, idx, local);
  return "{ " + render_dtype(var_dtype) + " v_ = " + var + "; __builtin_memcpy(" + buf + "+" + idx + ", &v_, sizeof(v_)); }";
}

// a union reinterprets the bits without breaking C's aliasing rules (a pointer cast would)
std::string ClangRenderer::render_cast(const std::string& x, DType dt, bool bitcast) const {
  // a C cast between vector types reinterprets the bits: value casts convert lane by lane
  if (!bitcast && dt.count > 1) return "__builtin_convertvector(" + x + ", " + render_dtype(dt) + ")";
  if (!bitcast) return CStyleLanguage::render_cast(x, dt, false);
  return "(((union { __typeof__(" + x + ") f; " + render_dtype(dt) + " t; }){" + x + "}).t)";
}

std::string ClangRenderer::render_range(const UOp& u, const std::string& type, const std::string& var, const std::string& start,
                                        const std::string& end) const {
  if (!is_parallel_range(u)) return CStyleLanguage::render_range(u, type, var, start, end);
  TG_ASSERT(u->src[0]->op == Ops::CONST && const_to_int(u->src[0].const_value()) == 0, "a parallel RANGE must start at 0: " + u.str());
  return CStyleLanguage::render_range(u, type, var, "core_lo", "core_hi");
}

std::string ClangRenderer::render_kernel(const std::string& function_name, const std::vector<std::string>& kernel,
                                         const std::vector<KernelParam>& params, const std::vector<UOp>& uops,
                                         const std::optional<std::vector<std::string>>& prefix) const {
  // vector types as clang extended vectors
  std::vector<std::string> typedefs;
  std::set<std::pair<int, int>> seen;
  std::vector<DType> dts;
  for (const UOp& u : uops) {
    if (u->dtype.count <= 1 || u->dtype.ptr) continue;
    // bool vectors are compares' lane masks, declared by __typeof__; vector selects name their mask type
    if (u->dtype.scalar() != dtypes::bool_) dts.push_back(u->dtype);
    if (u->op == Ops::ALU && u->dtype.scalar() != dtypes::bool_) dts.push_back(vector_mask_dtype(u->dtype));
  }
  for (DType dt : dts) {
    if (!seen.insert({static_cast<int>(dt.kind), dt.count}).second) continue;
    std::string sz = std::to_string(dt.itemsize());
    typedefs.push_back("typedef " + render_dtype(dt.scalar()) + " " + render_dtype(dt) + " __attribute__((aligned(" + sz +
                       "),vector_size(" + sz + ")));");
  }
  return CStyleLanguage::render_kernel(function_name, kernel, params, uops, typedefs);
}

std::vector<std::string> ClangRenderer::kernel_extra_args(const std::vector<UOp>& uops) const {
  std::vector<std::string> args = extra_args;
  // the thread's slice of the parallel loop comes last
  if (std::any_of(uops.begin(), uops.end(), is_parallel_range)) { args.push_back("int core_lo"); args.push_back("int core_hi"); }
  return args;
}

std::string ClangRenderer::render(const std::string& name, const std::vector<UOp>& uops) const {
  std::string src = CStyleLanguage::render(name, uops);
  std::vector<KernelParam> params = kernel_params(uops);
  std::vector<std::string> vars;
  for (const KernelParam& p : params)
    if (!p.is_buffer) vars.push_back(p.name);
  std::sort(vars.begin(), vars.end());   // vals[] follows the program's sorted var list
  bool parallel = std::any_of(uops.begin(), uops.end(), is_parallel_range);
  std::vector<std::string> args, unused;
  for (const KernelParam& p : params) {
    if (p.is_buffer) {
      args.push_back("(" + std::string(p.is_mutable ? "" : "const ") + render_dtype(p.dtype.base()) + "*)bufs[" +
                     p.name.substr(4) + "]");
    } else {
      args.push_back("vals[" + std::to_string(std::find(vars.begin(), vars.end(), p.name) - vars.begin()) + "]");
    }
  }
  if (parallel) { args.push_back("core_lo"); args.push_back("core_hi"); }
  if (vars.empty()) unused.push_back("(void)vals;");
  if (!parallel) { unused.push_back("(void)core_lo;"); unused.push_back("(void)core_hi;"); }
  src += "\nvoid " + name + "_call(void** bufs, const int* vals, int core_lo, int core_hi) {\n";
  if (!unused.empty()) src += "  " + join(unused, " ") + "\n";
  return src + "  " + name + "(" + join(args, ", ") + ");\n}\n";
}

// ------------------------------------------------------------------ CUDA

namespace {
const char* kVecNames = "xyzwabcdefghijkl";

// CUDA has no half4/half8: a struct with a make_ function like its float4
std::string make_cuda_dtype(const CStyleLanguage& r, DType dt) {
  std::string vec = r.render_dtype(dt), scal = r.render_dtype(dt.scalar());
  std::vector<std::string> elems, header;
  for (int i = 0; i < dt.count; i++) {
    elems.push_back(std::string(1, kVecNames[i]));
    header.push_back(scal + " " + kVecNames[i]);
  }
  return "struct __align__(" + std::to_string(dt.itemsize()) + ") " + vec + " { " + scal + " " + join(elems, ", ") + "; }; __device__ " +
         vec + " make_" + vec + "(" + join(header, ", ") + ") { " + vec + " r={" + join(elems, ", ") + "}; return r; }";
}

// m16n8k16 mma.sync: A is 8 halves (4 regs), B 4 halves (2 regs), C/D 4 floats, or 4 halves packed in 2 regs
std::string cuda_wmma_helper(const CStyleLanguage& r, const WMMAArg& w) {
  auto ptx = [](DType d) { return d == dtypes::float32 ? "f32" : d == dtypes::half ? "f16" : "bf16"; };
  std::string ti = r.render_dtype(w.dtype_in), to = r.render_dtype(w.dtype_out), ci = ptx(w.dtype_in), co = ptx(w.dtype_out);
  if (w.dtype_out == dtypes::half)
    return "__device__ half4 __" + w.name + "(" + ti + "8 a, " + ti + "4 b, half4 c) { int *a_pk = (int *) (&a), *b_pk = (int *) (&b), *c_pk = (int *) (&c);\n" +
           "asm( \"mma.sync.aligned.m16n8k16.row.col.f16." + ci + "." + ci + ".f16 { %0, %1 }, { %2, %3, %4, %5 }, { %6, %7 }, { %0, %1 };\"\n" +
           "  : \"+r\"(c_pk[0]), \"+r\"(c_pk[1]) : \"r\"(a_pk[0]), \"r\"(a_pk[1]), \"r\"(a_pk[2]), \"r\"(a_pk[3]), "
           "\"r\"(b_pk[0]), \"r\"(b_pk[1]) );\nreturn c;}";
  return "__device__ " + to + "4 __" + w.name + "(" + ti + "8 a, " + ti + "4 b, " + to + "4 c) { int *a_pk = (int *) (&a), *b_pk = (int *) (&b);\n" +
         "asm( \"mma.sync.aligned.m16n8k16.row.col." + co + "." + ci + "." + ci + "." + co +
         " { %0, %1, %2, %3 }, { %4, %5, %6, %7 }, { %8, %9 }, { %0, %1, %2, %3 };\"\n" +
         "  : \"+f\"(c.x), \"+f\"(c.y), \"+f\"(c.z), \"+f\"(c.w) : \"r\"(a_pk[0]), \"r\"(a_pk[1]), \"r\"(a_pk[2]), \"r\"(a_pk[3]), "
         "\"r\"(b_pk[0]), \"r\"(b_pk[1]) );\nreturn c;}";
}
}  // namespace

std::string CUDARenderer::render_load(DType out, const std::string& buf, DType buf_dtype, const std::string& idx, bool local) const {
  if (out.count != 4 || local || !(out.scalar() == dtypes::float32 || out.scalar() == dtypes::int32)) return CStyleLanguage::render_load(out, buf, buf_dtype, idx, local);
  std::vector<std::string> lanes;
  for (int i = 0; i < out.count; i++) lanes.push_back(buf + "[" + idx + (i ? "+" + std::to_string(i) : "") + "]");
  const std::string t = render_dtype(out);
  return "((((unsigned long long)" + buf + ")&15)==0?*((" + t + "*)(" + buf + "+" + idx + ")):make_" + t + "(" + join(lanes, ",") + "))";
}

std::string CUDARenderer::render_store(const std::string& buf, DType buf_dtype, const std::string& var, DType var_dtype,
                                       const std::string& idx, bool local) const {
  const DType sc = var_dtype.scalar();
  if (var_dtype.count != 4 || local || !(sc == dtypes::float32 || sc == dtypes::int32))
    return CStyleLanguage::render_store(buf, buf_dtype, var, var_dtype, idx, local);
  const std::string t = render_dtype(var_dtype);
  std::string lanes;
  for (int i = 0; i < 4; i++) lanes += " " + buf + "[" + idx + (i ? "+" + std::to_string(i) : "") + "] = v_." + "xyzw"[i] + ";";
  return "{ " + t + " v_ = " + var + "; if ((((unsigned long long)" + buf + ")&15)==0) *((" + t + "*)(" + buf + "+" + idx +
         ")) = v_; else {" + lanes + " } }";
}

CUDARenderer::CUDARenderer(const std::string& arch) {
  device = "CUDA";
  global_max = {2147483647, 65535, 65535};
  local_max = {1024, 1024, 64};
  shared_max = 49152;
  sm = arch.size() > 3 ? std::atoi(arch.c_str() + 3) : 0;
  // m16n8k16: half and bfloat16 into float (as 0.9.2), and half into half (a half sum without a float accumulator)
  if (sm >= 80)
    for (auto [di, dout] : {std::pair{dtypes::half, dtypes::float32}, std::pair{dtypes::bfloat16, dtypes::float32}, std::pair{dtypes::half, dtypes::half}})
      tensor_cores.push_back({{8, 16, 16}, di, dout, {{0, 2}, {0, 2}, {1, 2}, {1, 2}, {1, 2}}});
  kernel_prefix = "extern \"C\" __global__ ";
  smem_prefix = "__shared__ ";
  smem_prefix_for_cast = false;
  barrier = "__syncthreads();";
  float4 = "make_float4";
  auto dim = [](int x) { return std::string(1, static_cast<char>('x' + x)); };
  code_for_workitem = {
      {'g', [dim](int x) { return "blockIdx." + dim(x); }},
      {'l', [dim](int x) { return "threadIdx." + dim(x); }},
      {'i', [dim](int x) { return "(blockIdx." + dim(x) + "*blockDim." + dim(x) + "+threadIdx." + dim(x) + ")"; }},
  };
  type_map = {{ScalarKind::bfloat16, "nv_bfloat16"}};
  // half and bfloat16 have their own intrinsics
  auto half_un = [](const char* h, const char* f) {
    return [h, f](const Strs& o, DType dt) { return std::string(is_fp16ish(dt) ? h : f) + "(" + o[0] + ")"; };
  };
  code_for_op[UnaryOps::RECIP] = [](const Strs& o, DType dt) { return is_fp16ish(dt) ? "hrcp(" + o[0] + ")" : "1/" + o[0]; };
  has_warp_shuffle = true;
  code_for_op[BinaryOps::SHFL_XOR] = [](const Strs& o, DType) { return "__shfl_xor_sync(0xffffffffu, " + o[0] + ", " + o[1] + ")"; };
  code_for_op[BinaryOps::MAX] = [](const Strs& o, DType dt) {
    return std::string(is_fp16ish(dt) ? "__hmax" : "max") + "(" + o[0] + "," + o[1] + ")";
  };
  code_for_op[UnaryOps::SQRT] = half_un("hsqrt", "sqrt");
  code_for_op[UnaryOps::SIN] = half_un("hsin", "sin");
  code_for_op[UnaryOps::LOG2] = half_un("hlog2", "log2");
  code_for_op[UnaryOps::EXP2] = half_un("hexp2", "exp2");
}

std::string CUDARenderer::render_kernel(const std::string& function_name, const std::vector<std::string>& kernel,
                                        const std::vector<KernelParam>& params, const std::vector<UOp>& uops,
                                        const std::optional<std::vector<std::string>>& prefix) const {
  std::vector<std::string> pre = {"#define INFINITY (__int_as_float(0x7f800000))", "#define NAN (__int_as_float(0x7fffffff))"};
  // any half/bfloat16 value, vector or pointer needs the header and the vector structs
  std::vector<DType> halfs;
  for (const UOp& u : uops) {
    DType sc = u->dtype.scalar();
    if (is_fp16ish(sc) && std::find(halfs.begin(), halfs.end(), sc) == halfs.end()) halfs.push_back(sc);
  }
  for (DType dt : halfs) {
    pre.push_back(std::string("#include <cuda_") + (dt == dtypes::half ? "fp" : "bf") + "16.h>");
    for (int sz : {4, 8}) pre.push_back(make_cuda_dtype(*this, dt.vec(sz)));
  }
  std::vector<std::string> wmma_seen;
  for (const UOp& u : uops) {
    if (u->op != Ops::WMMA) continue;
    auto* w = dynamic_cast<const WMMAArg*>(u->as<ArgObjPtr>().get());
    TG_ASSERT(w, "WMMA needs a WMMAArg: " + u.str());
    if (std::find(wmma_seen.begin(), wmma_seen.end(), w->name) != wmma_seen.end()) continue;
    wmma_seen.push_back(w->name);
    pre.push_back(cuda_wmma_helper(*this, *w));
  }
  return CStyleLanguage::render_kernel(function_name, kernel, params, uops, pre);
}

std::string CUDARenderer::get_kernel_modifier(const std::vector<UOp>& uops) const {
  int64_t threads = 1;
  for (const UOp& u : uops)
    if (u->op == Ops::SPECIAL && u->as<std::string>()[0] == 'l') threads *= const_int(u->src.at(0));
  return "__launch_bounds__(" + std::to_string(threads) + ") ";
}

}  // namespace tg
