// `hypic inspect`: what a segment store holds, and (--verify) whether every entry is intact.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "common/printable.hpp"
#include "pic/entry_forms.hpp"
#include "pic/junction.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {

struct InspectArgs {
  std::string store;
  bool verify = false;
  bool forms = false;
};

double mib(uint64_t bytes) {
  return static_cast<double>(bytes) / 1048576.0;
}

// --forms: every entry read; its linear layers' T by form (entry_forms.hpp) and each layer's
// bytes (T, S, conv). T in today's layout counts as its structure: dense [H, dk, dk], scalar
// [H] (lightning layers), or the WY form (T [H, dk] with X and Y).
void print_forms(store::SegmentStore& st) {
  const size_t el = dtype_size(st.dtype());
  pic::FormTally tally;
  int64_t wy_heads = 0, wy_values = 0;
  std::map<int, std::map<std::string, uint64_t>> by_layer;  // layer -> T / S / conv -> bytes
  for (const std::string& key : st.keys()) {
    std::optional<store::Entry> e = st.get(key);
    if (!e) continue;
    for (const auto& [name, t] : e->arrays) {
      if (name.rfind("linear/", 0) != 0) continue;
      const size_t slash = name.find('/', 7);
      const int layer = std::stoi(name.substr(7, slash - 7));
      const std::string what = name.substr(slash + 1);
      const std::string part = what == "S" || what == "Sform" || what == "Spack" ? "S"
                               : what == "conv"                                  ? what
                                                                                 : "T";
      by_layer[layer][part] += static_cast<uint64_t>(t.numel()) * el;
      const std::string base = "linear/" + std::to_string(layer) + "/";
      if (what == "S" && t.rank() == 3) {
        tally.s_full_heads += t.dim(0);
        tally.s_full_floats += t.numel();
      } else if (what == "Sform" && t.rank() == 2 && t.dim(1) == 4) {
        for (int64_t h = 0; h < t.dim(0); ++h) {
          const float* f = t.data() + 4 * h;
          const bool q = f[0] == 1.0f;
          (q ? tally.s_fp8_heads : tally.s_full_heads) += 1;
          (q ? tally.s_fp8_floats : tally.s_full_floats) +=
              pic::head_s_floats(q, static_cast<int>(f[2]), static_cast<int>(f[3]));
        }
      } else if (what == "Tform") {
        // dk: from S [H, dk, dv], or from Sform's rows (H, 4: form, packing, dk, dv)
        const auto s = e->arrays.find(base + "S");
        const auto sf = e->arrays.find(base + "Sform");
        const auto pk = e->arrays.find(base + "Tpack");
        int dk = 0;
        if (s != e->arrays.end() && s->second.rank() == 3)
          dk = static_cast<int>(s->second.dim(1));
        else if (sf != e->arrays.end() && sf->second.numel() >= 4)
          dk = static_cast<int>(sf->second.data()[2]);
        if (dk <= 0) continue;
        pic::PackedT p;
        p.forms = t.to_vector();
        if (pk != e->arrays.end()) p.packed = pk->second.to_vector();
        for (size_t h = 0; 2 * h + 1 < p.forms.size(); ++h) {
          pic::HeadChoice c;
          c.form = static_cast<pic::HeadForm>(static_cast<int>(p.forms[2 * h]));
          c.rank = static_cast<int>(p.forms[2 * h + 1]);
          p.choices.push_back(c);
        }
        pic::tally(p, dk, tally);
      } else if (what == "T" && t.rank() == 3) {
        tally.heads[static_cast<int>(pic::HeadForm::Dense)] += t.dim(0);
        tally.floats[static_cast<int>(pic::HeadForm::Dense)] += t.numel();
      } else if (what == "T" && t.rank() == 1) {
        tally.heads[static_cast<int>(pic::HeadForm::Scalar)] += t.dim(0);
        tally.floats[static_cast<int>(pic::HeadForm::Scalar)] += t.numel();
      } else if (what == "T" || what == "X" || what == "Y") {  // the WY form
        if (what == "T") wy_heads += t.dim(0);
        wy_values += t.numel();
      }
    }
  }
  std::printf("T by form      (every entry read; bytes as stored)\n");
  std::printf("  %-12s %10s %12s\n", "form", "heads", "MiB");
  for (int f = 0; f < pic::kHeadForms; ++f)
    std::printf("  %-12s %10lld %12.4f\n", pic::head_form_name(static_cast<pic::HeadForm>(f)),
                static_cast<long long>(tally.heads[f]),
                mib(static_cast<uint64_t>(tally.floats[f]) * el));
  if (wy_heads > 0)
    std::printf("  %-12s %10lld %12.4f\n", "WY (KDA)", static_cast<long long>(wy_heads),
                mib(static_cast<uint64_t>(wy_values) * el));
  std::printf("S by form\n");
  std::printf("  %-12s %10lld %12.4f\n", "as stored", static_cast<long long>(tally.s_full_heads),
              mib(static_cast<uint64_t>(tally.s_full_floats) * el));
  std::printf("  %-12s %10lld %12.4f\n", "fp8", static_cast<long long>(tally.s_fp8_heads),
              mib(static_cast<uint64_t>(tally.s_fp8_floats) * el));
  std::printf("per layer      %12s %12s %12s\n", "T MiB", "S MiB", "conv MiB");
  for (auto& [layer, parts] : by_layer)
    std::printf("  linear %-5d %12.4f %12.4f %12.4f\n", layer, mib(parts["T"]), mib(parts["S"]),
                mib(parts["conv"]));
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
  if (a.forms) print_forms(st);
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
  sub->add_flag("--forms", a->forms,
                "read every entry: bytes of T by per-head form, and T / S / conv bytes per layer");
  on_run(sub, [a] { return run_inspect(*a); });
}

}  // namespace hypic::app
