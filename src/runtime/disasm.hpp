// DEBUG=6: the device's disassembly of a compiled kernel, from the platform's own tool:
// objdump -d for CPU shared objects, cuobjdump -sass (or nvdisasm) for CUDA cubins.
#pragma once
#include <string>

namespace tg {

// The disassembly of lib (a compiler's output for renderer kind "C" or "CUDA"), or one line
// saying why it was skipped (no tool installed, the tool failed).
std::string disassemble(const std::string& renderer_kind, const std::string& lib);

}  // namespace tg
