// PyTorch checkpoints. torch.save (>= 1.6) and torch::pickle_save write a zip archive of stored
// entries: "<base>/data.pkl", a pickle whose tensors name their storages through persistent ids
// ('storage', torch.FloatStorage, key, location, numel), and "<base>/data/<key>", the raw
// little-endian storage bytes. The legacy format (torch.save before 1.6) is one stream of pickles:
// magic number, protocol version, sys_info, the object, the list of storage keys, then each storage
// as an int64 element count and its bytes. A small pickle VM rebuilds the object graph without
// running any code: it knows the handful of callables torch uses and keeps everything else opaque.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

#include "nn/formats.hpp"

namespace tg::formats {

namespace {

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t rd32(const uint8_t* p) { return uint32_t(rd16(p)) | uint32_t(rd16(p + 2)) << 16; }
uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }

// ======================= zip container =======================

struct ZipEntry {
  std::string name;
  int64_t data_offset = 0, csize = 0, usize = 0;
  uint16_t method = 0;   // 0 stored, 8 deflate
};

// Finds the central directory (zip64 aware) and each entry's data offset from its local header.
std::vector<ZipEntry> zip_entries(const File& f) {
  const int64_t tail_len = std::min<int64_t>(f.size(), 22 + 65535);
  std::vector<uint8_t> tail = f.read(f.size() - tail_len, tail_len);
  int64_t eocd = -1;
  for (int64_t k = tail_len - 22; k >= 0 && eocd < 0; k--)
    if (rd32(&tail[size_t(k)]) == 0x06054b50) eocd = k;
  if (eocd < 0) f.fail("bad zip: no end of central directory record");
  const uint8_t* e = &tail[size_t(eocd)];
  uint64_t count = rd16(e + 10), cd_size = rd32(e + 12), cd_off = rd32(e + 16);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {   // zip64
    int64_t loc = f.size() - tail_len + eocd - 20;
    if (loc < 0) f.fail("bad zip: zip64 end of central directory locator missing");
    std::vector<uint8_t> l = f.read(loc, 20);
    if (rd32(l.data()) != 0x07064b50) f.fail("bad zip: zip64 end of central directory locator missing");
    uint64_t rec_off = rd64(&l[8]);
    if (rec_off > uint64_t(f.size())) f.fail("bad zip: zip64 record offset beyond the file");
    std::vector<uint8_t> r = f.read(int64_t(rec_off), 56);
    if (rd32(r.data()) != 0x06064b50) f.fail("bad zip: bad zip64 end of central directory record");
    count = rd64(&r[32]), cd_size = rd64(&r[40]), cd_off = rd64(&r[48]);
  }
  if (cd_off > uint64_t(f.size()) || cd_size > uint64_t(f.size()) - cd_off)
    f.fail("bad zip: central directory [" + std::to_string(cd_off) + ", +" + std::to_string(cd_size) + ") beyond the file");
  if (count > cd_size / 46) f.fail("bad zip: " + std::to_string(count) + " entries cannot fit a central directory of " + std::to_string(cd_size) + " bytes");
  std::vector<uint8_t> cd = f.read(int64_t(cd_off), int64_t(cd_size));
  std::vector<ZipEntry> out;
  size_t p = 0;
  for (uint64_t i = 0; i < count; i++) {
    if (cd.size() - p < 46 || rd32(&cd[p]) != 0x02014b50) f.fail("bad zip: bad central directory record " + std::to_string(i));
    const uint8_t* h = &cd[p];
    ZipEntry z;
    z.method = rd16(h + 10);
    uint64_t csize = rd32(h + 20), usize = rd32(h + 24), lho = rd32(h + 42);
    size_t n = rd16(h + 28), x = rd16(h + 30), c = rd16(h + 32);
    if (cd.size() - p - 46 < n + x + c) f.fail("bad zip: central directory record " + std::to_string(i) + " runs past the directory");
    z.name.assign(reinterpret_cast<const char*>(h + 46), n);
    for (size_t q = 46 + n; q + 4 <= 46 + n + x;) {   // the zip64 extra field holds the 32-bit fields that overflowed
      uint16_t id = rd16(h + q), len = rd16(h + q + 2);
      if (q + 4 + len > 46 + n + x) f.fail("bad zip: bad extra field in \"" + z.name + "\"");
      if (id == 1) {
        size_t r = q + 4, rend = q + 4 + len;
        for (uint64_t* v : {&usize, &csize, &lho}) {
          if (*v != 0xFFFFFFFF) continue;
          if (r + 8 > rend) f.fail("bad zip: short zip64 extra field in \"" + z.name + "\"");
          *v = rd64(h + r), r += 8;
        }
      }
      q += 4 + len;
    }
    p += 46 + n + x + c;
    if (lho > uint64_t(f.size()) || csize > uint64_t(f.size()) || usize > (uint64_t(1) << 62))
      f.fail("bad zip: entry \"" + z.name + "\" has offsets beyond the file");
    std::vector<uint8_t> local = f.read(int64_t(lho), 30);
    if (rd32(local.data()) != 0x04034b50) f.fail("bad zip: bad local header for \"" + z.name + "\"");
    z.data_offset = int64_t(lho) + 30 + rd16(&local[26]) + rd16(&local[28]);
    z.csize = int64_t(csize), z.usize = int64_t(usize);
    if (z.data_offset > f.size() || z.csize > f.size() - z.data_offset)
      f.fail("bad zip: data of \"" + z.name + "\" runs past the end of the file");
    if (z.method == 0 && z.csize != z.usize) f.fail("bad zip: stored entry \"" + z.name + "\" has different sizes");
    if (z.method != 0 && z.method != 8)
      f.fail("bad zip: entry \"" + z.name + "\" uses compression method " + std::to_string(z.method) + " (only stored and deflate)");
    out.push_back(std::move(z));
  }
  return out;
}

std::vector<uint8_t> zip_read(const File& f, const ZipEntry& z) {
  std::vector<uint8_t> in = f.read(z.data_offset, z.csize);
  if (z.method == 0) return in;
  // deflate cannot expand more than ~1032x: a larger claimed size is a corrupt header, not a big file
  if (z.usize > z.csize * 1100 + 1024 || z.usize >= int64_t(UINT32_MAX) || z.csize >= int64_t(UINT32_MAX))
    f.fail("bad zip: entry \"" + z.name + "\" claims an impossible uncompressed size (or is over 4 GB compressed)");
  std::vector<uint8_t> out(size_t(z.usize) + 1);
  z_stream s{};
  if (inflateInit2(&s, -MAX_WBITS) != Z_OK) f.fail("zlib inflateInit failed");
  s.next_in = in.data(), s.avail_in = uInt(in.size());
  s.next_out = out.data(), s.avail_out = uInt(out.size());
  int rc = inflate(&s, Z_FINISH);
  int64_t got = int64_t(s.total_out);
  inflateEnd(&s);
  if (rc != Z_STREAM_END || got != z.usize) f.fail("bad zip: corrupt deflate data in \"" + z.name + "\"");
  out.resize(size_t(got));
  return out;
}

// ======================= pickle VM =======================

enum class K : uint8_t { None, Bool, Int, BigInt, Float, Str, Bytes, Tuple, List, Dict, Global, Storage, Tensor, Opaque };

struct Obj {
  K kind = K::None;
  int64_t i = 0;             // Bool, Int; Storage: numel
  double d = 0;              // Float
  std::string s;             // Str, Bytes, BigInt (little-endian bytes), Global ("module.name"), Storage key
  std::vector<int> items;    // Tuple, List; Dict: key, value, key, value ...; Tensor: {storage}
  DType dtype;               // Storage
  int64_t offset = 0;        // Tensor: storage offset in elements
  std::vector<int64_t> size, stride;   // Tensor
};

constexpr std::pair<const char*, DType> kStorageTypes[] = {
    {"torch.FloatStorage", dtypes::float32}, {"torch.DoubleStorage", dtypes::float64}, {"torch.HalfStorage", dtypes::float16},
    {"torch.BFloat16Storage", dtypes::bfloat16}, {"torch.LongStorage", dtypes::int64}, {"torch.IntStorage", dtypes::int32},
    {"torch.ShortStorage", dtypes::int16}, {"torch.CharStorage", dtypes::int8}, {"torch.ByteStorage", dtypes::uint8},
    {"torch.BoolStorage", dtypes::bool_}};

// Bytes of a pickle: in memory (zip) or a region of the file read on demand (legacy stream).
class Cursor {
 public:
  Cursor(const File& f, const std::vector<uint8_t>& mem) : f_(f), mem_(mem.data()), end_(int64_t(mem.size())) {}
  Cursor(const File& f, int64_t pos) : f_(f), pos_(pos), end_(f.size()) {}
  const uint8_t* take(int64_t n) {
    if (n < 0 || n > end_ - pos_) f_.fail("truncated pickle: needs " + std::to_string(n) + " more bytes at byte " + std::to_string(pos_));
    const uint8_t* p;
    if (mem_) {
      p = mem_ + pos_;
    } else if (pos_ >= chunk_pos_ && pos_ + n <= chunk_pos_ + int64_t(chunk_.size())) {
      p = chunk_.data() + (pos_ - chunk_pos_);
    } else if (n <= kChunk) {   // refill: one read per 64 KB of opcodes, not one per byte
      chunk_pos_ = pos_;
      chunk_.resize(size_t(std::min<int64_t>(kChunk, end_ - pos_)));
      f_.read(pos_, chunk_.data(), int64_t(chunk_.size()));
      p = chunk_.data();
    } else {
      buf_.resize(size_t(n));
      f_.read(pos_, buf_.data(), n);
      p = buf_.data();
    }
    pos_ += n;
    return p;
  }
  int64_t pos() const { return pos_; }
  std::string str(int64_t n) { return n ? std::string(reinterpret_cast<const char*>(take(n)), size_t(n)) : std::string(); }
  std::string line() {   // text GLOBAL arguments end in '\n'
    std::string out;
    for (;;) {
      char c = char(*take(1));
      if (c == '\n') return out;
      if (out.size() > 1000) f_.fail("bad pickle: GLOBAL name longer than 1000 bytes");
      out += c;
    }
  }

