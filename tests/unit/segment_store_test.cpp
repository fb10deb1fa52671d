// The segment store: checksums and keys, dtype conversions, round trips, refusal of a store
// made for another model, damage detection, a writer killed with SIGKILL at random moments,
// a full disk, merging shards, and the layout measurement behind docs/store-format.md.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "store/checksum.hpp"
#include "store/entry.hpp"
#include "store/hdf5.hpp"
#include "store/segment_store.hpp"

#include "temp_path.hpp"

namespace {
namespace segment_store_test {
using test_util::TempPath;

namespace fs = std::filesystem;
using hypic::Tensor;
using namespace hypic::store;  // NOLINT: test brevity

const char* kFingerprint = "tiny-hybrid@test";

std::vector<int32_t> tokens_for(int i) {
  std::vector<int32_t> t(5 + i % 7);
  for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<int32_t>(1000 * i + 7 * k);
  return t;
}

// A hybrid-model-like entry: linear layers (T, S, conv) and one attention layer (K, V).
// `scale` sets the array sizes; the values are a deterministic function of `seed`.
Entry make_entry(int seed, int scale = 1) {
  std::mt19937 rng(static_cast<unsigned>(seed) * 2654435761u + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Entry e;
  e.n_tokens = 5 + seed % 7;
  auto fill = [&](std::vector<int64_t> shape) {
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = normal(rng);
    return t;
  };
  const int64_t d = 4 * scale;
  for (int layer : {0, 1, 2}) {
    std::string p = "linear/" + std::to_string(layer) + "/";
    e.arrays[p + "T"] = fill({2, d, d});
    e.arrays[p + "S"] = fill({2, d, d});
    e.arrays[p + "conv"] = fill({3, 2 * d});
  }
  e.arrays["attn/3/K"] = fill({e.n_tokens, 2, d});
  e.arrays["attn/3/V"] = fill({e.n_tokens, 2, d});
  return e;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// `expected` after the store's rounding: what a correct read must return exactly.
Entry rounded(const Entry& e, hypic::DType dtype) {
  Entry out = e;
  for (auto& [name, t] : out.arrays) {
    std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
    if (dtype == hypic::DType::F32) continue;
    encode(dtype, t.data(), bits.size(), bits.data());
    decode(dtype, bits.data(), bits.size(), t.data());
  }
  return out;
}

void expect_same(const Entry& want, const Entry& got) {
  ASSERT_EQ(want.n_tokens, got.n_tokens);
  ASSERT_EQ(want.arrays.size(), got.arrays.size());
  for (const auto& [name, t] : want.arrays) EXPECT_TRUE(bit_equal(t, got.at(name))) << name;
}

void flip_byte_at(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

StoreOptions options_for(hypic::DType dtype, int junction = 8) {
  StoreOptions o;
  o.model_fingerprint = kFingerprint;
  o.junction = junction;
  o.dtype = dtype;
  return o;
}

// ---- checksums, keys, conversions ----

TEST(StoreChecksum, Crc32cKnownValueFastPathAndContinuation) {
  const char* digits = "123456789";
  EXPECT_EQ(crc32c(digits, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_bytewise(digits, 9), 0xE3069283u);
  std::vector<unsigned char> data(1000);
  std::mt19937 rng(3);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (size_t start : {0, 1, 3, 7}) {
    for (size_t n : {0, 1, 7, 8, 9, 63, 500, 993}) {
      EXPECT_EQ(crc32c(data.data() + start, n), crc32c_bytewise(data.data() + start, n));
    }
  }
  EXPECT_EQ(crc32c(data.data() + 300, 700, crc32c(data.data(), 300)), crc32c(data.data(), 1000));
}

TEST(StoreChecksum, Fnv1a128KnownValuesAndEntryKey) {
  auto hex = [](const std::string& s) {
    return to_hex(Fnv1a128().update(s.data(), s.size()).digest());
  };
  // Published FNV-1a 128 values (also reproduced in Python, docs/store-format.md).
  EXPECT_EQ(hex(""), "6c62272e07bb014262b821756295c58d");
  EXPECT_EQ(hex("a"), "d228cb696f1a8caf78912b704e4a8964");
  EXPECT_EQ(hex("foobar"), "343e1662793c64bf6f0d3597ba446f18");
  EXPECT_EQ(entry_key("qwen3-next-tiny@sha256:abc", {1, 2, 3, -1, 151643}, 8),
            "e08bb431f2d2fcfc44148fa48e5cd35e");
  EXPECT_EQ(entry_key("m", {}, 0), "9d2477d0facecbfca7b77004cab579e8");
  // Every input matters.
  std::string base = entry_key("m", {1, 2}, 8);
  EXPECT_NE(base, entry_key("m", {2, 1}, 8));
  EXPECT_NE(base, entry_key("m", {1, 2}, 0));
  EXPECT_NE(base, entry_key("n", {1, 2}, 8));
  Hash128 h;
  EXPECT_TRUE(parse_hex128(base, h));
  EXPECT_EQ(to_hex(h), base);
  EXPECT_FALSE(parse_hex128("xyz", h));
}

TEST(StoreDtypes, Bf16RoundsToNearestEven) {
  auto bf = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
  const float ulp = std::ldexp(1.0f, -7);               // bf16 spacing in [1, 2)
  EXPECT_EQ(bf(1.0f + ulp / 2), 1.0f);                  // tie -> even
  EXPECT_EQ(bf(1.0f + ulp + ulp / 2), 1.0f + 2 * ulp);  // tie -> even (up)
  EXPECT_EQ(bf(1.0f + ulp / 2 + 1e-6f), 1.0f + ulp);    // above the tie
  EXPECT_TRUE(std::isinf(bf(std::numeric_limits<float>::max())));
  EXPECT_TRUE(std::isnan(bf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bf(-0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(bf(-0.0f)));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  for (int i = 0; i < 10000; ++i) {
    float x = u(rng);
    EXPECT_LE(std::fabs(bf(x) - x), std::fabs(x) * std::ldexp(1.0f, -8));
  }
}

TEST(StoreDtypes, F16MatchesCompilerConversionOnEveryInterestingValue) {
  // Every f16 bit pattern survives f16 -> f32 -> f16 (NaNs stay NaN).
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    float x = f16_to_f32(static_cast<uint16_t>(bits));
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(x))));
    } else {
      ASSERT_EQ(f32_to_f16(x), bits) << bits;
    }
  }
#if defined(__FLT16_MAX__)
  // Against the compiler's own round-to-nearest-even conversion, including subnormals,
  // ties and overflow.
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    uint32_t raw = rng();
    // Focus on the f16 range: exponents around 2^-26 .. 2^17.
    raw = (raw & 0x807FFFFFu) | ((97u + rng() % 48u) << 23);
    float x;
    std::memcpy(&x, &raw, 4);
    _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(f32_to_f16(x), want) << x;
  }
#endif
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_EQ(parse_dtype("bfloat16"), hypic::DType::BF16);
  EXPECT_THROW(parse_dtype("int8"), hypic::Error);
}

// ---- the store ----

class StoreRoundTrip : public ::testing::TestWithParam<hypic::DType> {};

TEST_P(StoreRoundTrip, EntriesReadBackAfterReopen) {
  const hypic::DType dtype = GetParam();
  TempPath path("store-roundtrip");
  std::vector<std::string> keys;
  {
    SegmentStore store = SegmentStore::create(path.str(), options_for(dtype));
    for (int i = 0; i < 20; ++i) {
      keys.push_back(store.key_for(tokens_for(i)));
      EXPECT_TRUE(store.put(keys.back(), make_entry(i)));
    }
    EXPECT_FALSE(store.put(keys[3], make_entry(3)));  // already there: nothing written
    EXPECT_EQ(store.size(), 20u);
    // Readable in the same session, before closing.
    expect_same(rounded(make_entry(7), dtype), *store.get(keys[7]));
  }
  SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
  EXPECT_EQ(store.dtype(), dtype);
  EXPECT_EQ(store.keys(), keys);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store.contains(keys[i]));
    std::optional<Entry> got = store.get(keys[i]);
    ASSERT_TRUE(got.has_value());
    Entry want = make_entry(i);
    expect_same(rounded(want, dtype), *got);
    // And within the format's rounding error of the original values.
    const float tol = dtype == hypic::DType::F32    ? 0.0f
                      : dtype == hypic::DType::BF16 ? std::ldexp(1.0f, -8)
                                                    : std::ldexp(1.0f, -11);
    for (const auto& [name, t] : want.arrays) {
      const Tensor& g = got->at(name);
      for (int64_t k = 0; k < t.numel(); ++k)
        ASSERT_LE(std::fabs(g[k] - t[k]), tol * std::fabs(t[k]) + 1e-7f) << name;
    }
  }
  EXPECT_FALSE(store.contains(store.key_for({42, 43})));
  EXPECT_FALSE(store.get(store.key_for({42, 43})).has_value());
  VerifyReport report = store.verify();
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.entries_valid, 20u);

  StoreStats stats = store.stats();
  EXPECT_EQ(stats.entries, 20u);
  uint64_t tokens = 0, bytes = 0;
  for (int i = 0; i < 20; ++i) {
    tokens += static_cast<uint64_t>(make_entry(i).n_tokens);
    bytes += make_entry(i).element_count() * dtype_size(dtype);
  }
  EXPECT_EQ(stats.tokens, tokens);
  EXPECT_EQ(stats.payload_bytes, bytes);
  std::map<std::string, uint64_t> kinds(stats.bytes_by_kind.begin(), stats.bytes_by_kind.end());
  EXPECT_EQ(kinds.size(), 5u);
  EXPECT_EQ(kinds["linear/T"], 20u * 3 * 2 * 4 * 4 * dtype_size(dtype));
  uint64_t sum = 0;
  for (const auto& [kind, n] : kinds) sum += n;
  EXPECT_EQ(sum, bytes);
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, StoreRoundTrip,
                         ::testing::Values(hypic::DType::F32, hypic::DType::BF16,
                                           hypic::DType::F16),
                         [](const auto& param_info) { return dtype_name(param_info.param); });

