// A small JSON reader for GPT-2's config.json and encoder.json: objects, arrays, strings (with \u
// escapes and surrogate pairs, decoded to UTF-8), numbers, true/false/null. Malformed input throws
// tg::Error naming the file and the byte offset.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gpt2 {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;   // file order
  const Json* find(const std::string& key) const;   // nullptr when absent or not an object
};

// `what` names the source in error messages (usually the file path).
Json json_parse(const std::string& text, const std::string& what);
std::string read_file(const std::string& path);   // whole file; tg::Error when it can't be opened

}  // namespace gpt2