 private:
  const File& f_;
  const uint8_t* mem_ = nullptr;
  int64_t pos_ = 0, end_;
  static constexpr int64_t kChunk = 1 << 16;
  int64_t chunk_pos_ = 0;
  std::vector<uint8_t> chunk_, buf_;
};

class Unpickler {
 public:
  Unpickler(const File& f, std::vector<Obj>& heap) : f_(f), heap_(heap) {}

  int load(Cursor& in) {
    stack_.clear(), marks_.clear(), memo_.clear();
    for (;;) {
      uint8_t op = *in.take(1);
      if (op == '.') return pop("STOP");
      step(op, in);
    }
  }
  [[noreturn]] void bad(const std::string& what) const { f_.fail("bad pickle: " + what); }
  const Obj& at(int id) const { return heap_[size_t(id)]; }

 private:
  const File& f_;
  std::vector<Obj>& heap_;
  std::vector<int> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, int> memo_;

  int make(Obj o) {
    if (heap_.size() > (size_t(1) << 26)) bad("more than 2^26 objects");
    heap_.push_back(std::move(o));
    return int(heap_.size() - 1);
  }
  int make(K k) {
    Obj o;
    o.kind = k;
    return make(std::move(o));
  }
  void push(int id) { stack_.push_back(id); }
  int pop(const char* op) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) bad(std::string("stack underflow in ") + op);
    int v = stack_.back();
    stack_.pop_back();
    return v;
  }
  int top(const char* op) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) bad(std::string("stack underflow in ") + op);
    return stack_.back();
  }
  std::vector<int> pop_mark(const char* op) {   // the items above the last MARK, and the MARK
    if (marks_.empty()) bad(std::string(op) + " without a MARK");
    std::vector<int> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Obj& obj(int id) { return heap_[size_t(id)]; }
  int get_memo(uint32_t k) {
    auto it = memo_.find(k);
    if (it == memo_.end()) bad("memo key " + std::to_string(k) + " was never stored");
    return it->second;
  }
  int tuple(std::vector<int> items) {
    Obj o;
    o.kind = K::Tuple, o.items = std::move(items);
    return make(std::move(o));
  }
  int scalar(K k, int64_t i) {
    Obj o;
    o.kind = k, o.i = i;
    return make(std::move(o));
  }
  int text(K k, std::string s) {
    Obj o;
    o.kind = k, o.s = std::move(s);
    return make(std::move(o));
  }
  int long_int(Cursor& in, int64_t n) {   // little-endian two's complement
    if (n > 8) return text(K::BigInt, in.str(n));
    const uint8_t* p = in.take(n);
    uint64_t v = 0;
    for (int64_t k = n - 1; k >= 0; k--) v = v << 8 | p[k];
    if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);   // sign-extend
    return scalar(K::Int, int64_t(v));
  }
  void add_items(int target, const std::vector<int>& items, bool pairs, const char* op) {
    Obj& t = obj(target);
    if (t.kind == K::Opaque) return;   // an unknown class filling itself: not state we read
    if (pairs ? t.kind != K::Dict : t.kind != K::List) bad(std::string(op) + " on a non-" + (pairs ? "dict" : "list"));
    if (pairs && items.size() % 2) bad(std::string(op) + " with an odd number of items");
    t.items.insert(t.items.end(), items.begin(), items.end());
  }

  void step(uint8_t op, Cursor& in);
  int call(int func, int args, int depth = 0);
  int persistent(int pid);
};