TEST(SegmentStore, RefusesAnotherModelOrJunctionNamingBoth) {
  TempPath path("store-mismatch");
  { SegmentStore::create(path.str(), options_for(hypic::DType::BF16, 8)); }
  try {
    SegmentStore::open(path.str(), "other-model", 8, OpenMode::kRead);
    FAIL() << "expected a refusal";
  } catch (const hypic::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(kFingerprint), std::string::npos) << what;
    EXPECT_NE(what.find("other-model"), std::string::npos) << what;
  }
  try {
    SegmentStore::open(path.str(), kFingerprint, 16, OpenMode::kWrite);
    FAIL() << "expected a refusal";
  } catch (const hypic::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("junction width 8"), std::string::npos) << what;
    EXPECT_NE(what.find("16"), std::string::npos) << what;
  }
  EXPECT_THROW(SegmentStore::open_or_create(path.str(), options_for(hypic::DType::F16, 8)),
               hypic::Error);
  // Not a store at all.
  TempPath other("store-notastore");
  float x = 1;
  hypic::h5::write_f32_dataset(other.str(), "x", &x, {1});
  EXPECT_THROW(SegmentStore::open_any(other.str(), OpenMode::kRead), hypic::Error);
  EXPECT_THROW(SegmentStore::open_any(path.str() + ".missing", OpenMode::kRead), hypic::Error);
}

