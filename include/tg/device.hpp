// Devices as the user sees them: names, the default, synchronization.
// Names: "CPU" (alias "CLANG"), "CUDA", "CUDA:1", "DISK:/path/to/file"; case-insensitive, ":0" dropped.
#pragma once
#include <string>
#include <vector>

namespace tg {

struct Device {
  static std::string default_device();                        // DEVICE=CPU|CUDA, CPU=1/CUDA=1, else CUDA when present, else CPU
  static std::string canonicalize(const std::string& name);   // "cpu" -> "CPU", "cuda:0" -> "CUDA", "" -> default_device()
  static std::vector<std::string> available();                // devices that run kernels here, "CPU" first
  static void synchronize(const std::string& name = "");      // waits for the device's queued work; "" = default
};

}  // namespace tg