void Unpickler::step(uint8_t op, Cursor& in) {
  switch (op) {
    case 0x80: in.take(1); break;                       // PROTO
    case 0x95: in.take(8); break;                       // FRAME: framing is only a read-ahead hint
    case '(': marks_.push_back(stack_.size()); break;   // MARK
    case ')': push(tuple({})); break;                   // EMPTY_TUPLE
    case 't': push(tuple(pop_mark("TUPLE"))); break;
    case 0x85: case 0x86: case 0x87: {                  // TUPLE1..3
      std::vector<int> items(size_t(op - 0x84));
      for (size_t k = items.size(); k-- > 0;) items[k] = pop("TUPLEn");
      push(tuple(std::move(items)));
      break;
    }
    case '}': push(make(K::Dict)); break;   // EMPTY_DICT
    case ']': push(make(K::List)); break;   // EMPTY_LIST
    case 'd': { int d = make(K::Dict); add_items(d, pop_mark("DICT"), true, "DICT"); push(d); break; }
    case 'l': { int l = make(K::List); add_items(l, pop_mark("LIST"), false, "LIST"); push(l); break; }
    case 's': { int v = pop("SETITEM"), k = pop("SETITEM"); add_items(top("SETITEM"), {k, v}, true, "SETITEM"); break; }
    case 'u': { auto items = pop_mark("SETITEMS"); add_items(top("SETITEMS"), items, true, "SETITEMS"); break; }
    case 'a': { int v = pop("APPEND"); add_items(top("APPEND"), {v}, false, "APPEND"); break; }
    case 'e': { auto items = pop_mark("APPENDS"); add_items(top("APPENDS"), items, false, "APPENDS"); break; }
    case 0x8f: push(make(K::Opaque)); break;          // EMPTY_SET: sets hold no tensors we load
    case 0x90: pop_mark("ADDITEMS"), top("ADDITEMS"); break;
    case 0x91: pop_mark("FROZENSET"), push(make(K::Opaque)); break;
    case 'K': push(scalar(K::Int, *in.take(1))); break;                         // BININT1
    case 'M': push(scalar(K::Int, rd16(in.take(2)))); break;                     // BININT2
    case 'J': push(scalar(K::Int, int32_t(rd32(in.take(4))))); break;            // BININT
    case 0x8a: push(long_int(in, *in.take(1))); break;                           // LONG1
    case 0x8b: {                                                                  // LONG4
      int32_t n = int32_t(rd32(in.take(4)));
      if (n < 0) bad("negative LONG4 length");
      push(long_int(in, n));
      break;
    }
    case 'G': {   // BINFLOAT: big-endian double
      const uint8_t* p = in.take(8);
      uint64_t bits = 0;
      for (int k = 0; k < 8; k++) bits = bits << 8 | p[k];
      Obj o;
      o.kind = K::Float;
      std::memcpy(&o.d, &bits, 8);
      push(make(std::move(o)));
      break;
    }
    case 0x8c: push(text(K::Str, in.str(*in.take(1)))); break;                // SHORT_BINUNICODE
    case 'X': push(text(K::Str, in.str(rd32(in.take(4))))); break;            // BINUNICODE
    case 0x8d: push(text(K::Str, in.str(int64_t(rd64(in.take(8)) & (~uint64_t(0) >> 1))))); break;   // BINUNICODE8
    case 'U': push(text(K::Bytes, in.str(*in.take(1)))); break;               // SHORT_BINSTRING
    case 'T': push(text(K::Bytes, in.str(int32_t(rd32(in.take(4)))))); break; // BINSTRING (negative length throws)
    case 'C': push(text(K::Bytes, in.str(*in.take(1)))); break;               // SHORT_BINBYTES
    case 'B': push(text(K::Bytes, in.str(rd32(in.take(4))))); break;          // BINBYTES
    case 0x8e: push(text(K::Bytes, in.str(int64_t(rd64(in.take(8)) & (~uint64_t(0) >> 1))))); break;  // BINBYTES8
    case 0x88: push(scalar(K::Bool, 1)); break;   // NEWTRUE
    case 0x89: push(scalar(K::Bool, 0)); break;   // NEWFALSE
    case 'N': push(make(K::None)); break;
    case 0x94: memo_[uint32_t(memo_.size())] = top("MEMOIZE"); break;
    case 'q': memo_[*in.take(1)] = top("BINPUT"); break;
    case 'r': memo_[rd32(in.take(4))] = top("LONG_BINPUT"); break;
    case 'h': push(get_memo(*in.take(1))); break;         // BINGET
    case 'j': push(get_memo(rd32(in.take(4)))); break;    // LONG_BINGET
    case 'c': { std::string m = in.line(); push(text(K::Global, m + "." + in.line())); break; }   // GLOBAL
    case 0x93: {                                                                                 // STACK_GLOBAL
      int name = pop("STACK_GLOBAL"), mod = pop("STACK_GLOBAL");
      if (at(name).kind != K::Str || at(mod).kind != K::Str) bad("STACK_GLOBAL needs two strings");
      push(text(K::Global, at(mod).s + "." + at(name).s));
      break;
    }
    case 'Q': push(persistent(pop("BINPERSID"))); break;
    case 'R': { int args = pop("REDUCE"), func = pop("REDUCE"); push(call(func, args)); break; }
    case 0x81: { int args = pop("NEWOBJ"), cls = pop("NEWOBJ"); push(call(cls, args)); break; }
    case 0x92: { pop("NEWOBJ_EX"); int args = pop("NEWOBJ_EX"), cls = pop("NEWOBJ_EX"); push(call(cls, args)); break; }
    case 'b': pop("BUILD"), top("BUILD"); break;   // __setstate__: attributes we do not read (e.g. _metadata)
    case '0': pop("POP"); break;
    case '1': pop_mark("POP_MARK"); break;
    case '2': push(top("DUP")); break;
    default: {
      static const char* hex = "0123456789abcdef";
      bad(std::string("unknown or unsupported opcode 0x") + hex[op >> 4] + hex[op & 15] + " at byte " + std::to_string(in.pos() - 1));
    }
  }
}

