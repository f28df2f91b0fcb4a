// The realize engine (tinygrad 0.9.2 engine/realize.py): ScheduleItems -> ExecItems -> run.
// A KERNEL item becomes a CompiledRunner (Kernel -> opts -> lower -> render -> compile -> load), cached
// per (device, ast, BEAM, NOOPT) in the method cache; COPY, EMPTY and VIEW items get small runners.
// DEBUG>=2 prints one line per run kernel, DEBUG>=3 the AST and opts, DEBUG>=4 the source.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/kernel.hpp"
#include "engine/schedule.hpp"
#include "renderer/renderer.hpp"
#include "runtime/buffer.hpp"

namespace tg {

using VarVals = std::unordered_map<std::string, int64_t>;

class Runner {
 public:
  Runner(std::string display_name, std::string device, int64_t op_estimate = 0, int64_t mem_estimate = 0,
         std::optional<int64_t> lds_estimate = std::nullopt)
      : display_name(std::move(display_name)), device(std::move(device)), op_estimate(op_estimate),
        mem_estimate(mem_estimate), lds_estimate(lds_estimate.value_or(mem_estimate)) {}
  virtual ~Runner() = default;
  std::string display_name, device;
  int64_t op_estimate, mem_estimate, lds_estimate;
  bool first_run = true;
  // Runs on bufs; returns the run time in seconds when wait (nullopt when the runner can't time itself).
  virtual std::optional<double> operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) = 0;
  // true: the runner allocates bufs[0] itself (ExecItem::run allocates the others before the call)
  virtual bool allocates_output() const { return false; }
};

class CompiledRunner : public Runner {
 public:
  // Compiles p.src with the device's compiler (through the in-process program cache by source, then the disk
  // cache) unless precompiled is given. p.arg_vals are passed after the variables' values.
  explicit CompiledRunner(RenderedProgram p, std::optional<std::string> precompiled = std::nullopt);
  RenderedProgram p;
  std::string lib;
  std::unique_ptr<RuntimeProgram> clprg;
  std::optional<double> operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) override;
};

// A CPU GEMM whose b operand is packed first (codegen/pack.hpp): runs the copy kernel into its own
// scratch buffer, then the GEMM reading the scratch as one more buffer. Both are method-cache runners.
class PackedRunner : public Runner {
 public:
  PackedRunner(std::shared_ptr<CompiledRunner> pack, std::shared_ptr<CompiledRunner> gemm, int64_t b_index, int64_t scratch_index,
               int64_t scratch_size, DType dtype);
  std::shared_ptr<CompiledRunner> pack, gemm;
  std::optional<double> operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) override;

 private:
  int64_t b_index_, scratch_index_;
  std::shared_ptr<Buffer> scratch_;
};

// Copies bufs[1] into bufs[0] (any two devices; through the host when neither is host memory).
class BufferCopy : public Runner {
 public:
  BufferCopy(int64_t total_sz, const std::string& dest_device, const std::string& src_device, bool symbolic = false);
  std::optional<double> operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) override;
  bool allocates_output() const override { return true; }   // DISK -> CPU maps the file's bytes (Buffer::map_from_disk)

 private:
  bool symbolic_;   // the copied tensor has symbolic dims: its buffers may be sized for different values
};

// Allocation only: the buffer is allocated by ExecItem::run.
class EmptyOp : public Runner {
 public:
  explicit EmptyOp(const Buffer& buf);
  std::optional<double> operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) override;
};

// bufs[0] is a view of bufs[1]'s memory: nothing to run, checked.
class ViewOp : public Runner {
 public:
  explicit ViewOp(const Buffer& buf);
  std::optional<double> operator()(const std::vector<Buffer*>& bufs, const VarVals& var_vals, bool wait) override;
};

struct ExecItem {
  std::shared_ptr<Runner> prg;
  std::vector<std::shared_ptr<Buffer>> bufs;
  std::vector<std::string> metadata;
  // allocates the buffers (unless jit), runs, updates GlobalCounters and prints the DEBUG>=2 line
  std::optional<double> run(const VarVals& var_vals = {}, bool wait = false, bool jit = false, bool do_update_stats = true);
};

// TinyJit's capture: while a CaptureScope is alive, every ExecItem that runs is appended to out.
class CaptureScope {
 public:
  explicit CaptureScope(std::vector<ExecItem>* out);
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
 private:
  std::vector<ExecItem>* prev_;
};

// The renderer of a device's kind: "C" -> ClangRenderer, "CUDA" -> CUDARenderer for its arch. One per device.
const Renderer& get_renderer(const std::string& device);
// Kernel with required, tensor-core-free hand-coded opts (NOOPT=1: none).
std::unique_ptr<Kernel> get_kernel(const Renderer& renderer, const UOp& ast);
// From the method cache, or built and compiled once.
std::shared_ptr<CompiledRunner> get_runner(const std::string& device, const UOp& ast);
// The runner of a KERNEL ast: get_runner's, or a PackedRunner when the CPU packs a GEMM operand (NOOPT doesn't)
std::shared_ptr<Runner> get_kernel_runner(const std::string& device, const UOp& ast);
// the method cache and the in-process program cache (compiled binaries by source) together
void clear_method_cache();
size_t method_cache_size();

ExecItem lower_schedule_item(const ScheduleItem& si);
void run_schedule(std::vector<ScheduleItem> schedule, const VarVals& var_vals = {}, bool do_update_stats = true);

}  // namespace tg
