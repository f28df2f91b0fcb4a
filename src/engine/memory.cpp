// The memory planner (tinygrad 0.9.2 engine/realize.py _internal_memory_planner): a buffer that
// lives only between two schedule items, is not allocated yet and is held by no LazyBuffer can
// take the storage of an earlier buffer whose last use is already past.
#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "engine/schedule.hpp"
#include "runtime/buffer.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {

using BufferPtr = std::shared_ptr<Buffer>;

struct Segment {
  int start, end;   // the schedule items [start, end] during which buf is free
  BufferPtr buf;
};

// Every allocator here supports offset views, so one storage serves any smaller buffer of the
// same device and dtype (largest buffers are placed first).
class SegmentPool {
 public:
  explicit SegmentPool(int n_items) : n_items_(n_items) {}
  BufferPtr place(const BufferPtr& buf, int st, int en) {
    auto& segs = free_[{buf->device, buf->dtype.str()}];
    Segment seg{0, n_items_ - 1, buf};   // no free segment: the buffer keeps its own storage
    auto it = std::find_if(segs.begin(), segs.end(), [&](const Segment& s) { return s.start <= st && en <= s.end; });
    if (it != segs.end()) { seg = *it; segs.erase(it); }
    if (st - 1 >= seg.start) segs.push_back({seg.start, st - 1, seg.buf});
    if (seg.end >= en + 1) segs.push_back({en + 1, seg.end, seg.buf});
    return seg.buf->nbytes() == buf->nbytes() ? seg.buf : seg.buf->view(buf->size, buf->dtype, 0);
  }
 private:
  int n_items_;
  std::map<std::pair<std::string, std::string>, std::vector<Segment>> free_;
};

}  // namespace

std::vector<ScheduleItem> memory_planner(std::vector<ScheduleItem> schedule) {
  if (getenv("NO_MEMORY_PLANNER")) return schedule;
  // buffers of copies and other non-kernel items keep their storage (transfers may overlap)
  std::unordered_set<Buffer*> noopt;
  for (auto& si : schedule)
    if (si.kind != MetaOps::KERNEL) for (auto& b : si.bufs) noopt.insert(&b->base());
  auto plannable = [&](const BufferPtr& b) { return !b->is_allocated() && b->lb_refcount() == 0 && !noopt.count(&b->base()); };

  std::vector<BufferPtr> order;   // bases in order of first appearance
  std::unordered_map<Buffer*, std::pair<int, int>> span;
  for (int i = 0; i < static_cast<int>(schedule.size()); i++) {
    for (auto& b : schedule[i].bufs) {
      if (!plannable(b)) continue;
      BufferPtr base = b->base().shared_from_this();
      auto [it, fresh] = span.emplace(base.get(), std::pair{i, i});
      if (fresh) order.push_back(base);
      it->second.second = i;
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const BufferPtr& a, const BufferPtr& b) { return a->nbytes() > b->nbytes(); });
  SegmentPool pool(static_cast<int>(schedule.size()));
  std::unordered_map<Buffer*, BufferPtr> assigned;
  for (auto& base : order) assigned[base.get()] = pool.place(base, span[base.get()].first, span[base.get()].second);

  std::unordered_map<Buffer*, BufferPtr> replaced;   // every planned buffer, views included
  std::vector<BufferPtr> old;                        // keeps replaced buffers (the map's keys) alive
  for (auto& si : schedule) {
    for (auto& b : si.bufs) {
      if (!plannable(b)) continue;
      auto done = replaced.find(b.get());
      if (done != replaced.end()) { b = done->second; continue; }
      BufferPtr nb;
      if (b->is_view()) {
        BufferPtr storage = assigned[&b->base()];
        nb = std::make_shared<Buffer>(storage->base().shared_from_this(), b->size, b->dtype, b->offset + storage->offset);
      } else {
        nb = assigned[b.get()];
      }
      replaced.emplace(b.get(), nb);
      old.push_back(b);
      b = nb;
    }
  }
  if (debug() >= 1) {
    std::unordered_set<Buffer*> before, after;
    for (auto& [k, v] : assigned) { before.insert(k); after.insert(&v->base()); }
    if (before.size() != after.size()) {
      int64_t nb = 0, na = 0;
      for (auto* x : before) nb += x->nbytes();
      for (auto* x : after) na += x->nbytes();
      printf("memory reduced from %.2f MB -> %.2f MB, %zu -> %zu bufs\n", nb / 1e6, na / 1e6, before.size(), after.size());
    }
  }
  return schedule;
}

}  // namespace tg