TEST(SegmentStore, OneWriterAtATime) {
  TempPath path("store-lock");
  SegmentStore writer = SegmentStore::create(path.str(), options_for(hypic::DType::F32));
  EXPECT_THROW(SegmentStore::open_any(path.str(), OpenMode::kWrite), hypic::Error);
  writer.close();
  SegmentStore again = SegmentStore::open_any(path.str(), OpenMode::kWrite);
  EXPECT_TRUE(again.writable());
  SegmentStore reader = SegmentStore::open_any(path.str(), OpenMode::kRead);
  EXPECT_THROW(reader.put(reader.key_for({1}), make_entry(1)), hypic::Error);
}

TEST(SegmentStore, DamagedPayloadIsReportedNeverReturnedAndReplaceable) {
  TempPath path("store-damage");
  const std::string key_a = entry_key(kFingerprint, {1}, 8);
  const std::string key_b = entry_key(kFingerprint, {2}, 8);
  // A payload with a byte pattern we can find in the file.
  Entry marked;
  marked.n_tokens = 1;
  Tensor t({64});
  for (int i = 0; i < 64; ++i) {
    uint32_t bits = 0x3F123400u + static_cast<uint32_t>(i);
    std::memcpy(&t[i], &bits, 4);
  }
  marked.arrays["linear/0/S"] = t;
  {
    SegmentStore store = SegmentStore::create(path.str(), options_for(hypic::DType::F32));
    store.put(key_a, make_entry(1));
    store.put(key_b, marked);
  }
  std::string bytes = test_util::read_bytes(path.str());
  size_t at = bytes.find(std::string(reinterpret_cast<const char*>(t.data()) + 40 * 4, 16));
  ASSERT_NE(at, std::string::npos);
  flip_byte_at(path.str(), at + 2);
  {
    SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
    VerifyReport report = store.verify();
    ASSERT_EQ(report.damaged.size(), 1u);
    EXPECT_EQ(report.damaged[0].key, key_b);
    EXPECT_NE(report.damaged[0].problem.find("checksum"), std::string::npos);
    EXPECT_EQ(store.read(key_b).status, EntryStatus::kDamaged);
    EXPECT_FALSE(store.read(key_b).entry.has_value());
    EXPECT_THROW(store.get(key_b), DamagedEntryError);
    EXPECT_FALSE(store.contains(key_b));  // now known damaged: the engine recomputes it
    EXPECT_TRUE(store.get(key_a).has_value());
  }
  {
    SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kWrite);
    EXPECT_THROW(store.get(key_b), DamagedEntryError);
    EXPECT_TRUE(store.put(key_b, marked));  // replaced
    expect_same(marked, *store.get(key_b));
  }
  SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
  VerifyReport report = store.verify();
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.superseded_rows, 1u);
  EXPECT_EQ(store.size(), 2u);
  expect_same(marked, *store.get(key_b));
}

