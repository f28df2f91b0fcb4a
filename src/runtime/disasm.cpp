// DEBUG=6 disassembly through objdump / cuobjdump / nvdisasm, when installed.
#include "runtime/disasm.hpp"

#include <unistd.h>

#include <optional>
#include <vector>

#include "runtime/tools.hpp"
#include "tg/helpers.hpp"

namespace tg {

namespace {
std::vector<std::string> cuda_dirs() {
  std::vector<std::string> d;
  for (const char* k : {"CUDA_PATH", "CUDA_HOME"})
    if (auto v = getenv_str(k); !v.empty()) d.push_back(v + "/bin");
  d.push_back("/usr/local/cuda/bin");
  return d;
}

std::string run_on(const std::vector<std::string>& argv_head, const std::string& lib, const char* suffix) {
  const std::string path = write_temp("tg_disasm", suffix, lib);
  std::vector<std::string> argv = argv_head;
  argv.push_back(path);
  std::string out;
  const int rc = run_tool(argv, &out);
  unlink(path.c_str());
  if (rc != 0) return "DEBUG=6: " + argv[0] + " failed (exit " + std::to_string(rc) + "), disassembly skipped: " + out.substr(0, out.find('\n'));
  return out;
}
}  // namespace

std::string disassemble(const std::string& renderer_kind, const std::string& lib, const std::string& function) {
  if (renderer_kind == "C") {
    auto objdump = find_tool("objdump");
    if (!objdump) return "DEBUG=6: objdump not found (Debian: binutils), disassembly skipped";
    if (function.empty()) return run_on({*objdump, "-d", "--no-show-raw-insn", "-j", ".text"}, lib, ".so");
    // the kernel only: not the C runtime's startup code, nor the _call wrapper that inlines it again
    std::string out = run_on({*objdump, "-d", "--no-show-raw-insn", "--disassemble=" + function}, lib, ".so");
    if (out.rfind("DEBUG=6:", 0) == 0) return out;
    const size_t at = out.find("<" + function + ">:");
    if (at == std::string::npos) return "DEBUG=6: objdump found no function " + function + ", disassembly skipped";
    const size_t line = out.rfind('\n', at) + 1, end = out.find("\n\n", at);
    return out.substr(line, end == std::string::npos ? std::string::npos : end - line);
  }
  if (renderer_kind == "CUDA") {
    if (auto t = find_tool("cuobjdump", cuda_dirs())) return run_on({*t, "-sass"}, lib, ".cubin");
    if (auto t = find_tool("nvdisasm", cuda_dirs())) return run_on({*t}, lib, ".cubin");
    return "DEBUG=6: neither cuobjdump nor nvdisasm found (CUDA toolkit), disassembly skipped";
  }
  return "DEBUG=6: no disassembler for " + renderer_kind + " programs, skipped";
}

}  // namespace tg
