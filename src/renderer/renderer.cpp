// Program summary of a rendered kernel: launch sizes, variables, buffers, cost estimates.
#include "renderer/renderer.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <unordered_set>

#include "tg/helpers.hpp"

namespace tg {

std::string TensorCore::str() const {
  std::string s = "WMMA";
  for (int64_t d : dims) s += "_" + std::to_string(d);
  return s + "_" + dtype_in.name() + "_" + dtype_out.name();
}

size_t WMMAArg::hash() const {
  size_t h = std::hash<std::string>()(name) ^ (std::hash<std::string>()(device) << 1);
  for (int64_t d : dims) h = h * 31 + std::hash<int64_t>()(d);
  for (const auto& up : upcast_axes)
    for (auto [a, sz] : up) h = h * 31 + std::hash<int64_t>()(a * 1024 + sz);
  for (int64_t a : reduce_axes) h = h * 37 + std::hash<int64_t>()(a);
  return h ^ (dtype_in.hash() << 3) ^ (dtype_out.hash() << 5);
}
bool WMMAArg::equals(const ArgObj& o) const {
  auto* w = dynamic_cast<const WMMAArg*>(&o);
  return w && w->name == name && w->dims == dims && w->dtype_in == dtype_in && w->dtype_out == dtype_out && w->device == device &&
         w->upcast_axes == upcast_axes && w->reduce_axes == reduce_axes;
}
std::string WMMAArg::str() const {
  std::string ups = "(";
  for (const auto& up : upcast_axes) {
    ups += "(";
    for (auto [a, sz] : up) ups += "(" + std::to_string(a) + ", " + std::to_string(sz) + "), ";
    ups += "), ";
  }
  std::string red = "(";
  for (int64_t a : reduce_axes) red += std::to_string(a) + ", ";
  return "('" + name + "', (" + std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + ", " + std::to_string(dims[2]) +
         "), " + dtype_in.str() + ", " + dtype_out.str() + ", '" + device + "'" +
         (upcast_axes.empty() ? std::string() : ", " + ups + "), " + red + ")") + ")";
}

std::string to_function_name(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0x1b && i + 1 < s.size() && s[i + 1] == '[') {   // ANSI escape: ESC [ ... letter
      i += 2;
      while (i < s.size() && !std::isalpha(static_cast<unsigned char>(s[i]))) i++;
      continue;
    }
    if (std::isalnum(c) || c == '_') { out += static_cast<char>(c); continue; }
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02X", c);
    out += hex;
  }
  return out;
}

DeviceCaps Renderer::kernel_caps() const {
  DeviceCaps c = *this;
  c.has_exp2 = supports(UnaryOps::EXP2);
  c.has_log2 = supports(UnaryOps::LOG2);
  c.has_sin = supports(UnaryOps::SIN);
  c.vector_bytes = getenv("VECTORIZE", 1) ? vector_bytes : 0;
  c.gpu_vector_loads = has_local && supports_float4 && vector_bytes == 0 && getenv("GPU_FLOAT4", 1);
  return c;
}

namespace {

int64_t upper_int(const UOp& u) { return const_to_int(u->op == Ops::CONST ? u.const_value() : u.vmax()); }

// every node below (and including) u
void collect_parents(const UOp& u, std::unordered_set<const UOpNode*>& out) {
  std::vector<UOp> work{u};
  while (!work.empty()) {
    UOp x = work.back();
    work.pop_back();
    if (!out.insert(x.get()).second) continue;
    for (const UOp& s : x->src) work.push_back(s);
  }
}

}  // namespace

std::pair<int64_t, int64_t> flops_mem(const std::vector<UOp>& uops, bool ignore_indexing) {
  std::unordered_set<const UOpNode*> dont_count;
  if (ignore_indexing) {
    for (const UOp& u : uops) {
      if (u->op == Ops::LOAD) {
        collect_parents(u->src[1], dont_count);
        if (u->src.size() > 3) collect_parents(u->src[3], dont_count);
      } else if (u->op == Ops::STORE) {
        collect_parents(u->src[1], dont_count);
        if (u->src.size() > 3) collect_parents(u->src[3], dont_count);
      } else if (u->op == Ops::IF) {
        collect_parents(u->src[0], dont_count);
      }
    }
  }
  int64_t flops = 0, mem = 0, mults = 1;
  std::vector<int64_t> mult_stack;
  for (const UOp& u : uops) {
    switch (u->op) {
      case Ops::RANGE:
        mult_stack.push_back(mults);
        mults *= std::max<int64_t>(0, upper_int(u->src[1]) - const_to_int(u->src[0]->op == Ops::CONST ? u->src[0].const_value() : u->src[0].vmin()));
        break;
      case Ops::ENDRANGE:
        TG_ASSERT(!mult_stack.empty(), "ENDRANGE without RANGE");
        mults = mult_stack.back();
        mult_stack.pop_back();
        break;
      case Ops::SPECIAL: mults *= upper_int(u->src.at(0)); break;   // a SPECIAL can't be ended
      case Ops::LOAD: mem += u->dtype.itemsize() * mults; break;
      case Ops::STORE: mem += u->src[2]->dtype.itemsize() * mults; break;
      case Ops::ALU:
        if (!dont_count.count(u.get())) {
          bool mulacc = u->is<TernaryOps>() && u->as<TernaryOps>() == TernaryOps::MULACC;
          flops += mults * (mulacc ? 2 : 1) * u->dtype.count;
        }
        break;
      case Ops::WMMA:
        if (!dont_count.count(u.get())) {
          auto* w = u->is<ArgObjPtr>() ? dynamic_cast<const WMMAArg*>(u->as<ArgObjPtr>().get()) : nullptr;
          TG_ASSERT(w, "WMMA needs a WMMAArg: " + u.str());
          flops += 2 * w->dims[0] * w->dims[1] * w->dims[2] / 32 * mults;
        }
        break;
      default: break;
    }
  }
  return {flops, mem};
}

