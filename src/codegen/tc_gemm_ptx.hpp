// The Hopper TMA GEMM (codegen/tc_gemm.cpp, render_tma) rendered directly as PTX. The CUDA C kernel's NVRTC compile
// is ~2/3 front end + NVVM and ~1/3 ptxas (bench/tc_notes.md, session 13); its main loop is inline PTX already, so
// the PTX kernel skips NVVM: the runtime turns it into a cubin with ptxas in-process (runtime/cuda.cpp: nvJitLink, or
// the driver's JIT). The kernel's structure is render_tma's (the same producer, ring, consumer loop, staged epilogue
// and instruction mix); tc_gemm.cpp fills in the config and renders the AST's epilogue ops through Fn.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace tg::ptx {

// A PTX function body under construction: virtual registers declared on first use, labels numbered.
struct Fn {
  std::string decls, body;
  int n = 0, labels = 0;
  // a fresh register of type ty ("b32", "f32", "b16", "b64", "pred")
  std::string reg(const std::string& ty) {
    const std::string r = "%v" + std::to_string(n++);
    decls += "\t.reg ." + ty + " " + r + ";\n";
    return r;
  }
  std::string label() { return "$L" + std::to_string(labels++); }
  void operator()(const std::string& ins) { body += "\t" + ins + ";\n"; }
  void at(const std::string& l) { body += l + ":\n"; }
  // d = op(a, b) into a fresh register of type ty
  std::string op(const std::string& ins, const std::string& ty, const std::string& a, const std::string& b = "") {
    const std::string d = reg(ty);
    (*this)(ins + " " + d + ", " + a + (b.empty() ? "" : ", " + b));
    return d;
  }
};

// Everything the PTX kernel takes from the plan (see render_tma for the meaning of each part).
struct TmaSpec {
  std::string fname;
  int consumers = 1, bs = 128, stages = 6, ep_cols = 128;
  bool r_kmajor = false, s_is_b = false, r_fast = false;   // R K-major; S is B; the output contiguous along R
  // the k tile's four k16 steps with 2 consumers (1 consumer: always 1): steps > 0 read both operands by
  // descriptor, `steps` wgmma in a rolled loop of 4 / steps iterations (1: ONE wgmma, as the 64x128 kernel); 0: R's
  // fragments by four ldmatrix and four wgmma (the C kernel's form). ptxas' time grows with each wgmma in the text
  // (~80 M instructions for one with 128 accumulators): the 1792^3 kernel's ptxas -O1 executes 367 M instructions
  // with 1, 609 M with 0, and on the H100 its first call took 68-104 ms against 138-164 at the same kernel speed; 2
  // and 4 ran 10-13% slower (tc_notes.md, session 14). TC_PTX_KSTEPS sets it (a measurement knob).
  int steps = 1;
  // 2 consumers: the producer warpgroup hands registers to the consumers (setmaxnreg 40 / 232). Without it the kernel
  // by descriptors still fits (161 registers a thread, no spills) and its ptxas -O1 executes 303 M instead of 367 M
  // instructions, but on the H100 ptxas took only ~5% less time, the first call of the 1792^3 GEMM 68-72 ms against
  // 78-104, and fp16/bf16 4096^3 ran ~1% slower (tc_notes.md, session 14): kept. TC_PTX_MAXNREG=0 drops it; the
  // ldmatrix form (steps 0) always has it.
  bool maxnreg = true;
  std::string in;                                          // wgmma input type: "f16" or "bf16"
  std::vector<long long> launch;                           // the tg_launch words
  int n_bufs = 0, out_buf = 0, out_bytes = 2;              // buffers; the output's index and element size
  int rank_r = 2, rank_s = 2;
  std::vector<int> batch_r, batch_s;                       // the batch axes (indices into bdims) in each map's coords
  std::string M, N, K;                                     // int parameter names
  std::vector<std::string> bdims;                          // the batch axes' sizes (parameter names)
  // one output element at (em, en) from its f32 accumulator acc: a register of the output's type
  std::function<std::string(Fn&, const std::string& em, const std::string& en, const std::string& acc)> value;
  // the output's element index of (em, en), an s32 register
  std::function<std::string(Fn&, const std::string& em, const std::string& en)> out_index;
  // the int parameters in launch order; read after the epilogue is rendered (it adds some)
  std::function<std::vector<std::string>()> params;
};

// the kernel's PTX module (one .entry named spec.fname and the tg_launch global)
std::string render_tma(const TmaSpec& spec);
// the register of int parameter `name` (loaded at the kernel's start)
inline std::string arg_reg(const std::string& name) { return "%" + name; }
// the register holding batch axis i's coordinate of the current tile
inline std::string eb_reg(size_t i) { return "%eb" + std::to_string(i); }

}  // namespace tg::ptx