TEST(SegmentStore, DamagedIndexRowIsReported) {
  TempPath path("store-damage-index");
  const std::string key = entry_key(kFingerprint, {9, 9}, 8);
  {
    SegmentStore store = SegmentStore::create(path.str(), options_for(hypic::DType::BF16));
    store.put(key, make_entry(9));
  }
  std::string bytes = test_util::read_bytes(path.str());
  size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  // Change one hex digit of the stored key to another hex digit.
  std::string altered = key;
  altered[5] = altered[5] == '0' ? '1' : '0';
  {
    std::fstream f(path.str(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 5));
    f.write(&altered[5], 1);
  }
  {
    SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
    EXPECT_FALSE(store.contains(key));  // the original key is simply missing: recomputed
    VerifyReport report = store.verify();
    ASSERT_EQ(report.damaged.size(), 1u);  // and the altered row is caught by its checksum
    EXPECT_EQ(report.damaged[0].key, altered);
  }
  // A byte that is no hex digit at all is reported too.
  {
    std::fstream f(path.str(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 5));
    f.write("?", 1);
  }
  SegmentStore again = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
  EXPECT_EQ(again.size(), 0u);
  VerifyReport second = again.verify();
  ASSERT_EQ(second.damaged.size(), 1u);
  EXPECT_NE(second.damaged[0].problem.find("hex"), std::string::npos);
}

// The child of the crash test: resumes the store and writes entries 0..n-1 that are missing,
// announcing each index on `announce` before putting it. Never returns.
[[noreturn]] void crash_test_writer(const std::string& path, int n, int announce) {
  int code = 0;
  try {
    SegmentStore store = SegmentStore::open_or_create(path, options_for(hypic::DType::BF16));
    for (int i = 0; i < n; ++i) {
      std::string key = store.key_for(tokens_for(i));
      if (store.contains(key)) continue;
      if (::write(announce, &i, sizeof(i)) != sizeof(i)) _exit(3);
      store.put(key, make_entry(i, 1 + i % 4));
    }
    store.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash test writer: %s\n", e.what());
    code = 2;
  }
  _exit(code);
}

