#include "store/segment_store.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/copy_stats.hpp"
#include "common/files.hpp"
#include "common/printable.hpp"
#include "store/checksum.hpp"
#include "store/entry_record.hpp"
#include "store/hdf5.hpp"
#include "store/open.hpp"
#include "store/shards.hpp"

namespace hypic::store {
namespace {

constexpr const char* kFormatName = "hypic-segment-store";
constexpr int kMaxRank = 6;
constexpr size_t kKeyChars = 32;
constexpr size_t kMaxNameChars = 64;
constexpr hsize_t kPayloadChunk = 256 * 1024;  // elements: 1 MiB of f32, 512 KiB of 16-bit
constexpr hsize_t kEntryChunk = 1024;          // rows of 72 bytes
constexpr hsize_t kArrayChunk = 4096;          // rows of 64 bytes
constexpr hsize_t kNameChunk = 256;
constexpr size_t kPayloadCacheBytes = 8u << 20;
constexpr size_t kTableCacheBytes = 2u << 20;
constexpr hsize_t kScanBlock = 65536;

// One row of /entries.
struct EntryRow {
  char key[kKeyChars];
  int64_t n_tokens;
  uint64_t payload_offset;  // first element in /payload
  uint64_t payload_count;   // elements
  uint64_t array_first;     // first row in /arrays
  uint32_t array_count;
  uint32_t checksum;  // CRC32C, see entry_checksum()
};

// One row of /arrays (store/entry.hpp, where decode_entry reads it).
using ArrayRow = ArrayRecord;
static_assert(kMaxRank == kMaxStoredRank);

// One slot of /commit: what a writer has made durable. Two slots, written alternately, so
// a torn write of one (power loss) leaves the other.
struct CommitRecord {
  uint64_t generation;
  uint64_t entries;  // committed rows of /entries (current and superseded)
  uint64_t arrays;   // committed rows of /arrays
  uint64_t names;    // committed rows of /array_names
  uint64_t payload_end;
  uint64_t reserved[2];
  uint64_t crc;  // CRC32C of the seven words above
};
static_assert(sizeof(CommitRecord) == 8 * sizeof(uint64_t));

uint64_t record_crc(const CommitRecord& r) {
  return crc32c(&r, offsetof(CommitRecord, crc));
}

h5::Handle entry_row_type() {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(EntryRow));
  hid_t key = H5Tcopy(H5T_C_S1);
  H5Tset_size(key, kKeyChars);
  H5Tset_strpad(key, H5T_STR_NULLPAD);
  H5Tinsert(t, "key", HOFFSET(EntryRow, key), key);
  H5Tclose(key);
  H5Tinsert(t, "n_tokens", HOFFSET(EntryRow, n_tokens), H5T_STD_I64LE);
  H5Tinsert(t, "payload_offset", HOFFSET(EntryRow, payload_offset), H5T_STD_U64LE);
  H5Tinsert(t, "payload_count", HOFFSET(EntryRow, payload_count), H5T_STD_U64LE);
  H5Tinsert(t, "array_first", HOFFSET(EntryRow, array_first), H5T_STD_U64LE);
  H5Tinsert(t, "array_count", HOFFSET(EntryRow, array_count), H5T_STD_U32LE);
  H5Tinsert(t, "checksum", HOFFSET(EntryRow, checksum), H5T_STD_U32LE);
  return h5::Handle(t, H5Tclose);
}

h5::Handle array_row_type() {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(ArrayRow));
  H5Tinsert(t, "name_id", HOFFSET(ArrayRow, name_id), H5T_STD_U32LE);
  H5Tinsert(t, "rank", HOFFSET(ArrayRow, rank), H5T_STD_U32LE);
  hsize_t dims[1] = {kMaxRank};
  hid_t shape = H5Tarray_create2(H5T_STD_I64LE, 1, dims);
  H5Tinsert(t, "shape", HOFFSET(ArrayRow, shape), shape);
  H5Tclose(shape);
  H5Tinsert(t, "offset", HOFFSET(ArrayRow, offset), H5T_STD_U64LE);
  return h5::Handle(t, H5Tclose);
}

h5::Handle name_type() {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, kMaxNameChars);
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  return h5::Handle(t, H5Tclose);
}

