// sqlite3 disk cache. One connection per process, reopened when CACHEDB changes.
// Each table is (hash TEXT PRIMARY KEY, key TEXT, val BLOB): the hash keeps the index small,
// the stored key guards against collisions. WAL + a busy timeout make concurrent processes safe.
#include "runtime/cache.hpp"

#include "runtime/sqlite_dl.hpp"

#include <cctype>
#include <type_traits>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <vector>

#include "tg/helpers.hpp"

namespace tg {

namespace {
constexpr int kVersion = 1;

struct Db {
  sqlite::db* conn = nullptr;
  std::string path;
  std::set<std::string> tables;   // created in this connection
  ~Db() { if (conn) sqlite::api().close(conn); }
};
std::mutex& db_mutex() { static std::mutex m; return m; }
Db& db() { static Db d; return d; }

std::string hash_hex(const std::string& s) {   // two FNV-1a 64 streams, 128 bits
  uint64_t a = 1469598103934665603ULL, b = 0x9e3779b97f4a7c15ULL;
  for (unsigned char c : s) { a = (a ^ c) * 1099511628211ULL; b = (b ^ c) * 0x100000001b3ULL + 0x2545F4914F6CDD1DULL; }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
  return std::string(buf) + "_" + std::to_string(s.size());
}

std::string table_name(const std::string& table) {
  if (table.empty()) throw Error("diskcache: empty table name");
  for (char c : table)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
      throw Error("diskcache: table name '" + table + "' may only hold letters, digits and '_'");
  return table + "_v" + std::to_string(kVersion);
}

// Returns the open connection, or nullptr when the database can't be used (warns at DEBUG>=1).
sqlite::db* connection() {
  Db& d = db();
  std::string path = cachedb_path();
  if (!sqlite::api().ok) {
    if (debug() >= 1) std::fprintf(stderr, "diskcache: libsqlite3 not found, the disk cache is off\n");
    return nullptr;
  }
  if (d.conn && d.path == path) return d.conn;
  if (d.conn) { sqlite::api().close(d.conn); d.conn = nullptr; d.tables.clear(); }
  d.path = path;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (sqlite::api().open(path.c_str(), &d.conn) != sqlite::OK) {
    if (debug() >= 1) std::fprintf(stderr, "diskcache: can't open %s: %s\n", path.c_str(), d.conn ? sqlite::api().errmsg(d.conn) : "");
    sqlite::api().close(d.conn);
    d.conn = nullptr;
    return nullptr;
  }
  sqlite::api().busy_timeout(d.conn, 60000);
  sqlite::api().exec(d.conn, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);   // may fail if another process holds it
  return d.conn;
}

struct Stmt {
  sqlite::stmt* s = nullptr;
  Stmt(sqlite::db* c, const std::string& sql) { sqlite::api().prepare_v2(c, sql.c_str(), -1, &s, nullptr); }
  ~Stmt() { sqlite::api().finalize(s); }
};
}  // namespace

std::string cachedb_path() {
  std::string p = getenv_str("CACHEDB", "");
  if (!p.empty()) return p;
  std::string base = getenv_str("XDG_CACHE_HOME", "");
  if (base.empty()) base = getenv_str("HOME", "/tmp") + "/.cache";
  return base + "/tinygrad.cpp/cache.db";
}

std::optional<std::string> diskcache_get(const std::string& table, const std::string& key) {
  if (getenv("CACHELEVEL", 2) == 0) return std::nullopt;
  std::string tname = table_name(table);
  std::lock_guard<std::mutex> lock(db_mutex());
  sqlite::db* c = connection();
  if (!c) return std::nullopt;
  Stmt st(c, "SELECT key, val FROM '" + tname + "' WHERE hash=?");
  if (!st.s) { DiskCacheStats::misses++; return std::nullopt; }   // table doesn't exist yet
  std::string h = hash_hex(key);
  sqlite::api().bind_text(st.s, 1, h.data(), (int)h.size(), sqlite::TRANSIENT);
  if (sqlite::api().step(st.s) == sqlite::ROW) {
    std::string k(static_cast<const char*>(sqlite::api().column_blob(st.s, 0)), sqlite::api().column_bytes(st.s, 0));
    if (k == key) {
      const void* v = sqlite::api().column_blob(st.s, 1);
      DiskCacheStats::hits++;
      return std::string(static_cast<const char*>(v), sqlite::api().column_bytes(st.s, 1));
    }
  }
  DiskCacheStats::misses++;
  return std::nullopt;
}

void diskcache_put(const std::string& table, const std::string& key, const std::string& val) {
  if (getenv("CACHELEVEL", 2) == 0) return;
  std::string tname = table_name(table);
  std::lock_guard<std::mutex> lock(db_mutex());
  sqlite::db* c = connection();
  if (!c) return;
  if (!db().tables.count(tname)) {
    std::string sql = "CREATE TABLE IF NOT EXISTS '" + tname + "' (hash TEXT PRIMARY KEY, key BLOB, val BLOB)";
    if (sqlite::api().exec(c, sql.c_str(), nullptr, nullptr, nullptr) != sqlite::OK) {
      if (debug() >= 1) std::fprintf(stderr, "diskcache: can't create %s: %s\n", tname.c_str(), sqlite::api().errmsg(c));
      return;
    }
    db().tables.insert(tname);
  }
  Stmt st(c, "REPLACE INTO '" + tname + "' (hash, key, val) VALUES (?, ?, ?)");
  if (!st.s) return;
  std::string h = hash_hex(key);
  sqlite::api().bind_text(st.s, 1, h.data(), (int)h.size(), sqlite::TRANSIENT);
  sqlite::api().bind_blob(st.s, 2, key.data(), (int)key.size(), sqlite::TRANSIENT);
  sqlite::api().bind_blob(st.s, 3, val.data(), (int)val.size(), sqlite::TRANSIENT);
  // a failed write (disk full, read-only db) only costs a recompile later
  if (sqlite::api().step(st.s) == sqlite::DONE) DiskCacheStats::puts++;
  else if (debug() >= 1) std::fprintf(stderr, "diskcache: write to %s failed: %s\n", tname.c_str(), sqlite::api().errmsg(c));
}

void diskcache_clear() {
  std::lock_guard<std::mutex> lock(db_mutex());
  sqlite::db* c = connection();
  if (!c) return;
  std::vector<std::string> names;
  {
    Stmt st(c, "SELECT name FROM sqlite_master WHERE type='table'");
    while (st.s && sqlite::api().step(st.s) == sqlite::ROW) names.emplace_back(reinterpret_cast<const char*>(sqlite::api().column_text(st.s, 0)));
  }
  for (auto& n : names) sqlite::api().exec(c, ("DROP TABLE IF EXISTS '" + n + "'").c_str(), nullptr, nullptr, nullptr);
  db().tables.clear();
}

}  // namespace tg
