// On-disk cache (tinygrad's diskcache): an sqlite3 database shared by all processes.
// CACHEDB sets the path (default $XDG_CACHE_HOME or ~/.cache, then tinygrad.cpp/cache.db);
// CACHELEVEL=0 turns it off. Used for compiled kernels and BEAM results.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace tg {

// table: [A-Za-z0-9_]+ (tg::Error otherwise). Keys of any length; values are raw bytes.
std::optional<std::string> diskcache_get(const std::string& table, const std::string& key);
void diskcache_put(const std::string& table, const std::string& key, const std::string& val);
void diskcache_clear();          // drops every table of the current database
std::string cachedb_path();

struct DiskCacheStats {
  static inline int64_t hits = 0, misses = 0, puts = 0;
};

}  // namespace tg
