// The shared-memory tensor-core GEMM template (see tc_gemm.hpp).
//
// plan(): reads the GEMM out of the Kernel's AST. One SUM over K of MUL(LOAD a, LOAD b) (optionally CAST to the
// tensor core's accumulator dtype); every other non-unit axis is M (only a varies along it), N (only b) or a
// batch axis (both, or neither). Each operand must be a single unmasked view whose contiguous axis is K or its
// M/N axis, with all other strides multiples of 8 elements, so that every 16-byte copy is aligned.
// render(): the kernel text. The main loop is fixed (a template); the block tile, the operands' strides and
// layouts, the batch decomposition and the epilogue (the AST between the reduce and the store, rendered with the
// CUDA dialect's own op table) come from the plan.
#include "codegen/tc_gemm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <variant>

#include "codegen/kernel.hpp"
#include "codegen/tc_gemm_ptx.hpp"
#include "renderer/cstyle.hpp"
#include "shape/shapetracker_arg.hpp"
#include "uop/symbolic.hpp"

namespace tg {
namespace {

struct NotCovered {};   // the template doesn't apply: the caller falls back to the WMMA path

// An index of the GEMM (a row of M or N, or k) as an operand addresses it: dims outermost first, each (size,
// stride), adjacent axes merged where the operand's strides allow. One dim for a plain GEMM; a conv's window view
// (codegen of an implicit GEMM) has several: rows (batch, y, x), k (ky, kx*cin).
struct Dim { int64_t size, stride; };
using Dims = std::vector<Dim>;

struct Operand {
  UOp buf;                          // DEFINE_GLOBAL
  int64_t off = 0, s_row = 0, s_k = 0;   // element offset; stride along its rows and along K when each is one dim
  Dims rows, ks;                    // the row index (M for a, N for b) and k as addresses
  std::vector<int64_t> s_batch;     // per batch axis
  bool k_major = false;             // K is the contiguous axis (else M/N is)
  bool linear() const { return rows.size() == 1 && ks.size() == 1; }
};

struct Plan {
  Operand a, b;                     // a varies along M, b along N
  int64_t M = 0, N = 0, K = 0;
  std::vector<int> m_axes, n_axes, k_axes;   // several M axes and K axes: a conv as an implicit GEMM
  std::vector<int> batch_axes;
  Shape full;
  int64_t batch = 1;
  UOp store, reduce;
  TensorCore tc;                    // SIMT: only dtype_in/out (float32) are set
  bool simt = false;                // no tensor core: the fp32 register-blocked template (render_simt)
  bool tf32 = false;                // fp32 on TF32 tensor cores (ALLOW_TF32=1): wgmma k8 (sm_90) or mma.sync m16n8k8
  int vec() const { return 16 / static_cast<int>(tc.dtype_in.itemsize()); }   // elements of one 16-byte chunk
};

struct Cfg {
  int bm, bn, bk, warps_m, warps_n, stages, min_blocks;
  int threads() const { return 32 * warps_m * warps_n; }
};

bool is_mul(const UOp& u) { return u->op == Ops::ALU && u->is<BinaryOps>() && u->as<BinaryOps>() == BinaryOps::MUL; }

void need(bool c) {
  if (!c) throw NotCovered{};
}
std::string S(int64_t v) { return std::to_string(v); }

// the axes' (size, stride) in v, adjacent ones merged where the outer stride is the inner's extent
Dims merged_dims(const View& v, const std::vector<int>& axes, const Shape& full) {
  Dims d;
  for (int ax : axes) {
    if (!d.empty() && d.back().stride == full[ax] * v.strides[ax]) d.back() = {d.back().size * full[ax], v.strides[ax]};
    else d.push_back({full[ax], v.strides[ax]});
  }
  return d;
}

Operand operand(const UOp& load, const View& v, const std::vector<int>& row_axes, const std::vector<int>& k_axes,
                const std::vector<int>& batch_axes, const Shape& full) {
  const int64_t vec = 16 / load->dtype.itemsize();   // elements of one 16-byte copy
  Operand o;
  o.buf = load->src[0];
  o.off = v.offset;
  o.rows = merged_dims(v, row_axes, full);
  o.ks = merged_dims(v, k_axes, full);
  o.s_row = o.rows.back().stride;
  o.s_k = o.ks.back().stride;
  for (int ax : batch_axes) o.s_batch.push_back(v.strides[ax]);
  // the contiguous dim (K's innermost, else the rows') holds whole 16-byte chunks; every other stride is a
  // multiple of a chunk, so each chunk of 8 consecutive k (or rows) is one aligned copy
  o.k_major = o.s_k == 1;
  const Dims& inner = o.k_major ? o.ks : o.rows;
  need(inner.back().stride == 1 && inner.back().size % vec == 0);
  for (const Dims* ds : {&o.rows, &o.ks})
    for (const Dim& d : *ds) need(&d == &inner.back() || d.stride % vec == 0);
  need(o.off % vec == 0 && o.off >= 0);
  // every index the copies form stays in int32 (the batch base is 64-bit)
  int64_t hi = o.off;
  for (size_t i = 0; i < full.size(); i++) {
    need(v.strides[i] >= 0);
    hi += (full[i] - 1) * v.strides[i];
  }
  need(hi < (int64_t{1} << 31));
  for (int64_t s : o.s_batch) need(s % vec == 0);
  return o;
}

Plan plan(const Kernel& k) {
  need(getenv("TC_GEMM", 1) != 0 && k.opts->device == "CUDA" && k.vars.empty() && k.reduceops.size() == 1);
  Plan p;
  if (k.tensor_core) {
    need(k.use_tensor_cores == 1);
    p.tc = *k.tensor_core;
  } else {
    // no tensor core: an fp32 GEMM takes TF32 tensor cores when ALLOW_TF32=1 (sm_80+, off by default as in torch),
    // else the SIMT template (SIMT_GEMM=0 keeps the heuristic's kernel)
    need(k.reduceops[0]->dtype == dtypes::float32);
    auto* cuda = dynamic_cast<const CUDARenderer*>(k.opts);
    p.tf32 = getenv("ALLOW_TF32", 0) != 0 && cuda && cuda->sm >= 80;
    need(p.tf32 || getenv("SIMT_GEMM", 1) != 0);
    p.simt = !p.tf32;
    p.tc.dtype_in = p.tc.dtype_out = dtypes::float32;
  }
  const UOp& ast = k.ast;
  need(ast->op == Ops::SINK && ast->src.size() == 1);
  p.store = ast->src[0];
  need(p.store->op == Ops::STORE && p.store->src[0]->op == Ops::DEFINE_GLOBAL);
  p.reduce = k.reduceops[0];
  const ReduceArg& ra = p.reduce->as<ReduceArg>();
  need(ra.op == ReduceOps::SUM && p.reduce->dtype == p.tc.dtype_out);
  UOp mul = p.reduce->src[0];
  if (mul->op == Ops::CAST) mul = mul->src[0];
  need(is_mul(mul) && (mul == p.reduce->src[0] || p.reduce->src[0]->dtype == p.tc.dtype_out));
  auto is_load = [&](const UOp& u) {
    return u->op == Ops::LOAD && u->src.size() == 2 && u->src[0]->op == Ops::DEFINE_GLOBAL && u->src[1]->op == Ops::SHAPETRACKER &&
           u->dtype == p.tc.dtype_in;
  };
  need(is_load(mul->src[0]) && is_load(mul->src[1]));
  const ShapeTracker st0 = st_of(mul->src[0]->src[1]).simplify(), st1 = st_of(mul->src[1]->src[1]).simplify();
  need(!st0.symbolic() && !st1.symbolic() && st0.views.size() == 1 && st1.views.size() == 1);
  const View &v0 = st0.views[0], &v1 = st1.views[0];
  need(!v0.mask && !v1.mask);
  p.full = v0.shape;
  need(v1.shape == p.full);
  for (int64_t a : ra.axes)
    if (p.full[a] > 1) p.k_axes.push_back(static_cast<int>(a));
  need(!p.k_axes.empty());
  for (int i = 0; i < static_cast<int>(p.full.size()); i++) {
    if (p.full[i] == 1 || std::find(p.k_axes.begin(), p.k_axes.end(), i) != p.k_axes.end()) continue;
    const bool in0 = v0.strides[i] != 0, in1 = v1.strides[i] != 0;
    if (in0 && !in1) p.m_axes.push_back(i);
    else if (!in0 && in1) p.n_axes.push_back(i);
    else p.batch_axes.push_back(i);
  }
  need(!p.m_axes.empty() && !p.n_axes.empty());
  p.M = p.N = p.K = 1;
  for (int ax : p.m_axes) p.M *= p.full[ax];
  for (int ax : p.n_axes) p.N *= p.full[ax];
  for (int ax : p.k_axes) p.K *= p.full[ax];
  need(p.M < (int64_t{1} << 31) && p.N < (int64_t{1} << 31) && p.K < (int64_t{1} << 31));
  for (int ax : p.batch_axes) p.batch *= p.full[ax];
  need(p.batch <= 65535);
  // SIMT and TF32 only for GEMM shapes: a matrix-vector product (decode steps) keeps the heuristic's reduce kernel
  need(!(p.simt || p.tf32) || (p.M >= 64 && p.N >= 64 && p.K >= 32));
  // the epilogue's and the store's indices are int32 too
  for (const UOp& u : p.store.toposort())
    if ((u->op == Ops::LOAD || u->op == Ops::STORE) && u->src.size() > 1 && u->src[1]->op == Ops::SHAPETRACKER)
      need(st_of(u->src[1]).real_size() < (int64_t{1} << 31));
  p.a = operand(mul->src[0], v0, p.m_axes, p.k_axes, p.batch_axes, p.full);
  p.b = operand(mul->src[1], v1, p.n_axes, p.k_axes, p.batch_axes, p.full);
  // the SIMT template addresses plain strided operands only
  need(!p.simt || (p.a.linear() && p.b.linear()));
  return p;
}

// ------------------------------------------------------------------ shape-generic kernels: int arguments

// The int arguments of a shape-generic kernel (the TMA one): every size and stride its source would otherwise hold as
// a constant is a parameter `const int tg_<name>` with its value in RenderedProgram::arg_vals, so that GEMMs which
// differ only in shape render one source and share its binary. What stays in the text is the config: dtypes, layouts,
// the tile config, the epilogue's ops, and which strides are 0 or 1 (those decide the text's form: vector stores,
// coalescing). A tensor-map field refers to argument i as -(1 + i) (runtime/cuda.cpp reads it from the launch's ints).
struct Args {
  std::vector<std::pair<std::string, int64_t>> list;   // parameter, value; in order of first use
  std::vector<UOp> trackers;                           // the epilogue's SHAPETRACKERs in order of first use

  // the parameter's index in list, added on first use
  size_t slot(const std::string& name, int64_t v) {
    const std::string n = "tg_" + name;
    for (size_t i = 0; i < list.size(); i++)
      if (list[i].first == n) {
        TG_ASSERT(list[i].second == v, "tc_gemm: argument " + n + " bound to " + std::to_string(list[i].second) + " and " + std::to_string(v));
        return i;
      }
    need(v >= -(int64_t{1} << 31) && v < (int64_t{1} << 31));   // the launch passes ints
    list.push_back({n, v});
    return list.size() - 1;
  }
  std::string operator()(const std::string& name, int64_t v) { return list[slot(name, v)].first; }
  long long ref(const std::string& name, int64_t v) { return -1 - static_cast<long long>(slot(name, v)); }
  int tracker(const UOp& st) {
    for (size_t i = 0; i < trackers.size(); i++)
      if (trackers[i] == st) return static_cast<int>(i);
    trackers.push_back(st);
    return static_cast<int>(trackers.size()) - 1;
  }
  std::string params() const {
    std::string s;
    for (const auto& [n, v] : list) s += ", const int " + n;
    return s;
  }
  std::vector<int64_t> values() const {
    std::vector<int64_t> v;
    for (const auto& [n, x] : list) v.push_back(x);
    return v;
  }
};

// ------------------------------------------------------------------ the epilogue: AST after the reduce -> C

struct Epilogue {
  const CStyleLanguage& r;
  const Plan& p;
  std::vector<UOp> idxs;   // per axis of the output: em, en, eb<i>, or 0
  Args* args = nullptr;    // shape-generic: sizes and strides as arguments (generic_index)

