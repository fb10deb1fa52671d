// `hypic warmup`: every document of a corpus becomes a segment entry in the store.
// Resumable: entries already in the store are skipped, so a killed warm-up continues where
// its last committed entry ended. Under mpirun, rank 0 plans (LPT) and writes the store, and
// the other ranks compute entries (pic/distributed.hpp).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "app/pic_inputs.hpp"
#include "cluster/world.hpp"
#include "hypic/kernels/blas.hpp"
#include "pic/distributed.hpp"
#include "pic/junction.hpp"
#include "pic/segment_entry.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {
struct WarmupArgs {
  std::string model, corpus, store, junction = "8", dtype = "bf16", on_bad_line = "fail";
  int ranks = 0;
  bool sync = false;
  bool repair = false;
};

int run_warmup(const WarmupArgs& a) {
  cluster::check_world_size(a.ranks);
  const cluster::Communicator comm = cluster::Communicator::world().duplicate();
  const cluster::WorldInfo world = cluster::describe_world(comm.get());
  kernels::set_blas_threads(cluster::blas_threads_per_rank(world));
  const pic::JunctionSpec junction = pic::JunctionSpec::parse(a.junction);
  const store::StoreDtype dtype = store::parse_dtype(a.dtype);
  LoadedPicModel m = load_pic_model(a.model);
  pic::WarmupOptions wo;
  wo.junction = junction;
  if (world.rank != 0) {  // a worker: computes what rank 0 sends until it says stop
    pic::warmup_across_ranks(comm.get(), *m.model, m.fingerprint, {}, nullptr, wo);
    return 0;
  }
  const model::ModelConfig& cfg = m.model->config();
  const Corpus corpus =
      read_corpus(a.corpus, m.tokenizer, cfg, parse_bad_line_policy(a.on_bad_line));

  store::SegmentStore st =
      open_store_for_writing(a.store, m.fingerprint, junction.store_code(), dtype, a.sync);
  if (st.dtype() != dtype)
    std::fprintf(stderr, "warmup: store %s keeps its dtype %s (--dtype %s applies to new stores)\n",
                 a.store.c_str(), store::dtype_name(st.dtype()).c_str(), a.dtype.c_str());

  if (a.repair) {  // checks every checksum; damaged entries then count as missing
    const store::VerifyReport v = st.verify();
    std::fprintf(stderr, "warmup: verified %llu entries, %zu damaged (recomputed below)\n",
                 static_cast<unsigned long long>(v.entries_checked), v.damaged.size());
  }
  std::vector<std::vector<int32_t>> docs;
  docs.reserve(corpus.docs.size());
  for (const CorpusDoc& d : corpus.docs) {
    docs.push_back(d.tokens);
    wo.labels.push_back(d.id);
  }
  wo.after_death = "the store " + a.store +
                   " keeps every entry committed so far (hypic inspect --store " + a.store +
                   " --verify checks it); rerun the same command to resume";

  wo.cost = pic::load_cost_model_or_default(a.store);
  const bool tty = isatty(fileno(stderr));
  wo.progress = [tty](const std::string& line, bool final) {
    std::fprintf(stderr, "%swarmup: %s%s", tty ? "\r" : "", line.c_str(),
                 tty && !final ? "" : "\n");
    std::fflush(stderr);
  };
  if (world.size > 1)
    std::fprintf(stderr,
                 "warmup: %d ranks (1 planner and writer, %d workers), %d BLAS threads each\n",
                 world.size, world.size - 1, cluster::blas_threads_per_rank(world));
  const pic::WarmupResult res =
      pic::warmup_across_ranks(comm.get(), *m.model, m.fingerprint, docs, &st, wo);

  // Measured times refine the cost model that plans the next run.
  if (res.samples.size() >= 3) {
    cluster::CostModel fitted = cluster::CostModel::fit(res.samples);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    fitted.provenance = m.fingerprint + ", " + cfg.layout_string() + ", " + host + ", " +
                        std::to_string(cluster::blas_threads_per_rank(world)) + " BLAS threads";
    fitted.save(pic::cost_model_path(a.store));
  }
  const double dt = res.seconds;
  const store::StoreStats stats = st.stats();
  st.close();
  std::printf(
      "warmup: %zu entries: %zu computed, %zu already in the store; %lld tokens computed "
      "in %.2f s (%.0f tokens/s)\n",
      res.total, res.computed, res.present, static_cast<long long>(res.computed_tokens), dt,
      dt > 0 ? res.computed_tokens / dt : 0.0);
  std::printf("store %s: %llu entries, %llu tokens, %.1f MiB, %s, junction %s\n", a.store.c_str(),
              static_cast<unsigned long long>(stats.entries),
              static_cast<unsigned long long>(stats.tokens), stats.file_bytes / 1048576.0,
              store::dtype_name(stats.dtype).c_str(),
              pic::JunctionSpec::from_store_code(stats.junction).to_string().c_str());
  return 0;
}

}  // namespace

void add_warmup_command(CLI::App& app) {
  auto* sub = app.add_subcommand("warmup", "Compute a corpus's segment entries into the store");
  auto a = std::make_shared<WarmupArgs>();
  sub->add_option("--model", a->model, "Hugging Face model folder")->required();
  sub->add_option("--corpus", a->corpus, "JSONL lines {\"id\", \"text\" | \"tokens\"}")->required();
  sub->add_option("--store", a->store, "segment store (HDF5), created if absent")->required();
  sub->add_option("--junction", a->junction, "junction window: tokens, or a share in (0,1]")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "stored element type of a new store: f32, bf16, f16")
      ->capture_default_str();
  sub->add_option("--on-bad-line", a->on_bad_line, "fail | skip")->capture_default_str();
  sub->add_flag("--repair", a->repair,
                "verify every stored entry first and recompute damaged ones");
  sub->add_option("--ranks", a->ranks,
                  "MPI ranks this job must have (0: whatever the launcher started)")
      ->capture_default_str()
      ->check(non_negative_count());
  sub->add_flag("--sync", a->sync, "fsync after every entry (survives power loss)");
  on_run(sub, [a] { return run_warmup(*a); });
}

}  // namespace hypic::app