// The payload element type on disk. f16 is an IEEE half that h5py reads as numpy.float16;
// bf16 has no HDF5 or numpy type, so it is stored as its raw 16 bits (uint16).
h5::Handle payload_file_type(DType dtype) {
  if (dtype == DType::F32) return h5::Handle(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  if (dtype == DType::BF16) return h5::Handle(H5Tcopy(H5T_STD_U16LE), H5Tclose);
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return h5::Handle(t, H5Tclose);
}

// Memory type to read and write payload bytes without any HDF5 conversion.
h5::Handle payload_memory_type(DType dtype) {
  if (dtype == DType::F32) return h5::Handle(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
  if (dtype == DType::BF16) return h5::Handle(H5Tcopy(H5T_NATIVE_UINT16), H5Tclose);
  return payload_file_type(dtype);
}

std::string key_text(const EntryRow& row) {
  return std::string(row.key, kKeyChars);
}

// What `warmup --repair` writes over the key of a damaged row that nothing replaced: readers
// skip the row (it can never be served, and no longer fails verification).
const std::string kDroppedKey(kKeyChars, '-');

// The root attributes a store's meaning depends on, in a fixed order; their CRC32C is kept
// in the attribute `header_crc32c` so `inspect --verify` notices a flipped byte in them.
constexpr const char* kHeaderStrings[] = {"format",   "model_fingerprint", "dtype",
                                          "checksum", "key_hash",          "created_by"};
constexpr const char* kHeaderInts[] = {"format_version", "junction"};

// CRC32C over each header attribute's name, a zero byte, and its value (strings as their
// bytes and a zero byte, integers as i64 little-endian). Missing attributes count as empty.
uint32_t header_crc(const h5::File& file) {
  uint32_t crc = 0;
  for (const char* name : kHeaderStrings) {
    crc = crc32c(name, std::strlen(name) + 1, crc);
    const std::string v = file.has_attribute(name) ? file.string_attribute(name) : "";
    crc = crc32c(v.c_str(), v.size() + 1, crc);
  }
  for (const char* name : kHeaderInts) {
    crc = crc32c(name, std::strlen(name) + 1, crc);
    const int64_t v = file.has_attribute(name) ? file.int_attribute(name) : 0;
    unsigned char le[8];
    for (int i = 0; i < 8; ++i)
      le[i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i));
    crc = crc32c(le, 8, crc);
  }
  return crc;
}

// The entry checksum: CRC32C over the stored payload bytes, then per array its name, a zero
// byte, rank (u32), the rank dimensions (i64) and its offset from the entry's first element
// (u64), then the key's 32 characters and n_tokens (i64); integers little-endian.
uint32_t entry_checksum(const void* payload, size_t payload_bytes, const EntryRow& row,
                        const std::vector<ArrayRow>& arrays,
                        const std::vector<std::string>& names) {
  uint32_t crc = crc32c(payload, payload_bytes);
  for (const ArrayRow& a : arrays) {
    const std::string& name = a.name_id < names.size() ? names[a.name_id] : std::string();
    crc = crc32c(name.c_str(), name.size() + 1, crc);
    crc = crc32c(&a.rank, sizeof(a.rank), crc);
    crc = crc32c(a.shape, sizeof(int64_t) * std::min<uint32_t>(a.rank, kMaxRank), crc);
    uint64_t relative = a.offset - row.payload_offset;
    crc = crc32c(&relative, sizeof(relative), crc);
  }
  crc = crc32c(row.key, kKeyChars, crc);
  return crc32c(&row.n_tokens, sizeof(row.n_tokens), crc);
}

Hash128 parse_key_or_throw(const std::string& key) {
  Hash128 h;
  HYPIC_REQUIRE(parse_hex128(key, h), "segment store: '" + key +
                                          "' is not an entry key (32 hex digits, as entry_key() "
                                          "returns)");
  return h;
}

// Holds an exclusive open-file-description lock on the store file while a writer has it
// open, so a second writer (another process or another SegmentStore) is refused instead of
// corrupting the file. Released by the kernel when the process dies.
class WriterLock {
 public:
  WriterLock() = default;
  WriterLock(const std::string& path, bool create) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (fd_ < 0) {
      throw Error("segment store '" + path + "': cannot open for writing: " + std::strerror(errno));
    }
    struct flock lock;
    std::memset(&lock, 0, sizeof(lock));
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (::fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
      int err = errno;
      ::close(fd_);
      fd_ = -1;
      if (err == EAGAIN || err == EACCES) {
        throw Error("segment store '" + path +
                    "' is being written by another process (or another open store in this "
                    "one); wait for it to finish or use a different --store path");
      }
      throw Error("segment store '" + path + "': cannot lock for writing: " + std::strerror(err));
    }
  }
  WriterLock(WriterLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  WriterLock& operator=(WriterLock&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~WriterLock() { release(); }
  void release() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool held() const { return fd_ >= 0; }
  // Our own descriptor on the same file: fsync through it flushes the file's pages.
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// True when some open file description holds the writer lock on `path` (a live writer, in
// this process or another). Readers of a store nobody writes need no SWMR retries.
bool writer_holds_lock(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock probe;
  std::memset(&probe, 0, sizeof(probe));
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  const bool held = ::fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

// The length a "truncated file" error from HDF5 says the superblock records, or 0 when the
// error is about something else.
uint64_t recorded_length_if_truncated(const std::string& what) {
  const std::string marker = "stored_eof = ";
  const size_t at = what.find(marker);
  if (what.find("truncated file") == std::string::npos || at == std::string::npos) return 0;
  return std::strtoull(what.c_str() + at + marker.size(), nullptr, 10);
}

std::string truncated_message(const std::string& path, uint64_t size, uint64_t recorded) {
  return "segment store '" + path + "' is truncated: the file has " + std::to_string(size) +
         " bytes but its header records " + std::to_string(recorded);
}

// Opens the HDF5 file for reading. Never changes the file: a truncated store is refused.
h5::File open_for_reading(const std::string& path, const h5::FileOptions& options) {
  try {
    return h5::File::open(path, h5::Access::kReadOnly, options);
  } catch (const Error& e) {
    const uint64_t recorded = recorded_length_if_truncated(e.what());
    if (recorded == 0) throw;
    throw Error(truncated_message(path, std::filesystem::file_size(path), recorded) +
                "; it was left as it is (if a warm-up stopped because the disk was full, "
                "resuming that warm-up restores it; otherwise recompute it into a new store)");
  }
}

// A store file extended back to the length its superblock records (see below), and how to
// undo that when the file still cannot be used.
struct LengthRepair {
  std::string path;
  uint64_t size = 0;      // on disk before
  uint64_t recorded = 0;  // what the superblock records
  std::string head;       // the first bytes before: opening for writing rewrites the superblock
  bool extended = false;

  // Puts the file back byte for byte (the caller has closed it); returns the refusal.
  std::string undo(const std::string& why) const {
    bool restored = ::truncate(path.c_str(), static_cast<off_t>(size)) == 0;
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    restored =
        restored && f != nullptr && std::fwrite(head.data(), 1, head.size(), f) == head.size();
    if (f != nullptr) restored = std::fclose(f) == 0 && restored;
    return truncated_message(path, size, recorded) + " and what is left cannot be used (" + why +
           "); " +
           (restored ? "it was left as it was" : "putting back its original length failed") +
           "; recompute it into a new store";
  }
};

// Opens the HDF5 file for writing; the caller holds the writer lock. A writer that failed
// because the disk was full can leave a file shorter than the length its superblock records
// (HDF5 then refuses it as "truncated"). The missing tail only ever held uncommitted data, so
// the file is extended back to its recorded length with zeros and opened again; the commit
// record and checksums decide what is valid. When the cut went into committed metadata the
// open fails again: the file is then put back exactly as it was (here, or by the caller with
// `repair` when a later step fails) and the store is refused.
h5::File open_for_writing_repairing_length(const std::string& path, const h5::FileOptions& options,
                                           LengthRepair& repair) {
  repair = LengthRepair{};
  repair.path = path;
  try {
    return h5::File::open(path, h5::Access::kReadWrite, options);
  } catch (const Error& e) {
    repair.recorded = recorded_length_if_truncated(e.what());
    if (repair.recorded == 0) throw;
  }
  repair.size = std::filesystem::file_size(path);
  const std::string refused = truncated_message(path, repair.size, repair.recorded);
  if (repair.recorded <= repair.size) throw Error(refused);
  repair.head.assign(static_cast<size_t>(std::min<uint64_t>(repair.size, 4096)), '\0');
  std::FILE* f = std::fopen(path.c_str(), "rb");
  const bool read_ok = f != nullptr && std::fread(repair.head.data(), 1, repair.head.size(), f) ==
                                           repair.head.size();
  if (f != nullptr) std::fclose(f);
  if (!read_ok) throw Error(refused + "; cannot read it");
  if (::truncate(path.c_str(), static_cast<off_t>(repair.recorded)) != 0)
    throw Error(refused + "; cannot extend it: " + std::strerror(errno));
  repair.extended = true;
  try {
    return h5::File::open(path, h5::Access::kReadWrite, options);
  } catch (const Error& e) {
    throw Error(repair.undo(e.what()));
  }
}

}  // namespace

struct SegmentStore::Impl {
  std::string path;
  OpenMode mode = OpenMode::kRead;
  StoreOptions options;
  int format_version = kStoreFormatVersion;
  WriterLock lock;
  h5::File file;
  h5::Dataset payload, entries, arrays, names_ds, commit;
  h5::Handle entry_type = entry_row_type();
  h5::Handle array_type = array_row_type();
  h5::Handle name_type_ = name_type();
  h5::Handle payload_mem;
  size_t element_bytes = 4;

  CommitRecord committed{};
  std::vector<EntryRow> rows;                                    // committed rows of /entries
  std::unordered_map<Hash128, uint64_t, Hash128Hasher> current;  // key -> row
  std::unordered_set<uint64_t> damaged_rows;                     // found damaged this session
  std::vector<uint64_t> unreadable_key_rows;  // rows whose key is not hex (damaged index)
  uint64_t dropped_rows = 0;                  // rows `warmup --repair` dropped
  std::vector<std::string> names;
  std::unordered_map<std::string, uint32_t> name_ids;
  std::string failed;         // set after a write error: the store must be reopened
  std::string space_problem;  // set when that error came from the file-size limit or a full disk

  // A sharded store (shards.hpp): the shard files its manifest names, open for reading; a
  // shard that cannot be used has no impl and says why.
  struct Shard {
    std::string path;
    std::unique_ptr<Impl> impl;
    std::string problem;
  };
  std::vector<Shard> shards;

  // True when this file holds `h` and it is not known to be damaged.
  bool holds_valid(const Hash128& h) const {
    auto found = current.find(h);
    return found != current.end() && damaged_rows.count(found->second) == 0;
  }
  // The files of the logical store in lookup order: this one, then each usable shard, with the
  // words that name it in a problem ("" for the store file itself).
  std::vector<std::pair<Impl*, std::string>> files() {
    std::vector<std::pair<Impl*, std::string>> out{{this, ""}};
    for (Shard& s : shards)
      if (s.impl) out.emplace_back(s.impl.get(), "in shard " + s.path + ": ");
    return out;
  }

  // Why a write of `more` bytes past the file's end failed, when space explains it: the
  // process's file-size limit (ulimit -f; SIGXFSZ is ignored so the write fails with EFBIG)
  // or a full file system. "" when neither does.
  std::string diagnose_space(uint64_t more) const {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) return "";
    char text[256];
    rlimit limit{};
    if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        size + more > static_cast<uint64_t>(limit.rlim_cur)) {
      std::snprintf(text, sizeof text,
                    "the file-size limit of this process (ulimit -f) of %.1f MiB was reached (%s)",
                    static_cast<double>(limit.rlim_cur) / 1048576.0, std::strerror(EFBIG));
      return text;
    }
    struct statvfs fs_info {};
    const std::string folder = std::filesystem::absolute(path, ec).parent_path().string();
    if (statvfs(folder.c_str(), &fs_info) == 0 &&
        static_cast<uint64_t>(fs_info.f_bavail) * fs_info.f_frsize < more) {
      std::snprintf(text, sizeof text, "the file system holding it is full (%.1f MiB free: %s)",
                    static_cast<double>(fs_info.f_bavail) * fs_info.f_frsize / 1048576.0,
                    std::strerror(ENOSPC));
      return text;
    }
    return "";
  }

  std::string where() const { return "segment store '" + path + "'"; }

  // After a failed write the file is closed (put): say so instead of reading a closed file.
  void require_open() const {
    HYPIC_REQUIRE(failed.empty(),
                  where() + ": an earlier write failed (" + failed +
                      "); committed entries are intact, reopen the store to resume");
  }

  void close_file() {
    payload = h5::Dataset();
    entries = h5::Dataset();
    arrays = h5::Dataset();
    names_ds = h5::Dataset();
    commit = h5::Dataset();
    file = h5::File();
  }

  void open_datasets() {
    payload = file.open_dataset("payload", kPayloadCacheBytes);
    entries = file.open_dataset("entries", kTableCacheBytes);
    arrays = file.open_dataset("arrays", kTableCacheBytes);
    names_ds = file.open_dataset("array_names");
    commit = file.open_dataset("commit");
    payload_mem = payload_memory_type(options.dtype);
    element_bytes = dtype_size(options.dtype);
  }

  void read_attributes() {
    HYPIC_REQUIRE(file.has_attribute("format") && file.string_attribute("format") == kFormatName,
                  "'" + path + "' is not a hypic segment store (no format attribute '" +
                      std::string(kFormatName) + "')");
    format_version = static_cast<int>(file.int_attribute("format_version"));
    HYPIC_REQUIRE(format_version <= kStoreFormatVersion,
                  where() + " has format version " + std::to_string(format_version) +
                      ", newer than this hypic reads (" + std::to_string(kStoreFormatVersion) +
                      "); use a newer hypic");
    options.model_fingerprint = file.string_attribute("model_fingerprint");
    options.junction = static_cast<int>(file.int_attribute("junction"));
    options.dtype = parse_dtype(file.string_attribute("dtype"));
  }

  void load() {
    // The newest slot whose checksum holds.
    std::vector<uint64_t> slots = commit.read_all<uint64_t>();
    HYPIC_REQUIRE(slots.size() == 16, where() + ": /commit has an unexpected shape");
    bool found = false;
    for (int s = 0; s < 2; ++s) {
      CommitRecord r{};
      std::memcpy(&r, slots.data() + 8 * s, sizeof(r));
      if (r.crc != record_crc(r)) continue;
      if (!found || r.generation > committed.generation) committed = r;
      found = true;
    }
    HYPIC_REQUIRE(found, where() +
                             ": both commit records are damaged, so which entries are complete is "
                             "unknown; the file cannot be used (recompute it into a new store)");
    // A reader racing a live SWMR writer can see the new commit record before the grown
    // extents of the datasets it covers (HDF5 refreshes each object's metadata separately).
    // Refresh those datasets until the view catches up; only a real truncation persists.
    auto extents_cover = [&] {
      return entries.shape().at(0) >= committed.entries &&
             arrays.shape().at(0) >= committed.arrays &&
             names_ds.shape().at(0) >= committed.names &&
             payload.shape().at(0) >= committed.payload_end;
    };
    if (mode == OpenMode::kRead) {
      for (int attempt = 0; attempt < 200 && !extents_cover(); ++attempt) {
        for (const h5::Dataset* d : {&entries, &arrays, &names_ds, &payload}) H5Drefresh(d->id());
        if (!extents_cover()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    auto check_extent = [&](const h5::Dataset& d, uint64_t needed, const char* what) {
      uint64_t have = d.shape().at(0);
      HYPIC_REQUIRE(have >= needed, where() + " is truncated: its commit record counts " +
                                        std::to_string(needed) + " " + what +
                                        " but the file holds " + std::to_string(have));
    };
    check_extent(entries, committed.entries, "entries");
    check_extent(arrays, committed.arrays, "array rows");
    check_extent(names_ds, committed.names, "array names");
    check_extent(payload, committed.payload_end, "payload elements");

    rows.resize(committed.entries);
    if (!rows.empty()) entries.read_raw(entry_type.id(), {0}, {committed.entries}, rows.data());
    current.clear();
    current.reserve(rows.size() * 2);
    unreadable_key_rows.clear();
    dropped_rows = 0;
    for (uint64_t i = 0; i < rows.size(); ++i) {
      Hash128 h;
      if (key_text(rows[i]) == kDroppedKey) {
        ++dropped_rows;
      } else if (parse_hex128(key_text(rows[i]), h)) {
        current[h] = i;  // later rows supersede
      } else {
        unreadable_key_rows.push_back(i);
      }
    }
    std::vector<char> raw(committed.names * kMaxNameChars);
    if (!raw.empty()) names_ds.read_raw(name_type_.id(), {0}, {committed.names}, raw.data());
    names.clear();
    name_ids.clear();
    for (uint64_t i = 0; i < committed.names; ++i) {
      const char* text = raw.data() + i * kMaxNameChars;
      names.emplace_back(text, strnlen(text, kMaxNameChars));
      name_ids.emplace(names.back(), static_cast<uint32_t>(i));
    }
  }

  uint32_t name_id_for(const std::string& name, std::vector<std::string>& added) {
    auto found = name_ids.find(name);
    if (found != name_ids.end()) return found->second;
    for (size_t i = 0; i < added.size(); ++i)
      if (added[i] == name) return static_cast<uint32_t>(names.size() + i);
    added.push_back(name);
    return static_cast<uint32_t>(names.size() + added.size() - 1);
  }

  static void ensure_extent(h5::Dataset& d, uint64_t needed) {
    h5::Shape shape = d.shape();
    if (shape.at(0) < needed) {
      shape[0] = needed;
      d.resize(shape);
    }
  }

  void write_commit(const CommitRecord& r) {
    commit.write_slab<uint64_t>({r.generation % 2, 0}, {1, 8},
                                reinterpret_cast<const uint64_t*>(&r));
  }

  void durable_flush() {
    file.flush();
    if (options.sync_to_disk && ::fsync(lock.fd()) != 0)
      throw Error(where() + ": fsync failed: " + std::strerror(errno));
  }

  // Reads one committed row; never throws for damage (reports it instead).
  ReadResult read_row(uint64_t index) {
    ReadResult result;
    const EntryRow& row = rows[index];
    auto damaged = [&](const std::string& why) {
      damaged_rows.insert(index);
      ReadResult report;  // a fresh one: never an entry, whatever `result` holds
      report.status = EntryStatus::kDamaged;
      report.problem = why;
      return report;
    };
    // Written so that no sum can wrap: the row's fields may be anything.
    if (row.array_count > committed.arrays ||
        row.array_first > committed.arrays - row.array_count ||
        row.payload_count > committed.payload_end ||
        row.payload_offset > committed.payload_end - row.payload_count)
      return damaged("its index row points outside the committed data");
    std::vector<ArrayRow> dir(row.array_count);
    std::vector<unsigned char> bytes(row.payload_count * element_bytes);
    try {
      if (!dir.empty())
        arrays.read_raw(array_type.id(), {row.array_first}, {dir.size()}, dir.data());
      if (!bytes.empty())
        payload.read_raw(payload_mem.id(), {row.payload_offset}, {row.payload_count}, bytes.data());
    } catch (const Error& e) {
      return damaged(std::string("cannot be read: ") + e.what());
    }
    uint32_t crc = entry_checksum(bytes.data(), bytes.size(), row, dir, names);
    if (crc != row.checksum) {
      char text[96];
      std::snprintf(text, sizeof(text), "checksum mismatch (stored %08x, computed %08x)",
                    row.checksum, crc);
      return damaged(text);
    }
    Entry entry;
    const std::string problem = decode_entry(row.n_tokens, dir, names, options.dtype, bytes.data(),
                                             row.payload_offset, row.payload_count, entry);
    if (!problem.empty()) return damaged(problem);
    result.status = EntryStatus::kValid;
    result.entry = std::move(entry);
    return result;
  }

  // Overwrites the key of every row known to be damaged that no later row replaced (an
  // unreadable key, or a current entry found damaged this session) with kDroppedKey.
  std::vector<DamagedEntry> drop_damaged() {
    HYPIC_REQUIRE(mode == OpenMode::kWrite, where() + " is open read-only; cannot drop rows");
    require_open();
    std::vector<std::pair<uint64_t, Hash128>> stale;
    for (const auto& [h, row] : current)
      if (damaged_rows.count(row) != 0) stale.emplace_back(row, h);
    std::vector<DamagedEntry> dropped;
    EntryRow marked;
    auto drop_row = [&](uint64_t row, const std::string& why) {
      dropped.push_back({printable_bytes(key_text(rows[row])), why});
      marked = rows[row];
      std::memcpy(marked.key, kDroppedKey.data(), kKeyChars);
      entries.write_raw(entry_type.id(), {row}, {1}, &marked);
      rows[row] = marked;
      ++dropped_rows;
    };
    try {
      for (uint64_t row : unreadable_key_rows)
        drop_row(row, "index row " + std::to_string(row) + " had a damaged key");
      for (const auto& [row, h] : stale) {
        drop_row(row, "index row " + std::to_string(row) + " held a damaged entry");
        current.erase(h);
        damaged_rows.erase(row);
      }
      unreadable_key_rows.clear();
      if (!dropped.empty()) durable_flush();
    } catch (const Error& e) {
      throw Error(where() + ": dropping damaged index rows failed (" + e.what() +
                  "); they stay reported as damaged");
    }
    return dropped;
  }

  bool put(const std::string& key, const EntryView& entry) {
    HYPIC_REQUIRE(mode == OpenMode::kWrite, where() + " is open read-only; cannot put entries");
    require_open();
    Hash128 h = parse_key_or_throw(key);
    auto found = current.find(h);
    if (found != current.end() && damaged_rows.count(found->second) == 0) return false;
    HYPIC_REQUIRE(entry.n_tokens >= 0, where() + ": entry " + key + " has a negative token count");

    // Lay the arrays out back to back and encode them.
    EntryRow row;
    std::memset(&row, 0, sizeof(row));
    std::memcpy(row.key, key.data(), kKeyChars);
    for (size_t i = 0; i < kKeyChars; ++i)
      row.key[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(row.key[i])));
    row.n_tokens = entry.n_tokens;
    row.payload_offset = committed.payload_end;
    row.payload_count = entry.element_count();
    row.array_first = committed.arrays;
    row.array_count = static_cast<uint32_t>(entry.arrays.size());
    std::vector<unsigned char> bytes(row.payload_count * element_bytes);
    std::vector<ArrayRow> dir;
    dir.reserve(entry.arrays.size());
    std::vector<std::string> added_names;
    uint64_t at = 0;
    for (const auto& [name, tensor] : entry.arrays) {
      HYPIC_REQUIRE(!name.empty() && name.size() <= kMaxNameChars,
                    where() + ": array name '" + name + "' must have 1 to " +
                        std::to_string(kMaxNameChars) + " characters");
      const int rank = static_cast<int>(tensor.shape.size());
      HYPIC_REQUIRE(rank <= static_cast<int>(kMaxRank),
                    where() + ": array '" + name + "' has rank " + std::to_string(rank) +
                        "; at most " + std::to_string(kMaxRank) + " is supported");
      ArrayRow a;
      std::memset(&a, 0, sizeof(a));
      a.name_id = name_id_for(name, added_names);
      a.rank = static_cast<uint32_t>(rank);
      for (int d = 0; d < rank; ++d) a.shape[d] = tensor.shape[static_cast<size_t>(d)];
      a.offset = row.payload_offset + at;
      encode(options.dtype, tensor.data, static_cast<size_t>(tensor.numel()),
             bytes.data() + at * element_bytes);
      stats::count_entry_copy(static_cast<uint64_t>(tensor.numel()) * element_bytes);
      at += static_cast<uint64_t>(tensor.numel());
      dir.push_back(a);
    }
    std::vector<std::string> all_names = names;
    all_names.insert(all_names.end(), added_names.begin(), added_names.end());
    row.checksum = entry_checksum(bytes.data(), bytes.size(), row, dir, all_names);

    CommitRecord next = committed;
    next.generation += 1;
    next.entries += 1;
    next.arrays += dir.size();
    next.names += added_names.size();
    next.payload_end += row.payload_count;
    next.crc = record_crc(next);
    // Checked before writing: a write that fails inside HDF5 (EFBIG, ENOSPC) leaves its caches
    // dirty, and closing the file then fails again. The margin covers a new payload chunk and
    // the metadata HDF5 may add.
    const uint64_t need = bytes.size() + dir.size() * sizeof(ArrayRow) + sizeof(row) +
                          kPayloadChunk * element_bytes + (256u << 10);
    space_problem = diagnose_space(need);
    if (!space_problem.empty())
      throw Error(where() + ": writing entry " + key + " failed: " + space_problem + "; the " +
                  std::to_string(committed.entries) + " entries committed before it are intact");
    try {
      // 1. Everything the entry needs, past the committed ends.
      if (!added_names.empty()) {
        std::vector<char> raw(added_names.size() * kMaxNameChars, '\0');
        for (size_t i = 0; i < added_names.size(); ++i)
          std::memcpy(raw.data() + i * kMaxNameChars, added_names[i].data(), added_names[i].size());
        ensure_extent(names_ds, next.names);
        names_ds.write_raw(name_type_.id(), {committed.names}, {added_names.size()}, raw.data());
      }
      if (!bytes.empty()) {
        ensure_extent(payload, next.payload_end);
        payload.write_raw(payload_mem.id(), {row.payload_offset}, {row.payload_count},
                          bytes.data());
      }
      if (!dir.empty()) {
        ensure_extent(arrays, next.arrays);
        arrays.write_raw(array_type.id(), {committed.arrays}, {dir.size()}, dir.data());
      }
      ensure_extent(entries, next.entries);
      entries.write_raw(entry_type.id(), {committed.entries}, {1}, &row);
      durable_flush();
      // 2. The commit: one small write into the slot not holding the current record.
      write_commit(next);
      durable_flush();
    } catch (const Error& e) {
      failed = e.what();
      close_file();  // drops what HDF5 could not write (store/hdf5.hpp); committed entries stay
      space_problem = diagnose_space(bytes.size() + dir.size() * sizeof(ArrayRow) + sizeof(row));
      if (!space_problem.empty())
        throw Error(where() + ": writing entry " + key + " failed: " + space_problem + " (" +
                    e.what() + "); the " + std::to_string(committed.entries) +
                    " entries committed before it are intact");
      throw Error(where() + ": writing entry " + key + " failed (" + e.what() +
                  "); entries committed before it are intact");
    }
    committed = next;
    for (const std::string& name : added_names) {
      name_ids.emplace(name, static_cast<uint32_t>(names.size()));
      names.push_back(name);
    }
    rows.push_back(row);
    current[h] = rows.size() - 1;
    return true;
  }
};

// ---- construction ----

bool is_new_store_path(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return true;
  require_regular_file(path, "segment store");  // a folder, FIFO or device is no store
  return std::filesystem::file_size(path) == 0;
}

SegmentStore::SegmentStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SegmentStore::SegmentStore(SegmentStore&&) noexcept = default;
SegmentStore& SegmentStore::operator=(SegmentStore&&) noexcept = default;
SegmentStore::~SegmentStore() = default;

SegmentStore SegmentStore::create(const std::string& path, const StoreOptions& options) {
  HYPIC_REQUIRE(!options.model_fingerprint.empty(),
                "segment store '" + path + "': a model fingerprint is required to create it");
  HYPIC_REQUIRE(options.junction >= 0, "segment store '" + path +
                                           "': junction width must be >= 0, got " +
                                           std::to_string(options.junction));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mode = OpenMode::kWrite;
  impl->options = options;
  impl->lock = WriterLock(path, /*create=*/true);
  h5::FileOptions file_options;
  file_options.latest_format = true;
  {
    h5::File file = h5::File::create(path, file_options);
    file.set_string_attribute("format", kFormatName);
    file.set_int_attribute("format_version", kStoreFormatVersion);
    file.set_string_attribute("model_fingerprint", options.model_fingerprint);
    file.set_int_attribute("junction", options.junction);
    file.set_string_attribute("dtype", dtype_name(options.dtype));
    file.set_string_attribute("checksum", "crc32c");
    file.set_string_attribute("key_hash", "fnv1a-128");
    file.set_string_attribute("created_by", std::string("hypic ") + HYPIC_VERSION);
    file.set_int_attribute("header_crc32c", header_crc(file));

    h5::DatasetOptions blob;
    blob.chunk = {kPayloadChunk};
    blob.max_shape = {h5::kUnlimited};
    h5::Handle stored = payload_file_type(options.dtype);
    h5::Dataset payload = file.create_dataset("payload", stored.id(), {0}, blob);
    payload.set_string_attribute(
        "encoding", options.dtype == DType::BF16
                        ? "bfloat16 bits: float32 = uint32(value) << 16"
                        : (options.dtype == DType::F16 ? "IEEE float16" : "IEEE float32"));
    h5::DatasetOptions table = blob;
    table.chunk = {kEntryChunk};
    h5::Handle entry_type = entry_row_type();
    file.create_dataset("entries", entry_type.id(), {0}, table);
    table.chunk = {kArrayChunk};
    h5::Handle array_type = array_row_type();
    file.create_dataset("arrays", array_type.id(), {0}, table);
    table.chunk = {kNameChunk};
    h5::Handle names = name_type();
    file.create_dataset("array_names", names.id(), {0}, table);
    h5::DatasetOptions fixed;
    fixed.allocate_early = true;
    h5::Dataset commit = file.create_dataset<uint64_t>("commit", {2, 8}, fixed);
    CommitRecord empty{};
    empty.crc = record_crc(empty);
    CommitRecord slots[2] = {empty, empty};
    slots[1].generation = 0;
    commit.write(reinterpret_cast<const uint64_t*>(slots));
    file.flush();
    file.start_swmr_write();
    impl->file = std::move(file);
  }
  impl->open_datasets();
  impl->committed = CommitRecord{};
  load_shards(*impl);  // a manifest left beside the path: its shards belong to this store
  return SegmentStore(std::move(impl));
}

std::unique_ptr<SegmentStore::Impl> SegmentStore::open_impl(const std::string& path,
                                                            OpenMode mode) {
  std::unique_ptr<Impl> impl = open_file(path, mode);
  load_shards(*impl);
  return impl;
}

void SegmentStore::load_shards(Impl& main) {
  main.shards.clear();
  for (const std::string& shard : read_shard_manifest(main.path)) {
    Impl::Shard s;
    s.path = shard;
    try {
      HYPIC_REQUIRE(std::filesystem::exists(shard),
                    "it is named in " + shard_manifest_path(main.path) + " but absent");
      s.impl = open_file(shard, OpenMode::kRead);
      const StoreOptions& o = s.impl->options;
      HYPIC_REQUIRE(o.model_fingerprint == main.options.model_fingerprint &&
                        o.junction == main.options.junction && o.dtype == main.options.dtype,
                    "it was made for model '" + printable_bytes(o.model_fingerprint) +
                        "', junction " + std::to_string(o.junction) + ", " + dtype_name(o.dtype) +
                        ", not the store's '" + printable_bytes(main.options.model_fingerprint) +
                        "', junction " + std::to_string(main.options.junction) + ", " +
                        dtype_name(main.options.dtype));
    } catch (const Error& e) {
      s.impl.reset();
      s.problem = e.what();
    }
    main.shards.push_back(std::move(s));
  }
}

std::unique_ptr<SegmentStore::Impl> SegmentStore::open_file(const std::string& path,
                                                            OpenMode mode) {
  HYPIC_REQUIRE(std::filesystem::exists(path), "segment store '" + path + "' does not exist");
  // Checked before anything opens it: opening a FIFO blocks until a writer comes, and HDF5
  // opening an empty file for writing leaves a stub behind that is then no store.
  require_regular_file(path, "segment store");
  HYPIC_REQUIRE(std::filesystem::file_size(path) > 0,
                "segment store '" + path +
                    "' is an empty file (0 bytes), not a segment store; warmup or serve makes "
                    "a new store there");
  // hypic writes every store with the latest HDF5 format (superblock version 3, which SWMR
  // needs); HDF5's refusal of an older superblock means some other program's HDF5 file.
  auto foreign = [&path](const Error& e) {
    const std::string what = e.what();
    if (what.find("superblock version for SWMR") == std::string::npos) throw e;
    throw Error("'" + path +
                "' is not a hypic segment store (an HDF5 file of an older format than hypic "
                "writes: another program's file?)");
  };
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mode = mode;
  h5::FileOptions file_options;
  file_options.latest_format = true;
  if (mode == OpenMode::kWrite) {
    impl->lock = WriterLock(path, /*create=*/false);
    // We hold the writer lock, so flags a killed writer left behind are stale: clear them.
    file_options.clear_status_flags = true;
    // Nobody else changes the file while we hold the lock, so a metadata checksum that fails
    // is damage: re-reading it (SWMR writing retries 100 times, pausing between) cannot help.
    file_options.swmr_write = true;
    file_options.metadata_read_attempts = 1;
    LengthRepair repair;
    try {
      impl->file = open_for_writing_repairing_length(path, file_options, repair);
    } catch (const Error& e) {
      foreign(e);
    }
    try {
      impl->read_attributes();
      impl->open_datasets();
      impl->load();
    } catch (const Error& e) {
      if (!repair.extended) throw;
      const WriterLock keep = std::move(impl->lock);
      impl.reset();  // closes every HDF5 object and the file before its bytes are put back
      throw Error(repair.undo(e.what()));
    }
    return impl;
  }
  file_options.swmr_read = true;
  // SWMR readers re-read metadata whose checksum fails (100 times by default, pausing
  // longer each time) in case a writer is changing it; with no writer that only delays
  // the error on a damaged file by many minutes.
  if (!writer_holds_lock(path)) file_options.metadata_read_attempts = 1;
  try {
    impl->file = open_for_reading(path, file_options);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("already open") == std::string::npos) foreign(e);
    throw Error(what +
                " (if a writer was killed while opening this store, opening it once for "
                "writing, e.g. resuming the warm-up, repairs it; so does `h5clear -s " +
                path + "`)");
  }
  impl->read_attributes();
  impl->open_datasets();
  impl->load();
  return impl;
}

SegmentStore SegmentStore::open_any(const std::string& path, OpenMode mode) {
  return SegmentStore(open_impl(path, mode));
}

SegmentStore SegmentStore::open(const std::string& path, const std::string& model_fingerprint,
                                int junction, OpenMode mode) {
  auto impl = open_impl(path, mode);
  const StoreOptions& found = impl->options;
  HYPIC_REQUIRE(found.model_fingerprint == model_fingerprint,
                "segment store '" + path + "' was made for model fingerprint '" +
                    printable_bytes(found.model_fingerprint) + "' but this run expects '" +
                    printable_bytes(model_fingerprint) +
                    "'; use a store warmed with this model or a new --store path");
  // The recorded junction is a width (>= 0) or -round(share * 10000) (pic::JunctionSpec):
  // say which, in the form --junction takes.
  auto junction_flag = [](int code) {
    if (code >= 0) return std::to_string(code);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", -code / 10000.0);
    return std::string(buf);
  };
  auto junction_words = [&](int code) {
    return code >= 0 ? "junction width " + junction_flag(code)
                     : "a junction share of " + junction_flag(code);
  };
  HYPIC_REQUIRE(found.junction == junction,
                "segment store '" + path + "' was made with " + junction_words(found.junction) +
                    " but this run asks for " + junction_words(junction) + "; pass --junction " +
                    junction_flag(found.junction) + " or use a new --store path");
  return SegmentStore(std::move(impl));
}

SegmentStore SegmentStore::open_or_create(const std::string& path, const StoreOptions& options) {
  if (is_new_store_path(path)) return create(path, options);
  SegmentStore store = open(path, options.model_fingerprint, options.junction, OpenMode::kWrite);
  HYPIC_REQUIRE(store.dtype() == options.dtype,
                "segment store '" + path + "' stores " + dtype_name(store.dtype()) +
                    " but this run asks for " + dtype_name(options.dtype) + "; pass --dtype " +
                    dtype_name(store.dtype()) + " or use a new --store path");
  store.impl_->options.sync_to_disk = options.sync_to_disk;
  return store;
}

// ---- queries ----

const std::string& SegmentStore::path() const {
  return impl_->path;
}
const std::string& SegmentStore::model_fingerprint() const {
  return impl_->options.model_fingerprint;
}
int SegmentStore::junction() const {
  return impl_->options.junction;
}
DType SegmentStore::dtype() const {
  return impl_->options.dtype;
}
bool SegmentStore::writable() const {
  return impl_->mode == OpenMode::kWrite;
}

std::string SegmentStore::key_for(const std::vector<int32_t>& tokens) const {
  return entry_key(impl_->options.model_fingerprint, tokens, impl_->options.junction);
}

bool SegmentStore::contains(const std::string& key) const {
  Hash128 h;
  if (!parse_hex128(key, h)) return false;
  if (impl_->holds_valid(h)) return true;
  for (const Impl::Shard& s : impl_->shards)
    if (s.impl && s.impl->holds_valid(h)) return true;
  return false;
}

uint64_t SegmentStore::size() const {
  uint64_t n = impl_->current.size();
  for (size_t i = 0; i < impl_->shards.size(); ++i) {
    if (!impl_->shards[i].impl) continue;
    for (const auto& [h, row] : impl_->shards[i].impl->current) {
      bool earlier = impl_->current.count(h) != 0;
      for (size_t j = 0; j < i && !earlier; ++j)
        earlier = impl_->shards[j].impl && impl_->shards[j].impl->current.count(h) != 0;
      if (!earlier) ++n;
    }
  }
  return n;
}

std::vector<std::string> SegmentStore::keys() const {
  std::vector<std::string> out;
  std::unordered_set<Hash128, Hash128Hasher> seen;
  auto add_file = [&](const Impl& f) {
    std::vector<uint64_t> order;
    order.reserve(f.current.size());
    for (const auto& [h, row] : f.current)
      if (seen.insert(h).second) order.push_back(row);
    std::sort(order.begin(), order.end());
    for (uint64_t row : order) out.push_back(key_text(f.rows[row]));
  };
  add_file(*impl_);
  for (const Impl::Shard& s : impl_->shards)
    if (s.impl) add_file(*s.impl);
  return out;
}

std::vector<std::string> SegmentStore::shard_paths() const {
  std::vector<std::string> out;
  for (const Impl::Shard& s : impl_->shards) out.push_back(s.path);
  return out;
}

std::string SegmentStore::holder(const std::string& key) const {
  Hash128 h;
  if (!parse_hex128(key, h)) return "";
  if (impl_->holds_valid(h)) return impl_->path;
  for (const Impl::Shard& s : impl_->shards)
    if (s.impl && s.impl->holds_valid(h)) return s.path;
  return "";
}

std::vector<ShardProblem> SegmentStore::shard_problems() const {
  std::vector<ShardProblem> out;
  for (const Impl::Shard& s : impl_->shards)
    if (!s.impl) out.push_back({s.path, s.problem});
  return out;
}

void SegmentStore::close_shards() {
  impl_->shards.clear();
}

void SegmentStore::reload_shards() {
  impl_->shards.clear();
  load_shards(*impl_);
}

bool SegmentStore::put(const std::string& key, const Entry& entry) {
  return put(key, view_of(entry));
}

bool SegmentStore::put(const std::string& key, const EntryView& entry) {
  Hash128 h;
  if (parse_hex128(key, h))  // a valid copy in a shard counts as there
    for (const Impl::Shard& s : impl_->shards)
      if (s.impl && s.impl->holds_valid(h)) return false;
  return impl_->put(key, entry);
}

ReadResult SegmentStore::read(const std::string& key) {
  impl_->require_open();
  const Hash128 h = parse_key_or_throw(key);
  // The first valid copy in lookup order; else the first damaged one, naming its file.
  ReadResult damaged;
  for (const auto& [file, words] : impl_->files()) {
    auto found = file->current.find(h);
    if (found == file->current.end()) continue;
    ReadResult r = file->read_row(found->second);
    if (r.status == EntryStatus::kValid) return r;
    if (damaged.status != EntryStatus::kDamaged) {
      damaged = std::move(r);
      damaged.problem = words + damaged.problem;
    }
  }
  return damaged;
}

std::optional<Entry> SegmentStore::get(const std::string& key) {
  ReadResult r = read(key);
  if (r.status == EntryStatus::kDamaged) {
    throw DamagedEntryError(key, impl_->where() + ": entry " + key + " is damaged (" + r.problem +
                                     "); recompute it and put it again");
  }
  return std::move(r.entry);
}

std::string VerifyReport::first_problem() const {
  if (!header_problem.empty()) return header_problem;
  if (!shard_problems.empty())
    return shard_problems.front() +
           (shard_problems.size() > 1
                ? " (and " + std::to_string(shard_problems.size() - 1) + " more shards)"
                : "");
  if (damaged.empty()) return "";
  return std::to_string(damaged.size()) + " damaged entr" + (damaged.size() == 1 ? "y" : "ies") +
         " (first " + damaged.front().key + ": " + damaged.front().problem + ")";
}

namespace {
VerifyReport verify_file(SegmentStore::Impl& file);
}

VerifyReport SegmentStore::verify() {
  impl_->require_open();
  VerifyReport report = verify_file(*impl_);
  if (impl_->shards.empty()) return report;
  // Each shard alone, then one logical report: a key damaged in one file but valid in another
  // is served from the valid copy, so it counts as superseded, not damaged.
  std::vector<std::pair<VerifyReport, std::string>> parts;
  for (Impl::Shard& s : impl_->shards) {
    ++report.shards;
    if (!s.impl) {
      report.shard_problems.push_back("shard " + s.path + ": " + s.problem);
      continue;
    }
    VerifyReport v = verify_file(*s.impl);
    if (!v.header_problem.empty())
      report.shard_problems.push_back("shard " + s.path + ": " + v.header_problem);
    parts.emplace_back(std::move(v), "in shard " + s.path + ": ");
  }
  std::unordered_set<Hash128, Hash128Hasher> valid;
  for (const auto& [file, words] : impl_->files())
    for (const auto& [h, row] : file->current)
      if (file->damaged_rows.count(row) == 0) valid.insert(h);
  std::vector<DamagedEntry> damaged;
  std::unordered_set<std::string> named;
  auto keep = [&](const DamagedEntry& d, const std::string& words) {
    Hash128 h;
    if (parse_hex128(d.key, h) && valid.count(h) != 0) return;
    if (!named.insert(d.key).second) return;
    damaged.push_back({d.key, words + d.problem});
  };
  for (const DamagedEntry& d : report.damaged) keep(d, "");
  for (const auto& [v, words] : parts) {
    for (const DamagedEntry& d : v.damaged) keep(d, words);
    report.entries_checked += v.entries_checked;
    report.superseded_rows += v.superseded_rows;
    report.dropped_rows += v.dropped_rows;
    report.uncommitted_payload_bytes += v.uncommitted_payload_bytes;
  }
  report.damaged = std::move(damaged);
  report.entries_valid = valid.size();
  return report;
}

namespace {
VerifyReport verify_file(SegmentStore::Impl& store_file) {
  SegmentStore::Impl* impl_ = &store_file;
  VerifyReport report;
  std::vector<uint64_t> order;
  for (const auto& [h, row] : impl_->current) order.push_back(row);
  std::sort(order.begin(), order.end());  // file order: sequential reads
  for (uint64_t row : order) {
    ReadResult r = impl_->read_row(row);
    ++report.entries_checked;
    if (r.status == EntryStatus::kValid) {
      ++report.entries_valid;
    } else {
      report.damaged.push_back({key_text(impl_->rows[row]), r.problem});
    }
  }
  for (uint64_t row : impl_->unreadable_key_rows) {
    ++report.entries_checked;
    report.damaged.push_back(
        {printable_bytes(key_text(impl_->rows[row])),
         "index row " + std::to_string(row) + " is damaged: its key is not 32 hex digits"});
  }
  report.superseded_rows = impl_->rows.size() - impl_->current.size() -
                           impl_->unreadable_key_rows.size() - impl_->dropped_rows;
  report.dropped_rows = impl_->dropped_rows;
  const h5::File& file = impl_->file;
  if (file.has_attribute("header_crc32c")) {
    const uint32_t stored = static_cast<uint32_t>(file.int_attribute("header_crc32c"));
    const uint32_t computed = header_crc(file);
    if (stored != computed) {
      char text[200];
      std::snprintf(text, sizeof text,
                    "its header attributes (model fingerprint, junction, dtype, format) fail "
                    "their checksum (stored %08x, computed %08x)",
                    stored, computed);
      report.header_problem = text;
    }
  } else {
    report.header_unchecked = true;  // made before stores carried header_crc32c
  }
  uint64_t extent = impl_->payload.shape().at(0);
  report.uncommitted_payload_bytes =
      (extent - std::min(extent, impl_->committed.payload_end)) * impl_->element_bytes;
  return report;
}
}  // namespace

namespace {
// Adds the current entries of one file that `seen` does not hold yet to `st` and `by_kind`.
void add_file_stats(const SegmentStore::Impl& s, std::unordered_set<Hash128, Hash128Hasher>& seen,
                    StoreStats& st, std::map<std::string, uint64_t>& by_kind);
}  // namespace

StoreStats SegmentStore::stats() const {
  impl_->require_open();
  const Impl& s = *impl_;
  StoreStats st;
  st.model_fingerprint = s.options.model_fingerprint;
  st.junction = s.options.junction;
  st.dtype = s.options.dtype;
  st.format_version = s.format_version;
  std::unordered_set<Hash128, Hash128Hasher> seen;
  std::map<std::string, uint64_t> by_kind;
  add_file_stats(s, seen, st, by_kind);
  for (const Impl::Shard& shard : s.shards) {
    if (!shard.impl) continue;
    ++st.shards;
    add_file_stats(*shard.impl, seen, st, by_kind);
  }
  st.bytes_by_kind.assign(by_kind.begin(), by_kind.end());
  return st;
}

namespace {
void add_file_stats(const SegmentStore::Impl& s, std::unordered_set<Hash128, Hash128Hasher>& seen,
                    StoreStats& st, std::map<std::string, uint64_t>& by_kind) {
  st.file_bytes += s.file.size_bytes();
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // current entries' directory rows
  for (const auto& [h, row] : s.current) {
    if (!seen.insert(h).second) continue;
    ++st.entries;
    const EntryRow& r = s.rows[row];
    st.tokens += static_cast<uint64_t>(std::max<int64_t>(r.n_tokens, 0));
    st.payload_bytes += r.payload_count * s.element_bytes;
    if (r.array_count > 0) ranges.emplace_back(r.array_first, r.array_count);
  }
  std::sort(ranges.begin(), ranges.end());
  // One pass over /arrays in large blocks, counting only rows of current entries.
  std::vector<std::string> kind_of(s.names.size());
  for (size_t i = 0; i < s.names.size(); ++i) kind_of[i] = array_kind(s.names[i]);
  std::vector<ArrayRow> block;
  size_t next = 0;
  uint64_t limit = std::min<uint64_t>(s.committed.arrays, s.arrays.shape().at(0));
  for (uint64_t start = 0; start < limit && next < ranges.size(); start += kScanBlock) {
    uint64_t count = std::min<uint64_t>(kScanBlock, limit - start);
    if (ranges[next].first >= start + count) continue;
    block.resize(count);
    s.arrays.read_raw(s.array_type.id(), {start}, {count}, block.data());
    for (uint64_t i = start; i < start + count; ++i) {
      while (next < ranges.size() && ranges[next].first + ranges[next].second <= i) ++next;
      if (next == ranges.size()) break;
      if (i < ranges[next].first) continue;
      const ArrayRow& a = block[i - start];
      uint64_t n = 1;
      for (uint32_t d = 0; d < std::min<uint32_t>(a.rank, kMaxRank); ++d)
        n *= static_cast<uint64_t>(std::max<int64_t>(a.shape[d], 0));
      ++st.arrays;
      const std::string& kind = a.name_id < kind_of.size() ? kind_of[a.name_id] : "?";
      by_kind[kind] += n * s.element_bytes;
    }
  }
}
}  // namespace

const std::string& SegmentStore::space_problem() const {
  return impl_->space_problem;
}

std::vector<DamagedEntry> SegmentStore::drop_damaged() {
  return impl_->drop_damaged();
}

void SegmentStore::close() {
  if (!impl_) return;
  impl_->shards.clear();
  impl_->payload = h5::Dataset();
  impl_->entries = h5::Dataset();
  impl_->arrays = h5::Dataset();
  impl_->names_ds = h5::Dataset();
  impl_->commit = h5::Dataset();
  if (impl_->file.valid()) impl_->file.close();
  impl_->lock.release();
}

void SegmentStore::reopen_for_reading() {
  const std::string path = impl_->path;
  impl_.reset();  // every HDF5 object and the file closed, the writer lock released
  impl_ = open_impl(path, OpenMode::kRead);
}

MergeReport merge_stores(SegmentStore& destination, const std::vector<std::string>& sources) {
  HYPIC_REQUIRE(destination.writable(),
                "merge: destination store '" + destination.path() + "' must be open for writing");
  MergeReport report;
  for (const std::string& source_path : sources) {
    SegmentStore source = SegmentStore::open(source_path, destination.model_fingerprint(),
                                             destination.junction(), OpenMode::kRead);
    for (const std::string& key : source.keys()) {
      if (destination.contains(key)) {
        ++report.already_present;
        continue;
      }
      ReadResult r = source.read(key);
      if (r.status != EntryStatus::kValid) {
        report.skipped_damaged.push_back({key, source_path + ": " + r.problem});
        continue;
      }
      destination.put(key, *r.entry);
      ++report.copied;
    }
  }
  return report;
}

}  // namespace hypic::store