// The callables torch's pickles use; any other class or function gives an opaque object.
int Unpickler::call(int func, int args, int depth) {
  if (at(func).kind == K::Opaque) return make(K::Opaque);
  if (at(func).kind != K::Global) bad("REDUCE/NEWOBJ on something that is not a class or function");
  if (at(args).kind != K::Tuple) bad("REDUCE/NEWOBJ arguments are not a tuple");
  const std::string name = at(func).s;
  const std::vector<int> a = at(args).items;
  if (name == "collections.OrderedDict" || name == "builtins.dict") {
    int d = make(K::Dict);
    if (!a.empty()) {   // OrderedDict([(k, v), ...])
      if (at(a[0]).kind != K::List && at(a[0]).kind != K::Tuple) bad("OrderedDict argument is not a list of pairs");
      for (int pair : std::vector<int>(at(a[0]).items)) {
        if (at(pair).kind != K::Tuple || at(pair).items.size() != 2) bad("OrderedDict argument is not a list of pairs");
        std::vector<int> kv = at(pair).items;
        add_items(d, kv, true, "OrderedDict");
      }
    }
    return d;
  }
  if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
    if (a.size() < 4) bad(name + " needs (storage, storage_offset, size, stride)");
    if (at(a[0]).kind != K::Storage) bad(name + ": the first argument is not a storage");
    if (at(a[1]).kind != K::Int) bad(name + ": storage_offset is not an int");
    Obj t;
    t.kind = K::Tensor, t.items = {a[0]}, t.offset = at(a[1]).i;
    for (auto [src, dst] : {std::pair{a[2], &t.size}, std::pair{a[3], &t.stride}}) {
      if (at(src).kind != K::Tuple) bad(name + ": size/stride is not a tuple");
      for (int v : at(src).items) {
        if (at(v).kind != K::Int) bad(name + ": size/stride entry is not an int");
        dst->push_back(at(v).i);
      }
    }
    if (t.size.size() != t.stride.size()) bad(name + ": size " + to_str(t.size) + " and stride " + to_str(t.stride) + " differ in length");
    return make(std::move(t));
  }
  // nn.Parameter(tensor, requires_grad, hooks) and the TorchScript type tag: the value is the first argument
  if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state" ||
      name == "torch.jit._pickle.restore_type_tag") {
    if (a.empty()) bad(name + " without arguments");
    return a[0];
  }
  // a tensor that carried Python attributes: (rebuild function, subclass, its arguments, attributes)
  if (name == "torch._tensor._rebuild_from_type_v2") {
    if (a.size() < 3 || depth > 8) bad(name + " needs (function, type, args, state) and may not nest");
    return call(a[0], a[2], depth + 1);
  }
  return make(K::Opaque);
}

