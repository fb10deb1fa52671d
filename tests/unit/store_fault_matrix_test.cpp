// The store fault matrix (issue #17): damages applied to a tiny store (superblock fields,
// commit records, index keys and rows, entry payloads, the header attributes, truncations at
// several sizes). For each: `hypic inspect --verify` ends within a bound, and when it fails it
// says so in one line naming the file; a reader never returns a damaged entry (every entry it
// returns is bit for bit the one that was put), undamaged entries are still served; a writer
// either refuses the file (leaving it as it was) or, after recomputing what is missing and
// dropping what cannot be recomputed, leaves a store that verifies. Then the same through the
// binary: `warmup --repair` clears a damaged key for good and `store merge` accepts the result.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "store/entry.hpp"
#include "store/segment_store.hpp"
#include "temp_path.hpp"

namespace {
namespace store_fault_matrix_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using hypic::Tensor;
using namespace hypic::store;
using test_util::TempDir;

constexpr int kEntries = 4;
constexpr int kBoundSeconds = 20;  // a command still running then counts as a hang
const std::string kFingerprint = "fault-matrix-model-fingerprint";

std::vector<int32_t> tokens_for(int i) {
  return {i, i + 1, i + 2};
}
std::string key_for(int i) {
  return entry_key(kFingerprint, tokens_for(i), 8);
}

// Values that appear nowhere else in the file, so a test can find an entry's bytes.
Entry entry_for(int i) {
  Entry e;
  e.n_tokens = 3 + i;
  Tensor k({3 + i, 4}), s({2, 2});
  for (int64_t j = 0; j < k.numel(); ++j) k.data()[j] = 1000.0f * (i + 1) + j + 0.25f;
  for (int64_t j = 0; j < s.numel(); ++j) s.data()[j] = -10.0f * (i + 1) - j - 0.5f;
  e.arrays.emplace("attn/0/K", std::move(k));
  e.arrays.emplace("linear/1/S", std::move(s));
  return e;
}

bool same_entry(const Entry& a, const Entry& b) {
  if (a.n_tokens != b.n_tokens || a.arrays.size() != b.arrays.size()) return false;
  for (const auto& [name, t] : a.arrays) {
    auto it = b.arrays.find(name);
    if (it == b.arrays.end() || it->second.shape() != t.shape() ||
        std::memcmp(t.data(), it->second.data(), t.bytes()) != 0)
      return false;
  }
  return true;
}

std::string read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
void write_bytes(const std::string& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// File offset of the contiguous /commit dataset (its two slots of 8 u64 words).
uint64_t commit_offset(const std::string& path) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, "commit", H5P_DEFAULT);
  const haddr_t at = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return at;
}

size_t find_once(const std::string& bytes, const std::string& needle) {
  const size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos);
  EXPECT_EQ(bytes.find(needle, at + 1), std::string::npos) << "ambiguous";
  return at;
}

struct Damage {
  std::string name;
  std::string bytes;
  std::vector<int> damaged;  // entries whose bytes it hits (a reader must not return them)
  bool header = false;       // a header attribute: verify must fail, entries are intact
};

