// TinyJit (tinygrad 0.9.2 engine/jit.py): call 1 runs, call 2 captures the ExecItems that run,
// calls 3+ swap in the new input buffers and replay them. JIT=0 turns it off.
#include "tg/jit.hpp"

#include <cstdio>

#include "engine/profile.hpp"
#include "access.hpp"
#include "engine/realize.hpp"
#include "lazy/lazy.hpp"

namespace tg {

namespace {
struct InputSig {
  Shape shape;
  DType dtype;
  std::string device;
  bool operator==(const InputSig&) const = default;
};
std::string sig_str(const std::vector<InputSig>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + to_str(s[i].shape) + " " + s[i].dtype.str() + " " + s[i].device;
  return out + "]";
}
void realize_all(std::vector<Tensor>& r) {
  if (r.empty()) return;
  Tensor first = r[0];
  first.realize(std::vector<Tensor>(r.begin() + 1, r.end()));
}
}  // namespace

struct TinyJit::State {
  Fn fn;
  int cnt = 0;
  std::vector<ExecItem> jit_cache;
  std::vector<std::pair<size_t, size_t>> input_pos;   // (item, buf) of each input use
  std::vector<size_t> input_idx;                       // which input it is
  std::vector<InputSig> expected;
  std::vector<Tensor> ret;
};

TinyJit::TinyJit(Fn fn) : s_(std::make_shared<State>()) { s_->fn = std::move(fn); }
int TinyJit::cnt() const { return s_->cnt; }
size_t TinyJit::captured_kernels() const { return s_->jit_cache.size(); }
void TinyJit::reset() {
  Fn fn = std::move(s_->fn);
  s_ = std::make_shared<State>();
  s_->fn = std::move(fn);
}

std::vector<Tensor> TinyJit::operator()(const std::vector<Tensor>& inputs_in) {
  State& s = *s_;
  std::vector<Tensor> inputs;
  for (auto& t : inputs_in) inputs.push_back(t.contiguous());   // inputs become realized buffers
  realize_all(inputs);
  std::vector<InputSig> sig;
  std::vector<std::shared_ptr<Buffer>> input_bufs;
  for (auto& t : inputs) {
    sig.push_back({t.shape(), t.dtype(), t.device()});
    input_bufs.push_back(Access::lazydata(t)->base()->buffer);
  }
  // the replay finds inputs by buffer: one buffer as two inputs would bind both to whichever comes last
  for (size_t a = 0; a < input_bufs.size(); a++)
    for (size_t b = a + 1; b < input_bufs.size(); b++)
      if (input_bufs[a] == input_bufs[b])
        throw Error("TinyJit: inputs " + std::to_string(a) + " and " + std::to_string(b) + " are the same buffer " + sig_str({sig[a]}) +
                    "; pass it once and use it twice inside the function");

  if (getenv("JIT", 1) == 0) {
    auto r = s.fn(inputs);
    realize_all(r);
    return r;
  }
  if (s.cnt >= 2) {
    if (sig != s.expected)
      throw Error("TinyJit: inputs changed after capture: captured with " + sig_str(s.expected) + ", called with " + sig_str(sig) +
                  "; use a new TinyJit (or reset()) for a different input signature");
    for (size_t k = 0; k < s.input_pos.size(); k++) {
      auto [j, i] = s.input_pos[k];
      s.jit_cache[j].bufs[i] = input_bufs[s.input_idx[k]];
    }
    profile::Span span("TinyJit replay");
    span.arg("kernels", std::to_string(s.jit_cache.size()));
    for (auto& ei : s.jit_cache) ei.run({}, false, true);
    s.cnt++;
    return s.ret;
  }
  if (s.cnt == 1) {
    std::vector<ExecItem> captured;
    profile::Span span("TinyJit capture");
    {
      CaptureScope scope(&captured);
      s.ret = s.fn(inputs);
      realize_all(s.ret);
    }
    s.expected = sig;
    s.jit_cache = std::move(captured);
    for (size_t j = 0; j < s.jit_cache.size(); j++)
      for (size_t i = 0; i < s.jit_cache[j].bufs.size(); i++)
        for (size_t k = 0; k < input_bufs.size(); k++)
          if (s.jit_cache[j].bufs[i] == input_bufs[k]) {
            s.input_pos.push_back({j, i});
            s.input_idx.push_back(k);
          }
    if (debug() >= 1) std::fprintf(stderr, "JIT captured %zu kernels with %zu inputs\n", s.jit_cache.size(), input_bufs.size());
    s.cnt = 2;
    span.arg("kernels", std::to_string(s.jit_cache.size()));
    return s.ret;
  }
  auto r = s.fn(inputs);
  realize_all(r);
  s.cnt = 1;
  return r;
}

}  // namespace tg