// ('storage', torch.FloatStorage, key, location, numel[, view_metadata]) -> a Storage object
int Unpickler::persistent(int pid) {
  const Obj& p = at(pid);
  if (p.kind != K::Tuple || p.items.size() < 5 || at(p.items[0]).kind != K::Str || at(p.items[0]).s != "storage")
    bad("persistent id is not a ('storage', type, key, location, numel) tuple");
  const Obj &type = at(p.items[1]), &key = at(p.items[2]), &numel = at(p.items[4]);
  Obj s;
  s.kind = K::Storage;
  bool known = false;
  for (auto& [n, dt] : kStorageTypes)
    if (type.kind == K::Global && type.s == n) s.dtype = dt, known = true;
  if (!known) bad("unsupported storage type " + (type.kind == K::Global ? type.s : std::string("(not a class)")));
  if (key.kind == K::Str) s.s = key.s;
  else if (key.kind == K::Int) s.s = std::to_string(key.i);
  else bad("storage key is not a string");
  if (numel.kind != K::Int || numel.i < 0) bad("storage size is not a non-negative int");
  s.i = numel.i;
  if (p.items.size() > 5 && at(p.items[5]).kind != K::None) bad("legacy storage views (view_metadata) are not supported");
  return make(std::move(s));
}

// ======================= tensors out of the object graph =======================

