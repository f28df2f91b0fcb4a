// graph_rewrite with the symbolic table on large index expressions: the flattened index of
// 6-d tensors read through a permute and a second reshaped view (what a ShapeTracker with two
// views produces), many of them in one SINK. Prints one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include "uop/symbolic.hpp"

using namespace tg;

namespace {
UOp ci(int64_t v) { return UOp::const_(dtypes::int32, v); }

// idx of a flat position `flat` in a contiguous `shape`, then re-linearized with `strides`
UOp view_index(const UOp& flat, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  UOp acc = ci(0);
  int64_t div = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; i--) {
    UOp idx = (flat / ci(div)) % ci(shape[i]);
    acc = acc + idx * ci(strides[i]);
    div *= shape[i];
  }
  return acc;
}

UOp build(int n_exprs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<UOp> outs;
  for (int k = 0; k < n_exprs; k++) {
    std::vector<int64_t> shape(6);
    for (auto& s : shape) s = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    int64_t total = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    std::vector<int> perm(6);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    // strides of the permuted contiguous buffer
    std::vector<int64_t> pst(6);
    int64_t st = 1;
    for (int i = 5; i >= 0; i--) { pst[perm[i]] = st; st *= shape[perm[i]]; }
    UOp g(Ops::DEFINE_VAR, dtypes::int32, {ci(0), ci(total - 1)}, "gidx" + std::to_string(k));
    // first view: a reshape of the flat index into (total/r, r), then the permuted 6-d view
    int64_t r = shape[5] * shape[4];
    UOp flat = (g / ci(r)) * ci(r) + g % ci(r);
    outs.push_back(view_index(flat, shape, pst));
  }
  return UOp(Ops::SINK, dtypes::void_, outs);
}
}  // namespace

int main() {
  UOp sink = build(400, 7);
  size_t nodes = sink.toposort().size();

  // count the successful rewrites once, through a wrapper rule
  int64_t rewrites = 0;
  PatternMatcher counting({{UPat(), [&](const Match& m) {
    auto r = symbolic().rewrite(*m.root);
    rewrites += r.has_value();
    return r;
  }}});
  UOp expect = graph_rewrite(sink, counting);

  const int reps = 20;
  double best = 1e30;
  for (int i = 0; i < reps; i++) {
    auto t0 = std::chrono::steady_clock::now();
    UOp out = graph_rewrite(sink, symbolic());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    if (out != expect) { std::fprintf(stderr, "bench_rewrite: results differ between runs\n"); return 1; }
  }
  std::printf("{\"bench\":\"rewrite\",\"nodes\":%zu,\"out_nodes\":%zu,\"rewrites\":%lld,\"rewrites_per_s\":%.0f,"
              "\"us_per_rewrite\":%.3f,\"us_per_node\":%.3f,\"ms\":%.3f}\n",
              nodes, expect.toposort().size(), static_cast<long long>(rewrites), rewrites / best, best * 1e6 / rewrites,
              best * 1e6 / nodes, best * 1e3);
  return 0;
}