class StoreFaultMatrix : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic-fault-matrix-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "pristine.h5").string();
    StoreOptions o;
    o.model_fingerprint = kFingerprint;
    o.junction = 8;
    o.dtype = hypic::DType::F32;
    SegmentStore st = SegmentStore::create(path_, o);
    for (int i = 0; i < kEntries; ++i) st.put(key_for(i), entry_for(i));
    st.close();
    pristine_ = read_bytes(path_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::vector<Damage> damages() {
    std::vector<Damage> out;
    auto with = [&](const std::string& name, std::vector<size_t> offsets, std::vector<int> hit,
                    unsigned char mask = 0x5a) {
      std::string b = pristine_;
      for (size_t at : offsets) b[at] = static_cast<char>(b[at] ^ mask);
      out.push_back({name, b, hit});
    };
    // Superblock: end-of-file address, root group address, checksum.
    for (size_t at : {28u, 36u, 44u}) with("superblock byte " + std::to_string(at), {at}, {});
    // Commit records: the newest one (the store falls back to the one before: the last entry
    // is then simply missing), and both.
    const uint64_t commit = commit_offset(path_);
    const size_t newest = commit + 64 * (kEntries % 2) + 8;  // generation kEntries, word 1
    const size_t older = commit + 64 * ((kEntries + 1) % 2) + 8;
    with("newest commit record", {newest}, {});
    with("both commit records", {newest, older}, {});
    // Index rows: a key byte made unprintable, a key digit changed to another hex digit, the
    // token count and the payload offset of a row.
    const size_t key1 = find_once(pristine_, key_for(1));
    {
      std::string b = pristine_;
      b[key1 + 5] = '\x01';
      out.push_back({"index key byte made \\x01", b, {1}});
    }
    const size_t key2 = find_once(pristine_, key_for(2));
    {
      std::string b = pristine_;
      b[key2 + 7] = b[key2 + 7] == '0' ? '1' : '0';
      out.push_back({"index key hex digit changed", b, {2}});
    }
    const size_t key3 = find_once(pristine_, key_for(3));
    with("index row token count", {key3 + 32}, {3});
    const size_t key0 = find_once(pristine_, key_for(0));
    with("index row payload offset", {key0 + 40}, {0});
    // Entry payloads: a byte of entry 2's first value and of entry 0's last array.
    float v = 3000.25f;
    with("entry payload", {find_once(pristine_, std::string(reinterpret_cast<char*>(&v), 4)) + 1},
         {2});
    v = -10.5f;
    with("entry payload (second array)",
         {find_once(pristine_, std::string(reinterpret_cast<char*>(&v), 4)) + 2}, {0});
    // The model fingerprint attribute.
    {
      std::string b = pristine_;
      b[find_once(pristine_, kFingerprint) + 3] ^= 0x01;
      out.push_back({"model_fingerprint attribute", b, {}, true});
    }
    // Truncations.
    for (size_t size : {size_t{100}, size_t{2048}, pristine_.size() / 2, pristine_.size() - 1})
      out.push_back({"truncated at " + std::to_string(size), pristine_.substr(0, size), {}});
    return out;
  }

  static fs::path dir_;
  static std::string path_, pristine_;
};
fs::path StoreFaultMatrix::dir_;
std::string StoreFaultMatrix::path_, StoreFaultMatrix::pristine_;