struct StorageData {
  int64_t offset = 0, nbytes = 0;                   // in the file, when mem is null
  std::shared_ptr<std::vector<uint8_t>> mem;        // decompressed entry
};

// Walks dicts/lists the way get_state_dict does, "." joining keys; only tensors are kept.
class Flattener {
 public:
  explicit Flattener(const Unpickler& u) : u_(u) {}
  std::vector<std::pair<std::string, int>> out;
  void walk(int id, const std::string& prefix, int depth) {
    if (depth > 64) u_.bad("objects nested deeper than 64 levels (a reference cycle?)");
    if (++visits_ > 10'000'000) u_.bad("too many objects to walk (shared references blow up)");
    const Obj& o = u_.at(id);
    if (o.kind == K::Tensor) {
      out.emplace_back(prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1), id);
    } else if (o.kind == K::Dict) {
      for (size_t k = 0; k + 1 < o.items.size(); k += 2) {
        const Obj& key = u_.at(o.items[k]);
        if (key.kind == K::Str) walk(o.items[k + 1], prefix + key.s + ".", depth + 1);
        else if (key.kind == K::Int) walk(o.items[k + 1], prefix + std::to_string(key.i) + ".", depth + 1);
      }
    } else if (o.kind == K::List || o.kind == K::Tuple) {
      for (size_t k = 0; k < o.items.size(); k++) walk(o.items[k], prefix + std::to_string(k) + ".", depth + 1);
    }
  }

 private:
  const Unpickler& u_;
  int64_t visits_ = 0;
};

bool is_contiguous(const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  int64_t expect = 1;
  for (size_t k = size.size(); k-- > 0;) {
    if (size[k] != 1 && stride[k] != expect) return false;
    expect *= size[k];
  }
  return true;
}

// Copies the strided elements into a contiguous row-major buffer.
void gather(const uint8_t* src, uint8_t* dst, const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
            int64_t numel, int itemsize) {
  std::vector<int64_t> idx(size.size(), 0);
  int64_t off = 0;
  for (int64_t n = 0; n < numel; n++) {
    std::memcpy(dst + n * itemsize, src + off * itemsize, size_t(itemsize));
    for (size_t k = size.size(); k-- > 0;) {   // odometer step
      off += stride[k];
      if (++idx[k] < size[k]) break;
      off -= stride[k] * size[k], idx[k] = 0;
    }
  }
}

