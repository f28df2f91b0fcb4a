// Splitting a kernel's dims so that two-view loads become one view.
//
// max_pool2d's backward (and any gradient through a reshaped broadcast) reads the pooled max, count
// and gradient at every element of the input: a view (n,c,10,2,10,2) with strides (.., 10, 0, 1, 0)
// seen through a reshape as (n,c,20,20). One view can't express that, so the load keeps two and its
// index is div/mod math per element (h/2*10 + w/2), which also keeps the Kernel from vectorizing or
// tiling along those dims: the batchnorm + max_pool2d backward kernels of beautiful_mnist ran at 2-4
// GB/s. Split at the windows' boundaries ((n,c,20,20) -> (n,c,10,2,10,2)) the views merge into one
// with plain strides; the Kernel merges back whatever dims every buffer reads contiguously.
#include "engine/refine_views.hpp"

#include <algorithm>
#include <unordered_map>

#include "shape/shapetracker_arg.hpp"
#include "tg/helpers.hpp"

namespace tg {
namespace {

// Inner block sizes (innermost first, cumulative products of the factors) of a dim of size n read at
// stride s by the last view, so that each factor steps through one dim of the view below it (shape
// below, row-major strides): {} when it already does or no split makes it.
std::vector<int64_t> blocks_for(int64_t n, int64_t s, const Shape& below) {
  std::vector<int64_t> c(below.size(), 1);
  for (size_t m = below.size(); m-- > 1;) c[m - 1] = c[m] * below[m];
  std::vector<int64_t> blocks;
  int64_t block = 1;
  while (n > 1 && s > 0) {
    // the dim of `below` that stride s steps within (s = q * c[m], q < below[m]; unique)
    std::optional<size_t> m;
    for (size_t j = 0; j < below.size() && !m; j++)
      if (below[j] > 1 && s % c[j] == 0 && s / c[j] < below[j]) m = j;
    if (!m) return {};
    const int64_t q = s / c[*m];
    if (below[*m] % q != 0) return {};
    const int64_t t = below[*m] / q;   // steps of s within that dim
    if (n <= t) break;
    if (n % t != 0) return {};
    block *= t, n /= t, s *= t;
    blocks.push_back(block);
  }
  return blocks;
}

// The split of every dim (its inner blocks) that makes st one view; false when none does.
bool propose(const ShapeTracker& st, std::vector<std::vector<int64_t>>& blocks) {
  if (st.views.size() < 2 || st.symbolic()) return false;
  const View& last = st.views.back();
  if (last.mask) return false;
  const Shape& below = st.views[st.views.size() - 2].shape;
  std::vector<std::vector<int64_t>> mine(last.shape.size());
  bool any = false;
  for (size_t d = 0; d < last.shape.size(); d++) {
    if (last.strides[d] < 0) return false;
    mine[d] = blocks_for(last.shape[d], last.strides[d], below);
    any = any || !mine[d].empty();
  }
  if (!any) return false;
  // merged with the splits proposed before: every block size divides the next larger one
  std::vector<std::vector<int64_t>> merged = blocks;
  for (size_t d = 0; d < mine.size(); d++) {
    std::vector<int64_t>& b = merged[d];
    b.insert(b.end(), mine[d].begin(), mine[d].end());
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    for (size_t i = 1; i < b.size(); i++)
      if (b[i] % b[i - 1] != 0) return false;
  }
  blocks = std::move(merged);
  return true;
}

}  // namespace

UOp refine_views(const UOp& sink) {
  if (!getenv("REFINE_VIEWS", 1)) return sink;
  const std::vector<UOp> topo = sink.toposort();
  std::vector<const ShapeTracker*> sts;
  for (const UOp& u : topo)
    if (u->op == Ops::SHAPETRACKER) sts.push_back(&st_of(u));
  if (sts.empty()) return sink;
  // the kernel's full shape: every tracker has it, or 1 where it reads after a reduce
  Shape full = sts[0]->shape();
  for (const ShapeTracker* st : sts) {
    if (st->symbolic() || st->shape().size() != full.size()) return sink;
    for (size_t d = 0; d < full.size(); d++) full[d] = std::max(full[d], st->shape()[d]);
  }
  for (const ShapeTracker* st : sts)
    for (size_t d = 0; d < full.size(); d++)
      if (st->shape()[d] != full[d] && st->shape()[d] != 1) return sink;
  std::vector<std::vector<int64_t>> blocks(full.size());
  bool any = false;
  for (const ShapeTracker* st : sts)
    if (st->shape() == full) any = propose(*st, blocks) || any;
  if (!any) return sink;
  // the refined shape, and where each old dim starts in it
  Shape refined;
  std::vector<int64_t> start(full.size() + 1, 0);
  for (size_t d = 0; d < full.size(); d++) {
    start[d] = static_cast<int64_t>(refined.size());
    std::vector<int64_t> factors;
    int64_t inner = 1;
    for (int64_t b : blocks[d]) factors.push_back(b / inner), inner = b;
    factors.push_back(full[d] / inner);
    for (auto it = factors.rbegin(); it != factors.rend(); ++it) refined.push_back(*it);
  }
  start[full.size()] = static_cast<int64_t>(refined.size());
  auto reshaped = [&](const ShapeTracker& st) -> std::optional<ShapeTracker> {
    Shape s;
    for (size_t d = 0; d < full.size(); d++)
      for (int64_t i = start[d]; i < start[d + 1]; i++) s.push_back(st.shape()[d] == 1 && full[d] != 1 ? 1 : refined[i]);
    ShapeTracker ret = st.reshape(s).simplify();
    if (ret.views.size() > st.views.size()) return std::nullopt;   // a masked dim that doesn't split
    return ret;
  };
  std::unordered_map<const UOpNode*, UOp> done;
  bool gained = false;
  for (const UOp& u : topo) {
    std::vector<UOp> src;
    for (const UOp& s : u->src) src.push_back(done.at(s.get()));
    Arg arg = u->arg;
    if (u->op == Ops::SHAPETRACKER) {
      std::optional<ShapeTracker> st = reshaped(st_of(u));
      if (!st) return sink;
      gained = gained || st->views.size() < st_of(u).views.size();
      done.emplace(u.get(), st_uop(*st));
      continue;
    }
    if (u->op == Ops::REDUCE_AXIS) {
      ReduceArg ra = u->as<ReduceArg>();
      std::vector<int64_t> axes;
      for (int64_t a : ra.axes)
        for (int64_t i = start[a]; i < start[a + 1]; i++) axes.push_back(i);
      ra.axes = axes;
      arg = ra;
    }
    done.emplace(u.get(), UOp(u->op, u->dtype, src, arg));
  }
  return gained ? done.at(sink.get()) : sink;
}

}  // namespace tg
