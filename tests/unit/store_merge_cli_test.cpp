// `hypic store merge` through the built binary: shards of a corpus warmed separately merge
// into the store one warm-up of the whole corpus writes (bit for bit); a rerun copies
// nothing; a missing, foreign, damaged or unreadable shard, or an output of another model,
// is refused with one line and writes no output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "store/segment_store.hpp"
#include "temp_path.hpp"

namespace {
namespace store_merge_cli_test {
namespace fs = std::filesystem;
using cli_test::CliRun;
using hypic::DType;
using hypic::store::Entry;
using hypic::store::SegmentStore;
using hypic::store::StoreOptions;
using nlohmann::json;

class StoreMergeCli : public ::testing::Test {
 protected:
  static fs::path dir_;

  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("hypic_store_merge_cli_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    CliRun r = hypic("model init --arch qwen3_5 --preset tiny --seed 4 --out " + p("model"));
    ASSERT_EQ(r.code, 0) << r.err;
    // 12 documents, one repeated (content-keyed: one entry), split into 3 shards of 4 lines.
    std::mt19937 rng(2);
    std::uniform_int_distribution<int> tok(0, 511), len(10, 40);
    std::vector<std::string> lines;
    std::vector<int> first;
    for (int d = 0; d < 12; ++d) {
      std::vector<int> t(static_cast<size_t>(len(rng)));
      for (int& x : t) x = tok(rng);
      if (d == 0) first = t;
      if (d == 9) t = first;  // shard 2 repeats a document of shard 0
      lines.push_back(json({{"id", "d" + std::to_string(d)}, {"tokens", t}}).dump());
    }
    std::ofstream all(dir_ / "corpus.jsonl");
    for (const auto& l : lines) all << l << "\n";
    all.close();
    for (int s = 0; s < 3; ++s) {
      std::ofstream part(dir_ / ("part" + std::to_string(s) + ".jsonl"));
      for (int d = 4 * s; d < 4 * s + 4; ++d) part << lines[static_cast<size_t>(d)] << "\n";
      part.close();
      r = hypic("warmup " + model() + " --corpus " + p("part" + std::to_string(s) + ".jsonl") +
                " --store " + p("shard" + std::to_string(s) + ".h5"));
      ASSERT_EQ(r.code, 0) << r.err;
    }
    r = hypic("warmup " + model() + " --corpus " + p("corpus.jsonl") + " --store " +
              p("reference.h5"));
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static CliRun hypic(const std::string& args) { return cli_test::run_hypic(dir_, args); }
  static std::string model() { return "--model " + p("model"); }
  static std::string p(const std::string& name) { return (dir_ / name).string(); }
  static std::string shards() {
    return p("shard0.h5") + " " + p("shard1.h5") + " " + p("shard2.h5");
  }

  // A store made directly with the library: one f32 entry whose payload is easy to find.
  static std::vector<float> make_store(const std::string& path, const std::string& fingerprint,
                                       int junction, hypic::DType dtype) {
    StoreOptions o;
    o.model_fingerprint = fingerprint;
    o.junction = junction;
    o.dtype = dtype;
    SegmentStore st = SegmentStore::create(path, o);
    Entry e;
    e.n_tokens = 3;
    hypic::Tensor t({64});
    std::vector<float> values(64);
    for (int i = 0; i < 64; ++i) {
      const uint32_t bits = 0x3F123400u + static_cast<uint32_t>(i);
      std::memcpy(&values[static_cast<size_t>(i)], &bits, 4);
      t[i] = values[static_cast<size_t>(i)];
    }
    e.arrays["linear/0/S"] = t;
    st.put(st.key_for({1, 2, 3}), e);
    st.close();
    return values;
  }
};
fs::path StoreMergeCli::dir_;

TEST_F(StoreMergeCli, ShardsMergeIntoTheStoreOneWarmupWritesAndARerunCopiesNothing) {
  const std::string out = p("merged/warmup.h5");  // the folder is created
  CliRun r = hypic("store merge --out " + out + " " + shards());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("store merge: 3 shard(s), 12 shard entries: 11 copied, 1 already in"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("11 entries"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify 11 entries checked, 11 valid, 0 damaged"), std::string::npos)
      << r.out;
  cli_test::expect_same_store(out, p("reference.h5"));
  // Each shard's warm-up fitted a cost model on its 4 entries; the first of the equals comes
  // along, so serve on the merged store plans with measured costs.
  EXPECT_NE(r.out.find("cost model of " + p("shard0.h5") + ".cost-model.json (4 samples)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(cli_test::slurp(out + ".cost-model.json"),
            cli_test::slurp(p("shard0.h5") + ".cost-model.json"));

  // Merging again (a rerun after a crash, or a shard listed twice) adds nothing, and keeps
  // the store's cost model.
  r = hypic("store merge --out " + out + " " + shards() + " " + p("shard1.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("0 copied, 16 already in"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("cost model of"), std::string::npos) << r.out;
  r = hypic("inspect --store " + out + " --verify");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("11 valid, 0 damaged"), std::string::npos) << r.out;
  cli_test::expect_same_store(out, p("reference.h5"));
}

TEST_F(StoreMergeCli, AShardsUnreadableCostModelIsSkippedWithAWarning) {
  fs::copy_file(p("shard0.h5"), p("hint.h5"));
  std::ofstream(p("hint.h5.cost-model.json")) << "{\"format\": \"hypic-cost-model\", \"vers";
  const std::string out = p("hint-merged.h5");
  const CliRun r = hypic("store merge --out " + out + " " + p("hint.h5") + " " + p("shard1.h5"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(
      r.err.rfind("hypic: warning: cost model " + p("hint.h5") + ".cost-model.json is not used", 0),
      0u)
      << r.err;
  EXPECT_EQ(cli_test::slurp(out + ".cost-model.json"),
            cli_test::slurp(p("shard1.h5") + ".cost-model.json"));
}

TEST_F(StoreMergeCli, BadShardsAndOutputsAreRefusedWithOneLine) {
  const std::string out = p("refused.h5");
  // A shard that is not there.
  cli_test::expect_one_line_error(
      hypic("store merge --out " + out + " " + p("shard0.h5") + " " + p("shard9.h5")),
      "shard " + p("shard9.h5") + " does not exist");
  // A shard of another model.
  SegmentStore ref = SegmentStore::open_any(p("shard0.h5"), hypic::store::OpenMode::kRead);
  const std::string fp = ref.model_fingerprint();
  ref.close();
  make_store(p("other-model.h5"), "another-model", 8, hypic::DType::BF16);
  cli_test::expect_one_line_error(
      hypic("store merge --out " + out + " " + p("shard0.h5") + " " + p("other-model.h5")),
      "shard " + p("other-model.h5") +
          " was made for model fingerprint 'another-model' but shard " + p("shard0.h5") + " for '" +
          fp + "'");
  // Same model, other junction width, other dtype.
  make_store(p("other-junction.h5"), fp, 4, hypic::DType::BF16);
  cli_test::expect_one_line_error(
      hypic("store merge --out " + out + " " + p("shard0.h5") + " " + p("other-junction.h5")),
      "has junction 4 but shard " + p("shard0.h5") + " has 8");
  make_store(p("other-dtype.h5"), fp, 8, hypic::DType::F32);
  cli_test::expect_one_line_error(
      hypic("store merge --out " + out + " " + p("shard0.h5") + " " + p("other-dtype.h5")),
      "stores f32 but shard " + p("shard0.h5") + " stores bf16");
  // A damaged shard: one payload byte flipped, caught by the entry's checksum.
  const std::vector<float> values = make_store(p("damaged.h5"), fp, 8, hypic::DType::F32);
  {
    const std::string bytes = test_util::read_bytes(p("damaged.h5"));
    const size_t at =
        bytes.find(std::string(reinterpret_cast<const char*>(values.data()) + 160, 16));
    ASSERT_NE(at, std::string::npos);
    std::fstream f(p("damaged.h5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 2));
    const char c = static_cast<char>(bytes[at + 2] ^ 0x5A);
    f.write(&c, 1);
  }
  cli_test::expect_one_line_error(hypic("store merge --out " + out + " " + p("damaged.h5")),
                                  "shard " + p("damaged.h5") + " has 1 damaged entry");
  // Not a store at all.
  std::ofstream(dir_ / "not-a-store.h5") << "hello\n";
  cli_test::expect_one_line_error(hypic("store merge --out " + out + " " + p("not-a-store.h5")),
                                  "shard " + p("not-a-store.h5") + " cannot be read");
  // None of these wrote an output.
  EXPECT_FALSE(fs::exists(out));

  // An existing output of another model is not extended; the output is never a shard.
  cli_test::expect_one_line_error(
      hypic("store merge --out " + p("other-model.h5") + " " + p("shard0.h5")),
      "store " + p("other-model.h5") + " was made for model fingerprint 'another-model'");
  cli_test::expect_one_line_error(
      hypic("store merge --out " + p("shard0.h5") + " " + p("shard0.h5")),
      "is the --out store itself");
  CliRun r = hypic("inspect --store " + p("other-model.h5"));
  EXPECT_NE(r.out.find("entries        1\n"), std::string::npos) << r.out;
  // No shard at all.
  r = hypic("store merge --out " + out);
  EXPECT_NE(r.code, 0);
}

}  // namespace store_merge_cli_test
}  // namespace