RawTensor make_raw(const File& f, const std::string& name, const Obj& t, const Obj& storage, const StorageData& sd) {
  const std::string what = "tensor \"" + name + "\"";
  const int isz = storage.dtype.itemsize();
  RawTensor r;
  r.dtype = storage.dtype, r.shape = t.size;
  const int64_t numel = checked_numel(f, t.size, what);
  const int64_t storage_bytes = checked_mul(f, storage.i, isz, what + " storage");
  if (storage_bytes > sd.nbytes)
    f.fail(what + ": storage \"" + storage.s + "\" claims " + std::to_string(storage_bytes) + " bytes but holds " + std::to_string(sd.nbytes));
  r.nbytes = checked_mul(f, numel, isz, what);
  if (t.offset < 0) f.fail(what + ": negative storage offset");
  int64_t last = t.offset;   // the highest element index the view touches
  for (size_t k = 0; k < t.size.size() && numel > 0; k++) {
    if (t.stride[k] < 0) f.fail(what + ": negative stride " + to_str(t.stride));
    int64_t span = 0;
    if (__builtin_mul_overflow(t.size[k] - 1, t.stride[k], &span) || __builtin_add_overflow(last, span, &last))
      f.fail(what + ": size " + to_str(t.size) + " with stride " + to_str(t.stride) + " overflows");
  }
  if (numel > 0 && last >= storage.i)
    f.fail(what + ": size " + to_str(t.size) + ", stride " + to_str(t.stride) + " and offset " + std::to_string(t.offset) +
           " reach element " + std::to_string(last) + " of a storage of " + std::to_string(storage.i));
  if (numel == 0) return r.bytes = std::make_shared<std::vector<uint8_t>>(), r;
  if (is_contiguous(t.size, t.stride)) {
    if (!sd.mem) return r.file = f.path(), r.offset = sd.offset + t.offset * isz, r;
    auto b = sd.mem->begin() + std::ptrdiff_t(t.offset * isz);
    r.bytes = std::make_shared<std::vector<uint8_t>>(b, b + std::ptrdiff_t(r.nbytes));
    return r;
  }
  // overlapping strides (expand) can ask for far more than the file holds: refuse absurd sizes
  if (numel > std::max<int64_t>(storage.i, (int64_t(1) << 26) / isz))
    f.fail(what + ": materializing size " + to_str(t.size) + " from stride " + to_str(t.stride) + " needs more than its storage; save it contiguous");
  const int64_t span = (last - t.offset + 1) * isz;
  std::vector<uint8_t> region = sd.mem ? std::vector<uint8_t>(sd.mem->begin() + std::ptrdiff_t(t.offset * isz),
                                                              sd.mem->begin() + std::ptrdiff_t(t.offset * isz + span))
                                       : f.read(sd.offset + t.offset * isz, span);
  r.bytes = std::make_shared<std::vector<uint8_t>>(size_t(r.nbytes));
  gather(region.data(), r.bytes->data(), t.size, t.stride, numel, isz);
  r.nbytes = int64_t(r.bytes->size());
  return r;
}

RawDict to_raw_dict(const File& f, const Unpickler& u, int root, const std::function<StorageData(const Obj&)>& storage_data) {
  Flattener fl(u);
  fl.walk(root, "", 0);
  RawDict out;
  std::unordered_map<std::string, int> seen;
  for (auto& [name, id] : fl.out) {
    if (!seen.emplace(name, id).second) f.fail("two tensors flatten to the same name \"" + name + "\"");
    const Obj& t = u.at(id);
    const Obj& storage = u.at(t.items[0]);
    out.emplace_back(name, make_raw(f, name, t, storage, storage_data(storage)));
  }
  return out;
}

RawDict load_zip(const File& f) {
  std::vector<ZipEntry> entries = zip_entries(f);
  if (entries.empty()) f.fail("bad zip: no entries (not a PyTorch checkpoint)");
  const std::string& first = entries[0].name;
  if (first.find('/') == std::string::npos) f.fail("not a PyTorch checkpoint: first zip entry \"" + first + "\" has no archive folder");
  const std::string base = first.substr(0, first.find('/'));
  std::unordered_map<std::string, const ZipEntry*> by_name;
  for (auto& e : entries) by_name.emplace(e.name, &e);
  if (auto it = by_name.find(base + "/byteorder"); it != by_name.end() && zip_read(f, *it->second) != std::vector<uint8_t>{'l', 'i', 't', 't', 'l', 'e'})
    f.fail("big-endian checkpoints are not supported");
  auto pkl = by_name.find(base + "/data.pkl");
  if (pkl == by_name.end()) f.fail("not a PyTorch checkpoint: no \"" + base + "/data.pkl\" in the zip");
  std::vector<uint8_t> bytes = zip_read(f, *pkl->second);
  std::vector<Obj> heap;
  Unpickler u(f, heap);
  Cursor in(f, bytes);
  int root = u.load(in);
  std::unordered_map<std::string, StorageData> cache;
  return to_raw_dict(f, u, root, [&](const Obj& storage) {
    auto hit = cache.find(storage.s);
    if (hit != cache.end()) return hit->second;
    auto e = by_name.find(base + "/data/" + storage.s);
    if (e == by_name.end()) f.fail("storage \"" + storage.s + "\" has no entry " + base + "/data/" + storage.s + " in the zip");
    StorageData sd;
    if (e->second->method == 0) sd.offset = e->second->data_offset, sd.nbytes = e->second->csize;
    else sd.mem = std::make_shared<std::vector<uint8_t>>(zip_read(f, *e->second)), sd.nbytes = int64_t(sd.mem->size());
    return cache[storage.s] = sd;
  });
}