TEST_F(StoreFaultMatrix, EveryDamageEndsInTimeServesNothingDamagedAndRepairs) {
  TempDir tmp("hypic-fault-matrix");
  const std::string file = tmp.file("damaged.h5");
  for (const Damage& d : damages()) {
    SCOPED_TRACE(d.name);
    write_bytes(file, d.bytes);

    // 1. The command ends within the bound; a failure is one line naming the file.
    const auto start = std::chrono::steady_clock::now();
    const CliRun r =
        cli_test::run_shell(tmp.file(""), "timeout -s KILL " + std::to_string(kBoundSeconds) + " " +
                                              HYPIC_BINARY + " inspect --verify --store " + file);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, kBoundSeconds - 1) << "still running after the bound";
    if (!d.damaged.empty() || d.header) {
      EXPECT_NE(r.code, 0) << r.out;
    }
    if (r.code != 0) {
      EXPECT_EQ(r.err.rfind("hypic: error: ", 0), 0u) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_NE(r.err.find(file), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find('\x01'), std::string::npos) << "a raw damaged byte: " << r.err;
    }
    if (d.name.find("\\x01") != std::string::npos) {
      EXPECT_NE(r.err.find("\\x01"), std::string::npos) << r.err;
    }
    if (d.header) {
      EXPECT_NE(r.err.find("header attributes"), std::string::npos) << r.err;
    }
    EXPECT_EQ(read_bytes(file), d.bytes) << "a reader changed the file";

    // 2. A reader returns only intact entries; the undamaged ones are all there.
    bool readable = true;
    try {
      SegmentStore st = SegmentStore::open_any(file, OpenMode::kRead);
      for (int i = 0; i < kEntries; ++i) {
        const ReadResult got = st.read(key_for(i));
        const bool hit = std::count(d.damaged.begin(), d.damaged.end(), i) > 0;
        if (got.status == EntryStatus::kValid) {
          EXPECT_FALSE(hit) << "entry " << i << " was served from damaged bytes";
          EXPECT_TRUE(same_entry(*got.entry, entry_for(i))) << "entry " << i;
        } else if (!hit && d.name.find("commit") == std::string::npos &&
                   d.name.find("truncated") == std::string::npos) {
          ADD_FAILURE() << "undamaged entry " << i << " is not served: " << got.problem;
        }
      }
      if (d.header) {
        EXPECT_FALSE(st.verify().header_problem.empty());
      }
    } catch (const hypic::Error& e) {
      readable = false;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
    if (!d.damaged.empty()) {
      EXPECT_TRUE(readable) << "damage to one entry refuses the store";
    }
    if (d.header) continue;  // nothing to recompute: the store is refused for its model

    // 3. A writer refuses the file as it was, or recomputes and drops until it verifies.
    try {
      SegmentStore st = SegmentStore::open(file, kFingerprint, 8, OpenMode::kWrite);
      (void)st.verify();
      for (int i = 0; i < kEntries; ++i) {
        if (!st.contains(key_for(i))) st.put(key_for(i), entry_for(i));
      }
      st.drop_damaged();
      st.close();
      SegmentStore again = SegmentStore::open_any(file, OpenMode::kRead);
      const VerifyReport v = again.verify();
      EXPECT_TRUE(v.ok()) << v.first_problem();
      EXPECT_EQ(v.entries_valid, static_cast<uint64_t>(kEntries));
      for (int i = 0; i < kEntries; ++i) {
        const ReadResult got = again.read(key_for(i));
        ASSERT_EQ(got.status, EntryStatus::kValid) << i;
        EXPECT_TRUE(same_entry(*got.entry, entry_for(i))) << i;
      }
    } catch (const hypic::Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      EXPECT_EQ(read_bytes(file), d.bytes) << "a refusing writer changed the file: " << e.what();
    }
  }
}

// Through the binary: a damaged key byte fails --verify (printed escaped) until `warmup
// --repair`, which recomputes the entry and drops the stale row; `store merge` then takes it.
TEST(StoreRepairCli, RepairClearsADamagedKeyAndMergeAcceptsTheStore) {
  TempDir tmp("hypic-repair-cli");
  auto hypic = [&](const std::string& args) {
    return cli_test::run_shell(tmp.file(""),
                               "cd " + tmp.file("") + " && " + HYPIC_BINARY + " " + args);
  };
  ASSERT_EQ(hypic("model init --arch qwen3_5 --preset tiny --seed 2 --out model").code, 0);
  std::ofstream(tmp.file("corpus.jsonl")) << R"({"id": "a", "tokens": [1, 2, 3, 4, 5]})"
                                             "\n"
                                             R"({"id": "b", "tokens": [6, 7, 8, 9]})"
                                             "\n";
  const std::string warm = "warmup --model model --corpus corpus.jsonl --store s.h5";
  CliRun r = hypic(warm);
  ASSERT_EQ(r.code, 0) << r.err;
  // Find the key of a row (32 hex digits followed by a small token count) and damage it.
  std::string bytes = read_bytes(tmp.file("s.h5"));
  size_t at = std::string::npos;
  for (size_t i = 0; i + 40 < bytes.size() && at == std::string::npos; ++i) {
    bool hex = true;
    for (size_t j = 0; j < 32 && hex; ++j)
      hex = std::isxdigit(static_cast<unsigned char>(bytes[i + j])) &&
            !std::isupper(static_cast<unsigned char>(bytes[i + j]));
    if (hex && bytes[i + 32] > 0 && bytes[i + 32] < 64 &&
        bytes.compare(i + 33, 7, std::string(7, '\0')) == 0)
      at = i;
  }
  ASSERT_NE(at, std::string::npos);
  bytes[at + 3] = '\x07';
  write_bytes(tmp.file("s.h5"), bytes);
  r = hypic("inspect --verify --store s.h5");
  cli_test::expect_one_line_error(r, "damaged");
  EXPECT_NE(r.err.find("\\x07"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x07'), std::string::npos) << r.err;
  EXPECT_NE(hypic("store merge --out m.h5 s.h5").code, 0);  // a damaged shard is refused

  r = hypic(warm + " --repair");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1 computed"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("dropped 1 damaged index row"), std::string::npos) << r.err;
  r = hypic("inspect --verify --store s.h5");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 valid, 0 damaged"), std::string::npos) << r.out;
  r = hypic("store merge --out m.h5 s.h5");
  EXPECT_EQ(r.code, 0) << r.err;
  r = hypic(warm);
  EXPECT_NE(r.out.find("0 computed, 2 already in the store"), std::string::npos) << r.out;
}

}  // namespace store_fault_matrix_test
}  // namespace