TEST(SegmentStore, SurvivesWriterKilledAtRandomMomentsAndResumes) {
  TempPath path("store-crash");
  const int n = 2500;
  const int rounds = 8;  // seven kills, then a writer that finishes
  std::mt19937 rng(1234);
  std::set<int> committed;
  int kills = 0;
  for (int round = 0; round < rounds; ++round) {
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(pipe_fds[0]);
      crash_test_writer(path.str(), n, pipe_fds[1]);
    }
    ::close(pipe_fds[1]);
    std::vector<int> attempted;
    int index;
    const bool last = round == rounds - 1;
    if (!last) {
      // Let it get some puts in, then kill it at a random moment of a put.
      const size_t before_kill = 20 + rng() % 250;
      while (attempted.size() < before_kill &&
             ::read(pipe_fds[0], &index, sizeof(index)) == sizeof(index))
        attempted.push_back(index);
      ::usleep(static_cast<useconds_t>(rng() % 400));
      ::kill(child, SIGKILL);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    while (::read(pipe_fds[0], &index, sizeof(index)) == sizeof(index)) attempted.push_back(index);
    ::close(pipe_fds[0]);
    if (last) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "final writer failed";
    } else if (WIFSIGNALED(status)) {
      ++kills;
    }
    // Resume never recomputed an entry that an earlier round had committed.
    for (int i : attempted) ASSERT_EQ(committed.count(i), 0u) << "entry " << i << " recomputed";

    // A reader (as `hypic inspect --verify`) opens the killed writer's file as it is.
    SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
    VerifyReport report = store.verify();
    ASSERT_TRUE(report.ok()) << report.damaged.size()
                             << " damaged, first: " << report.damaged[0].key << " "
                             << report.damaged[0].problem;
    std::set<int> now;
    for (int i = 0; i < n; ++i)
      if (store.contains(store.key_for(tokens_for(i)))) now.insert(i);
    for (int i : committed) ASSERT_EQ(now.count(i), 1u) << "lost entry " << i;
    // Committed entries read back bit-exact (spot-check the newest ones of this round).
    int checked = 0;
    for (auto it = now.rbegin(); it != now.rend() && checked < 40; ++it, ++checked) {
      if (committed.count(*it)) break;
      expect_same(rounded(make_entry(*it, 1 + *it % 4), hypic::DType::BF16),
                  *store.get(store.key_for(tokens_for(*it))));
    }
    EXPECT_EQ(store.size(), now.size());  // no duplicates
    committed = now;
  }
  EXPECT_EQ(kills, rounds - 1);
  EXPECT_EQ(committed.size(), static_cast<size_t>(n));
  // Every entry, bit-exact.
  SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
  for (int i = 0; i < n; ++i)
    expect_same(rounded(make_entry(i, 1 + i % 4), hypic::DType::BF16),
                *store.get(store.key_for(tokens_for(i))));
}

TEST(SegmentStore, ReaderOpensWhileAWriterRuns) {
  // `hypic inspect` during a warm-up: a reader in another process sees the committed entries.
  TempPath path("store-live");
  { SegmentStore::create(path.str(), options_for(hypic::DType::BF16)); }
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    crash_test_writer(path.str(), 100000, pipe_fds[1]);
  }
  ::close(pipe_fds[1]);
  int index = 0, seen = 0;
  uint64_t last_size = 0;
  for (int look = 0; look < 3; ++look) {
    for (int k = 0; k < 100; ++k, ++seen)
      ASSERT_EQ(::read(pipe_fds[0], &index, sizeof(index)), (ssize_t)sizeof(index));
    SegmentStore reader = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
    EXPECT_GE(reader.size(), static_cast<uint64_t>(seen - 1));
    EXPECT_GE(reader.size(), last_size);
    last_size = reader.size();
    EXPECT_TRUE(reader.verify().ok());
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(pipe_fds[0]);
}

