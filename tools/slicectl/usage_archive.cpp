#include "usage_archive.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>

namespace slicectl {

namespace {

constexpr int kSchemaVersion = 1;

// Waits this long for another writer (the archive timer, `slicectl rm`) to finish.
constexpr int kBusyTimeoutMs = 10'000;

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS records ("
    "  tenant TEXT NOT NULL, gpu_uuid TEXT NOT NULL, started_ms INTEGER NOT NULL, gpu_name TEXT NOT NULL,"
    "  last_wall_ms INTEGER NOT NULL, last_device_ns INTEGER NOT NULL, last_memory_byte_seconds REAL NOT NULL,"
    "  PRIMARY KEY (tenant, gpu_uuid, started_ms)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS samples ("
    "  tenant TEXT NOT NULL, gpu_uuid TEXT NOT NULL, started_ms INTEGER NOT NULL, wall_ms INTEGER NOT NULL,"
    "  device_ns INTEGER NOT NULL, memory_byte_seconds REAL NOT NULL,"
    "  PRIMARY KEY (tenant, gpu_uuid, started_ms, wall_ms)) WITHOUT ROWID;";

// A prepared statement, finalised however the function leaves.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  explicit operator bool() const { return stmt_ != nullptr; }
  sqlite3_stmt* get() const { return stmt_; }
  void text(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void integer(int i, std::uint64_t v) { sqlite3_bind_int64(stmt_, i, static_cast<sqlite3_int64>(v)); }
  void real(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  // One execution of a statement that returns no rows; reset for the next.
  bool run() {
    const int rc = sqlite3_step(stmt_);
    sqlite3_reset(stmt_);
    return rc == SQLITE_DONE;
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

std::string message_of(sqlite3* db, const std::string& what) { return what + ": " + sqlite3_errmsg(db); }

std::uint64_t column_u64(sqlite3_stmt* s, int i) {
  const sqlite3_int64 v = sqlite3_column_int64(s, i);
  return v < 0 ? 0 : static_cast<std::uint64_t>(v);  // the file is not trusted
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? reinterpret_cast<const char*>(t) : "";
}

sqlite3* open_database(const std::string& path, int flags, std::string& error) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
    error = "cannot open the usage archive " + path + ": " + (db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return nullptr;
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  return db;
}

}  // namespace

std::unique_ptr<UsageArchive> UsageArchive::open_for_writing(const std::string& path, std::string& error) {
  // Its folder, root's where root archives (the package makes /var/lib/libslice).
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string folder = path.substr(0, slash);
    if (mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) {
      error = "cannot create " + folder + " for the usage archive: " + std::strerror(errno);
      return nullptr;
    }
  }
  sqlite3* db = open_database(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, error);
  if (!db) return nullptr;
  std::unique_ptr<UsageArchive> a(new UsageArchive(db));
  // A rollback journal, not WAL: a reader without write access (`slicectl usage` as any user) can
  // read it; writes take milliseconds every few minutes, and readers wait them out (busy timeout).
  // FULL: an archive run that returned is on disk, whatever happens to the machine next.
  if (!a->exec("PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL;", error) || !a->exec(kSchema, error))
    return nullptr;
  Statement version(db, "PRAGMA user_version");
  if (!version || sqlite3_step(version.get()) != SQLITE_ROW) {
    error = message_of(db, "cannot read the usage archive's version");
    return nullptr;
  }
  const int found = sqlite3_column_int(version.get(), 0);
  if (found == 0) {
    if (!a->exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str(), error)) return nullptr;
  } else if (found != kSchemaVersion) {
    error = path + " is a usage archive of another version (" + std::to_string(found) + ", this slicectl writes " +
            std::to_string(kSchemaVersion) + ")";
    return nullptr;
  }
  chmod(path.c_str(), 0644);  // anyone may read what was billed; only its owner writes
  return a;
}

std::unique_ptr<UsageArchive> UsageArchive::open_for_reading(const std::string& path, std::string& error) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 && errno == ENOENT) return nullptr;  // nothing archived yet
  // Read-only, but not immutable: the timer may write while we read.
  sqlite3* db = open_database(path, SQLITE_OPEN_READONLY, error);
  if (!db) return nullptr;
  return std::unique_ptr<UsageArchive>(new UsageArchive(db));
}

UsageArchive::~UsageArchive() { sqlite3_close(db_); }

bool UsageArchive::exec(const char* sql, std::string& error) {
  char* text = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &text) == SQLITE_OK) return true;
  error = std::string("usage archive: ") + (text ? text : sqlite3_errmsg(db_));
  sqlite3_free(text);
  return false;
}

