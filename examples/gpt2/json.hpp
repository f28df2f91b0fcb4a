// The files GPT-2's loader reads whole: config.json and encoder.json through tg's JSON reader
// (tg/json.hpp, the one the safetensors header goes through too), vocab.bpe as text.
#pragma once
#include <string>

#include <tg/json.hpp>

namespace gpt2 {

using tg::Json;
std::string read_file(const std::string& path);   // whole file; tg::Error when it can't be opened
Json read_json(const std::string& path);          // tg::Error naming the path and byte when malformed

}  // namespace gpt2