TEST(SegmentStore, FullDiskLeavesCommittedEntriesIntact) {
  // A file-size limit makes write() fail with EFBIG, the way a full disk fails with ENOSPC.
  TempPath path("store-full");
  {
    SegmentStore store = SegmentStore::create(path.str(), options_for(hypic::DType::F32));
    for (int i = 0; i < 10; ++i) store.put(store.key_for(tokens_for(i)), make_entry(i));
  }
  const auto limit = static_cast<rlim_t>(fs::file_size(path.str()) + 256 * 1024);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    int code = 1;
    try {
      SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kWrite);
      for (int i = 10; i < 10000; ++i) store.put(store.key_for(tokens_for(i)), make_entry(i, 8));
    } catch (const hypic::Error& e) {
      std::string what = e.what();
      if (::write(pipe_fds[1], what.data(), what.size()) < 0) _exit(4);
      code = 0;
    }
    _exit(code);
  }
  ::close(pipe_fds[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::string message(4096, '\0');
  ssize_t got = ::read(pipe_fds[0], message.data(), message.size());
  ::close(pipe_fds[0]);
  message.resize(got > 0 ? static_cast<size_t>(got) : 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "no write error was reported";
  EXPECT_NE(message.find("intact"), std::string::npos) << message;

  SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kWrite);
  EXPECT_TRUE(store.verify().ok());
  EXPECT_GE(store.size(), 10u);
  for (int i = 0; i < 10; ++i) expect_same(make_entry(i), *store.get(store.key_for(tokens_for(i))));
  // With room again, writing resumes.
  EXPECT_TRUE(store.put(store.key_for({77}), make_entry(77)));
}

TEST(SegmentStore, WriteFailingInsideHdf5ClosesTheFileAndResumes) {
  // The space check before each write cannot see everything (another process may fill the
  // disk in between), so a write can still fail inside HDF5. Simulated here: the store's path
  // names a tiny file while the store writes to the real one (renamed away), so the check
  // passes and the write hits the file-size limit. Before, HDF5's teardown then crashed on the
  // file it could not close (SIGSEGV in H5F__close_cb) and main skipped it.
  TempPath path("store-fail-inside");
  const std::string moved = path.str() + ".moved";
  {
    SegmentStore store = SegmentStore::create(path.str(), options_for(hypic::DType::F32));
    for (int i = 0; i < 10; ++i) store.put(store.key_for(tokens_for(i)), make_entry(i));
  }
  const auto limit = static_cast<rlim_t>(fs::file_size(path.str()) + 256 * 1024);
  std::fflush(nullptr);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
    int code = 0;
    {
      SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kWrite);
      fs::rename(path.str(), moved);
      { std::ofstream tiny(path.str()); }
      try {
        for (int i = 10; i < 10000; ++i) store.put(store.key_for(tokens_for(i)), make_entry(i, 8));
        code = 2;  // the limit never bit
      } catch (const hypic::Error& e) {
        if (std::string(e.what()).find("intact") == std::string::npos) code = 3;
      }
      try {  // the file is closed: reading says so instead of reporting damage
        store.read(store.key_for(tokens_for(0)));
        code = 4;
      } catch (const hypic::Error& e) {
        if (std::string(e.what()).find("reopen the store") == std::string::npos) code = 5;
      }
    }
    if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) code = 6;
    if (hypic::h5::unreleased_object_seen()) code = 7;
    if (code == 0 && H5close() < 0) code = 8;  // HDF5's teardown, what MPI_Finalize runs
    _exit(code);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  fs::rename(moved, path.str());
  SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kWrite);
  EXPECT_TRUE(store.verify().ok());
  EXPECT_GE(store.size(), 10u);
  for (int i = 0; i < 10; ++i) expect_same(make_entry(i), *store.get(store.key_for(tokens_for(i))));
  EXPECT_TRUE(store.put(store.key_for({77}), make_entry(77)));
}

