// Finding and running outside tools (posix_spawn, no shell: paths with spaces are safe).
#include "runtime/tools.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tg/helpers.hpp"

extern char** environ;

namespace tg {

std::optional<std::string> find_tool(const std::string& exe, const std::vector<std::string>& extra_dirs) {
  std::vector<std::string> dirs;
  std::stringstream ss(getenv_str("PATH", "/usr/bin:/bin"));
  for (std::string d; std::getline(ss, d, ':');) if (!d.empty()) dirs.push_back(d);
  dirs.insert(dirs.end(), extra_dirs.begin(), extra_dirs.end());
  for (auto& d : dirs)
    if (access((d + "/" + exe).c_str(), X_OK) == 0) return d + "/" + exe;
  return std::nullopt;
}

std::string temp_dir() {
  std::string d = getenv_str("TMPDIR", "/tmp");
  return d.empty() ? "/tmp" : d;
}

std::string write_temp(const std::string& prefix, const std::string& suffix, const std::string& data) {
  std::string path = temp_dir() + "/" + prefix + "_XXXXXX" + suffix;
  int fd = mkstemps(path.data(), static_cast<int>(suffix.size()));
  if (fd < 0) throw Error("can't create a file in " + temp_dir() + ": " + std::strerror(errno) + "; set TMPDIR to a writable folder");
  close(fd);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!f) throw Error("can't write " + path + ": disk full or not writable; set TMPDIR to another folder");
  return path;
}

int run_process(const std::vector<std::string>& argv, const std::string& log, int& exec_errno) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) { exec_errno = rc; return -1; }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) { exec_errno = ENOENT; return -1; }   // shells, older libcs
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_tool(const std::vector<std::string>& argv, std::string* output) {
  const std::string log = write_temp("tg_tool", ".log", "");
  int err = 0;
  const int rc = run_process(argv, log, err);
  if (output) {
    std::ifstream f(log, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    *output = s.str();
  }
  unlink(log.c_str());
  return rc;
}

}  // namespace tg