  // an ALU node in the renderer's syntax, its sources rendered by src (index math or values)
  template <class F>
  std::string alu(const UOp& u, F src) const {
    std::vector<std::string> o;
    for (const UOp& s : u->src) o.push_back(src(s));
    const AluOp op = u->is<UnaryOps>() ? AluOp(u->as<UnaryOps>()) : u->is<BinaryOps>() ? AluOp(u->as<BinaryOps>()) : AluOp(u->as<TernaryOps>());
    auto it = r.code_for_op.find(op);
    need(it != r.code_for_op.end());
    return it->second(o, u->dtype);
  }
  std::string index(const UOp& u) const {
    switch (u->op) {
      case Ops::CONST: return r.render_const(u.const_value(), u->dtype);
      case Ops::DEFINE_VAR: return u->as<std::string>();
      case Ops::CAST: return r.render_cast(index(u->src[0]), u->dtype);
      case Ops::ALU: return alu(u, [&](const UOp& s) { return index(s); });
      default: throw NotCovered{};
    }
  }
  // axis i's index as the generic kernel forms it: em / en for a single M / N axis, else its digit of the flat index
  // (the sizes as arguments), eb<j> for batch axis j
  std::string digit(int i) const {
    for (auto [axes, flat] : {std::pair{&p.m_axes, "em"}, std::pair{&p.n_axes, "en"}}) {
      auto at = std::find(axes->begin(), axes->end(), i);
      if (at == axes->end()) continue;
      std::string inner;
      for (auto it = at + 1; it != axes->end(); ++it) inner += (inner.empty() ? "" : " * ") + (*args)("d" + S(*it), p.full[*it]);
      std::string d = inner.empty() ? std::string(flat) : "(" + std::string(flat) + " / (" + inner + "))";
      return at == axes->begin() ? d : "(" + d + " % " + (*args)("d" + S(i), p.full[i]) + ")";
    }
    auto it = std::find(p.batch_axes.begin(), p.batch_axes.end(), i);
    TG_ASSERT(it != p.batch_axes.end(), "tc_gemm: output axis " + std::to_string(i) + " is neither M, N nor batch");
    return "eb" + S(it - p.batch_axes.begin());
  }
  // a single unmasked view's element index with its offset and strides other than 0 and 1 as arguments (nothing for
  // other trackers: they keep their constants, correct for this shape only, as the text shows)
  std::optional<std::string> generic_index(const UOp& stu) const {
    const ShapeTracker st = st_of(stu).simplify();
    if (st.views.size() != 1 || st.views[0].mask || st.symbolic()) return std::nullopt;
    const View& v = st.views[0];
    const std::string t = "e" + S(args->tracker(stu)) + "_";
    std::string s;
    for (int i = 0; i < static_cast<int>(v.shape.size()); i++) {
      if (v.shape[i] == 1 || v.strides[i] == 0) continue;
      const std::string d = digit(i);
      s += (s.empty() ? "" : " + ") + (v.strides[i] == 1 ? d : d + " * " + (*args)(t + "s" + S(i), v.strides[i]));
    }
    if (v.offset != 0) s += (s.empty() ? "" : " + ") + (*args)(t + "o", v.offset);
    return s.empty() ? "0" : s;
  }
  std::pair<std::string, std::optional<std::string>> indexed(const UOp& st) const {
    if (args)
      if (auto g = generic_index(st)) return {*g, std::nullopt};
    auto [idx, valid] = to_indexed_uops(st_of(st), idxs);
    idx = simplify(idx), valid = simplify(valid);
    std::optional<std::string> v;
    if (!(valid->op == Ops::CONST && valid.const_value() == ConstType(true))) v = index(valid);
    return {index(idx), v};
  }
  static ConstType ast_value(const UOp& x) {
    if (x->is<bool>()) return x->as<bool>();
    if (x->is<int64_t>()) return x->as<int64_t>();
    return x->as<double>();
  }
  std::string value(const UOp& x) const {
    if (x == p.reduce) return x->dtype == dtypes::float32 ? "acc" : r.render_cast("acc", x->dtype);
    switch (x->op) {
      case Ops::LOAD: {
        need(x->src.size() == 2 && x->src[0]->op == Ops::DEFINE_GLOBAL && x->src[1]->op == Ops::SHAPETRACKER);
        auto [i, v] = indexed(x->src[1]);
        const std::string ld = "data" + std::to_string(x->src[0]->as<int64_t>()) + "[" + i + "]";
        return v ? "(" + *v + "?" + ld + ":" + r.render_const(int64_t{0}, x->dtype) + ")" : ld;
      }
      case Ops::CONST: {
        need(x->src.size() == 1 && x->src[0]->op == Ops::SHAPETRACKER);
        const std::string c = r.render_const(ast_value(x), x->dtype);
        auto [i, v] = indexed(x->src[0]);
        return v ? "(" + *v + "?" + c + ":" + r.render_const(int64_t{0}, x->dtype) + ")" : c;
      }
      case Ops::CAST: return r.render_cast(value(x->src[0]), x->dtype);
      case Ops::BITCAST: return r.render_cast(value(x->src[0]), x->dtype, true);
      case Ops::ALU: return alu(x, [&](const UOp& s) { return value(s); });
      default: throw NotCovered{};
    }
  }
  // the store's element index and value apart, for a vector of stores (none when the store is masked)
  std::optional<std::pair<std::string, std::string>> store_parts() const {
    auto [i, v] = indexed(p.store->src[1]);
    if (v) return std::nullopt;
    return std::pair{i, value(p.store->src[2])};
  }
  std::string store() const {
    auto [i, v] = indexed(p.store->src[1]);
    const std::string s = "data" + std::to_string(p.store->src[0]->as<int64_t>()) + "[" + i + "] = " + value(p.store->src[2]) + ";";
    return v ? "if (" + *v + ") { " + s + " }" : s;
  }
};

// ------------------------------------------------------------------ the kernel text

// PTX wrappers. A test compiles the same kernel on the CPU with TG_GEMM_EMU defined and its own warp emulation.
const char* kHelpers = R"(#ifndef TG_GEMM_EMU
__device__ __forceinline__ void tg_cp_async16(void* dst, const void* src, int bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tg_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void tg_cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
__device__ __forceinline__ void tg_ldsm_x4(unsigned* r, const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void tg_ldsm_x4_t(unsigned* r, const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void tg_mma(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.TG_IN.TG_IN.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
)";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

// the epilogue's guard for an output element (em, en) of a tile_m x tile_n block tile: only the dims the tiles
// don't divide need one (the unrolled epilogue's compares were a third of NVRTC's time for a 1536^3 GEMM)
std::string in_bounds(const Plan& p, int64_t tile_m, int64_t tile_n) {
  std::string c;
  if (p.M % tile_m != 0) c = "em < " + S(p.M);
  if (p.N % tile_n != 0) c += (c.empty() ? "" : " && ") + std::string("en < ") + S(p.N);
  return c.empty() ? "{" : "if (" + c + ") {";
}

// Does the output advance by one element along the innermost of these axes (M's or N's)? Then the staged
// epilogue walks that dim fastest, so that a warp's stores are coalesced.
bool out_contiguous(const Plan& p, const std::vector<int>& axes) {
  const ShapeTracker st = st_of(p.store->src[1]).simplify();
  return st.views.size() == 1 && st.views[0].strides[axes.back()] == 1;
}

// the bytes of one warp's stage of `cols` columns
int64_t stage_bytes(int cols) { return int64_t{16} * cols * 4; }

// the element offset of flat index x (a C expression) in dims d: per dim its digit of x times its stride
std::string addr(const Dims& d, const std::string& x) {
  std::string s;
  int64_t inner = 1;
  for (size_t i = d.size(); i-- > 0;) {
    std::string digit = inner == 1 ? x : "(" + x + ") / " + S(inner);
    if (i > 0) digit = "(" + digit + ") % " + S(d[i].size);
    if (d[i].stride != 0) s += (s.empty() ? "" : " + ") + (d[i].stride == 1 ? "(" + digit + ")" : "(" + digit + ") * " + S(d[i].stride));
    inner *= d[i].size;
  }
  return s.empty() ? "0" : s;
}

// the chunk swizzle of k row `k` of an M/N-major tile. 16-bit: k%8 (ldmatrix.trans reads 8 k rows of one logical
// chunk). TF32 (4 floats a chunk): the fragment loads are scalar, a warp reading k rows t (0..3, or 4..7) of two
// adjacent chunks; (k%4)*2 + (k/4)%2 spreads those 8 (chunk, k) pairs over the 8 distinct 16-byte bank groups.
std::string mn_swz(int vec, const std::string& k) {
  return vec == 8 ? "(" + k + " & 7)" : "(((" + k + " & 3) << 1) | ((" + k + " >> 2) & 1))";
}

// One operand's tile copy for k-tile kt into stage s. K-major tiles are [rows][BK] (64-byte rows) with the 16-byte
// chunk index XORed by (row/2)%4 (8 consecutive rows then fall in 8 distinct bank groups); M/N-major tiles are
// [BK][rows] with the chunk XORed by mn_swz(k). ldmatrix reads 8 rows of one logical chunk: conflict-free either way.
// vec: elements of a 16-byte chunk (8 for fp16/bf16, 4 for TF32's fp32).
std::string tile_copy(const Operand& o, const std::string& name, const std::string& sm, int rows, int threads, int bk, int64_t dim,
                      int64_t K, const std::string& row0, int vec = 8) {
  const int chunks = rows * bk / vec, iters = chunks / threads;
  TG_ASSERT(chunks % threads == 0, "tile copy does not divide over the block");
  std::string s = "#pragma unroll\n    for (int i = 0; i < " + S(iters) + "; i++) {\n      const int c = tid + i * " + S(threads) + ";\n";
  if (o.k_major) {
    const int cpr = bk / vec;
    s += "      const int r = c / " + S(cpr) + ", ch = c % " + S(cpr) + ", gr = " + row0 + " + r, gk = kt * " + S(bk) + " + ch * " + S(vec) + ";\n";
    s += "      const bool ok = gr < " + S(dim) + " && gk < " + S(K) + ";\n";
    s += "      tg_cp_async16(" + sm + " + st * " + S(rows * bk) + " + r * " + S(bk) + " + ((ch ^ ((r >> 1) & 3)) << " + S(vec == 8 ? 3 : 2) + "), " + name +
         " + (ok ? " + addr(o.rows, "gr") + " + " + addr(o.ks, "gk") + " : 0), ok ? 16 : 0);\n";
  } else {
    const int cpr = rows / vec;
    s += "      const int r = c / " + S(cpr) + ", ch = c % " + S(cpr) + ", gk = kt * " + S(bk) + " + r, gr = " + row0 + " + ch * " + S(vec) + ";\n";
    s += "      const bool ok = gr < " + S(dim) + " && gk < " + S(K) + ";\n";
    s += "      tg_cp_async16(" + sm + " + st * " + S(rows * bk) + " + r * " + S(rows) + " + ((ch ^ " + mn_swz(vec, "r") + ") << " + S(vec == 8 ? 3 : 2) +
         "), " + name + " + (ok ? " + addr(o.ks, "gk") + " + " + addr(o.rows, "gr") + " : 0), ok ? 16 : 0);\n";
  }
  return s + "    }\n";
}

// ldmatrix of one 16x16 A fragment (mi) or two 16x8 B fragments (nj, nj+1) for k step kk, into r[4]
std::string frag_load(const Operand& o, bool is_a, const std::string& sm, int rows, int bk, const std::string& row0) {
  std::string s;
  if (o.k_major) {
    // A: lanes 0-15 rows 0-15 at k 0-7, lanes 16-31 at k 8-15; B: lanes 0-7/16-23 rows 0-7/8-15, lanes 8-15/24-31 k 8-15
    const std::string row = is_a ? "(lane & 15)" : "((lane & 7) + ((lane >> 4) << 3))", ch = is_a ? "(lane >> 4)" : "((lane >> 3) & 1)";
    s += "const int rr = " + row0 + " + " + row + ", ch = kk * 2 + " + ch + ";\n";
    s += "        tg_ldsm_x4(r, " + sm + " + rr * " + S(bk) + " + ((ch ^ ((rr >> 1) & 3)) << 3));";
  } else {
    const std::string kr = is_a ? "((lane & 7) + ((lane >> 4) << 3))" : "((lane & 7) + (((lane >> 3) & 1) << 3))",
                      ch = is_a ? "((lane >> 3) & 1)" : "(lane >> 4)";
    s += "const int kr = kk * 16 + " + kr + ", ch = (" + row0 + ") / 8 + " + ch + ";\n";
    s += "        tg_ldsm_x4_t(r, " + sm + " + kr * " + S(rows) + " + ((ch ^ (kr & 7)) << 3));";
  }
  return s;
}

// TF32 (fp32 in memory, m16n8k8 tf32 fragments of 32-bit registers) for k step kk (8 k) into r[4]. A: (row g, k t),
// (g+8, t), (g, t+4), (g+8, t+4); B: rows nj: (k t, row g), (t+4, g), rows nj+1: (t, g), (t+4, g) (g = lane/4,
// t = lane%4). K-major tiles: ldmatrix of 16-byte rows (4 floats) moves exactly these 32-bit words, with the fp16
// addressing (a k8 step is two chunks, as a k16 step of halves). M/N-major: ldmatrix.trans has no 32-bit form, so
// scalar shared-memory loads (the tile's mn_swz makes a warp's 32 of them conflict-free).
std::string frag_load_tf32(const Operand& o, bool is_a, const std::string& sm, int rows, int bk, const std::string& row0) {
  if (o.k_major) {
    const std::string row = is_a ? "(lane & 15)" : "((lane & 7) + ((lane >> 4) << 3))", ch = is_a ? "(lane >> 4)" : "((lane >> 3) & 1)";
    return "const int rr = " + row0 + " + " + row + ", ch = kk * 2 + " + ch + ";\n        tg_ldsm_x4(r, " + sm + " + rr * " + S(bk) +
           " + ((ch ^ ((rr >> 1) & 3)) << 2));\n        for (int q = 0; q < 4; q++) r[q] = tg_tf32u(r[q]);";
  }
  std::string s = "const int g = " + row0 + " + (lane >> 2), t = kk * 8 + (lane & 3);\n";
  s += "        auto e = [&](int k, int m) { return tg_tf32(" + sm + "[k * " + S(rows) + " + ((((m >> 2) ^ " + mn_swz(4, "k") +
       ") << 2) | (m & 3))]); };\n";
  if (is_a) s += "        r[0] = e(t, g); r[1] = e(t, g + 8); r[2] = e(t + 4, g); r[3] = e(t + 4, g + 8);";
  else s += "        r[0] = e(t, g); r[1] = e(t + 4, g); r[2] = e(t, g + 8); r[3] = e(t + 4, g + 8);";
  return s;
}

// TF32 helpers: the m16n8k8 MMA and the operand conversion. By default the fp32 bits go in as they are and the
// tensor core ignores the low 13 mantissa bits (truncation, CUTLASS's 'fast' TF32: no conversion instructions in
// the k loop). TF32_ROUND=1 rounds the register operands to TF32 (cvt.rna, one instruction per fragment register):
// both of mma.sync's, wgmma's R only (its S operand is read from shared memory as it was copied).
std::string tf32_helpers() {
  const bool round = getenv("TF32_ROUND", 0) != 0;
  return std::string("#ifndef TG_GEMM_EMU\n") +
         (round ? "__device__ __forceinline__ unsigned tg_tf32(float x) { unsigned r; asm(\"cvt.rna.tf32.f32 %0, %1;\\n\" : \"=r\"(r) : \"f\"(x)); return r; }\n"
                : "__device__ __forceinline__ unsigned tg_tf32(float x) { return __float_as_uint(x); }\n") +
         "__device__ __forceinline__ unsigned tg_tf32u(unsigned x) { return " + (round ? "tg_tf32(__uint_as_float(x))" : "x") + "; }\n"
         "__device__ __forceinline__ void tg_mma_tf32(float* c, const unsigned* a, const unsigned* b) {\n"
         "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\\n\"\n"
         "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
         "}\n#endif\n";
}

// TC_GEMM_CFG="bm,bn,warps_m,warps_n,stages,min_blocks" picks a block tile (for sweeps); else by the grid's size
Cfg choose(const Plan& p) {
  const Cfg big{128, 128, 32, 2, 4, 3, 2}, small{64, 64, 32, 2, 2, 4, 4};
  if (const std::string e = getenv_str("TC_GEMM_CFG"); !e.empty()) {
    std::vector<int> v;
    for (size_t at = 0; at <= e.size();) {
      const size_t comma = std::min(e.find(',', at), e.size());
      v.push_back(std::atoi(e.substr(at, comma - at).c_str()));
      at = comma + 1;
    }
    const Cfg c = v.size() == 6 ? Cfg{v[0], v[1], 32, v[2], v[3], v[4], v[5]} : Cfg{};
    const bool ok = v.size() == 6 && c.warps_m > 0 && c.warps_n > 0 && c.bm % (16 * c.warps_m) == 0 && c.bn % (16 * c.warps_n) == 0 &&
                    (c.bm * c.bk / 8) % c.threads() == 0 && (c.bn * c.bk / 8) % c.threads() == 0 && c.stages >= 2 && c.min_blocks >= 1 &&
                    c.stages * (c.bm + c.bn) * c.bk * 2 <= 49152;
    if (!ok)
      throw Error("TC_GEMM_CFG=" + e + ": want bm,bn,warps_m,warps_n,stages,min_blocks with bm a multiple of 16*warps_m, bn of " +
                  "16*warps_n, each tile's 16-byte chunks a multiple of the block's threads, and stages*(bm+bn)*64 bytes <= 48 KiB");
    return c;
  }
  const int64_t tile = getenv("TC_GEMM_TILE", 0);
  if (tile == 128) return big;
  if (tile == 64) return small;
  const int64_t blocks = ((p.M + 127) / 128) * ((p.N + 127) / 128) * p.batch;
  return blocks >= 128 ? big : small;
}

// the kernel's opening: headers, the PTX wrappers, the signature (every buffer of the AST by index), the tile
// order, the batch decomposition and the operands' base pointers ga/gb. Also the epilogue's store statement.
// vec: the output's element index and value, when the store is unmasked (the staged epilogue's vector stores)
struct Opening {
  std::string src, store;
  std::optional<std::pair<std::string, std::string>> vec;
  std::string out_type;   // the output buffer's element type
};
Opening opening(const Plan& p, const CStyleLanguage& r, const std::string& fname, int threads, int min_blocks, int64_t tiles_m,
                int64_t tiles_n, int64_t tile_m, int64_t tile_n, const std::string& extra_helpers, const std::string& extra_params = "",
                bool block_tile = true, Args* args = nullptr) {
  const std::string tin = r.render_dtype(p.tc.dtype_in);
  std::vector<UOp> globals(1 + [&] {
    int64_t mx = 0;
    for (const UOp& u : p.store.toposort())
      if (u->op == Ops::DEFINE_GLOBAL) mx = std::max(mx, u->as<int64_t>());
    return mx;
  }());
  for (const UOp& u : p.store.toposort())
    if (u->op == Ops::DEFINE_GLOBAL) globals[u->as<int64_t>()] = u;
  std::vector<std::string> params;
  bool bf16 = false;
  for (size_t i = 0; i < globals.size(); i++) {
    const DType dt = globals[i] ? globals[i]->dtype.base() : dtypes::uint8;
    bf16 = bf16 || dt == dtypes::bfloat16;
    const bool out = globals[i] == p.store->src[0];
    params.push_back(std::string(out ? "" : "const ") + r.render_dtype(dt) + "* __restrict__ data" + S(static_cast<int64_t>(i)));
  }
  Epilogue epi{r, p, {}, args};
  for (int i = 0; i < static_cast<int>(p.full.size()); i++) {
    auto var = [&](const std::string& nm, int64_t n) {
      return UOp(Ops::DEFINE_VAR, dtypes::int32, {UOp::const_(dtypes::int32, int64_t{0}), UOp::const_(dtypes::int32, n - 1)}, nm);
    };
    // an axis of M (N): its digit of the flat row index em (en), the last axis fastest
    auto digit = [&](const std::vector<int>& axes, const UOp& flat) -> std::optional<UOp> {
      auto at = std::find(axes.begin(), axes.end(), i);
      if (at == axes.end()) return std::nullopt;
      int64_t inner = 1;
      for (auto it = at + 1; it != axes.end(); ++it) inner *= p.full[*it];
      UOp d = inner == 1 ? flat : flat / inner;
      return at == axes.begin() ? d : d % p.full[i];
    };
    if (auto dm = digit(p.m_axes, var("em", p.M))) epi.idxs.push_back(*dm);
    else if (auto dn = digit(p.n_axes, var("en", p.N))) epi.idxs.push_back(*dn);
    else if (auto it = std::find(p.batch_axes.begin(), p.batch_axes.end(), i); it != p.batch_axes.end())
      epi.idxs.push_back(var("eb" + S(it - p.batch_axes.begin()), p.full[i]));
    else epi.idxs.push_back(UOp::const_(dtypes::int32, int64_t{0}));
  }
  Opening o;
  o.store = epi.store();
  o.vec = epi.store_parts();
  o.out_type = r.render_dtype(p.store->src[0]->dtype.base());
  std::string& s = o.src;
  s = "#define INFINITY (__int_as_float(0x7f800000))\n#define NAN (__int_as_float(0x7fffffff))\n#include <cuda_fp16.h>\n";
  if (bf16) s += "#include <cuda_bf16.h>\n";
  const std::string in = p.tc.dtype_in == dtypes::half ? "f16" : "bf16";
  s += replace_all(kHelpers, "TG_IN", in) + replace_all(extra_helpers, "TG_IN", in);
  s += "extern \"C\" __global__ void __launch_bounds__(" + S(threads) + ", " + S(min_blocks) + ") " + fname + "(";
  for (size_t i = 0; i < params.size(); i++) s += (i ? ", " : "") + params[i];
  s += extra_params + ") {\n";
  s += "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n";
  if (!block_tile) return o;
  // groups of 8 tile rows walk the columns together, so that the tiles a wave of blocks reads stay in L2
  s += "  const int pid = blockIdx.x, gw = 8 * " + S(tiles_n) + ", g0 = (pid / gw) * 8;\n";
  s += "  const int gsz = min(" + S(tiles_m) + " - g0, 8), tm = g0 + (pid % gw) % gsz, tn = (pid % gw) / gsz;\n";
  s += "  const int t0 = tm * " + S(tile_m) + ", t1 = tn * " + S(tile_n) + ";\n";
  std::string boff_a = S(p.a.off), boff_b = S(p.b.off);
  int64_t rest = p.batch;
  for (size_t i = 0; i < p.batch_axes.size(); i++) {
    const int64_t n = p.full[p.batch_axes[i]];
    rest /= n;
    s += "  const int eb" + S(static_cast<int64_t>(i)) + " = (blockIdx.z / " + S(rest) + ") % " + S(n) + ";\n";
    boff_a += " + (long long)eb" + S(static_cast<int64_t>(i)) + " * " + S(p.a.s_batch[i]);
    boff_b += " + (long long)eb" + S(static_cast<int64_t>(i)) + " * " + S(p.b.s_batch[i]);
  }
  s += "  const " + tin + "* ga = data" + S(p.a.buf->as<int64_t>()) + " + (" + boff_a + ");\n";
  s += "  const " + tin + "* gb = data" + S(p.b.buf->as<int64_t>()) + " + (" + boff_b + ");\n";
  return o;
}

// The epilogue of wgmma's accumulators through shared memory. Each warp holds 16 R rows x bs S columns: d[4j + q]
// is R row (lane>>2) + 8*(q>>1), S column 8j + 2*(lane&3) + (q&1). Per chunk of `cols` S columns the warp writes
// its d[4j..4j+3] as one float4 into its own stage (16 x cols floats in fragment order: slot j*32 + lane, XORed so
// that the reads below hit distinct banks), then a rolled loop renders the AST's epilogue ONCE (in an unrolled
// loop of VW elements) over runs of VW elements along the dim the output is contiguous in. VW = 8 with one or two
// 16-byte stores where the output allows it (unmasked, 8 consecutive elements aligned and within one row of it),
// else VW = 1, the lanes on consecutive elements. Unrolled, the 64-128 epilogues per thread were most of NVRTC's
// time for a GEMM (bench/tc_notes.md, session 10). The chunk loop is rolled too: chunk c's writes sit in
// `if (c == k)` blocks, so that d's indices stay constants.
struct Staged {
  bool s_is_b;
  int bs, cols;                       // S columns per warp, per chunk
  std::string guard;                  // the output element (em, en)'s bounds check, opening a block
  std::string stage, rbase, sbase;    // this warp's float* stage; its first R row and the tile's first S column
};
// can runs of 8 output elements along `axes` (M's or N's, the kernel's split axes) be stored as 16-byte vectors?
// The axes' innermost contiguous run (axes merged while each stride is the extent inside it) must hold whole runs
// of 8, and the offset and every other axis' stride must keep a run's first element 16-byte aligned.
bool vec8(const Plan& p, bool unmasked, const std::vector<int>& axes) {
  const DType dt = p.store->src[0]->dtype.base();
  if (!unmasked || (dt.itemsize() != 2 && dt.itemsize() != 4) || !out_contiguous(p, axes)) return false;
  const ShapeTracker st = st_of(p.store->src[1]).simplify();
  const View& v = st.views[0];
  int64_t run = 1;
  size_t k = axes.size();
  while (k > 0 && v.strides[axes[k - 1]] == run) run *= p.full[axes[--k]];
  if (run % 8 != 0 || v.offset % 8 != 0) return false;
  for (size_t i = 0; i < v.strides.size(); i++)
    if (std::find(axes.begin() + static_cast<std::ptrdiff_t>(k), axes.end(), static_cast<int>(i)) == axes.end() && v.strides[i] % 8 != 0) return false;
  return true;
}
std::string staged_epilogue(const Plan& p, const Opening& o, const Staged& e, const std::string& ind) {
  const int chunks = e.bs / e.cols;
  const std::vector<int>& r_axes = e.s_is_b ? p.m_axes : p.n_axes;
  const bool r_fast = out_contiguous(p, r_axes), vec = vec8(p, o.vec.has_value(), r_fast ? r_axes : (e.s_is_b ? p.n_axes : p.m_axes));
  const int vw = vec ? 8 : 1, runs = r_fast ? 16 / vw : e.cols / vw;   // runs of vw elements along the fast dim
  // slot L of 8-column block j
  auto slot = [](const std::string& j, const std::string& l) { return "(" + j + " * 32 + (" + l + " ^ (((" + l + " >> 3) & 3) | ((" + j + " & 1) << 2))))"; };
  // the output coordinates em, en of the stage's element (lr, ls)
  auto coords = [&](const std::string& in, const std::string& lr, const std::string& ls) {
    return in + "const int er = " + e.rbase + " + " + lr + ", es = " + e.sbase + " + c * " + S(e.cols) + " + " + ls + ";\n" + in + "const int em = " +
           (e.s_is_b ? "er" : "es") + ", en = " + (e.s_is_b ? "es" : "er") + ";\n";
  };
  std::string s = ind + "float* tg_ep = " + e.stage + ";\n";
  s += "#pragma unroll 1\n" + ind + "for (int c = 0; c < " + S(chunks) + "; c++) {\n";
  s += ind + "  __syncwarp();   // the lanes' reads of the last chunk are done\n";
  for (int k = 0; k < chunks; k++) {
    const int j0 = k * e.cols / 8;
    const std::string body = "#pragma unroll\n" + ind + "  for (int j = 0; j < " + S(e.cols / 8) + "; j++)\n" + ind +
                             "    reinterpret_cast<float4*>(tg_ep)[" + slot("j", "lane") + "] = make_float4(d[" + S(4 * j0) + " + 4 * j], d[" +
                             S(4 * j0 + 1) + " + 4 * j], d[" + S(4 * j0 + 2) + " + 4 * j], d[" + S(4 * j0 + 3) + " + 4 * j]);\n";
    s += chunks == 1 ? body : ind + "  if (c == " + S(k) + ") {\n" + body + ind + "  }\n";
  }
  s += ind + "  __syncwarp();\n";
  s += "#pragma unroll 1\n" + ind + "  for (int x = lane; x < " + S(16 * e.cols / vw) + "; x += 32) {\n";
  const std::string fast = "(x % " + S(runs) + ")" + (vw > 1 ? " * " + S(vw) : ""), slow = "x / " + S(runs);
  s += ind + "    const int lr0 = " + (r_fast ? fast : slow) + ", ls0 = " + (r_fast ? slow : fast) + ";\n";
  // one element of the run: u along the fast dim
  const std::string in = ind + (vec ? "        " : "      ");
  std::string one = in + "const int lr = lr0" + (r_fast && vec ? " + u" : "") + ", ls = ls0" + (!r_fast && vec ? " + u" : "") + ";\n";
  one += in + "const int j = ls >> 3, l = ((lr & 7) << 2) | ((ls & 7) >> 1), q = ((lr >> 3) << 1) | (ls & 1);\n";
  one += coords(in, "lr", "ls") + in + "const float acc = tg_ep[" + slot("j", "l") + " * 4 + q];\n";
  if (!vec) {
    s += ind + "    {\n" + one + in + e.guard + "\n" + in + "  " + o.store + "\n" + in + "}\n" + ind + "    }\n";
  } else {
    // the run's first element gives the index and the guard (a run is all in or all out), then its 8 values
    const int n16 = vw * static_cast<int>(p.store->src[0]->dtype.base().itemsize()) / 16;
    s += coords(ind + "    ", "lr0", "ls0") + ind + "    " + e.guard + "\n" + ind + "      uint4 tg_o[" + S(n16) + "];\n";
    s += "#pragma unroll\n" + ind + "      for (int u = 0; u < " + S(vw) + "; u++) {\n" + one + in + "reinterpret_cast<" + o.out_type + "*>(tg_o)[u] = " +
         o.vec->second + ";\n" + ind + "      }\n";
    s += ind + "      uint4* tg_g = reinterpret_cast<uint4*>(&data" + S(p.store->src[0]->as<int64_t>()) + "[" + o.vec->first + "]);\n";
    s += "#pragma unroll\n" + ind + "      for (int v = 0; v < " + S(n16) + "; v++) tg_g[v] = tg_o[v];\n" + ind + "    }\n";
  }
  return s + ind + "  }\n" + ind + "}\n";
}

// the k loop's skeleton: prologue copies, then per k tile wait, barrier, refill a stage, compute. The refill goes
// `ahead` tiles ahead into the stage computed on stages-ahead iterations ago: that compute must be finished (the
// barrier orders it for plain loads; wgmma waits for all but stages-1-ahead groups at the end of compute).
std::string k_loop(int stages, int ahead, int64_t kt_n, const std::string& before_barrier, const std::string& compute) {
  std::string s = "  constexpr int KT = " + S(kt_n) + ";\n";
  s += "#pragma unroll\n  for (int st = 0; st < " + S(ahead) + "; st++) {\n    if (st < KT) load_tile(st, st);\n    tg_cp_commit();\n  }\n";
  s += "  for (int kt = 0; kt < KT; kt++) {\n";
  s += "    tg_cp_wait<" + S(ahead - 1) + ">();\n" + before_barrier + "    __syncthreads();\n";
  s += "    if (kt + " + S(ahead) + " < KT) load_tile((kt + " + S(ahead) + ") % " + S(stages) + ", kt + " + S(ahead) + ");\n";
  s += "    tg_cp_commit();\n" + compute + "  }\n  tg_cp_wait<0>();\n";
  return s;
}

// mma.sync: warps_m x warps_n warps, each a (bm/warps_m) x (bn/warps_n) tile of 16x8 mma tiles; A and B by ldmatrix
std::string render(const Plan& p, const Cfg& c, const CStyleLanguage& r, const std::string& fname) {
  const int wm = c.bm / c.warps_m, wn = c.bn / c.warps_n, mi_n = wm / 16, ni_n = wn / 8;
  const int64_t tiles_m = (p.M + c.bm - 1) / c.bm, tiles_n = (p.N + c.bn - 1) / c.bn;
  const std::string tin = r.render_dtype(p.tc.dtype_in);
  Opening o = opening(p, r, fname, c.threads(), c.min_blocks, tiles_m, tiles_n, c.bm, c.bn, p.tf32 ? tf32_helpers() : "");
  std::string s = o.src;
  s += "  // block tile " + S(c.bm) + "x" + S(c.bn) + "x" + S(c.bk) + ", " + S(c.stages) + " stages, " + S(c.warps_m * c.warps_n) +
       " warps of " + S(wm) + "x" + S(wn) + (p.tf32 ? " (mma.sync tf32)" : " (mma.sync)") + "; M=" + S(p.M) + " N=" + S(p.N) + " K=" + S(p.K) + " batch=" + S(p.batch) + "\n";
  s += "  const int m0 = t0, n0 = t1;\n";
  s += "  __shared__ __align__(128) " + tin + " tg_sa[" + S(c.stages * c.bm * c.bk) + "];\n";
  s += "  __shared__ __align__(128) " + tin + " tg_sb[" + S(c.stages * c.bn * c.bk) + "];\n";
  s += "  const int wm0 = (warp / " + S(c.warps_n) + ") * " + S(wm) + ", wn0 = (warp % " + S(c.warps_n) + ") * " + S(wn) + ";\n";
  s += "  float c[" + S(mi_n) + "][" + S(ni_n) + "][4];\n";
  s += "#pragma unroll\n  for (int i = 0; i < " + S(mi_n) + "; i++)\n#pragma unroll\n    for (int j = 0; j < " + S(ni_n) +
       "; j++) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.0f;\n";
  s += "  auto load_tile = [&](int st, int kt) {\n    " + tile_copy(p.a, "ga", "tg_sa", c.bm, c.threads(), c.bk, p.M, p.K, "m0", p.vec()) +
       "    " + tile_copy(p.b, "gb", "tg_sb", c.bn, c.threads(), c.bk, p.N, p.K, "n0", p.vec()) + "  };\n";
  // a k step: 16 halves (m16n8k16) or 8 floats (TF32 m16n8k8), 32 bytes of a row either way
  auto frag = [&](const Operand& op, bool is_a, const std::string& sm, int rows, const std::string& row0) {
    return p.tf32 ? frag_load_tf32(op, is_a, sm, rows, c.bk, row0) : frag_load(op, is_a, sm, rows, c.bk, row0);
  };
  std::string compute;
  compute += "    const " + tin + "* sa = tg_sa + (kt % " + S(c.stages) + ") * " + S(c.bm * c.bk) + ";\n";
  compute += "    const " + tin + "* sb = tg_sb + (kt % " + S(c.stages) + ") * " + S(c.bn * c.bk) + ";\n";
  compute += "#pragma unroll\n    for (int kk = 0; kk < " + S(c.bk / (p.tf32 ? 8 : 16)) + "; kk++) {\n";
  compute += "      unsigned af[" + S(mi_n) + "][4], bf[" + S(ni_n) + "][2];\n";
  compute += "#pragma unroll\n      for (int mi = 0; mi < " + S(mi_n) + "; mi++) {\n        unsigned* r = af[mi];\n        " +
             frag(p.a, true, "sa", c.bm, "wm0 + mi * 16") + "\n      }\n";
  compute += "#pragma unroll\n      for (int nj = 0; nj < " + S(ni_n) + "; nj += 2) {\n        unsigned r[4];\n        " +
             frag(p.b, false, "sb", c.bn, "wn0 + nj * 8") +
             "\n        bf[nj][0] = r[0]; bf[nj][1] = r[1]; bf[nj + 1][0] = r[2]; bf[nj + 1][1] = r[3];\n      }\n";
  compute += "#pragma unroll\n      for (int mi = 0; mi < " + S(mi_n) + "; mi++)\n#pragma unroll\n        for (int ni = 0; ni < " + S(ni_n) +
             "; ni++) " + (p.tf32 ? "tg_mma_tf32" : "tg_mma") + "(c[mi][ni], af[mi], bf[ni]);\n    }\n";
  s += k_loop(c.stages, c.stages - 1, (p.K + c.bk - 1) / c.bk, "", compute);
  // the epilogue: each lane's accumulators are (row g, cols 2t, 2t+1) and (row g+8, same cols) of every 16x8 tile
  s += "#pragma unroll\n  for (int mi = 0; mi < " + S(mi_n) + "; mi++)\n#pragma unroll\n  for (int ni = 0; ni < " + S(ni_n) +
       "; ni++)\n#pragma unroll\n  for (int i = 0; i < 4; i++) {\n";
  s += "    const int em = m0 + wm0 + mi * 16 + (lane >> 2) + ((i >> 1) << 3), en = n0 + wn0 + ni * 8 + ((lane & 3) << 1) + (i & 1);\n";
  s += "    " + in_bounds(p, c.bm, c.bn) + "\n      const float acc = c[mi][ni][i];\n      " + o.store + "\n    }\n  }\n}\n";
  return s;
}

// ------------------------------------------------------------------ sm_90: wgmma

// Hopper's warpgroup MMA, m64nNk16: the K-major operand S (B if B is K-major, else A) is read from shared memory
// through a descriptor; its tile layout above is the hardware's 64-byte swizzle (16-byte chunk ^= (row/2)%4 within
// 512-byte groups of 8 rows of 64 bytes), so SBO = 512 bytes and a k16 step is +32 bytes of start address. The
// other operand R goes through registers by ldmatrix (as mma.sync's A fragment): each warp of a warpgroup holds 16
// of its 64 rows. Each of the block's warpgroups computes 64 R rows x bs S rows.
struct WgCfg {
  int wgs, bs, stages, min_blocks, inflight = 0;   // inflight: wgmma groups left running across the next refill
  int threads() const { return 128 * wgs; }
  int br() const { return 64 * wgs; }
};

const char* kWgmmaHelpers = R"(#ifndef TG_GEMM_EMU
__device__ __forceinline__ void tg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void tg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void tg_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// cp.async wrote through the generic proxy; wgmma reads through the async proxy
__device__ __forceinline__ void tg_fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// shared-memory matrix descriptor: start address >> 4, LBO 16 (unused: K-major and swizzled), SBO 512, 64-byte swizzle
__device__ __forceinline__ unsigned long long tg_desc(const void* p) {
  const unsigned long long a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  return ((a & 0x3FFFF) >> 4) | (1ull << 16) | (32ull << 32) | (2ull << 62);
}
TG_WGMMA_FN
#endif
)";

// tg_wgmma: m64n{n}k16 of 16-bit inputs (TG_IN), A through registers; tf32: tg_wgmma_tf32, m64n{n}k8 (no transpose
// operand: S is K-major); ss: tg_wgmma_ss<TA>, m64n{n}k16 with both operands by descriptor, A K-major (TA = 0) or
// M-major (TA = 1, imm-trans-a)
std::string wgmma_fn(int n, bool tf32 = false, bool ss = false) {
  const int nd = n / 2;
  std::string regs, outs;
  for (int i = 0; i < nd; i++) {
    regs += (i ? "," : "") + std::string("%") + S(i);
    outs += (i ? ", " : "") + std::string("\"+f\"(d[") + S(i) + "])";
  }
  const int na = ss ? 1 : 4;   // A's operands: one descriptor, or four registers of fragments
  std::string a = ss ? "%" + S(nd) : "{%" + S(nd) + ",%" + S(nd + 1) + ",%" + S(nd + 2) + ",%" + S(nd + 3) + "}";
  const std::string in = ss ? "\"l\"(da)" : "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])";
  const std::string tail = tf32 ? ", p, 1, 1;" : ss ? ", p, 1, 1, %" + S(nd + na + 2) + ", 0;" : ", p, 1, 1, 0;";
  return std::string(ss ? "template <int TA> " : "") + "__device__ __forceinline__ void " + (tf32 ? "tg_wgmma_tf32" : ss ? "tg_wgmma_ss" : "tg_wgmma") +
         (ss ? "(float* d, unsigned long long da, unsigned long long desc) {\n" : "(float* d, const unsigned* a, unsigned long long desc) {\n") +
         "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %" + S(nd + na + 1) + ", 0;\\n"
         "wgmma.mma_async.sync.aligned.m64n" + S(n) + (tf32 ? "k8.f32.tf32.tf32 {" : "k16.f32.TG_IN.TG_IN {") + regs + "}, " + a + ", %" +
         S(nd + na) + tail + "\\n}\\n\"\n    : " + outs + "\n    : " + in + ", \"l\"(desc), \"r\"(1)" + (ss ? ", \"n\"(TA)" : "") + ");\n}";
}

std::string render_wgmma(const Plan& p, const WgCfg& c, const CStyleLanguage& r, const std::string& fname, bool s_is_b) {
  const Operand &R = s_is_b ? p.a : p.b, &Sop = s_is_b ? p.b : p.a;
  const int64_t rdim = s_is_b ? p.M : p.N, sdim = s_is_b ? p.N : p.M;
  const int64_t tiles_r = (rdim + c.br() - 1) / c.br(), tiles_s = (sdim + c.bs - 1) / c.bs;
  const int bk = 64 / static_cast<int>(p.tc.dtype_in.itemsize());   // 64-byte k rows: 32 halves, 16 floats (TF32)
  const std::string tin = r.render_dtype(p.tc.dtype_in);
  Opening o = opening(p, r, fname, c.threads(), c.min_blocks, tiles_r, tiles_s, c.br(), c.bs,
                      replace_all(kWgmmaHelpers, "TG_WGMMA_FN", wgmma_fn(c.bs, p.tf32)) + (p.tf32 ? tf32_helpers() : ""));
  std::string s = o.src;
  s += "  // block tile " + S(c.br()) + "x" + S(c.bs) + "x" + S(bk) + ", " + S(c.stages) + " stages, " + S(c.wgs) + " warpgroups of wgmma m64n" +
       S(c.bs) + (p.tf32 ? "k8 tf32 (" : "k16 (") + (s_is_b ? "A" : "B") + " through registers); M=" + S(p.M) + " N=" + S(p.N) + " K=" + S(p.K) + " batch=" +
       S(p.batch) + "\n";
  s += "  const int r0 = t0, s0 = t1;\n";
  s += "  const " + tin + "* pr = " + (s_is_b ? "ga" : "gb") + ";\n  const " + tin + "* ps = " + (s_is_b ? "gb" : "ga") + ";\n";
  s += "  __shared__ __align__(1024) " + tin + " tg_sr[" + S(c.stages * c.br() * bk) + "];\n";
  s += "  __shared__ __align__(1024) " + tin + " tg_ss[" + S(c.stages * c.bs * bk) + "];\n";
  s += "  const int wr0 = warp * 16;   // this warp's 16 R rows (warpgroup warp / 4 holds rows 64*(warp/4)..)\n";
  s += "  float d[" + S(c.bs / 2) + "];\n#pragma unroll\n  for (int i = 0; i < " + S(c.bs / 2) + "; i++) d[i] = 0.0f;\n";
  s += "  auto load_tile = [&](int st, int kt) {\n    " + tile_copy(R, "pr", "tg_sr", c.br(), c.threads(), bk, rdim, p.K, "r0", p.vec()) +
       "    " + tile_copy(Sop, "ps", "tg_ss", c.bs, c.threads(), bk, sdim, p.K, "s0", p.vec()) + "  };\n";
  std::string compute;
  compute += "    const " + tin + "* sr = tg_sr + (kt % " + S(c.stages) + ") * " + S(c.br() * bk) + ";\n";
  compute += "    const " + tin + "* ss = tg_ss + (kt % " + S(c.stages) + ") * " + S(c.bs * bk) + ";\n";
  compute += "    unsigned af[2][4];\n#pragma unroll\n    for (int kk = 0; kk < 2; kk++) {\n      unsigned* r = af[kk];\n      " +
             (p.tf32 ? frag_load_tf32(R, true, "sr", c.br(), bk, "wr0") : frag_load(R, true, "sr", c.br(), bk, "wr0")) + "\n    }\n";
  compute += "    tg_wgmma_fence();\n";
  // a k step is 32 bytes of S's rows: 16 halves or 8 floats
  compute += "#pragma unroll\n    for (int kk = 0; kk < 2; kk++) " + std::string(p.tf32 ? "tg_wgmma_tf32" : "tg_wgmma") + "(d, af[kk], tg_desc(ss + kk * " +
             S(bk / 2) + "));\n";
  // the next refill overwrites a stage this group reads: wait for it before the next barrier
  compute += "    tg_wgmma_commit();\n    tg_wgmma_wait<" + S(c.inflight) + ">();\n";
  s += k_loop(c.stages, c.stages - 1 - c.inflight, (p.K + bk - 1) / bk, "    tg_fence_async_smem();\n", compute);
  s += "  tg_wgmma_wait<0>();\n";
  // accumulators: per 8-column block j of the S rows, (R row g, S rows 2t, 2t+1) and (R row g+8, same)
  s += "#pragma unroll\n  for (int i = 0; i < " + S(c.bs / 2) + "; i++) {\n";
  s += "    const int er = r0 + wr0 + (lane >> 2) + (((i & 3) >> 1) << 3), es = s0 + (i >> 2) * 8 + ((lane & 3) << 1) + (i & 1);\n";
  s += std::string("    const int em = ") + (s_is_b ? "er" : "es") + ", en = " + (s_is_b ? "es" : "er") + ";\n";
  s += "    " + in_bounds(p, s_is_b ? c.br() : c.bs, s_is_b ? c.bs : c.br()) + "\n      const float acc = d[i];\n      " + o.store + "\n    }\n  }\n}\n";
  return s;
}

// wgmma on sm_90 when one operand is K-major (TC_WGMMA=0: mma.sync). TC_WGMMA_CFG="warpgroups,bs,stages,min_blocks[,inflight]".
std::optional<WgCfg> choose_wgmma(const Plan& p, int sm) {
  // TF32 too: its wgmma has no transpose, which S (K-major) doesn't need; R goes through registers either way
  if (sm < 90 || getenv("TC_WGMMA", 1) == 0 || !(p.a.k_major || p.b.k_major)) return std::nullopt;
  if (const std::string e = getenv_str("TC_WGMMA_CFG"); !e.empty()) {
    int v[5] = {0, 0, 0, 0, 0};
    const int n = std::sscanf(e.c_str(), "%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4]);
    const WgCfg c{v[0], v[1], v[2], v[3], v[4]};
    const bool ok = (n == 4 || n == 5) && c.inflight >= 0 && c.inflight <= c.stages - 2 && c.wgs >= 1 && c.wgs <= 2 && c.bs >= 16 &&
                    c.bs <= 256 && c.bs % 16 == 0 && c.stages >= 2 && c.min_blocks >= 1 &&
                    (c.bs * 4) % c.threads() == 0 && c.stages * (c.br() + c.bs) * 64 <= 49152;
    if (!ok)
      throw Error("TC_WGMMA_CFG=" + e + ": want warpgroups (1-2),bs (16..256, a multiple of 16 with bs*4 a multiple of the " +
                  "threads),stages (>= 2),min_blocks[,inflight (0..stages-2)] with stages*(64*warpgroups+bs)*64 bytes <= 48 KiB");
    return c;
  }
  // H100, 4096^3 / 1024^3 fp16 (bench/tc_notes.md): 2 warpgroups of 64x128 without in-flight groups for large grids;
  // for small ones (fewer than 128 tiles of 128x128) one warpgroup with one group in flight fills the SMs better
  const WgCfg big{2, 128, 3, 2, 0}, small{1, 128, 4, 2, 1};
  const int64_t rdim = p.b.k_major ? p.M : p.N, sdim = p.b.k_major ? p.N : p.M;
  return ((rdim + 127) / 128) * ((sdim + 127) / 128) * p.batch >= 128 ? big : small;
}

// ------------------------------------------------------------------ sm_90: TMA + mbarrier ring + warp specialization
//
// The Hopper ladder's kernel. Warpgroup 0 is the producer: one thread issues TMA bulk tensor copies
// (cp.async.bulk.tensor, tensor maps encoded by the runtime from tg_launch, see runtime/cuda.cpp) of a BK=64 k tile
// of R and S into a ring of `stages` shared-memory slots, each guarded by a `full` mbarrier (the copies' bytes
// complete it) and an `empty` one (every consumer warp arrives once it is done with the slot). Warpgroups 1..C are
// consumers: per k tile they wait on `full`, issue four wgmma m64n{bs}k16 (tma_k_steps: with 1 consumer both operands
// by descriptor in a rolled loop, with 2 R by ldmatrix as wgmma's register A), wait for them and release the slot. The tiles are 128-byte rows with
// TMA's 128-byte swizzle (16-byte chunk ^= row % 8 within 1024-byte groups): S's descriptor is the K-major SW128
// layout (SBO 1024 bytes, +32 bytes per k16 step). The grid is persistent: block b takes tiles b, b+grid, ... in an
// L2-friendly order (8 R tiles walk the S tiles together), so the producer fetches the next tile's k tiles while the
// consumers run the epilogue. M/N/K edges: TMA zero-fills what is out of bounds; stores are guarded.
struct TmaCfg {
  int consumers, bs, stages, grid;   // consumer warpgroups (64 R rows each), S rows per block, ring slots, blocks
  int threads() const { return 128 * (consumers + 1); }
  int br() const { return 64 * consumers; }
  int64_t ring_bytes() const { return int64_t{stages} * (br() + bs) * 128 + 16 * stages + 1024; }   // tiles, barriers, alignment
  // the staged epilogue's S columns per chunk: all bs where the consumer warps' stages fit beside the ring (the
  // producer refills it during the epilogue), else halves
  int ep_cols() const {
    int c = bs;
    while (c > 8 && ring_bytes() + 4 * consumers * stage_bytes(c) > 227 * 1024) c /= 2;
    return c;
  }
  int64_t shared_bytes() const { return ring_bytes() + 4 * consumers * stage_bytes(ep_cols()); }
  bool rolled() const { return consumers == 1; }   // the k steps' form (tma_k_steps)
};
constexpr int kTmaBK = 64;   // 64 halves: one 128-byte swizzle row

const char* kTmaHelpers = R"(#ifndef TG_GEMM_EMU
struct __align__(64) tg_tmap { unsigned long long v[16]; };
__device__ __forceinline__ unsigned tg_smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void tg_mbar_init(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(tg_smem_u32(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void tg_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void tg_mbar_expect_tx(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(tg_smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tg_mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(tg_smem_u32(b)) : "memory");
}
__device__ __forceinline__ void tg_mbar_wait(unsigned long long* b, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(tg_smem_u32(b)), "r"(parity) : "memory");
}
template <int N> __device__ __forceinline__ void tg_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); }
template <int N> __device__ __forceinline__ void tg_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); }
// K-major shared-memory matrix with the 128-byte swizzle: LBO unused (16), SBO 1024 bytes (8 rows of 128 bytes)
__device__ __forceinline__ unsigned long long tg_desc128(const void* p) {
  const unsigned long long a = tg_smem_u32(p);
  return ((a & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// M/N-major (wgmma's transposed A) with the 128-byte swizzle: 64 rows in each 128-byte k row, 8 k rows a 1024-byte
// group. The k16 step's two groups are 1024 bytes apart: SBO, and LBO too (the stride between 64-row blocks, unused
// for the 64 rows of an m64 A, in case the hardware reads the k stride from it)
__device__ __forceinline__ unsigned long long tg_desc128_mn(const void* p) {
  const unsigned long long a = tg_smem_u32(p);
  return ((a & 0x3FFFF) >> 4) | (64ull << 16) | (64ull << 32) | (1ull << 62);
}
TG_TMA_FNS
#endif
)";

// cp.async.bulk.tensor of a rank-n box at coordinates c0.. into dst, completing `bar`'s transaction bytes
std::string tma_fn(int rank) {
  std::string args, coords;
  for (int i = 0; i < rank; i++) args += ", int c" + S(i), coords += (i ? ", " : "") + std::string("%") + S(i + 2);
  std::string ins;
  for (int i = 0; i < rank; i++) ins += ", \"r\"(c" + S(i) + ")";
  return "__device__ __forceinline__ void tg_tma" + S(rank) + "(void* dst, const tg_tmap* m" + args + ", unsigned long long* bar) {\n"
         "  asm volatile(\"cp.async.bulk.tensor." + S(rank) + "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {" +
         coords + "}], [%" + S(rank + 2) + "];\\n\"\n    :: \"r\"(tg_smem_u32(dst)), \"l\"(m)" + ins +
         ", \"r\"(tg_smem_u32(bar)) : \"memory\");\n}\n";
}

// One operand's tensor map (the fields runtime/cuda.cpp reads from tg_launch) and its batch coordinates.
// K-major: dims (K, rows), box (64, box_rows); M/N-major: dims (rows, K), box (64, 64); then the batch axes the
// operand has a stride along (box 1). Nothing when TMA can't address it (rank > 5, a stride TMA can't take).
struct TmaMap {
  std::vector<long long> fields;
  std::vector<int> batch;   // indices into Plan::batch_axes
  int rank = 0;
};
// The sizes, strides (in elements) and offset are arguments of the generic kernel (Args::ref, rows_arg names rows).
std::optional<TmaMap> tma_map(const Plan& p, const Operand& o, int64_t rows, const std::string& rows_arg, int box_rows, Args& a) {
  const int64_t es = p.tc.dtype_in.itemsize();
  if (!o.linear()) return std::nullopt;   // a conv's window view: the cp.async kernel gathers it
  std::vector<long long> strides, box;
  if (o.k_major) strides = {o.s_row}, box = {kTmaBK, box_rows};
  else strides = {o.s_k}, box = {64, kTmaBK};
  TmaMap m;
  for (size_t i = 0; i < o.s_batch.size(); i++)
    if (o.s_batch[i] != 0) strides.push_back(o.s_batch[i]), box.push_back(1), m.batch.push_back(static_cast<int>(i));
  m.rank = static_cast<int>(strides.size()) + 1;
  if (m.rank > 5) return std::nullopt;
  for (long long st : strides)
    if ((st * es) % 16 != 0 || st <= 0 || st * es >= (1ll << 40) || st >= (1ll << 31)) return std::nullopt;
  if ((o.off * es) % 16 != 0) return std::nullopt;
  const std::string b = S(o.buf->as<int64_t>());
  std::vector<long long> dims = o.k_major ? std::vector<long long>{a.ref("K", p.K), a.ref(rows_arg, rows)}
                                          : std::vector<long long>{a.ref(rows_arg, rows), a.ref("K", p.K)};
  for (int i : m.batch) dims.push_back(a.ref("B" + S(i), p.full[p.batch_axes[i]]));
  for (size_t i = 0; i < strides.size(); i++) strides[i] = a.ref("t" + b + "_s" + S(static_cast<int64_t>(i)), strides[i]);
  dims.resize(5, 1), strides.resize(4, 0), box.resize(5, 1);
  m.fields = {o.buf->as<int64_t>(), 1 /* UINT16: fp16 and bf16 copy as bits */, m.rank, 3 /* SWIZZLE_128B */,
              o.off == 0 ? 0 : a.ref("t" + b + "_o", o.off)};
  m.fields.insert(m.fields.end(), dims.begin(), dims.end());
  m.fields.insert(m.fields.end(), strides.begin(), strides.end());
  m.fields.insert(m.fields.end(), box.begin(), box.end());
  return m;
}

// One k tile's four k16 steps of a consumer warpgroup (the slot st is full). Rolled (TmaCfg::rolled): both operands
// by descriptor (R's 64 rows of this warpgroup: K-major [row][64 k] like S, or M/N-major [k][64 rows], wgmma's
// transposed A) and ONE wgmma in a rolled loop: unrolled, each wgmma asm with its 64 accumulators cost NVVM and
// ptxas ~5% of the compile, and NVVM unrolls a k-tile loop of a constant trip count up to ~8 too (so `unroll 1` on
// it). Else R's fragments by ldmatrix (.trans where M/N-major) and four wgmma, unrolled: the 128x256 tiles' kernel
// ran 11% slower rolled on the H100 (bench/tc_notes.md, session 11). The PTX kernel (tc_gemm_ptx.cpp), the default,
// is rolled for both configs: ptxas alone does not lose that speed (session 14).
std::string tma_k_steps(const Operand& R, const TmaCfg& c, const std::string& tin, int64_t stage_r, int64_t stage_s) {
  const std::string ss = "        const " + tin + "* ss = tg_ss + st * " + S(stage_s) + ";\n";
  if (c.rolled()) {
    std::string s = "        const " + tin + "* ra = tg_sr + st * " + S(stage_r) + " + (wg - 1) * 4096;\n" + ss + "        tg_wgmma_fence();\n";
    return s + "#pragma unroll 1\n        for (int kk = 0; kk < 4; kk++) tg_wgmma_ss<" + (R.k_major ? "0" : "1") + ">(d, " +
           (R.k_major ? "tg_desc128(ra + kk * 16)" : "tg_desc128_mn(ra + kk * 1024)") + ", tg_desc128(ss + kk * 16));\n";
  }
  std::string s = "        const " + tin + "* sr = tg_sr + st * " + S(stage_r) + ";\n" + ss;
  s += "        unsigned af[4][4];\n#pragma unroll\n        for (int kk = 0; kk < 4; kk++) {\n";
  if (R.k_major) {
    s += "          const int rr = wr0 + (lane & 15), ch = kk * 2 + (lane >> 4);\n";
    s += "          tg_ldsm_x4(af[kk], sr + rr * 64 + ((ch ^ (rr & 7)) << 3));\n";
  } else {
    s += "          const int kr = kk * 16 + (lane & 7) + ((lane >> 4) << 3), ch = (wr0 >> 3) + ((lane >> 3) & 1);\n";
    s += "          tg_ldsm_x4_t(af[kk], sr + (ch >> 3) * 4096 + kr * 64 + (((ch & 7) ^ (kr & 7)) << 3));\n";
  }
  s += "        }\n        tg_wgmma_fence();\n";
  return s + "#pragma unroll\n        for (int kk = 0; kk < 4; kk++) tg_wgmma(d, af[kk], tg_desc128(ss + kk * 16));\n";
}

// Shape-generic: M, N, K, the batch sizes, the tensor maps' sizes and strides and the epilogue's strides are int
// arguments (args, filled by tma_map before and by the rendering here), so the text depends on the config only.
std::string render_tma(const Plan& p, const TmaCfg& c, const CStyleLanguage& r, const std::string& fname, bool s_is_b,
                       const TmaMap& mr, const TmaMap& ms, Args& args) {
  const Operand& R = s_is_b ? p.a : p.b;   // through registers (by descriptor where rolled); S (K-major) by descriptor
  const std::string M = args("M", p.M), N = args("N", p.N), K = args("K", p.K), rdim = s_is_b ? M : N, sdim = s_is_b ? N : M;
  std::vector<std::string> bdims;   // the batch axes' sizes
  for (size_t i = 0; i < p.batch_axes.size(); i++) bdims.push_back(args("B" + S(static_cast<int64_t>(i)), p.full[p.batch_axes[i]]));
  const std::string tin = r.render_dtype(p.tc.dtype_in);
  std::string fns = tma_fn(mr.rank);
  if (ms.rank != mr.rank) fns += tma_fn(ms.rank);
  const bool ss = c.rolled();
  const std::string helpers = replace_all(kWgmmaHelpers, "TG_WGMMA_FN", wgmma_fn(c.bs, false, ss)) + replace_all(kTmaHelpers, "TG_TMA_FNS", fns);
  // the launch description the runtime reads (runtime/cuda.cpp, LaunchInfo)
  std::vector<long long> li = {1, c.shared_bytes(), 2};
  li.insert(li.end(), mr.fields.begin(), mr.fields.end());
  li.insert(li.end(), ms.fields.begin(), ms.fields.end());
  std::string lis;
  for (size_t i = 0; i < li.size(); i++) lis += (i ? ", " : "") + std::to_string(li[i]);
  // the int parameters go between the buffers and the tensor maps (the launch passes bufs, ints, maps); they are
  // known once the epilogue is rendered
  const std::string kArgs = "/*TG_ARGS*/";
  Opening o = opening(p, r, fname, c.threads(), 1, 0, 0, c.br(), c.bs, helpers,
                      kArgs + ", const __grid_constant__ tg_tmap tm_r, const __grid_constant__ tg_tmap tm_s", false, &args);
  const size_t sig = o.src.find("extern \"C\" __global__");
  o.src.insert(sig, "extern \"C\" __device__ long long tg_launch[" + S(static_cast<int64_t>(li.size())) + "] = {" + lis + "};\n");
  std::string s = o.src;
  const int64_t stage_r = int64_t{c.br()} * kTmaBK, stage_s = int64_t{c.bs} * kTmaBK;
  s += "  // TMA + mbarrier ring: block tile " + S(c.br()) + "x" + S(c.bs) + "x64, " + S(c.stages) + " stages, 1 producer + " +
       S(c.consumers) + " consumer warpgroups of wgmma m64n" + S(c.bs) + "k16 (" +
       (ss ? std::string("both by descriptor, rolled") : std::string(s_is_b ? "A" : "B") + " through registers") + "), " +
       "persistent grid; the shape in int arguments\n";
  s += "  extern __shared__ unsigned char tg_dsmem[];\n";
  s += "  unsigned char* tg_base = tg_dsmem + ((1024 - (tg_smem_u32(tg_dsmem) & 1023)) & 1023);   // SW128 tiles: 1024-byte aligned\n";
  s += "  " + tin + "* tg_sr = reinterpret_cast<" + tin + "*>(tg_base);\n";
  s += "  " + tin + "* tg_ss = tg_sr + " + S(c.stages * stage_r) + ";\n";
  s += "  unsigned long long* tg_full = reinterpret_cast<unsigned long long*>(tg_ss + " + S(c.stages * stage_s) + ");\n";
  s += "  unsigned long long* tg_empty = tg_full + " + S(c.stages) + ";\n";
  s += "  if (tid == 0) {\n    for (int i = 0; i < " + S(c.stages) + "; i++) tg_mbar_init(&tg_full[i], 1), tg_mbar_init(&tg_empty[i], " +
       S(c.consumers * 4) + ");\n    tg_mbar_init_fence();\n  }\n  __syncthreads();\n";
  std::string batch;
  for (const std::string& b : bdims) batch += " * " + b;
  s += "  const int KT = (" + K + " + " + S(kTmaBK - 1) + ") / " + S(kTmaBK) + ", TR = (" + rdim + " + " + S(c.br() - 1) + ") / " + S(c.br()) +
       ", TS = (" + sdim + " + " + S(c.bs - 1) + ") / " + S(c.bs) + ", NTB = TR * TS, NT = NTB" + batch + ";\n";
  // a tile's coordinates: batch, then groups of 8 R tiles walking the S tiles
  std::string tile = "      const int bt = tile / NTB, tl = tile % NTB, gw = 8 * TS, g0 = (tl / gw) * 8, gsz = min(TR - g0, 8);\n";
  tile += "      const int r0 = (g0 + (tl % gw) % gsz) * " + S(c.br()) + ", s0 = ((tl % gw) / gsz) * " + S(c.bs) + ";\n";
  for (size_t i = 0; i < bdims.size(); i++) {
    std::string rest;   // the later batch axes' sizes
    for (size_t j = i + 1; j < bdims.size(); j++) rest += (rest.empty() ? "" : " * ") + bdims[j];
    const std::string q = rest.empty() ? "bt" : "(bt / (" + rest + "))";
    tile += "      const int eb" + S(static_cast<int64_t>(i)) + " = " + (i == 0 ? q : "(" + q + " % " + bdims[i] + ")") + ";\n";
  }
  tile += "      (void)bt;\n";
  auto bcoords = [&](const TmaMap& m) {
    std::string b;
    for (int i : m.batch) b += ", eb" + S(i);
    return b;
  };
  // producer. Rolled: the warpgroup index through a shuffle, so that ptxas knows the branches are warp-uniform, which
  // it needs to keep a rolled loop of wgmma asynchronous (else it serializes them, C7520)
  s += ss ? "  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);\n  if (wg == 0) {\n" : "  if (warp < 4) {\n";
  if (c.consumers == 2) s += "    tg_setmaxnreg_dec<40>();\n";
  s += "    if (tid == 0) {\n      int it = 0;\n      for (int tile = blockIdx.x; tile < NT; tile += gridDim.x) {\n" + tile;
  s += "      for (int kt = 0; kt < KT; kt++, it++) {\n        const int st = it % " + S(c.stages) + ";\n";
  s += "        if (it >= " + S(c.stages) + ") tg_mbar_wait(&tg_empty[st], ((it / " + S(c.stages) + ") & 1) ^ 1);\n";
  s += "        tg_mbar_expect_tx(&tg_full[st], " + S((stage_r + stage_s) * 2) + ");\n";
  if (R.k_major) {
    s += "        tg_tma" + S(mr.rank) + "(tg_sr + st * " + S(stage_r) + ", &tm_r, kt * 64, r0" + bcoords(mr) + ", &tg_full[st]);\n";
  } else {
    s += "        for (int j = 0; j < " + S(c.br() / 64) + "; j++)\n";
    s += "          tg_tma" + S(mr.rank) + "(tg_sr + st * " + S(stage_r) + " + j * 4096, &tm_r, r0 + j * 64, kt * 64" + bcoords(mr) +
         ", &tg_full[st]);\n";
  }
  s += "        tg_tma" + S(ms.rank) + "(tg_ss + st * " + S(stage_s) + ", &tm_s, kt * 64, s0" + bcoords(ms) + ", &tg_full[st]);\n";
  s += "      }\n      }\n    }\n  } else {\n";
  // consumers
  if (c.consumers == 2) s += "    tg_setmaxnreg_inc<232>();\n";
  s += "    const int wr0 = (warp - 4) * 16;   // this warp's 16 R rows\n    int it = 0;\n    float d[" + S(c.bs / 2) + "];\n";
  s += "    for (int tile = blockIdx.x; tile < NT; tile += gridDim.x) {\n" + tile;
  s += "#pragma unroll\n      for (int i = 0; i < " + S(c.bs / 2) + "; i++) d[i] = 0.0f;\n";
  s += std::string(ss ? "#pragma unroll 1\n" : "") + "      for (int kt = 0; kt < KT; kt++, it++) {\n        const int st = it % " + S(c.stages) + ";\n";
  s += "        tg_mbar_wait(&tg_full[st], (it / " + S(c.stages) + ") & 1);\n";
  s += tma_k_steps(R, c, tin, stage_r, stage_s);
  // every k tile's wgmma group completes before its slot is released. (A 5th TC_TMA_CFG field once left one group in
  // flight across k tiles: no default used it, and on the H100 it gave wrong results with 2 consumers once
  // TmaConfigs really compiled each config, session 10. It was removed, its cause not established.)
  s += "        tg_wgmma_commit();\n        tg_wgmma_wait<0>();\n        if (lane == 0) tg_mbar_arrive(&tg_empty[st]);\n      }\n";
  // the epilogue through each consumer warp's stage (after the barriers; the ring stays the producer's)
  const int cols = c.ep_cols();
  s += staged_epilogue(p, o,
                       {s_is_b, c.bs, cols, "if (em < " + M + " && en < " + N + ") {",
                        "reinterpret_cast<float*>(tg_empty + " + S(c.stages) + ") + (warp - 4) * " + S(stage_bytes(cols) / 4), "r0 + wr0", "s0"},
                       "      ");
  s += "    }\n  }\n}\n";
  return replace_all(s, kArgs, args.params());
}

// ------------------------------------------------------------------ the TMA kernel as PTX (codegen/tc_gemm_ptx.cpp)

// The AST's epilogue as PTX for one output element (em, en): the ops the GEMMs in models ask for (loads of bias or
// residual through single unmasked views, float constants, casts between f32/f16/bf16, ADD MUL MAX NEG). Anything
// else is NotCovered: the CUDA C kernel then (render_tma).
struct PtxEpilogue {
  const Plan& p;
  Args& args;
  ptx::Fn& f;
  std::string em, en;

  static std::string ty(DType dt) {
    if (dt == dtypes::float32) return "f32";
    if (dt == dtypes::half) return "f16";
    if (dt == dtypes::bfloat16) return "bf16";
    throw NotCovered{};
  }
  static std::string reg_ty(DType dt) { return ty(dt) == "f32" ? "f32" : "b16"; }
  // x (dtype from) as dtype to
  std::string cast(const std::string& x, DType from, DType to) {
    if (ty(from) == ty(to)) return x;
    if (ty(to) == "f32") return f.op("cvt.f32." + ty(from), "f32", x);
    const std::string x32 = ty(from) == "f32" ? x : f.op("cvt.f32." + ty(from), "f32", x);
    return f.op("cvt.rn." + ty(to) + ".f32", "b16", x32);
  }
  // axis i's index (Epilogue::digit): em / en for a single M / N axis, else its digit of the flat index
  std::string digit(int i) {
    for (auto [axes, flat] : {std::pair{&p.m_axes, em}, std::pair{&p.n_axes, en}}) {
      auto at = std::find(axes->begin(), axes->end(), i);
      if (at == axes->end()) continue;
      std::string d = flat;
      for (auto it = at + 1; it != axes->end(); ++it) d = f.op("div.u32", "b32", d, ptx::arg_reg(args("d" + S(*it), p.full[*it])));
      return at == axes->begin() ? d : f.op("rem.u32", "b32", d, ptx::arg_reg(args("d" + S(i), p.full[i])));
    }
    auto it = std::find(p.batch_axes.begin(), p.batch_axes.end(), i);
    TG_ASSERT(it != p.batch_axes.end(), "tc_gemm: output axis " + std::to_string(i) + " is neither M, N nor batch");
    return ptx::eb_reg(static_cast<size_t>(it - p.batch_axes.begin()));
  }
  // a single unmasked view's element index (Epilogue::generic_index: strides other than 0 and 1 and the offset as
  // arguments)
  std::string index(const UOp& stu) {
    const ShapeTracker st = st_of(stu).simplify();
    need(st.views.size() == 1 && !st.views[0].mask && !st.symbolic());
    const View& v = st.views[0];
    const std::string t = "e" + S(args.tracker(stu)) + "_";
    std::string s;
    for (int i = 0; i < static_cast<int>(v.shape.size()); i++) {
      if (v.shape[i] == 1 || v.strides[i] == 0) continue;
      std::string d = digit(i);
      if (v.strides[i] != 1) d = f.op("mul.lo.u32", "b32", d, ptx::arg_reg(args(t + "s" + S(i), v.strides[i])));
      s = s.empty() ? d : f.op("add.u32", "b32", s, d);
    }
    if (v.offset != 0) {
      const std::string o = ptx::arg_reg(args(t + "o", v.offset));
      s = s.empty() ? o : f.op("add.u32", "b32", s, o);
    }
    return s.empty() ? f.op("mov.u32", "b32", "0") : s;
  }
  std::string value(const UOp& x, const std::string& acc) {
    if (x == p.reduce) return cast(acc, dtypes::float32, x->dtype);
    switch (x->op) {
      case Ops::LOAD: {
        need(x->src.size() == 2 && x->src[0]->op == Ops::DEFINE_GLOBAL && x->src[1]->op == Ops::SHAPETRACKER);
        const int64_t es = x->dtype.itemsize();
        const std::string a = f.op("add.s64", "b64", "%g" + S(x->src[0]->as<int64_t>()), f.op("mul.wide.u32", "b64", index(x->src[1]), S(es)));
        const std::string r = f.reg(reg_ty(x->dtype));
        f("ld.global.nc." + std::string(es == 4 ? "f32" : "b16") + " " + r + ", [" + a + "]");
        return r;
      }
      case Ops::CONST: {
        need(x->src.size() == 1 && x->src[0]->op == Ops::SHAPETRACKER);
        const ShapeTracker st = st_of(x->src[0]).simplify();
        need(st.views.size() == 1 && !st.views[0].mask);
        ty(x->dtype);
        const ConstType c = Epilogue::ast_value(x);
        const double v = std::holds_alternative<double>(c) ? std::get<double>(c) : std::holds_alternative<int64_t>(c) ? static_cast<double>(std::get<int64_t>(c)) : 0.0;
        need(!std::holds_alternative<bool>(c));
        const float fv = static_cast<float>(v);
        unsigned bits = 0;
        std::memcpy(&bits, &fv, 4);
        char hex[16];
        std::snprintf(hex, sizeof(hex), "0f%08X", bits);
        return cast(f.op("mov.f32", "f32", hex), dtypes::float32, x->dtype);
      }
      case Ops::CAST: return cast(value(x->src[0], acc), x->src[0]->dtype, x->dtype);
      case Ops::ALU: {
        const std::string t = ty(x->dtype), rt = reg_ty(x->dtype);
        if (x->is<UnaryOps>() && x->as<UnaryOps>() == UnaryOps::NEG) return f.op("neg." + t, rt, value(x->src[0], acc));
        need(x->is<BinaryOps>());
        const BinaryOps b = x->as<BinaryOps>();
        need(b == BinaryOps::ADD || b == BinaryOps::MUL || b == BinaryOps::MAX);
        need(x->src[0]->dtype == x->dtype && x->src[1]->dtype == x->dtype);
        const std::string a = value(x->src[0], acc), c = value(x->src[1], acc);
        const std::string rn = t == "f32" ? "" : ".rn";   // f16/bf16 add and mul as cuda_fp16's __hadd and __hmul
        return f.op(b == BinaryOps::ADD ? "add" + rn + "." + t : b == BinaryOps::MUL ? "mul" + rn + "." + t : "max." + t, rt, a, c);
      }
      default: throw NotCovered{};
    }
  }
};

// render_tma's kernel as PTX, for the epilogues PtxEpilogue covers whose output takes 16-byte runs of 8 (vec8);
// NotCovered otherwise (args then as before: the caller renders the CUDA C kernel from a copy)
std::string render_tma_ptx(const Plan& p, const TmaCfg& c, const std::string& fname, bool s_is_b, const TmaMap& mr, const TmaMap& ms, Args& args) {
  // the PTX kernel's tile and run index math takes powers of two (shifts): TC_TMA_CFG's bs of 192 takes CUDA C
  need(getenv("TC_PTX", 1) != 0 && (c.bs & (c.bs - 1)) == 0);
  // the 128x256 kernel's first wgmma by descriptors starts the accumulators (no zeroing): with K = 0 none would run
  need(p.K > 0);
  const std::vector<int>& r_axes = s_is_b ? p.m_axes : p.n_axes;
  ptx::TmaSpec sp;
  sp.fname = fname;
  sp.consumers = c.consumers, sp.bs = c.bs, sp.stages = c.stages, sp.ep_cols = c.ep_cols();
  sp.steps = static_cast<int>(getenv("TC_PTX_KSTEPS", 1));
  if (sp.steps != 0 && sp.steps != 1 && sp.steps != 2 && sp.steps != 4)
    throw Error("TC_PTX_KSTEPS=" + std::to_string(sp.steps) + ": the 128x256 PTX kernel takes 0 (ldmatrix + four wgmma), 1, 2 or 4 k16 steps per wgmma loop iteration");
  sp.maxnreg = getenv("TC_PTX_MAXNREG", 1) != 0;
  sp.r_kmajor = (s_is_b ? p.a : p.b).k_major, sp.s_is_b = s_is_b, sp.r_fast = out_contiguous(p, r_axes);
  const ShapeTracker out = st_of(p.store->src[1]).simplify();
  need(out.views.size() == 1 && !out.views[0].mask && vec8(p, true, sp.r_fast ? r_axes : (s_is_b ? p.n_axes : p.m_axes)));
  need(p.tc.dtype_in == dtypes::half || p.tc.dtype_in == dtypes::bfloat16);
  sp.in = p.tc.dtype_in == dtypes::half ? "f16" : "bf16";
  sp.launch = {1, c.shared_bytes(), 2};
  sp.launch.insert(sp.launch.end(), mr.fields.begin(), mr.fields.end());
  sp.launch.insert(sp.launch.end(), ms.fields.begin(), ms.fields.end());
  for (const UOp& u : p.store.toposort())
    if (u->op == Ops::DEFINE_GLOBAL) sp.n_bufs = std::max(sp.n_bufs, static_cast<int>(u->as<int64_t>()) + 1);
  sp.out_buf = static_cast<int>(p.store->src[0]->as<int64_t>());
  const DType odt = p.store->src[0]->dtype.base();
  sp.out_bytes = static_cast<int>(odt.itemsize());
  sp.rank_r = mr.rank, sp.rank_s = ms.rank, sp.batch_r = mr.batch, sp.batch_s = ms.batch;
  sp.M = args("M", p.M), sp.N = args("N", p.N), sp.K = args("K", p.K);
  for (size_t i = 0; i < p.batch_axes.size(); i++) sp.bdims.push_back(args("B" + S(static_cast<int64_t>(i)), p.full[p.batch_axes[i]]));
  sp.value = [&](ptx::Fn& f, const std::string& em, const std::string& en, const std::string& acc) {
    PtxEpilogue e{p, args, f, em, en};
    const UOp& v = p.store->src[2];
    return e.cast(e.value(v, acc), v->dtype, odt);
  };
  sp.out_index = [&](ptx::Fn& f, const std::string& em, const std::string& en) { return PtxEpilogue{p, args, f, em, en}.index(p.store->src[1]); };
  sp.params = [&] {
    std::vector<std::string> v;
    for (const auto& [n, x] : args.list) v.push_back(n);
    return v;
  };
  return ptx::render_tma(sp);
}

// TMA on sm_90 unless TC_TMA=0. TC_TMA_CFG="consumers,bs,stages[,grid]" (sweeps); else by the number of tiles.
std::optional<TmaCfg> choose_tma(const Plan& p, bool s_is_b, int device_sms) {
  // TC_WGMMA_CFG asks for the cp.async wgmma kernel (render_wgmma)
  if (getenv("TC_TMA", 1) == 0 || !getenv_str("TC_WGMMA_CFG").empty()) return std::nullopt;
  const int64_t rdim = s_is_b ? p.M : p.N, sdim = s_is_b ? p.N : p.M;
  // one block per SM (the device's count; 132, an H100 SXM's, when unknown); any grid is correct (the loop strides)
  const int sms = static_cast<int>(getenv("TC_SMS", device_sms > 0 ? device_sms : 132));
  if (const std::string e = getenv_str("TC_TMA_CFG"); !e.empty()) {
    int v[4] = {0, 0, 0, 0};
    char extra = 0;
    const int n = std::sscanf(e.c_str(), "%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &extra);
    TmaCfg c{v[0], v[1], v[2], v[3]};
    const bool ok = (n >= 3 && n <= 4) && c.consumers >= 1 && c.consumers <= 2 && c.bs >= 64 && c.bs <= 256 && c.bs % 64 == 0 &&
                    c.stages >= 2 && c.grid >= 0 && c.shared_bytes() <= 227 * 1024;
    if (!ok)
      throw Error("TC_TMA_CFG=" + e + ": want consumers (1-2),bs (64..256, a multiple of 64),stages (>= 2)[,grid (0: one block per SM)] " +
                  "with stages*(64*consumers+bs)*128 bytes within 227 KiB of shared memory");
    const int64_t nt = ((rdim + c.br() - 1) / c.br()) * ((sdim + c.bs - 1) / c.bs) * p.batch;
    if (c.grid == 0) c.grid = static_cast<int>(std::min<int64_t>(nt, sms));
    return c;
  }
  // H100 sweep (bench/tc_notes.md, fp16 TFLOP/s at 4096/2048/1024): 128x256 tiles with 2 consumers and 4 stages of
  // 48 KiB 710/526/107; 64x128 with 1 consumer and 6 stages 407/338/165. Big tiles down to ~100 of them, then small.
  TmaCfg c{2, 256, 4, 0};
  if (((rdim + 127) / 128) * ((sdim + 255) / 256) * p.batch < 96) c = {1, 128, 6, 0};
  const int64_t nt = ((rdim + c.br() - 1) / c.br()) * ((sdim + c.bs - 1) / c.bs) * p.batch;
  c.grid = static_cast<int>(std::min<int64_t>(nt, sms));
  return c;
}

// ------------------------------------------------------------------ fp32 without tensor cores: SIMT

// The classic register-blocked SGEMM: a 128x128 block tile of 256 threads (a 16x16 grid, warps of 4x8 threads), each
// 8x8 outputs in four 4x4 cells 64 rows and 64 columns apart, so that a warp's float4 shared-memory reads of a k row
// hit 4 distinct A and 8 distinct B chunks. k tiles of 8 in two shared-memory buffers [k][row] (K-major operands are
// transposed on the way in). The next k tile's 16 bytes per thread and operand are loaded into registers before the
// FMAs of this one and stored after them: one barrier per k tile. Edges: zero-filled loads where the tiles don't
// divide the shape (rows, and K in steps of 4), guarded stores.
// H100 4096^3 (bench/tc_notes.md, session 10; torch 50.5): this kernel 47.1 TFLOP/s. Measured and dropped: k tiles
// of 16 (40.9-42.7), fragments not double-buffered (43.4), FMAs by A's row (44.3: 12 bytes of spills at the 128-register
// cap of 2 blocks per SM), 8x16 and 16x8 threads (128x256 and 256x128 blocks, one per SM) with 2-4 cp.async stages
// (43.4-46.6), cp.async for the 8x8 tile (43.5-45.4).
constexpr int kSimtBk = 8;

// one operand's k tile (8 x 128) into float4 register `reg`: 256 threads, one 16-byte chunk each. (tid / 2 and
// tid % 2, not shifts: the kernel timed was this text; ptxas schedules the shift form's loop differently.)
std::string simt_load(const Operand& o, const std::string& reg, const std::string& g, int64_t dim, int64_t K, const std::string& row0) {
  std::string guard;   // only where the tiles don't divide the shape
  if (dim % 128 != 0) guard = "gr < " + S(dim);
  if (K % kSimtBk != 0) guard += (guard.empty() ? "" : " && ") + std::string("gk < ") + S(K);
  const std::string ptr = o.k_major ? g + " + gr * " + S(o.s_row) + " + gk" : g + " + gk * " + S(o.s_k) + " + gr";
  std::string s = o.k_major ? "    {\n      const int lr = tid / 2, lk = (tid % 2) << 2"     // 2 threads per row, 4 k each
                            : "    {\n      const int lk = tid / 32, lr = (tid % 32) << 2";  // 32 threads per k row, 4 rows each
  s += ", gr = " + row0 + " + lr, gk = kt * " + S(kSimtBk) + " + lk;\n      " + reg + " = ";
  return s + (guard.empty() ? "*reinterpret_cast<const float4*>(" + ptr + ");\n"
                            : guard + " ? *reinterpret_cast<const float4*>(" + ptr + ") : make_float4(0.f, 0.f, 0.f, 0.f);\n") + "    }\n";
}
std::string simt_store(const Operand& o, const std::string& reg, const std::string& sm) {
  if (o.k_major)
    return "    {\n      const int lr = tid / 2, lk = (tid % 2) << 2;\n      " + sm + "[buf][lk][lr] = " + reg + ".x; " + sm + "[buf][lk + 1][lr] = " + reg + ".y; " +
           sm + "[buf][lk + 2][lr] = " + reg + ".z; " + sm + "[buf][lk + 3][lr] = " + reg + ".w;\n    }\n";
  return "    {\n      const int lk = tid / 32, lr = (tid % 32) << 2;\n      *reinterpret_cast<float4*>(&" + sm + "[buf][lk][lr]) = " + reg + ";\n    }\n";
}

// k row `k` of buffer `buf` into fragment registers fa[f], fb[f]
std::string simt_frag(const std::string& f, const std::string& buf, const std::string& k) {
  std::string s;
  for (int i = 0; i < 2; i++)
    s += "      fa[" + f + "][" + S(i) + "] = *reinterpret_cast<const float4*>(&tg_as[" + buf + "][" + k + "][tr + " + S(64 * i) + "]);\n";
  for (int j = 0; j < 2; j++)
    s += "      fb[" + f + "][" + S(j) + "] = *reinterpret_cast<const float4*>(&tg_bs[" + buf + "][" + k + "][tc + " + S(64 * j) + "]);\n";
  return s;
}
// the 64 FMAs of one k step, B's column in the outer loop: FMAs by A's row needed 12 bytes of spills at 128 registers
std::string simt_fma(const std::string& f) {
  auto vals = [&](const std::string& v) {
    std::string s;
    for (int i = 0; i < 8; i++) s += std::string(i ? ", " : "") + v + "[" + f + "][" + S(i / 4) + "]." + "xyzw"[i % 4];
    return s;
  };
  return "      {\n      const float av[8] = {" + vals("fa") + "};\n      const float bv[8] = {" + vals("fb") +
         "};\n#pragma unroll\n      for (int j = 0; j < 8; j++)\n#pragma unroll\n        for (int i = 0; i < 8; i++) c[i][j] = fmaf(av[i], bv[j], c[i][j]);\n      }\n";
}

std::string render_simt(const Plan& p, const CStyleLanguage& r, const std::string& fname) {
  const int64_t tiles_m = (p.M + 127) / 128, tiles_n = (p.N + 127) / 128, kt_n = (p.K + kSimtBk - 1) / kSimtBk;
  Opening o = opening(p, r, fname, 256, 2, tiles_m, tiles_n, 128, 128, "");
  std::string s = o.src;
  s += "  // SIMT fp32: block tile 128x128x8, 256 threads of 8x8, fragments double-buffered, 2 shared-memory buffers; M=" + S(p.M) + " N=" + S(p.N) +
       " K=" + S(p.K) + " batch=" + S(p.batch) + "\n";
  s += "  __shared__ __align__(16) float tg_as[2][8][128];\n  __shared__ __align__(16) float tg_bs[2][8][128];\n";
  s += "  const int m0 = t0, n0 = t1, tr = (((warp >> 1) << 2) + (lane >> 3)) << 2, tc = (((warp & 1) << 3) + (lane & 7)) << 2;\n";
  s += "  float c[8][8];\n#pragma unroll\n  for (int i = 0; i < 8; i++)\n#pragma unroll\n    for (int j = 0; j < 8; j++) c[i][j] = 0.0f;\n";
  s += "  float4 ra, rb;\n  constexpr int KT = " + S(kt_n) + ";\n";
  s += "  auto load = [&](int kt) {\n" + simt_load(p.a, "ra", "ga", p.M, p.K, "m0") + simt_load(p.b, "rb", "gb", p.N, p.K, "n0") + "  };\n";
  s += "  auto store = [&](int buf) {\n" + simt_store(p.a, "ra", "tg_as") + simt_store(p.b, "rb", "tg_bs") + "  };\n";
  s += "  load(0);\n  store(0);\n  __syncthreads();\n";
  // k+1's fragments are read while k's FMAs run; the next tile's first row right after its barrier
  s += "  float4 fa[2][2], fb[2][2];\n" + simt_frag("0", "0", "0");
  s += "  for (int kt = 0; kt < KT; kt++) {\n    const int cur = kt & 1;\n    if (kt + 1 < KT) load(kt + 1);\n";
  s += "#pragma unroll\n    for (int k = 0; k < " + S(kSimtBk - 1) + "; k++) {\n" + simt_frag("(k + 1) & 1", "cur", "k + 1") + simt_fma("k & 1") + "    }\n";
  s += "    if (kt + 1 < KT) {\n      store(cur ^ 1);\n      __syncthreads();\n" + simt_frag("0", "cur ^ 1", "0") + "    }\n";
  s += simt_fma("1") + "  }\n";
  s += "#pragma unroll\n  for (int i = 0; i < 8; i++)\n#pragma unroll\n  for (int j = 0; j < 8; j++) {\n";
  s += "    const int em = m0 + tr + (i & 3) + ((i >> 2) << 6), en = n0 + tc + (j & 3) + ((j >> 2) << 6);\n";
  s += "    " + in_bounds(p, 128, 128) + "\n      const float acc = c[i][j];\n      " + o.store + "\n    }\n  }\n}\n";
  return s;
}

}  // namespace

bool tc_gemm_applies(const Kernel& k) {
  try {
    plan(k);
    return dynamic_cast<const CStyleLanguage*>(k.opts) != nullptr;
  } catch (const NotCovered&) {
    return false;
  }
}

std::optional<RenderedProgram> tc_gemm_program(const Kernel& k, const std::string& name) {
  auto* r = dynamic_cast<const CStyleLanguage*>(k.opts);
  if (!r) return std::nullopt;
  try {
    const Plan p = plan(k);
    RenderedProgram prg;
    prg.name = name;
    prg.function_name = to_function_name(name);
    prg.device = k.opts->device;
    auto* cuda = dynamic_cast<const CUDARenderer*>(k.opts);
    if (p.simt) {
      prg.src = render_simt(p, *r, prg.function_name);
      prg.global_size = {((p.M + 127) / 128) * ((p.N + 127) / 128), 1, p.batch};
      prg.local_size = {256, 1, 1};
    }
    std::optional<WgCfg> wc = p.simt ? std::nullopt : choose_wgmma(p, cuda ? cuda->sm : 0);
    const bool s_is_b = p.b.k_major;   // wgmma: S (the descriptor operand) must be K-major, B when it is, else A
    // TMA copies 16-bit tiles of 64 k (tma_map): TF32 takes the cp.async wgmma kernel
    std::optional<TmaCfg> tc = wc && !p.tf32 ? choose_tma(p, s_is_b, cuda ? cuda->sms : 0) : std::nullopt;
    std::optional<TmaMap> mr, ms;
    Args args;
    if (tc) {
      const int64_t rdim = s_is_b ? p.M : p.N, sdim = s_is_b ? p.N : p.M;
      (void)args("M", p.M), (void)args("N", p.N), (void)args("K", p.K);   // the first arguments, in this order
      mr = tma_map(p, s_is_b ? p.a : p.b, rdim, s_is_b ? "M" : "N", tc->br(), args);
      ms = tma_map(p, s_is_b ? p.b : p.a, sdim, s_is_b ? "N" : "M", tc->bs, args);
      if (!mr || !ms) tc.reset();
    }
    if (tc) {
      // one source for every shape of this config: the function's name holds no shape (the display name does)
      prg.function_name = "tg_gemm_tma_" + S(tc->br()) + "x" + S(tc->bs);
      // as PTX where the epilogue allows (ptxas only: no NVRTC front end, no NVVM), else CUDA C
      Args pa = args;
      try {
        prg.src = render_tma_ptx(p, *tc, prg.function_name, s_is_b, *mr, *ms, pa);
        args = pa;
      } catch (const NotCovered&) {
        prg.src = render_tma(p, *tc, *r, prg.function_name, s_is_b, *mr, *ms, args);
      }
      prg.arg_vals = args.values();
      prg.global_size = {tc->grid, 1, 1};
      prg.local_size = {tc->threads(), 1, 1};
    } else if (wc) {
      prg.src = render_wgmma(p, *wc, *r, prg.function_name, s_is_b);
      const int64_t rdim = s_is_b ? p.M : p.N, sdim = s_is_b ? p.N : p.M;
      prg.global_size = {((rdim + wc->br() - 1) / wc->br()) * ((sdim + wc->bs - 1) / wc->bs), 1, p.batch};
      prg.local_size = {wc->threads(), 1, 1};
    } else if (!p.simt) {
      Cfg c = choose(p);
      c.bk = 64 / static_cast<int>(p.tc.dtype_in.itemsize());   // 64-byte k rows: 32 halves, 16 floats (TF32)
      prg.src = render(p, c, *r, prg.function_name);
      prg.global_size = {((p.M + c.bm - 1) / c.bm) * ((p.N + c.bn - 1) / c.bn), 1, p.batch};
      prg.local_size = {c.threads(), 1, 1};
    }
    for (int64_t g : prg.global_size) prg.global_dims.push_back(UOp::const_(dtypes::int32, g));
    for (int64_t l : prg.local_size) prg.local_dims.push_back(UOp::const_(dtypes::int32, l));
    int64_t nb = 0;
    for (const UOp& u : p.store.toposort())
      if (u->op == Ops::DEFINE_GLOBAL) nb = std::max(nb, u->as<int64_t>() + 1);
    prg.n_bufs = static_cast<int>(nb);
    prg.outs = {p.store->src[0]->as<int64_t>()};
    prg.op_estimate = 2 * p.M * p.N * p.K * p.batch;
    prg.mem_estimate = k.mem_estimate();
    return prg;
  } catch (const NotCovered&) {
    return std::nullopt;
  }
}

}  // namespace tg
