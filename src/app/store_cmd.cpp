// `hypic store merge --out STORE SHARD...`: one store from the shard stores of a sharded
// warm-up (jobs/slurm/warmup-array.sbatch). Every shard is verified first (each entry's
// checksum), and must come from the same model, junction width and dtype; then every entry
// the output lacks is copied, and the output is verified. The output is an ordinary store:
// an existing one is extended (resumable: a merge killed half-way is rerun), a new one is
// created with the shards' settings. Entries are content-addressed, so the result holds the
// same keys and bytes as one warm-up of the whole corpus. The shards' cost model comes along
// (merge_cost_models).
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "app/commands.hpp"
#include "cluster/cost_model.hpp"
#include "cluster/distributed.hpp"
#include "hypic/error.hpp"
#include "pic/junction.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {
namespace fs = std::filesystem;

struct MergeArgs {
  std::string out;
  std::vector<std::string> shards;
};

// The settings a shard was made with, and where they come from (for the messages).
struct Settings {
  std::string from;  // "shard X" or "store X"
  std::string fingerprint;
  int junction = 0;
  DType dtype = DType::F32;
};

Settings settings_of(const std::string& from, const store::SegmentStore& st) {
  return {from, st.model_fingerprint(), st.junction(), st.dtype()};
}

std::string junction_text(int code) {
  return pic::JunctionSpec::from_store_code(code).to_string();
}

// Refuses a shard whose settings differ from `want`, naming both.
void require_same(const Settings& want, const Settings& got) {
  HYPIC_REQUIRE(got.fingerprint == want.fingerprint,
                got.from + " was made for model fingerprint '" + got.fingerprint + "' but " +
                    want.from + " for '" + want.fingerprint +
                    "'; a merge takes stores of one model only");
  HYPIC_REQUIRE(got.junction == want.junction,
                got.from + " has junction " + junction_text(got.junction) + " but " + want.from +
                    " has " + junction_text(want.junction) +
                    "; a merge takes stores of one junction width only");
  HYPIC_REQUIRE(got.dtype == want.dtype, got.from + " stores " + dtype_name(got.dtype) + " but " +
                                             want.from + " stores " + dtype_name(want.dtype) +
                                             "; a merge takes stores of one dtype only");
}

std::string damaged_text(const std::string& what, const store::VerifyReport& v) {
  return what + (v.header_problem.empty() ? " has " : ": ") + v.first_problem();
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::exists(a) && fs::exists(b) && fs::equivalent(a, b, ec);
}

// The cost model that plans later runs on the merged store (STORE.cost-model.json): an
// existing one is kept; otherwise the shards' model fitted on the most samples is copied
// (the first on ties: every shard ran the same model, on nodes of one partition). It is a
// planning hint, not stored data, so a shard's unreadable model is skipped with a warning.
void merge_cost_models(const std::string& out, const std::vector<std::string>& shards) {
  const std::string target = cluster::cost_model_path(out);
  if (fs::exists(target)) return;
  std::optional<cluster::CostModel> best;
  std::string from;
  for (const std::string& shard : shards) {
    const std::string path = cluster::cost_model_path(shard);
    if (!fs::exists(path)) continue;
    try {
      cluster::CostModel m = cluster::CostModel::load(path);
      if (!best || m.samples() > best->samples()) {
        best = std::move(m);
        from = path;
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "hypic: warning: cost model %s is not used: %s\n", path.c_str(),
                   e.what());
    }
  }
  if (!best) return;
  best->save(target);
  std::printf("store merge: cost model of %s (%lld samples) -> %s\n", from.c_str(),
              static_cast<long long>(best->samples()), target.c_str());
}