namespace {
namespace store_fault_matrix_test {

// A warm-up that reaches the file-size limit ends with one line saying so and how much the
// rest needs (instead of dying by SIGXFSZ); the entries committed before stay and a rerun
// without the limit computes only the rest. The limit is put on the running process with
// prlimit once it prints its first progress line (after its first entry, about 0.1 MB into
// the 2.4 MB store): `ulimit -f` before the start would also limit the MPI runtime's own
// files. The process is stopped while prlimit runs, so the limit is in place long before
// the store reaches it however fast the machine is (polling the store's size raced a fast
// warm-up to its end).
TEST(StoreSpaceCli, FileSizeLimitEndsAWarmupWithOneLineAndKeepsTheEntries) {
  if (std::system("command -v prlimit > /dev/null") != 0) GTEST_SKIP() << "no prlimit here";
  TempDir tmp("hypic-space-cli");
  auto in_dir = [&](const std::string& command) {
    return cli_test::run_shell(tmp.file(""), "cd " + tmp.file("") + " && " + command);
  };
  const std::string bin = HYPIC_BINARY;
  ASSERT_EQ(in_dir(bin + " model init --arch qwen3_5 --preset tiny --seed 2 --out model").code, 0);
  {
    std::ofstream corpus(tmp.file("corpus.jsonl"));
    for (int d = 0; d < 80; ++d) {
      std::vector<int> t(90);
      for (int j = 0; j < 90; ++j) t[static_cast<size_t>(j)] = (d * 131 + j * 17) % 512;
      corpus << nlohmann::json({{"id", "d" + std::to_string(d)}, {"tokens", t}}).dump() << "\n";
    }
  }
  const std::string warm = bin + " warmup --model model --corpus corpus.jsonl --store s.h5";
  const CliRun limited =
      in_dir("bash -c 'mkfifo w.fifo; " + warm +
             " > w.out 2> w.fifo & pid=$!; "
             "{ IFS= read -r first; kill -STOP $pid; prlimit --fsize=1100000 --pid $pid; "
             "kill -CONT $pid; printf \"%s\\n\" \"$first\"; cat; } < w.fifo > w.err; "
             "wait $pid; echo $? > w.rc'");
  ASSERT_EQ(limited.code, 0) << limited.err;
  const std::string err = read_bytes(tmp.file("w.err"));
  std::string progress_free;  // the one error line, without the progress lines
  std::istringstream lines(err);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind("warmup: ", 0) != 0) progress_free += l + "\n";
  EXPECT_EQ(read_bytes(tmp.file("w.rc")), "1\n") << err;
  EXPECT_EQ(progress_free.rfind("hypic: error: ", 0), 0u) << err;
  EXPECT_EQ(std::count(progress_free.begin(), progress_free.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("the file-size limit of this process (ulimit -f) of 1.0 MiB was reached"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("entries committed before it are intact"), std::string::npos) << err;
  EXPECT_NE(err.find("need about"), std::string::npos) << err;
  CliRun r = in_dir(warm);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find(" 0 already in the store"), std::string::npos) << "kept nothing: " << r.out;
  EXPECT_NE(r.out.find("80 entries"), std::string::npos) << r.out;
  r = in_dir(bin + " inspect --verify --store s.h5");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("80 valid, 0 damaged"), std::string::npos) << r.out;
}

}  // namespace store_fault_matrix_test
}  // namespace
