// `hypic warmup`: every document of a corpus becomes a segment entry in the store.
// Resumable: entries already in the store are skipped, so a killed warm-up continues where
// its last committed entry ended.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "app/pic_inputs.hpp"
#include "pic/junction.hpp"
#include "pic/segment_entry.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {
using Clock = std::chrono::steady_clock;

std::string clock_text(double seconds) {
  const long s = seconds < 0 ? 0 : static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

struct WarmupArgs {
  std::string model, corpus, store, junction = "8", dtype = "bf16", on_bad_line = "fail";
  bool sync = false;
  bool repair = false;
};

int run_warmup(const WarmupArgs& a) {
  const pic::JunctionSpec junction = pic::JunctionSpec::parse(a.junction);
  const store::StoreDtype dtype = store::parse_dtype(a.dtype);
  LoadedPicModel m = load_pic_model(a.model);
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
  const size_t total = corpus.docs.size();
  int64_t total_tokens = 0;
  for (const CorpusDoc& d : corpus.docs) total_tokens += static_cast<int64_t>(d.tokens.size());
  size_t computed = 0, present = 0;
  int64_t done_tokens = 0, computed_tokens = 0;
  const auto t0 = Clock::now();
  auto last_print = t0 - std::chrono::seconds(10);
  const bool tty = isatty(fileno(stderr));
  auto progress = [&](bool final) {
    const auto now = Clock::now();
    if (!final && now - last_print < std::chrono::milliseconds(500)) return;
    last_print = now;
    const double dt = std::chrono::duration<double>(now - t0).count();
    const double rate = dt > 0 ? computed_tokens / dt : 0;
    const double eta = rate > 0 ? (total_tokens - done_tokens) / rate : 0;
    std::fprintf(
        stderr,
        "%swarmup: %zu/%zu entries (%zu computed, %zu already stored), %.0f tokens/s, ETA %s%s",
        tty ? "\r" : "", computed + present, total, computed, present, rate,
        clock_text(eta).c_str(), tty && !final ? "" : "\n");
    std::fflush(stderr);
  };
  for (const CorpusDoc& d : corpus.docs) {
    const int64_t n = static_cast<int64_t>(d.tokens.size());
    const int w = junction.tokens_for(n);
    const std::string key = store::entry_key(m.fingerprint, d.tokens, w);
    if (st.contains(key)) {
      ++present;
    } else {
      const pic::SegmentEntry e = pic::compute_entry(*m.model, d.tokens, w);
      if (st.put(key, pic::to_store_entry(e)))
        ++computed;
      else
        ++present;  // an earlier line of this corpus had the same tokens
      computed_tokens += n;
    }
    done_tokens += n;
    progress(false);
  }
  progress(true);
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  const store::StoreStats stats = st.stats();
  st.close();
  std::printf(
      "warmup: %zu entries: %zu computed, %zu already in the store; %lld tokens computed "
      "in %.2f s (%.0f tokens/s)\n",
      total, computed, present, static_cast<long long>(computed_tokens), dt,
      dt > 0 ? computed_tokens / dt : 0.0);
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
  sub->add_flag("--sync", a->sync, "fsync after every entry (survives power loss)");
  on_run(sub, [a] { return run_warmup(*a); });
}

}  // namespace hypic::app
