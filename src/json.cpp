// The JSON reader (see tg/json.hpp): a recursive descent over the text, no copies of it.
#include "tg/json.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "tg/helpers.hpp"

namespace tg {

const Json* Json::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  for (auto& [k, v] : obj)
    if (k == key) return &v;
  return nullptr;
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6), out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12), out += char(0x80 | (cp >> 6 & 0x3F)), out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18), out += char(0x80 | (cp >> 12 & 0x3F)), out += char(0x80 | (cp >> 6 & 0x3F)), out += char(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& what) : t_(text), what_(what) {}
  Json parse() {
    Json v = value(0);
    ws();
    if (p_ != t_.size()) bad("trailing characters");
    return v;
  }

 private:
  std::string_view t_;
  const std::string& what_;
  size_t p_ = 0;

  [[noreturn]] void bad(const std::string& why) const {
    throw Error(what_ + ": bad JSON: " + why + " at byte " + std::to_string(p_));
  }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) p_++;
  }
  char peek() {
    ws();
    if (p_ >= t_.size()) bad("unexpected end");
    return t_[p_];
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    p_++;
  }
  bool word(std::string_view w) {
    if (t_.substr(p_, w.size()) != w) return false;
    p_ += w.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 64) bad("nesting deeper than 64");
    Json v;
    const char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') {
      v.kind = Json::Kind::Array, p_++;
      if (peek() == ']') return p_++, v;
      for (;;) {
        v.arr.push_back(value(depth + 1));
        if (peek() == ']') return p_++, v;
        expect(',');
      }
    }
    if (c == '"') return v.kind = Json::Kind::String, v.str = string(), v;
    if (word("true")) return v.kind = Json::Kind::Bool, v.b = true, v;
    if (word("false")) return v.kind = Json::Kind::Bool, v;
    if (word("null")) return v;
    if (c == '-' || is_digit(c)) return number();
    bad(std::string("unexpected character '") + c + "'");
  }

  Json object(int depth) {
    Json v;
    v.kind = Json::Kind::Object, p_++;
    if (peek() == '}') return p_++, v;
    for (;;) {
      if (peek() != '"') bad("expected a string key");
      std::string k = string();
      expect(':');
      v.obj.emplace_back(std::move(k), value(depth + 1));
      if (peek() == '}') break;
      expect(',');
    }
    p_++;
    // keys sorted once per object: encoder.json's 50k keys stay O(n log n)
    std::vector<const std::string*> keys;
    for (auto& [k, x] : v.obj) keys.push_back(&k);
    std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return *a < *b; });
    for (size_t k = 1; k < keys.size(); k++)
      if (*keys[k] == *keys[k - 1]) bad("duplicate key \"" + *keys[k] + "\" in the object ending");
    return v;
  }

  Json number() {
    const size_t start = p_;
    const bool neg = t_[p_] == '-';
    if (neg) p_++;
    if (p_ >= t_.size() || !is_digit(t_[p_])) bad("bad number");
    if (t_[p_] == '0' && p_ + 1 < t_.size() && is_digit(t_[p_ + 1])) bad("leading zero in number");
    Json v;
    v.kind = Json::Kind::Number;
    bool overflow = false;
    while (p_ < t_.size() && is_digit(t_[p_])) {
      const int digit = t_[p_++] - '0';
      overflow |= __builtin_mul_overflow(v.i, 10, &v.i) || __builtin_add_overflow(v.i, neg ? -digit : digit, &v.i);
    }
    bool frac = false;
    if (p_ < t_.size() && t_[p_] == '.') {
      frac = true, p_++;
      if (p_ >= t_.size() || !is_digit(t_[p_])) bad("bad fraction");
      while (p_ < t_.size() && is_digit(t_[p_])) p_++;
    }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      frac = true, p_++;
      if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) p_++;
      if (p_ >= t_.size() || !is_digit(t_[p_])) bad("bad exponent");
      while (p_ < t_.size() && is_digit(t_[p_])) p_++;
    }
    v.is_int = !frac && !overflow;
    if (v.is_int) v.num = double(v.i);
    else v.i = 0, v.num = std::strtod(std::string(t_.substr(start, p_ - start)).c_str(), nullptr);
    return v;
  }

  uint32_t hex4() {
    if (t_.size() - p_ < 4) bad("truncated \\u escape");
    uint32_t u = 0;
    for (int k = 0; k < 4; k++) {
      const char h = t_[p_++];
      u <<= 4;
      if (is_digit(h)) u |= uint32_t(h - '0');
      else if (h >= 'a' && h <= 'f') u |= uint32_t(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') u |= uint32_t(h - 'A' + 10);
      else bad("bad hex digit in \\u escape");
    }
    return u;
  }

  uint32_t code_point() {   // after "\u"
    uint32_t cp = hex4();
    if (cp >= 0xD800 && cp < 0xDC00) {   // a surrogate pair spells one code point
      if (!word("\\u")) bad("lone high surrogate");
      const uint32_t lo = hex4();
      if (lo < 0xDC00 || lo >= 0xE000) bad("bad low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      bad("lone low surrogate");
    }
    return cp;
  }

  std::string string() {
    p_++;   // opening quote
    std::string out;
    for (;;) {
      if (p_ >= t_.size()) bad("unterminated string");
      const char c = t_[p_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) bad("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= t_.size()) bad("unterminated escape");
      const char e = t_[p_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': put_utf8(out, code_point()); break;
        default: bad(std::string("bad escape \\") + e);
      }
    }
  }
};

}  // namespace

Json json_parse(std::string_view text, const std::string& what) { return Parser(text, what).parse(); }

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\u%04x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

}  // namespace tg
