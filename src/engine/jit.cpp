// TinyJit (tinygrad 0.9.2 engine/jit.py): call 1 runs, call 2 captures the ExecItems that run,
// calls 3+ swap in the new input buffers and replay them (engine/replay.cpp). Variable values
// (from `vars` and the inputs' symbolic dims) are the replay's var_vals; symbolic outputs are
// rebound to them. JIT=0: the function runs every call; JIT=1 (default): replays batch kernels
// into device graphs where the device has them (CUDA graphs); JIT=2: replays without graphs.
#include "tg/jit.hpp"

#include <map>
#include <cstdio>

#include "engine/profile.hpp"
#include "access.hpp"
#include "engine/realize.hpp"
#include "engine/replay.hpp"
#include "lazy/lazy.hpp"

namespace tg {

namespace {
struct InputSig {
  std::string shape;   // symbolic dims as their (unbound) expressions
  DType dtype;
  std::string device;
  bool operator==(const InputSig&) const = default;
};
std::string sig_str(const std::vector<InputSig>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + s[i].shape + " " + s[i].dtype.str() + " " + s[i].device;
  return out + "]";
}
std::string shape_sig(const Tensor& t) {
  if (!t.is_symbolic()) return to_str(t.shape());
  std::string out = "(";
  auto ss = t.sym_shape();
  for (size_t i = 0; i < ss.size(); i++) out += (i ? ", " : "") + (ss[i].is_const() ? std::to_string(ss[i].const_value()) : ss[i].render());
  return out + ")";
}
std::string names_str(const VarBindings& v) {
  std::string out = "{";
  for (auto& [k, x] : v) out += (out.size() > 1 ? ", " : "") + k;
  return out + "}";
}
void realize_all(std::vector<Tensor>& r) {
  // inputs are usually realized already: no schedule to build (a replay pays for every step here)
  bool all = true;
  for (const Tensor& t : r) all = all && Access::lazydata(t)->is_realized();
  if (all) return;
  Tensor first = r[0];
  first.realize(std::vector<Tensor>(r.begin() + 1, r.end()));
}
}  // namespace

struct TinyJit::State {
  FnV fn;
  std::vector<std::string> var_names;                  // the captured variable set
  int cnt = 0;
  std::unique_ptr<JitReplay> replay;                   // the capture, bound for replays
  std::vector<InputSig> expected;
  std::vector<Tensor> ret;
  VarBindings captured_vals;
  // each variable's [min, max] in the captured kernels: their buffers are sized for max, so a
  // same-named Variable with a wider range must not replay them
  std::map<std::string, std::pair<int64_t, int64_t>> var_ranges;
};

namespace {
// outputs of a replay: the captured buffers seen through trackers bound to this call's values
std::vector<Tensor> rebind(const std::vector<Tensor>& ret, const VarBindings& vals) {
  std::vector<Tensor> out;
  for (const Tensor& t : ret) {
    LazyBufferPtr lb = Access::lazydata(t);
    if (!lb->st.symbolic() || vals.empty()) { out.push_back(t); continue; }
    LazyBufferPtr base = lb->base();
    out.push_back(Access::from_lazydata(LazyBuffer::create(lb->device, lb->st.bind(vals), lb->dtype, {}, {}, {}, base)));
  }
  return out;
}
}  // namespace

TinyJit::TinyJit(Fn fn) : s_(std::make_shared<State>()) {
  s_->fn = [f = std::move(fn)](const std::vector<Tensor>& in, const std::vector<Variable>&) { return f(in); };
}
TinyJit::TinyJit(FnV fn) : s_(std::make_shared<State>()) { s_->fn = std::move(fn); }
int TinyJit::cnt() const { return s_->cnt; }
size_t TinyJit::captured_kernels() const { return s_->replay ? s_->replay->captured() : 0; }
void TinyJit::reset() {
  FnV fn = std::move(s_->fn);
  s_ = std::make_shared<State>();
  s_->fn = std::move(fn);
}

std::vector<Tensor> TinyJit::operator()(const std::vector<Tensor>& inputs_in) { return (*this)(inputs_in, {}); }

std::vector<Tensor> TinyJit::operator()(const std::vector<Tensor>& inputs_in, const std::vector<Variable>& vars) {
  State& s = *s_;
  VarBindings var_vals;
  auto add_val = [&](const std::string& k, int64_t v) {
    auto [it, fresh] = var_vals.emplace(k, v);
    if (!fresh && it->second != v)
      throw Error("TinyJit: variable '" + k + "' has two values (" + std::to_string(it->second) + " and " + std::to_string(v) +
                  "); bind it to one value per call");
  };
  for (const Variable& v : vars) {
    if (!v.val()) throw Error("TinyJit: variable '" + v.name() + "' is not bound; pass Variable(...).bind(value)");
    add_val(v.name(), *v.val());
  }
  for (const Tensor& t : inputs_in)
    if (t.is_symbolic())
      for (auto& [k, v] : Access::lazydata(t)->st.var_vals()) add_val(k, v);
  std::vector<Tensor> inputs;
  for (auto& t : inputs_in) inputs.push_back(t.contiguous());   // inputs become realized buffers
  realize_all(inputs);
  std::vector<InputSig> sig;
  std::vector<std::shared_ptr<Buffer>> input_bufs;
  for (auto& t : inputs) {
    sig.push_back({shape_sig(t), t.dtype(), t.device()});
    input_bufs.push_back(Access::lazydata(t)->base()->buffer);
  }
  // the replay finds inputs by buffer: one buffer as two inputs would bind both to whichever comes last
  for (size_t a = 0; a < input_bufs.size(); a++)
    for (size_t b = a + 1; b < input_bufs.size(); b++)
      if (input_bufs[a] == input_bufs[b])
        throw Error("TinyJit: inputs " + std::to_string(a) + " and " + std::to_string(b) + " are the same buffer " + sig_str({sig[a]}) +
                    "; pass it once and use it twice inside the function");

  std::vector<std::string> names;
  for (auto& [k, v] : var_vals) names.push_back(k);
  thread_local uint64_t seen = 0;   // JIT, read again only after a tg::Context change
  thread_local int64_t mode = 1;
  if (const uint64_t g = context_generation(); g != seen) mode = getenv("JIT", 1), seen = g;
  if (mode < 0 || mode > 2) throw Error("TinyJit: JIT=" + std::to_string(mode) + " is not a mode; use JIT=0 (off), 1 (graphs) or 2 (no graphs)");
  if (mode == 0) {
    auto r = s.fn(inputs, vars);
    realize_all(r);
    return r;
  }
  if (s.cnt >= 2) {
    if (sig != s.expected)
      throw Error("TinyJit: inputs changed after capture: captured with " + sig_str(s.expected) + ", called with " + sig_str(sig) +
                  "; use a new TinyJit (or reset()) for a different input signature");
    if (names != s.var_names)
      throw Error("TinyJit: the variables changed after capture: captured with " + names_str(s.captured_vals) + ", called with " +
                  names_str(var_vals) + "; pass the same Variables on every call (or use a new TinyJit)");
    for (auto& [k, v] : var_vals)
      if (auto it = s.var_ranges.find(k); it != s.var_ranges.end() && (v < it->second.first || v > it->second.second))
        throw Error("TinyJit: variable '" + k + "' = " + std::to_string(v) + " is outside the range [" + std::to_string(it->second.first) +
                    ", " + std::to_string(it->second.second) + "] the capture was compiled for; use the same Variable (name and range) on every call");
    profile::Span span("TinyJit replay");
    if (profile::enabled()) span.arg("kernels", std::to_string(s.replay->captured()));
    const VarVals vv(var_vals.begin(), var_vals.end());
    s.replay->run(input_bufs, vv, mode);
    s.cnt++;
    return rebind(s.ret, var_vals);
  }
  if (s.cnt == 1) {
    std::vector<ExecItem> captured;
    profile::Span span("TinyJit capture");
    {
      CaptureScope scope(&captured);
      s.ret = s.fn(inputs, vars);
      realize_all(s.ret);
    }
    s.expected = sig;
    s.var_names = names;
    s.captured_vals = var_vals;
    for (const ExecItem& ei : captured)
      if (auto* cr = dynamic_cast<const CompiledRunner*>(ei.prg.get()))
        for (size_t i = 0; i < cr->p.vars.size() && i < cr->p.var_ranges.size(); i++) s.var_ranges[cr->p.vars[i]] = cr->p.var_ranges[i];
    s.replay = std::make_unique<JitReplay>(std::move(captured), input_bufs, names, VarVals(var_vals.begin(), var_vals.end()));
    if (debug() >= 1) std::fprintf(stderr, "JIT captured %zu kernels with %zu inputs\n", s.replay->captured(), input_bufs.size());
    s.cnt = 2;
    span.arg("kernels", std::to_string(s.replay->captured()));
    return s.ret;
  }
  auto r = s.fn(inputs, vars);
  realize_all(r);
  s.cnt = 1;
  return r;
}

}  // namespace tg
