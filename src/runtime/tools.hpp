// Outside tools the debugging features use when present (Graphviz dot, objdump, cuobjdump/nvdisasm):
// finding them and running them without a shell.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tg {

// The executable's path: on PATH or in one of extra_dirs; nullopt when absent.
std::optional<std::string> find_tool(const std::string& exe, const std::vector<std::string>& extra_dirs = {});
// Runs argv; stdout+stderr go to *output. Returns the exit status, -1 when it couldn't start.
int run_tool(const std::vector<std::string>& argv, std::string* output);
// Runs argv (PATH lookup), stdout+stderr to the file log. Returns the exit status; -1 with errno in
// exec_errno when it couldn't start.
int run_process(const std::vector<std::string>& argv, const std::string& log, int& exec_errno);
std::string temp_dir();   // TMPDIR or /tmp
// Writes data to a new file in temp_dir() named prefix_XXXXXX suffix; returns its path.
std::string write_temp(const std::string& prefix, const std::string& suffix, const std::string& data);

}  // namespace tg
