#pragma once
// The persistent segment store: one HDF5 file holding up to millions of segment entries in
// a few chunked, extendible datasets (a payload blob, an entry index, an array directory,
// a name table) plus a two-slot commit record. Layout, crash-safety argument and the
// measurements behind the choice: docs/store-format.md.
//
// Crash safety: a writer appends an entry's bytes, flushes, then writes the commit record
// and flushes again, in SWMR mode (HDF5 keeps the on-disk metadata consistent at every
// point). Whatever a killed writer left past the last commit is ignored and overwritten
// when a writer opens the store again. Each entry carries a CRC32C; a damaged entry is
// reported (verify(), read()) and never returned as data, and may be put again.
//
// One writer per file at a time (enforced by a lock on the file); any number of readers,
// including while a writer runs (they see the entries committed when they opened).
// A SegmentStore is not thread-safe.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/entry.hpp"

namespace hypic::store {

inline constexpr int kStoreFormatVersion = 1;

struct StoreOptions {
  std::string model_fingerprint;
  int junction = 8;
  DType dtype = DType::BF16;
  // fsync after each commit: survives power loss, not only a killed process. Costs a disk
  // round trip per entry.
  bool sync_to_disk = false;
};

enum class OpenMode { kRead, kWrite };

enum class EntryStatus { kMissing, kValid, kDamaged };

struct ReadResult {
  EntryStatus status = EntryStatus::kMissing;
  std::optional<Entry> entry;  // set only when valid
  std::string problem;         // why it is damaged
};

// Thrown by get() for a damaged entry; the caller should recompute and put() it again.
class DamagedEntryError : public Error {
 public:
  DamagedEntryError(const std::string& key, const std::string& what) : Error(what), key_(key) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

struct DamagedEntry {
  std::string key;
  std::string problem;
};

struct VerifyReport {
  uint64_t entries_checked = 0;
  uint64_t entries_valid = 0;
  std::vector<DamagedEntry> damaged;
  uint64_t superseded_rows = 0;  // older rows of keys that were put again
  uint64_t dropped_rows = 0;     // damaged rows `warmup --repair` dropped (skipped by readers)
  // Set when the header attributes fail their checksum (header_crc32c).
  std::string header_problem;
  bool header_unchecked = false;  // a store from before header_crc32c existed
  // Bytes past the last commit (left by an interrupted writer; reused by the next one).
  uint64_t uncommitted_payload_bytes = 0;
  // A sharded store (shards.hpp): each shard that cannot be used (absent, unreadable, made for
  // another model, a damaged header), as "shard PATH: why". Entries damaged in a shard are in
  // `damaged` with the shard named in their problem, unless another file holds a valid copy.
  std::vector<std::string> shard_problems;
  uint64_t shards = 0;  // shard files checked
  bool ok() const { return damaged.empty() && header_problem.empty() && shard_problems.empty(); }
  // One line for the first problem (header first, then a shard, then the first damaged entry).
  std::string first_problem() const;
};

struct StoreStats {
  std::string model_fingerprint;
  int junction = 0;
  DType dtype = DType::F32;
  int format_version = 0;
  uint64_t entries = 0;
  uint64_t tokens = 0;
  uint64_t arrays = 0;
  uint64_t payload_bytes = 0;                                   // stored bytes of current entries
  uint64_t file_bytes = 0;                                      // the store file and its shards
  uint64_t shards = 0;                                          // shard files read (shards.hpp)
  std::vector<std::pair<std::string, uint64_t>> bytes_by_kind;  // array_kind(), sorted
};

// A shard named by the manifest that cannot be used, and why.
struct ShardProblem {
  std::string path;
  std::string problem;
};

// A store may be sharded (store/shards.hpp): the file at `path` plus the shard files its
// manifest STORE.shards.json names, written by other processes. Every open reads the manifest
// and opens the shards for reading, and contains/get/read/keys/size/verify/stats see the one
// logical store: the store file first, then the shards in manifest order, the first valid copy
// of a key winning. put() and drop_damaged() write the store file only.
class SegmentStore {
 public:
  // Creates a new store at `path`, replacing any file there, open for writing.
  static SegmentStore create(const std::string& path, const StoreOptions& options);
  // Opens an existing store. The fingerprint and junction width must match what the store
  // was made with, or a hypic::Error names the expected and found values. kWrite resumes
  // after the last committed entry (also after a killed writer).
  static SegmentStore open(const std::string& path, const std::string& model_fingerprint,
                           int junction, OpenMode mode);
  // Opens for writing if the file exists (checking fingerprint and junction), else creates.
  static SegmentStore open_or_create(const std::string& path, const StoreOptions& options);
  // Opens without checking fingerprint or junction (inspect, merge).
  static SegmentStore open_any(const std::string& path, OpenMode mode);

