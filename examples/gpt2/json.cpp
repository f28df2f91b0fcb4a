#include "gpt2/json.hpp"

#include <fstream>
#include <sstream>

#include <tg/tg.hpp>

namespace gpt2 {

const Json* Json::find(const std::string& key) const {
  if (kind != Kind::Object) return nullptr;
  for (auto& [k, v] : obj)
    if (k == key) return &v;
  return nullptr;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw tg::Error("gpt2: can't open '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

namespace {

void put_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | c >> 6), out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | c >> 12), out += char(0x80 | (c >> 6 & 0x3F)), out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | c >> 18), out += char(0x80 | (c >> 12 & 0x3F)), out += char(0x80 | (c >> 6 & 0x3F)), out += char(0x80 | (c & 0x3F));
  }
}

struct Parser {
  const std::string& s;
  const std::string& what;
  size_t p = 0;
  int depth = 0;

  [[noreturn]] void fail(const std::string& msg) const {
    throw tg::Error("gpt2: bad JSON in " + what + " at byte " + std::to_string(p) + ": " + msg);
  }
  void ws() {
    while (p < s.size() && (s[p] == ' ' || s[p] == '\n' || s[p] == '\r' || s[p] == '\t')) p++;
  }
  char peek() {
    ws();
    if (p >= s.size()) fail("unexpected end");
    return s[p];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    p++;
  }
  uint32_t hex4() {
    if (p + 4 > s.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
      char c = s[p++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (p >= s.size()) fail("unterminated string");
      char c = s[p++];
      if (c == '"') return out;
      if (c != '\\') { out += c; continue; }
      if (p >= s.size()) fail("unterminated escape");
      char e = s[p++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t c1 = hex4();
          if (c1 >= 0xD800 && c1 < 0xDC00 && p + 6 <= s.size() && s[p] == '\\' && s[p + 1] == 'u') {
            p += 2;
            uint32_t c2 = hex4();
            if (c2 < 0xDC00 || c2 >= 0xE000) fail("unpaired surrogate");
            c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
          }
          put_utf8(out, c1);
          break;
        }
        default: fail(std::string("bad escape \\") + e);
      }
    }
  }
  Json value() {
    if (++depth > 64) fail("nesting deeper than 64");
    Json j;
    char c = peek();
    if (c == '{') {
      j.kind = Json::Kind::Object, p++;
      if (peek() == '}') p++;
      else
        for (;;) {
          std::string k = string();
          expect(':');
          j.obj.emplace_back(std::move(k), value());
          if (peek() == ',') { p++; continue; }
          expect('}');
          break;
        }
    } else if (c == '[') {
      j.kind = Json::Kind::Array, p++;
      if (peek() == ']') p++;
      else
        for (;;) {
          j.arr.push_back(value());
          if (peek() == ',') { p++; continue; }
          expect(']');
          break;
        }
    } else if (c == '"') {
      j.kind = Json::Kind::String, j.str = string();
    } else if (s.compare(p, 4, "true") == 0) {
      j.kind = Json::Kind::Bool, j.b = true, p += 4;
    } else if (s.compare(p, 5, "false") == 0) {
      j.kind = Json::Kind::Bool, p += 5;
    } else if (s.compare(p, 4, "null") == 0) {
      p += 4;
    } else {
      size_t used = 0;
      try {
        j.num = std::stod(s.substr(p, 40), &used);
      } catch (...) {
        fail("expected a value");
      }
      j.kind = Json::Kind::Number, p += used;
    }
    depth--;
    return j;
  }
};

}  // namespace

Json json_parse(const std::string& text, const std::string& what) {
  Parser ps{text, what};
  Json j = ps.value();
  ps.ws();
  if (ps.p != text.size()) ps.fail("trailing characters");
  return j;
}

}  // namespace gpt2