TEST(SegmentStore, RealFullDiskOnSmallTmpfs) {
  // Needs the right to mount (root in a privileged container); skipped elsewhere.
  const fs::path dir = fs::temp_directory_path() / ("store-tmpfs-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=2m") != 0) {
    fs::remove(dir);
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << ")";
  }
  struct Unmount {
    fs::path dir;
    ~Unmount() {
      ::umount2(dir.c_str(), MNT_DETACH);
      std::error_code ignored;
      fs::remove(dir, ignored);
    }
  } unmount{dir};
  const std::string path = (dir / "store.h5").string();
  int written = 0;
  std::string message;
  try {
    SegmentStore store = SegmentStore::create(path, options_for(hypic::DType::F32));
    for (;; ++written) store.put(store.key_for(tokens_for(written)), make_entry(written, 8));
  } catch (const hypic::Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("No space left on device"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  ASSERT_GT(written, 0);
  SegmentStore store = SegmentStore::open(path, kFingerprint, 8, OpenMode::kRead);
  EXPECT_EQ(store.size(), static_cast<uint64_t>(written));
  EXPECT_TRUE(store.verify().ok());
  for (int i = 0; i < written; ++i)
    expect_same(make_entry(i, 8), *store.get(store.key_for(tokens_for(i))));
}

TEST(SegmentStore, MergeShards) {
  TempPath a("store-shard-a"), b("store-shard-b"), dst("store-merged");
  std::vector<std::string> keys;
  for (int i = 0; i < 12; ++i) keys.push_back(entry_key(kFingerprint, tokens_for(i), 8));
  {
    SegmentStore sa = SegmentStore::create(a.str(), options_for(hypic::DType::F16));
    SegmentStore sb = SegmentStore::create(b.str(), options_for(hypic::DType::F16));
    for (int i = 0; i < 8; ++i) sa.put(keys[i], make_entry(i));
    for (int i = 5; i < 12; ++i) sb.put(keys[i], make_entry(i));  // 5..7 in both
  }
  SegmentStore merged = SegmentStore::create(dst.str(), options_for(hypic::DType::F16));
  MergeReport report = merge_stores(merged, {a.str(), b.str()});
  EXPECT_EQ(report.copied, 12u);
  EXPECT_EQ(report.already_present, 3u);
  for (int i = 0; i < 12; ++i)
    expect_same(rounded(make_entry(i), hypic::DType::F16), *merged.get(keys[i]));
  TempPath other("store-shard-other");
  StoreOptions o = options_for(hypic::DType::F16, 4);
  { SegmentStore::create(other.str(), o); }
  EXPECT_THROW(merge_stores(merged, {other.str()}), hypic::Error);
}

// ---- scale and the layout measurement ----

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The alternative layout: one group per segment, one dataset per array, attributes for the
// token count and checksum; flushed after each entry as the store does.
struct GroupLayoutTimes {
  double write = 0, open = 0, read = 0;
  uint64_t bytes = 0;
};

GroupLayoutTimes measure_group_layout(const std::string& path, const std::vector<Entry>& entries,
                                      const std::vector<std::string>& keys,
                                      const std::vector<size_t>& reads) {
  using namespace hypic::h5;
  GroupLayoutTimes times;
  auto t0 = std::chrono::steady_clock::now();
  {
    FileOptions fo;
    fo.latest_format = true;
    File file = File::create(path, fo);
    Group root = file.create_group("segments");
    for (size_t i = 0; i < entries.size(); ++i) {
      Group g = root.create_group(keys[i]);
      g.set_int_attribute("n_tokens", entries[i].n_tokens);
      for (const auto& [name, t] : entries[i].arrays) {
        std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
        encode(hypic::DType::BF16, t.data(), bits.size(), bits.data());
        Shape shape(t.shape().begin(), t.shape().end());
        g.create_dataset<uint16_t>(name, shape).write(bits.data());
      }
      g.set_int_attribute("checksum", 0);
      file.flush();
    }
  }
  times.write = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  File file = File::open(path, Access::kReadOnly);
  Group root = file.open_group("segments");
  // Loading the index means visiting every group (its name and attributes).
  std::vector<std::string> names;
  H5Literate(
      root.id(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
        static_cast<std::vector<std::string>*>(out)->emplace_back(name);
        return 0;
      },
      &names);
  int64_t total_tokens = 0;
  for (const std::string& name : names)
    total_tokens += root.open_group(name).int_attribute("n_tokens");
  EXPECT_GT(total_tokens, 0);
  times.open = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (size_t i : reads) {
    Group g = root.open_group(keys[i]);
    for (const auto& [name, t] : entries[i].arrays) {
      std::vector<uint16_t> bits = g.open_dataset(name).read_all<uint16_t>();
      std::vector<float> values(bits.size());
      decode(hypic::DType::BF16, bits.data(), bits.size(), values.data());
    }
  }
  times.read = seconds_since(t0);
  times.bytes = fs::file_size(path);
  return times;
}

TEST(StoreLayout, BlobIndexAgainstGroupPerSegment) {
  const int n = 2000;
  std::vector<Entry> entries;
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    entries.push_back(make_entry(i));
    keys.push_back(entry_key(kFingerprint, tokens_for(i), 8));
  }
  std::mt19937 rng(9);
  std::vector<size_t> reads(500);
  for (auto& r : reads) r = rng() % n;

  TempPath blob_path("layout-blob"), group_path("layout-group");
  auto t0 = std::chrono::steady_clock::now();
  {
    SegmentStore store = SegmentStore::create(blob_path.str(), options_for(hypic::DType::BF16));
    for (int i = 0; i < n; ++i) store.put(keys[i], entries[i]);
  }
  double blob_write = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  SegmentStore store = SegmentStore::open(blob_path.str(), kFingerprint, 8, OpenMode::kRead);
  double blob_open = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (size_t i : reads) ASSERT_TRUE(store.get(keys[i]).has_value());
  double blob_read = seconds_since(t0);
  uint64_t blob_bytes = fs::file_size(blob_path.str());

  GroupLayoutTimes g = measure_group_layout(group_path.str(), entries, keys, reads);
  uint64_t payload = store.stats().payload_bytes;
  std::printf(
      "[layout] %d entries of %zu arrays, %.1f KiB payload each (bf16)\n"
      "[layout] blob+index : write %.3f s  open %.4f s  %zu random reads %.3f s  file %.2f MiB\n"
      "[layout] group/seg  : write %.3f s  open %.4f s  %zu random reads %.3f s  file %.2f MiB\n"
      "[layout] payload    : %.2f MiB\n",
      n, entries[0].arrays.size(), payload / 1024.0 / n, blob_write, blob_open, reads.size(),
      blob_read, blob_bytes / 1048576.0, g.write, g.open, reads.size(), g.read, g.bytes / 1048576.0,
      payload / 1048576.0);
  EXPECT_LT(blob_open, g.open);
}