namespace {
bool is_cpu_parallel(const UOp& u) {
  if (u->op != Ops::RANGE) return false;
  const auto& a = u->as<std::vector<int64_t>>();
  return a.size() >= 3 && a[2] == 1;
}
std::vector<int64_t> dims_value(const std::vector<UOp>& dims) {
  std::vector<int64_t> out;
  for (const UOp& d : dims) out.push_back(d->op == Ops::CONST ? const_to_int(d.const_value()) : -1);
  return out;
}
}  // namespace

RenderedProgram to_program(const Renderer& r, const std::string& name, const std::vector<UOp>& uops) {
  RenderedProgram p;
  p.name = name;
  p.function_name = to_function_name(name);
  p.device = r.device;
  p.src = r.render(p.function_name, uops);
  UOp one = UOp::const_(dtypes::int32, int64_t{1});
  p.global_dims = p.local_dims = {one, one, one};
  bool local_by_runtime = false;
  int n_parallel = 0;
  for (const UOp& u : uops) {
    switch (u->op) {
      case Ops::DEFINE_VAR:
        p.vars.push_back(u->as<std::string>());
        if (u->src.size() == 2 && u->src[0]->op == Ops::CONST && u->src[1]->op == Ops::CONST)
          p.var_ranges.emplace_back(const_to_int(u->src[0].const_value()), const_to_int(u->src[1].const_value()));
        else   // a DEFINE_VAR without a range (hand-built uops): any int32
          p.var_ranges.emplace_back(INT32_MIN, INT32_MAX);
        break;
      case Ops::DEFINE_GLOBAL: p.n_bufs = std::max<int>(p.n_bufs, static_cast<int>(u->as<int64_t>()) + 1); break;
      case Ops::STORE: {
        std::unordered_set<const UOpNode*> parents;
        collect_parents(u->src[0], parents);
        for (const UOpNode* x : parents)
          if (x->op == Ops::DEFINE_GLOBAL) p.outs.push_back(x->as<int64_t>());
        break;
      }
      case Ops::SPECIAL: {
        const std::string& nm = u->as<std::string>();
        size_t dim = static_cast<size_t>(nm.back() - '0');
        TG_ASSERT(dim < 3, "SPECIAL name must end in its dimension 0..2: " + nm);
        if (nm[0] == 'i') local_by_runtime = true;
        if (nm[0] == 'l') p.local_dims[dim] = u->src.at(0);
        else p.global_dims[dim] = u->src.at(0);
        break;
      }
      case Ops::RANGE:
        if (r.cpu_threads && is_cpu_parallel(u)) {
          TG_ASSERT(++n_parallel == 1, "more than one parallel RANGE in " + name);
          p.global_dims[0] = u->src[1];   // the range starts at 0 (checked by the renderer)
        }
        break;
      default: break;
    }
  }
  {   // names sorted (the kernel's argument order), each range kept with its name
    std::vector<size_t> order(p.vars.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return p.vars[x] < p.vars[y]; });
    std::vector<std::string> vars;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (size_t i : order) vars.push_back(p.vars[i]), ranges.push_back(p.var_ranges[i]);
    p.vars = std::move(vars), p.var_ranges = std::move(ranges);
  }
  std::sort(p.outs.begin(), p.outs.end());
  p.outs.erase(std::unique(p.outs.begin(), p.outs.end()), p.outs.end());
  if (local_by_runtime) p.local_dims.clear();
  p.global_size = dims_value(p.global_dims);
  p.local_size = dims_value(p.local_dims);
  auto [flops, mem] = flops_mem(uops, true);
  p.op_estimate = flops;
  p.mem_estimate = mem;
  return p;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> RenderedProgram::launch_dims(
    const std::unordered_map<std::string, int64_t>& var_vals) const {
  auto eval = [&](const std::vector<UOp>& dims) {
    std::vector<int64_t> out;
    for (const UOp& d : dims) out.push_back(const_to_int(eval_uop(d, var_vals)));
    return out;
  };
  return {eval(global_dims), eval(local_dims)};
}

}  // namespace tg