int run_merge(const MergeArgs& a) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  HYPIC_REQUIRE(ranks == 1, "hypic store merge runs as one process, but this job has " +
                                std::to_string(ranks) + " ranks; start it without mpirun/srun -n");
  HYPIC_REQUIRE(!a.shards.empty(), "store merge: give at least one shard store");

  // 1. Every shard: there, a store, and of one kind (cheap: attributes only).
  auto open_shard = [](const std::string& shard) {
    try {
      return store::SegmentStore::open_any(shard, store::OpenMode::kRead);
    } catch (const Error& e) {
      throw Error("shard " + shard + " cannot be read: " + e.what());
    }
  };
  std::vector<Settings> settings;
  for (const std::string& shard : a.shards) {
    HYPIC_REQUIRE(fs::exists(shard), "shard " + shard + " does not exist");
    HYPIC_REQUIRE(!same_file(shard, a.out), "shard " + shard + " is the --out store itself");
    settings.push_back(settings_of("shard " + shard, open_shard(shard)));
    require_same(settings.front(), settings.back());
  }
  const Settings& want = settings.front();
  if (fs::exists(a.out)) {
    const store::SegmentStore st = store::SegmentStore::open_any(a.out, store::OpenMode::kRead);
    require_same(want, settings_of("store " + a.out, st));
  }

  // 2. Every shard intact: each entry's checksum.
  uint64_t shard_entries = 0;
  for (const std::string& shard : a.shards) {
    store::SegmentStore st = open_shard(shard);
    const store::VerifyReport v = st.verify();
    if (!v.ok())
      throw Error(damaged_text("shard " + shard, v) +
                  "; rerun the job that wrote it (or `hypic warmup --repair` on it), then merge "
                  "again");
    shard_entries += v.entries_valid;
    std::printf("store merge: %s: %llu entries, verified\n", shard.c_str(),
                static_cast<unsigned long long>(v.entries_valid));
    std::fflush(stdout);
  }

  // The output: extended when it exists, created with the shards' settings otherwise.
  store::SegmentStore out = [&] {
    if (fs::exists(a.out)) return store::SegmentStore::open_any(a.out, store::OpenMode::kWrite);
    store::StoreOptions o;
    o.model_fingerprint = want.fingerprint;
    o.junction = want.junction;
    o.dtype = want.dtype;
    if (fs::path(a.out).has_parent_path()) fs::create_directories(fs::path(a.out).parent_path());
    return store::SegmentStore::create(a.out, o);
  }();

  // 3. Copy what the output lacks, then check every entry of the result.
  const store::MergeReport m = store::merge_stores(out, a.shards);
  if (!m.skipped_damaged.empty())
    throw Error("entry " + m.skipped_damaged.front().key + " of " +
                m.skipped_damaged.front().problem +
                " (it verified a moment before: did something write the shard during the "
                "merge?); merge again");
  const store::VerifyReport v = out.verify();
  if (!v.ok()) throw Error(damaged_text("the merged store " + a.out, v));
  const store::StoreStats s = out.stats();
  out.close();
  std::printf(
      "store merge: %zu shard(s), %llu shard entries: %llu copied, %llu already in %s\n"
      "store %s: %llu entries, %llu tokens, %.1f MiB, %s, junction %s; verify %llu entries "
      "checked, %llu valid, 0 damaged\n",
      a.shards.size(), static_cast<unsigned long long>(shard_entries),
      static_cast<unsigned long long>(m.copied), static_cast<unsigned long long>(m.already_present),
      a.out.c_str(), a.out.c_str(), static_cast<unsigned long long>(s.entries),
      static_cast<unsigned long long>(s.tokens), s.file_bytes / 1048576.0, dtype_name(s.dtype),
      junction_text(s.junction).c_str(), static_cast<unsigned long long>(v.entries_checked),
      static_cast<unsigned long long>(v.entries_valid));
  merge_cost_models(a.out, a.shards);
  return 0;
}

}  // namespace

void add_store_commands(CLI::App& app) {
  auto* store = app.add_subcommand("store", "Segment store maintenance (merge)");
  store->require_subcommand(1);
  auto* merge = store->add_subcommand(
      "merge", "Merge shard stores into one store, verifying every shard and the result");
  auto a = std::make_shared<MergeArgs>();
  merge->add_option("--out", a->out, "the merged store (created, or extended if it exists)")
      ->required();
  merge->add_option("shards", a->shards, "the shard stores (HDF5)")->required();
  on_run(merge, [a] { return run_merge(*a); });
}

}  // namespace hypic::app
