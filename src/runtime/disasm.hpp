// DEBUG=6: the device's disassembly of a compiled kernel, from the platform's own tool:
// objdump -d for CPU shared objects, cuobjdump -sass (or nvdisasm) for CUDA cubins.
#pragma once
#include <string>

namespace tg {

// The disassembly of lib (a compiler's output for renderer kind "C" or "CUDA"), or one line
// saying why it was skipped (no tool installed, the tool failed). On the CPU, function names the
// kernel to show (its entry point and the "_call" wrapper); empty shows all of .text.
std::string disassemble(const std::string& renderer_kind, const std::string& lib, const std::string& function = "");

}  // namespace tg
