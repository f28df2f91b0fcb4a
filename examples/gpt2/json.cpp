#include "gpt2/json.hpp"

#include <fstream>
#include <sstream>

#include <tg/tg.hpp>

namespace gpt2 {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw tg::Error("gpt2: can't open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Json read_json(const std::string& path) { return tg::json_parse(read_file(path), "gpt2: " + path); }

}  // namespace gpt2