bool UsageArchive::store(const std::vector<slice::TenantView>& tenants, std::size_t& stored, std::string& error) {
  stored = 0;
  if (!exec("BEGIN IMMEDIATE", error)) return false;
  Statement record(db_,
                   "INSERT INTO records VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
                   "ON CONFLICT (tenant, gpu_uuid, started_ms) DO UPDATE SET gpu_name = ?4, "
                   "last_wall_ms = max(last_wall_ms, ?5), last_device_ns = max(last_device_ns, ?6), "
                   "last_memory_byte_seconds = max(last_memory_byte_seconds, ?7)");
  Statement sample(db_, "INSERT OR IGNORE INTO samples VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!record || !sample) {
    error = message_of(db_, "usage archive");
    exec("ROLLBACK", error);
    return false;
  }
  for (const slice::TenantView& t : tenants) {
    if (!t.readable) continue;
    for (const slice::TenantGpuView& g : t.gpus) {
      if (g.usage_started_ms == 0) continue;
      const slice::UsagePoint now = g.usage_now(t.read_wall_ms);
      record.text(1, t.name);
      record.text(2, g.uuid);
      record.integer(3, g.usage_started_ms);
      record.text(4, g.name);
      record.integer(5, now.wall_ms);
      record.integer(6, now.device_ns);
      record.real(7, now.memory_byte_seconds);
      bool ok = record.run();
      for (const slice::UsagePoint& p : g.usage_samples) {
        sample.text(1, t.name);
        sample.text(2, g.uuid);
        sample.integer(3, g.usage_started_ms);
        sample.integer(4, p.wall_ms);
        sample.integer(5, p.device_ns);
        sample.real(6, p.memory_byte_seconds);
        ok = ok && sample.run();
      }
      if (!ok) {
        error = message_of(db_, "cannot archive tenant '" + t.name + "' on " + g.uuid);
        std::string ignored;
        exec("ROLLBACK", ignored);
        return false;
      }
      ++stored;
    }
  }
  return exec("COMMIT", error);
}

bool UsageArchive::load(std::vector<ArchivedRecord>& out, std::string& error) {
  // One read transaction: records and samples as of one moment, whatever the timer writes.
  if (!exec("BEGIN", error)) return false;
  using Key = std::tuple<std::string, std::string, std::uint64_t>;
  std::map<Key, std::size_t> index;
  {
    Statement records(db_,
                      "SELECT tenant, gpu_uuid, started_ms, gpu_name, last_wall_ms, last_device_ns, "
                      "last_memory_byte_seconds FROM records ORDER BY tenant, gpu_uuid, started_ms");
    if (!records) {
      error = message_of(db_, "cannot read the usage archive");
      std::string ignored;
      exec("ROLLBACK", ignored);
      return false;
    }
    int rc;
    while ((rc = sqlite3_step(records.get())) == SQLITE_ROW) {
      ArchivedRecord r;
      r.tenant = column_text(records.get(), 0);
      r.uuid = column_text(records.get(), 1);
      r.segment.started_ms = column_u64(records.get(), 2);
      r.gpu_name = column_text(records.get(), 3);
      r.segment.end = {column_u64(records.get(), 4), column_u64(records.get(), 5),
                       sqlite3_column_double(records.get(), 6)};
      index[{r.tenant, r.uuid, r.segment.started_ms}] = out.size();
      out.push_back(std::move(r));
    }
    if (rc != SQLITE_DONE) {
      error = message_of(db_, "cannot read the usage archive");
      std::string ignored;
      exec("ROLLBACK", ignored);
      return false;
    }
  }
  Statement samples(db_,
                    "SELECT tenant, gpu_uuid, started_ms, wall_ms, device_ns, memory_byte_seconds FROM samples "
                    "ORDER BY tenant, gpu_uuid, started_ms, wall_ms");
  int rc = samples ? SQLITE_ROW : SQLITE_ERROR;
  while (samples && (rc = sqlite3_step(samples.get())) == SQLITE_ROW) {
    const auto it =
        index.find({column_text(samples.get(), 0), column_text(samples.get(), 1), column_u64(samples.get(), 2)});
    if (it == index.end()) continue;
    UsageSegment& seg = out[it->second].segment;
    const slice::UsagePoint p{column_u64(samples.get(), 3), column_u64(samples.get(), 4),
                              sqlite3_column_double(samples.get(), 5)};
    // As the live reader does (usage_samples): counters never go down, nor pass the totals.
    if (p.wall_ms > seg.end.wall_ms || p.device_ns > seg.end.device_ns ||
        p.memory_byte_seconds > seg.end.memory_byte_seconds)
      continue;
    if (!seg.samples.empty() &&
        (p.device_ns < seg.samples.back().device_ns || p.memory_byte_seconds < seg.samples.back().memory_byte_seconds))
      continue;
    seg.samples.push_back(p);
  }
  std::string ignored;
  exec("COMMIT", ignored);
  if (rc != SQLITE_DONE) {
    error = message_of(db_, "cannot read the usage archive's samples");
    return false;
  }
  return true;
}

}  // namespace slicectl
