// The one JSON reader and quoting helper: safetensors headers (nn/state), GPT-2's config.json and
// encoder.json (examples/gpt2) and the tests' trace checks all read through it. Strict RFC 8259:
// objects, arrays, strings (\u escapes and surrogate pairs decoded to UTF-8), numbers,
// true/false/null; a duplicate key, a control character in a string, trailing characters or nesting
// deeper than 64 are errors. Malformed input throws tg::Error naming the source and the byte offset.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tg {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool b = false;
  double num = 0;          // a Number's value
  bool is_int = false;     // a Number written without fraction or exponent that fits int64_t: its value is i
  int64_t i = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;   // file order
  const Json* find(const std::string& key) const;   // nullptr when absent or not an object
};

// `what` names the source in error messages ("<what>: bad JSON: <why> at byte <n>"), usually a path.
Json json_parse(std::string_view text, const std::string& what);

// s as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace tg