TEST(StoreLayout, LargeEntryThroughput) {
  // One entry shaped like a real one: 8 MiB of f32 in, stored as bf16.
  TempPath path("store-large");
  Entry big;
  big.n_tokens = 512;
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int layer = 0; layer < 8; ++layer) {
    Tensor t({16, 128, 128});
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = u(rng);
    big.arrays["linear/" + std::to_string(layer) + "/T"] = std::move(t);
  }
  const double mib = static_cast<double>(big.element_count()) * 4 / 1048576.0;
  SegmentStore store = SegmentStore::create(path.str(), options_for(hypic::DType::BF16));
  const std::string key = store.key_for({1, 2, 3});
  auto t0 = std::chrono::steady_clock::now();
  store.put(key, big);
  double put_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::optional<Entry> back = store.get(key);
  double get_s = seconds_since(t0);
  std::printf(
      "[large] %.0f MiB f32 entry as bf16: put %.3f s (%.0f MiB/s), get %.3f s (%.0f MiB/s)\n", mib,
      put_s, mib / put_s, get_s, mib / get_s);
  expect_same(rounded(big, hypic::DType::BF16), *back);
}

TEST(StoreLayout, FiveThousandEntriesOpenFast) {
  TempPath path("store-many");
  const int n = 5000;
  {
    SegmentStore store = SegmentStore::create(path.str(), options_for(hypic::DType::F16));
    Entry tiny;
    tiny.n_tokens = 1;
    tiny.arrays["linear/0/S"] = Tensor({4}, 0.5f);
    for (int i = 0; i < n; ++i) {
      tiny.arrays["linear/0/S"][0] = static_cast<float>(i % 1024);  // exact in f16
      store.put(entry_key(kFingerprint, {i}, 8), tiny);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  SegmentStore store = SegmentStore::open(path.str(), kFingerprint, 8, OpenMode::kRead);
  double open_s = seconds_since(t0);
  std::printf("[scale] open of %d entries: %.4f s, file %.2f MiB\n", n, open_s,
              fs::file_size(path.str()) / 1048576.0);
  EXPECT_EQ(store.size(), static_cast<uint64_t>(n));
  EXPECT_LT(open_s, 0.5);
  EXPECT_EQ(store.get(entry_key(kFingerprint, {4321}, 8))->at("linear/0/S")[0], 4321.0f - 4096.0f);
}

}  // namespace segment_store_test
}  // namespace