RawDict load_legacy(const File& f) {
  std::vector<Obj> heap;
  Unpickler u(f, heap);
  Cursor in(f, int64_t(0));
  const Obj& magic = u.at(u.load(in));
  static const std::string kMagic = {'\x6c', '\xfc', '\x9c', '\x46', '\xf9', '\x20', '\x6a', '\xa8', '\x50', '\x19'};
  if (magic.kind != K::BigInt || magic.s != kMagic) f.fail("not a PyTorch checkpoint: bad legacy magic number");
  const Obj& version = u.at(u.load(in));
  if (version.kind != K::Int || version.i != 1001) f.fail("unsupported legacy protocol version (expected 1001)");
  const Obj& sys_info = u.at(u.load(in));
  for (size_t k = 0; sys_info.kind == K::Dict && k + 1 < sys_info.items.size(); k += 2)
    if (u.at(sys_info.items[k]).s == "little_endian" && u.at(sys_info.items[k + 1]).kind == K::Bool && !u.at(sys_info.items[k + 1]).i)
      f.fail("big-endian checkpoints are not supported");
  int root = u.load(in);
  std::vector<std::string> keys;
  const Obj& key_list = u.at(u.load(in));
  if (key_list.kind != K::List) f.fail("bad legacy checkpoint: the storage key list is not a list");
  for (int k : key_list.items) {
    if (u.at(k).kind != K::Str) f.fail("bad legacy checkpoint: a storage key is not a string");
    keys.push_back(u.at(k).s);
  }
  // each storage's element size comes from the object pickle's persistent ids
  std::unordered_map<std::string, int> itemsize;
  for (const Obj& o : heap)
    if (o.kind == K::Storage) itemsize[o.s] = o.dtype.itemsize();
  std::unordered_map<std::string, StorageData> where;
  int64_t pos = in.pos();
  for (const std::string& key : keys) {
    auto it = itemsize.find(key);
    if (it == itemsize.end()) f.fail("bad legacy checkpoint: storage \"" + key + "\" is listed but never used");
    uint8_t n8[8];
    f.read(pos, n8, 8);
    int64_t numel = int64_t(rd64(n8));
    StorageData sd;
    sd.offset = pos + 8, sd.nbytes = checked_mul(f, numel, it->second, "storage \"" + key + "\"");
    if (sd.nbytes > f.size() - sd.offset) f.fail("truncated: storage \"" + key + "\" runs past the end of the file");
    where[key] = sd;
    pos = sd.offset + sd.nbytes;
  }
  return to_raw_dict(f, u, root, [&](const Obj& storage) {
    auto it = where.find(storage.s);
    if (it == where.end()) f.fail("storage \"" + storage.s + "\" is missing from the legacy checkpoint");
    return it->second;
  });
}

}  // namespace

RawDict torch_load(const std::string& path) {
  File f(path);
  if (f.size() < 4) f.fail("not a PyTorch checkpoint: only " + std::to_string(f.size()) + " bytes");
  std::vector<uint8_t> head = f.read(0, std::min<int64_t>(f.size(), 262));
  if (rd32(head.data()) == 0x04034b50) return load_zip(f);
  if (head[0] == 0x80) return load_legacy(f);
  if (head.size() >= 262 && std::memcmp(&head[257], "ustar", 5) == 0)
    f.fail("tar checkpoints (PyTorch < 0.4) are not supported; re-save with a newer torch.save");
  f.fail("not a PyTorch checkpoint: neither a zip archive nor a pickle stream");
}

}  // namespace tg::formats