  SegmentStore(SegmentStore&&) noexcept;
  SegmentStore& operator=(SegmentStore&&) noexcept;
  ~SegmentStore();

  const std::string& path() const;
  const std::string& model_fingerprint() const;
  int junction() const;
  DType dtype() const;
  bool writable() const;

  // The key for these tokens under this store's model and junction width.
  std::string key_for(const std::vector<int32_t>& tokens) const;

  // True when `key` has a committed entry not known to be damaged (no checksum is read).
  bool contains(const std::string& key) const;
  uint64_t size() const;  // committed, current entries
  std::vector<std::string> keys() const;

  // Stores `entry` under `key` and commits it. Returns false (and writes nothing) when a valid
  // entry with this key is already there; a damaged one is replaced.
  bool put(const std::string& key, const Entry& entry);
  // The same, written from the caller's buffers (no copy of the arrays).
  bool put(const std::string& key, const EntryView& entry);
  // Reads and checks one entry; never throws for a damaged entry (status says so).
  ReadResult read(const std::string& key);
  // The entry, std::nullopt if missing; throws DamagedEntryError if its checksum fails.
  std::optional<Entry> get(const std::string& key);

  // Reads every current entry and checks its checksum and directory, and the header
  // attributes against their checksum. Damaged keys are printed with \xNN escapes.
  VerifyReport verify();
  // Drops every row known to be damaged that no later row replaced (an index row whose key
  // is unreadable; a current entry found damaged by verify() or read() and not put again):
  // its key is overwritten with a marker readers skip. Returns what was dropped. After
  // verify() and recomputing what can be recomputed, this leaves a store that verifies.
  std::vector<DamagedEntry> drop_damaged();
  StoreStats stats() const;

  // After a put() that failed for lack of space (the file-size limit or a full disk): which
  // of the two; "" otherwise.
  const std::string& space_problem() const;

  // The shard files the manifest names (empty: not sharded), and those that cannot be used
  // (absent, unreadable, made for another model, junction width or dtype); their entries count
  // as missing.
  std::vector<std::string> shard_paths() const;
  // The file a read of `key` tries first: path() when the store file holds it, else the first
  // shard (manifest order) that does, as shard_paths() names it; "" when no file holds it (or
  // only known-damaged copies). Serve uses it to send a hit to the worker that holds its shard.
  std::string holder(const std::string& key) const;
  std::vector<ShardProblem> shard_problems() const;
  // Closes the shards (a writer of its own shards in another process may then open them), and
  // opens them again from the manifest, seeing what their writers committed meanwhile.
  void close_shards();
  void reload_shards();

  // Closes now, reporting errors (the destructor closes silently).
  void close();
  // Closes the store (releasing the writer lock) and opens it again for reading only: after
  // a put() that failed, its committed entries stay readable; writable() is then false.
  void reopen_for_reading();

  struct Impl;  // opaque (segment_store.cpp)

 private:
  explicit SegmentStore(std::unique_ptr<Impl> impl);
  // The store file and the shards its manifest names.
  static std::unique_ptr<Impl> open_impl(const std::string& path, OpenMode mode);
  // The one file, no shards.
  static std::unique_ptr<Impl> open_file(const std::string& path, OpenMode mode);
  static void load_shards(Impl& main);
  std::unique_ptr<Impl> impl_;
};

struct MergeReport {
  uint64_t copied = 0;
  uint64_t already_present = 0;
  std::vector<DamagedEntry> skipped_damaged;
};

// Copies every valid entry of each source store that `destination` lacks. Sources must have
// the destination's fingerprint and junction width (else hypic::Error naming both).
MergeReport merge_stores(SegmentStore& destination, const std::vector<std::string>& sources);

}  // namespace hypic::store
