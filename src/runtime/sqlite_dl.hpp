// sqlite3 loaded at run time (like CUDA): the library builds without sqlite headers, and a machine
// without libsqlite3 runs with the disk cache off.
#pragma once
#include <dlfcn.h>

namespace tg::sqlite {

struct db;
struct stmt;
constexpr int OK = 0, ROW = 100, DONE = 101;
inline void (*const TRANSIENT)(void*) = reinterpret_cast<void (*)(void*)>(-1);

struct Api {
  bool ok = false;
  int (*open)(const char*, db**) = nullptr;
  int (*close)(db*) = nullptr;
  int (*busy_timeout)(db*, int) = nullptr;
  int (*exec)(db*, const char*, void*, void*, char**) = nullptr;
  const char* (*errmsg)(db*) = nullptr;
  int (*prepare_v2)(db*, const char*, int, stmt**, const char**) = nullptr;
  int (*finalize)(stmt*) = nullptr;
  int (*step)(stmt*) = nullptr;
  int (*bind_text)(stmt*, int, const char*, int, void (*)(void*)) = nullptr;
  int (*bind_blob)(stmt*, int, const void*, int, void (*)(void*)) = nullptr;
  const void* (*column_blob)(stmt*, int) = nullptr;
  int (*column_bytes)(stmt*, int) = nullptr;
  const unsigned char* (*column_text)(stmt*, int) = nullptr;
};

inline const Api& api() {
  static const Api a = [] {
    Api r;
    void* h = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libsqlite3.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) return r;
    auto load = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name)); return fn != nullptr; };
    r.ok = load(r.open, "sqlite3_open") & load(r.close, "sqlite3_close") & load(r.busy_timeout, "sqlite3_busy_timeout") &
           load(r.exec, "sqlite3_exec") & load(r.errmsg, "sqlite3_errmsg") & load(r.prepare_v2, "sqlite3_prepare_v2") &
           load(r.finalize, "sqlite3_finalize") & load(r.step, "sqlite3_step") & load(r.bind_text, "sqlite3_bind_text") &
           load(r.bind_blob, "sqlite3_bind_blob") & load(r.column_blob, "sqlite3_column_blob") &
           load(r.column_bytes, "sqlite3_column_bytes") & load(r.column_text, "sqlite3_column_text");
    return r;
  }();
  return a;
}

}  // namespace tg::sqlite
