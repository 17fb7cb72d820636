// The metering history that outlasts the coordinator. The live records are in the tenant files, in
// the volatile coordinator folder (lost at a reboot, or at `slicectl rm`); `slicectl archive` copies
// them into an SQLite database, by default /var/lib/libslice/usage.sqlite3, and `slicectl usage`
// reads both. Only the tools touch it, never a process under libslice.
//
// Tables: records (tenant, gpu_uuid, started_ms) with the GPU's name and the totals when last
// archived; samples (tenant, gpu_uuid, started_ms, wall_ms) with the record's hourly samples.
// Archiving again is harmless: it updates the totals and adds the samples it did not have.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "coordinator_view.h"
#include "usage_series.h"

struct sqlite3;

namespace slicectl {

constexpr const char* kDefaultArchive = "/var/lib/libslice/usage.sqlite3";

class UsageArchive {
 public:
  // Creates the file (and its folder) when missing. nullptr and `error` when it cannot.
  static std::unique_ptr<UsageArchive> open_for_writing(const std::string& path, std::string& error);
  // nullptr with `error` empty when there is no archive there (nothing was archived yet).
  static std::unique_ptr<UsageArchive> open_for_reading(const std::string& path, std::string& error);
  ~UsageArchive();
  UsageArchive(const UsageArchive&) = delete;
  UsageArchive& operator=(const UsageArchive&) = delete;

  // Stores the records of `tenants` (readable ones, GPUs with a record), in one transaction;
  // `stored` is how many records.
  bool store(const std::vector<slice::TenantView>& tenants, std::size_t& stored, std::string& error);
  bool load(std::vector<ArchivedRecord>& out, std::string& error);

 private:
  explicit UsageArchive(sqlite3* db) : db_(db) {}
  bool exec(const char* sql, std::string& error);
  sqlite3* db_;
};

}  // namespace slicectl
