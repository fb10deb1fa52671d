// `hypic inspect`: what a segment store holds, and (--verify) whether every entry is intact.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "common/printable.hpp"
#include "pic/junction.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {

struct InspectArgs {
  std::string store;
  bool verify = false;
};

double mib(uint64_t bytes) {
  return static_cast<double>(bytes) / 1048576.0;
}

int run_inspect(const InspectArgs& a) {
  store::SegmentStore st = store::SegmentStore::open_any(a.store, store::OpenMode::kRead);
  const store::StoreStats s = st.stats();
  std::printf("store          %s\n", a.store.c_str());
  const std::vector<std::string> shards = st.shard_paths();
  if (!shards.empty())  // a sharded store: the file and the shards its manifest names
    std::printf("shards         %zu (%s ... %s), %zu unreadable\n", shards.size(),
                shards.front().c_str(), shards.back().c_str(), st.shard_problems().size());
  std::printf("format version %d\n", s.format_version);
  std::printf("model          %s\n", printable_bytes(s.model_fingerprint).c_str());
  std::printf("dtype          %s\n", dtype_name(s.dtype));
  std::printf("junction       %s\n",
              pic::JunctionSpec::from_store_code(s.junction).to_string().c_str());
  std::printf("entries        %llu\n", static_cast<unsigned long long>(s.entries));
  std::printf("tokens         %llu\n", static_cast<unsigned long long>(s.tokens));
  std::printf("arrays         %llu\n", static_cast<unsigned long long>(s.arrays));
  std::printf("payload        %.2f MiB (file %.2f MiB)\n", mib(s.payload_bytes), mib(s.file_bytes));
  for (const auto& [kind, bytes] : s.bytes_by_kind)
    std::printf("  %-12s %10.2f MiB\n", kind.c_str(), mib(bytes));
  if (!a.verify) return 0;

  const store::VerifyReport v = st.verify();
  std::printf("verify         %llu entries checked, %llu valid, %zu damaged",
              static_cast<unsigned long long>(v.entries_checked),
              static_cast<unsigned long long>(v.entries_valid), v.damaged.size());
  if (v.uncommitted_payload_bytes > 0)
    std::printf(", %.2f MiB left past the last commit by an interrupted writer (ignored)",
                mib(v.uncommitted_payload_bytes));
  if (v.dropped_rows > 0)
    std::printf(", %llu damaged rows dropped by a repair",
                static_cast<unsigned long long>(v.dropped_rows));
  std::printf("\n");
  std::printf("header         %s\n", !v.header_problem.empty() ? "damaged"
                                     : v.header_unchecked      ? "not checked (no header_crc32c)"
                                                               : "checksum OK");
  for (const std::string& problem : v.shard_problems) std::printf("  %s\n", problem.c_str());
  for (const store::DamagedEntry& d : v.damaged)
    std::printf("  damaged %s: %s\n", d.key.c_str(), d.problem.c_str());
  std::fflush(stdout);
  if (!v.header_problem.empty())
    throw Error("store " + a.store + ": " + v.header_problem +
                "; its entries cannot be trusted to belong to the model it names (recompute it "
                "into a new store)");
  if (!v.shard_problems.empty())
    throw Error("store " + a.store + ": " + v.first_problem() +
                "; rerun the warm-up (it moves such a shard aside and recomputes its entries)");
  if (!v.ok())
    throw Error("store " + a.store + " has " + v.first_problem() +
                "; `hypic warmup --repair` recomputes them (and drops what it cannot)");
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("inspect", "Describe a segment store; --verify checks every entry");
  auto a = std::make_shared<InspectArgs>();
  sub->add_option("--store", a->store, "segment store (HDF5)")->required();
  sub->add_flag("--verify", a->verify, "read every entry and check its checksum");
  on_run(sub, [a] { return run_inspect(*a); });
}

}  // namespace hypic::app
