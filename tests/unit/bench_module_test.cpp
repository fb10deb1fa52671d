// The benchmark module (src/bench) called directly, without the CLI, on tiny shapes: the
// results must be complete and consistent with their parts. Nothing here asserts on speed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>

#include "bench/blas.hpp"
#include "bench/compose.hpp"
#include "bench/forward.hpp"
#include "bench/qps.hpp"
#include "bench/scaling.hpp"
#include "bench/timing.hpp"
#include "bench/tokenize.hpp"
#include "bench/ttft.hpp"
#include "cluster/world.hpp"
#include "hypic/error.hpp"
#include "model/presets.hpp"
#include "temp_path.hpp"

namespace {
namespace bench_module_test {
namespace bench = hypic::bench;
namespace model = hypic::model;

const std::string kData = HYPIC_TEST_DATA_DIR;

bool positive(double x) {
  return std::isfinite(x) && x > 0;
}

model::ModelConfig tiny() {
  return model::preset_config(model::parse_arch("qwen3_5"), "tiny");
}

TEST(BenchModule, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(bench::median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(bench::median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(bench::upper_median({4, 1, 3, 2}), 3.0);
  EXPECT_DOUBLE_EQ(bench::median({}), 0.0);
  int calls = 0;
  EXPECT_GE(bench::median_seconds(3, [&] { ++calls; }), 0.0);
  EXPECT_EQ(calls, 4);  // one warm-up, three timed
}

TEST(BenchModule, BlasRatePerThreadCount) {
  const bench::BlasResult r = bench::run_blas({64, 2});
  ASSERT_EQ(r.rates.size(), size_t(std::max(1, r.blas.threads)));
  for (size_t i = 0; i < r.rates.size(); ++i) {
    EXPECT_EQ(r.rates[i].threads, int(i) + 1);
    EXPECT_TRUE(positive(r.rates[i].gflops)) << r.rates[i].gflops;
  }
  EXPECT_EQ(hypic::kernels::blas_info().threads, r.blas.threads);  // left as it was found
  // The few-row section: every default shape, timed both ways, with linear's tile count.
  const bench::BlasOptions defaults;
  ASSERT_EQ(r.few_rows.size(), defaults.few_row_shapes.size());
  for (const bench::FewRowRate& f : r.few_rows) {
    EXPECT_EQ(f.tiles, hypic::kernels::linear_tiling(f.m, f.n, f.k).tiles());
    EXPECT_TRUE(positive(f.tiled_us)) << f.m << "x" << f.n << "x" << f.k;
    EXPECT_TRUE(positive(f.one_call_us)) << f.m << "x" << f.n << "x" << f.k;
  }
  EXPECT_THROW(bench::run_blas({0, 2}), hypic::Error);
}

TEST(BenchModule, ForwardFiguresAddUp) {
  bench::ForwardOptions o;
  o.tokens = 24;
  o.reps = 2;
  o.sgemm_n = 64;
  o.sgemm_reps = 2;
  const bench::ForwardResult r = bench::run_forward(kData + "/golden/qwen3_5", o);
  ASSERT_EQ(r.prefill_seconds.size(), 2u);
  for (double t : r.prefill_seconds) EXPECT_TRUE(positive(t));
  EXPECT_DOUBLE_EQ(r.prefill_seconds_median, bench::median(r.prefill_seconds));
  EXPECT_DOUBLE_EQ(r.tokens_per_second, 24 / r.prefill_seconds_median);
  EXPECT_TRUE(positive(r.flops.total()));
  EXPECT_DOUBLE_EQ(r.achieved_gflops, r.flops.total() / r.prefill_seconds_median / 1e9);
  EXPECT_TRUE(positive(r.sgemm_gflops));
  EXPECT_DOUBLE_EQ(r.fraction_of_sgemm, r.achieved_gflops / r.sgemm_gflops);
  EXPECT_DOUBLE_EQ(r.weights_bytes, r.parameter_count * sizeof(float));
  EXPECT_EQ(r.config.num_hidden_layers, 6);  // the golden qwen3_5 checkpoint
  EXPECT_TRUE(positive(r.cache_bytes));
  ASSERT_EQ(r.seconds_by_part.size(), 12u);
  EXPECT_EQ(r.seconds_by_part.front().first, "gdn_proj");
  EXPECT_EQ(r.seconds_by_part.back().first, "lm_head");
  double parts = 0;
  for (const auto& [name, s] : r.seconds_by_part) {
    EXPECT_GE(s, 0.0) << name;
    parts += s;
  }
  EXPECT_TRUE(positive(parts));
  EXPECT_LE(parts, r.parts_total * (1 + 1e-9));
  EXPECT_THROW(bench::run_forward(kData + "/no-such-model", o), hypic::Error);
}

TEST(BenchModule, ComposeShareAndSummaryBytes) {
  bench::ComposeOptions o;
  o.base = tiny();
  o.tokens = 40;
  o.hidden = 64;
  o.key_heads = 2;
  o.value_heads = 4;
  o.head_dim = 16;
  o.reps = 2;
  o.junction = 0;  // no S(R|0) correction: the build is the recurrence's extra time alone
  const bench::ComposeResult r = bench::run_compose(o);
  for (double t : {r.layer_forward_s, r.recurrence_s, r.recurrence_with_t_s, r.apply_s})
    EXPECT_TRUE(positive(t)) << t;
  EXPECT_DOUBLE_EQ(r.build_summary_s, std::max(0.0, r.recurrence_with_t_s - r.recurrence_s));
  EXPECT_DOUBLE_EQ(r.build_percent_of_layer, 100.0 * r.build_summary_s / r.layer_forward_s);
  ASSERT_EQ(r.summary_bytes.size(), 4u);
  const char* structures[] = {"scalar", "diagonal", "dense", "lowrank"};
  const size_t state_floats = 4 * 16 * 16;  // S: heads × dk × dv
  for (size_t i = 0; i < 4; ++i) {
    const bench::SummaryBytes& row = r.summary_bytes[i];
    EXPECT_EQ(row.structure, structures[i]);
    ASSERT_EQ(row.by_dtype.size(), 3u);
    EXPECT_EQ(row.by_dtype[0].first, "f32");
    EXPECT_GT(row.by_dtype[0].second, state_floats * 4);            // T adds to S
    EXPECT_EQ(row.by_dtype[1].second * 2, row.by_dtype[0].second);  // bf16: half of f32
    EXPECT_EQ(row.by_dtype[2].second, row.by_dtype[1].second);
  }
  EXPECT_EQ(r.summary_bytes[0].by_dtype[0].second, (4 + state_floats) * 4);  // one per head
  EXPECT_EQ(r.summary_bytes[2].by_dtype[0].second, 2 * state_floats * 4);    // dense dk × dk
  o.value_heads = 3;  // not a multiple of the key heads
  EXPECT_THROW(bench::run_compose(o), hypic::Error);
}

// One linear layer of each kind at its architecture's tiny preset: the parts add up, the
// summary is kept in the kind's structure (scalar per head for lightning layers, the WY form
// for a short KDA segment), and the entry's bytes are that structure's.
TEST(BenchModule, ComposeEveryLinearKind) {
  struct Case {
    const char* arch;
    const char* kind;
    int tokens;
    const char* form;
  };
  for (const Case& c :
       {Case{"qwen3_5_moe", "gated deltanet", 40, "dense"}, Case{"kimi_linear", "kda", 40, "dense"},
        Case{"kimi_linear", "kda", 10, "lowrank"},  // 6 cached ≤ 16/2 − 1
        Case{"minimax", "lightning", 40, "scalar"},
        Case{"bailing_moe_linear", "lightning (RoPE)", 40, "scalar"}}) {
    SCOPED_TRACE(std::string(c.arch) + " " + std::to_string(c.tokens));
    bench::ComposeOptions o;
    o.base = model::preset_config(model::parse_arch(c.arch), "tiny");
    o.tokens = c.tokens;
    o.junction = 4;
    o.reps = 1;
    const bench::ComposeResult r = bench::run_compose(o);
    EXPECT_EQ(r.arch, c.arch);
    EXPECT_EQ(r.layer_kind, c.kind);
    EXPECT_EQ(r.t_form, c.form);
    for (double t : {r.layer_forward_s, r.layer_forward_with_summary_s, r.recurrence_s,
                     r.recurrence_with_t_s, r.apply_s})
      EXPECT_TRUE(positive(t)) << t;
    EXPECT_LE(r.recurrence_s, r.layer_forward_s);
    EXPECT_DOUBLE_EQ(r.s0_s, r.apply_s);  // one application of T, with the window
    EXPECT_DOUBLE_EQ(r.build_summary_s,
                     std::max(0.0, r.recurrence_with_t_s - r.recurrence_s) + r.s0_s);
    EXPECT_DOUBLE_EQ(r.build_percent_of_layer, 100.0 * r.build_summary_s / r.layer_forward_s);
    const int cached = c.tokens - 4;
    const size_t H = r.value_heads, dk = r.dk, dv = r.dv;
    size_t t_values = H * dk * dk;
    if (std::string(c.form) == "scalar") t_values = H;
    if (std::string(c.form) == "lowrank") t_values = H * (dk + 2 * cached * dk);
    EXPECT_EQ(r.entry_layer_bytes_bf16, (t_values + H * dk * dv + r.conv_values) * 2);
    EXPECT_DOUBLE_EQ(r.entry_bytes_per_token_bf16, double(r.entry_layer_bytes_bf16) / cached);
    EXPECT_EQ(r.conv_values > 0, std::string(c.form) != "scalar");  // lightning: no conv
    // The kept structure is exact for the kind and the smallest exact one.
    size_t kept = 0, smallest = SIZE_MAX;
    for (const bench::SummaryBytes& row : r.summary_bytes) {
      if (row.exact) smallest = std::min(smallest, row.by_dtype[0].second);
      if (row.chosen) {
        kept = row.by_dtype[0].second;
        EXPECT_TRUE(row.exact) << row.structure;
      }
    }
    EXPECT_EQ(kept, smallest);
    EXPECT_EQ(r.lowrank_max_tokens, std::string(c.kind) == "kda" ? 7 : 0);
  }
  bench::ComposeOptions o;
  o.base = model::preset_config(model::parse_arch("minimax"), "tiny");
  o.layer = 3;  // a softmax-attention layer
  EXPECT_THROW(bench::run_compose(o), hypic::Error);
}

TEST(BenchModule, TokenizeCountsWhatItEncodes) {
  const std::string text = bench::sample_text(3000);
  EXPECT_GE(text.size(), 3000u);
  EXPECT_NE(text.find("位置"), std::string::npos);
  const auto tok = model::Tokenizer::for_model(kData + "/tokenizer");
  const bench::TokenizeResult r = bench::run_tokenize(tok, text, 0.02);
  EXPECT_EQ(r.bytes, text.size());
  EXPECT_EQ(r.tokens, tok.encode(text).size());
  EXPECT_GT(r.tokens, 100u);
  EXPECT_TRUE(positive(r.mb_per_s_cached));
  EXPECT_TRUE(positive(r.mb_per_s_cold_cache));
  EXPECT_THROW(bench::run_tokenize(tok, "", 0.02), hypic::Error);
}

bench::TtftOptions tiny_trace() {
  bench::TtftOptions o;
  o.model = tiny();
  o.segments = 3;
  o.segment_tokens = 24;
  o.corpus = 4;
  o.queries = 3;
  o.question_tokens = 4;
  o.memory_budget_mib = 64;
  return o;
}

TEST(BenchModule, TtftEveryModeAnswersEveryQuery) {
  const test_util::TempPath store("bench_ttft_store");
  bench::TtftOptions o = tiny_trace();
  o.store = store.str();
  int ready = 0, warmed = 0;
  std::vector<std::string> done;
  bench::TtftProgress progress;
  progress.model_ready = [&](const bench::TtftResult& r) {
    ++ready;
    EXPECT_TRUE(positive(r.parameter_count));
  };
  progress.store_warmed = [&](const bench::TtftResult& r) {
    ++warmed;
    EXPECT_EQ(r.warmup_entries, 4u);
  };
  progress.mode_done = [&](const bench::TtftModeRun& run) { done.push_back(run.name); };
  const bench::TtftResult r = bench::run_ttft(o, progress);
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(warmed, 1);
  const std::vector<std::string> names = {"full", "prefix", "pic", "pic-addition",
                                          "pic (store reads only)"};
  EXPECT_EQ(done, names);
  EXPECT_EQ(r.prompt_tokens, 3 * 24 + 4);
  EXPECT_EQ(r.warmup_entries, 4u);
  EXPECT_TRUE(positive(r.warmup_seconds));
  EXPECT_GT(r.store_bytes, 0u);
  EXPECT_TRUE(std::filesystem::exists(store.str()));  // kept: --store was given
  ASSERT_EQ(r.modes.size(), names.size());
  for (const bench::TtftModeRun& run : r.modes) {
    ASSERT_EQ(run.results.size(), 3u) << run.name;
    ASSERT_EQ(run.ttft_ms.size(), 3u) << run.name;
    for (size_t q = 0; q < 3; ++q) {
      EXPECT_TRUE(positive(run.ttft_ms[q])) << run.name;
      EXPECT_DOUBLE_EQ(run.ttft_ms[q], run.results[q].times.ttft * 1e3);
      EXPECT_EQ(run.results[q].id, "q" + std::to_string(q));
      EXPECT_EQ(run.results[q].segments, 3);
      EXPECT_EQ(run.results[q].answer.size(), 1u);
      EXPECT_TRUE(run.results[q].first_logits.empty());
      if (hypic::pic::uses_entries(run.mode)) {
        EXPECT_EQ(run.results[q].cold, 0) << run.name;  // every document was warmed
        EXPECT_EQ(run.results[q].hits_memory + run.results[q].hits_store, 3) << run.name;
      }
    }
    EXPECT_DOUBLE_EQ(run.ttft_p50_ms, bench::median(run.ttft_ms));
    EXPECT_TRUE(positive(run.forward.total())) << run.name;
  }
  EXPECT_EQ(r.modes[4].memory_budget_bytes, 0u);
  EXPECT_EQ(r.modes[4].memory_bytes, 0u);
  ASSERT_TRUE(r.ratio_prefix_over_pic_p50 && r.ratio_full_over_pic_p50);
  EXPECT_DOUBLE_EQ(*r.ratio_prefix_over_pic_p50, r.modes[1].ttft_p50_ms / r.modes[2].ttft_p50_ms);
  EXPECT_DOUBLE_EQ(*r.ratio_full_over_pic_p50, r.modes[0].ttft_p50_ms / r.modes[2].ttft_p50_ms);
}

TEST(BenchModule, TtftWithoutPicHasNoRatiosAndRemovesItsStore) {
  bench::TtftOptions o = tiny_trace();
  o.modes = {"full"};
  o.queries = 1;
  const bench::TtftResult r = bench::run_ttft(o);
  ASSERT_EQ(r.modes.size(), 1u);
  EXPECT_EQ(r.modes[0].results.size(), 1u);
  EXPECT_FALSE(r.ratio_prefix_over_pic_p50);
  EXPECT_FALSE(r.ratio_full_over_pic_p50);
  const auto temp = std::filesystem::temp_directory_path() /
                    ("hypic-bench-ttft-" + std::to_string(getpid()) + ".h5");
  EXPECT_FALSE(std::filesystem::exists(temp));
  o.modes = {"fast"};
  EXPECT_THROW(bench::run_ttft(o), hypic::Error);
  o.modes = {"full"};
  o.corpus = 2;  // fewer documents than segments per query
  EXPECT_THROW(bench::run_ttft(o), hypic::Error);
}

TEST(BenchModule, TtftSweepGivesOneResultPerSegmentCountOnOneStore) {
  bench::TtftOptions o = tiny_trace();
  o.modes = {"full", "prefix", "pic"};
  o.queries = 1;
  o.corpus = 2;  // raised to the largest count by the caller, else refused
  EXPECT_THROW(bench::run_ttft_sweep(o, {2, 5}), hypic::Error);
  o.corpus = 5;
  int warmed = 0, traces = 0, done = 0;
  bench::TtftProgress progress;
  progress.store_warmed = [&](const bench::TtftResult& r) {
    ++warmed;
    EXPECT_EQ(r.warmup_entries, 5u);  // the corpus once, for every count
  };
  progress.trace_ready = [&](const bench::TtftResult&) { ++traces; };
  progress.trace_done = [&](const bench::TtftResult& r) {
    ++done;
    EXPECT_TRUE(r.ratio_prefix_over_pic_p50.has_value());
  };
  const std::vector<bench::TtftResult> rs = bench::run_ttft_sweep(o, {2, 5}, progress);
  EXPECT_EQ(warmed, 1);
  EXPECT_EQ(traces, 2);
  EXPECT_EQ(done, 2);
  ASSERT_EQ(rs.size(), 2u);
  for (size_t i = 0; i < rs.size(); ++i) {
    const int k = i == 0 ? 2 : 5;
    EXPECT_EQ(rs[i].segments, k);
    EXPECT_EQ(rs[i].prompt_tokens, k * 24 + 4);
    ASSERT_EQ(rs[i].modes.size(), 4u);  // and pic from the store only
    for (const bench::TtftModeRun& run : rs[i].modes) {
      ASSERT_EQ(run.results.size(), 1u);
      EXPECT_EQ(run.results[0].segments, k) << run.name;
      EXPECT_EQ(run.results[0].prompt_tokens, k * 24 + 4) << run.name;
      if (hypic::pic::uses_entries(run.mode)) {
        EXPECT_EQ(run.results[0].cold, 0);
        EXPECT_EQ(run.results[0].tokens_recomputed, k * 8 + 4);  // windows and question
      }
    }
    ASSERT_TRUE(rs[i].ratio_full_over_pic_p50);
    EXPECT_DOUBLE_EQ(*rs[i].ratio_full_over_pic_p50,
                     rs[i].modes[0].ttft_p50_ms / rs[i].modes[2].ttft_p50_ms);
  }
}

bench::QpsOptions tiny_qps() {
  bench::QpsOptions o;
  o.model = tiny();
  o.corpus = 8;
  o.segment_tokens = 16;
  o.min_segments = 2;
  o.max_segments = 4;
  o.question_tokens = 4;
  o.queries = 6;
  o.cold_share = 0.25;
  o.loads = {0.05, 1e4};  // the second one sends the whole trace at once
  o.refine_steps = 1;
  return o;
}

TEST(BenchModule, QpsServesEveryModeAtEveryLoadAndFindsTheSlaEdge) {
  const bench::QpsOptions o = tiny_qps();
  int calibrated = 0, points = 0;
  bench::QpsProgress progress;
  progress.calibrated = [&](const bench::QpsModeResult& m) {
    ++calibrated;
    EXPECT_TRUE(m.points.empty());
  };
  progress.point_done = [&](const bench::QpsModeResult&, const bench::QpsPoint&) { ++points; };
  const bench::QpsResult r = bench::run_qps(o, progress);
  EXPECT_EQ(calibrated, 3);
  EXPECT_EQ(r.warmup_entries, 8u);
  ASSERT_EQ(r.trace.size(), 6u);
  int64_t cold = 0, segments = 0;
  for (const bench::QpsTraceQuery& q : r.trace) {
    EXPECT_GE(q.documents.size(), 2u);
    EXPECT_LE(q.documents.size(), 4u);
    EXPECT_TRUE(positive(q.gap));
    for (int64_t d : q.documents) {
      EXPECT_LT(d, 8);
      ++segments;
      cold += d < 0;
    }
  }
  EXPECT_DOUBLE_EQ(r.cold_segments_share, double(cold) / double(segments));
  ASSERT_EQ(r.modes.size(), 3u);
  double slowest = 0;
  for (const bench::QpsModeResult& m : r.modes) slowest = std::max(slowest, m.unloaded_ttft_p99_ms);
  EXPECT_DOUBLE_EQ(r.sla_ms, 2 * slowest);  // the default SLA
  int measured = 0;
  for (const bench::QpsModeResult& m : r.modes) {
    EXPECT_TRUE(positive(m.capacity_qps)) << m.mode;
    EXPECT_TRUE(positive(m.unloaded_service_ms)) << m.mode;
    ASSERT_GE(m.points.size(), 1u) << m.mode;
    measured += static_cast<int>(m.points.size());
    double best_ok = 0;
    for (size_t i = 0; i < m.points.size(); ++i) {
      const bench::QpsPoint& p = m.points[i];
      if (i > 0) {
        EXPECT_GT(p.rate, m.points[i - 1].rate) << m.mode;
      }
      EXPECT_TRUE(positive(p.ttft_p50_ms)) << m.mode;
      EXPECT_LE(p.ttft_p50_ms, p.ttft_p99_ms) << m.mode;
      EXPECT_GT(p.utilization, 0) << m.mode;
      EXPECT_LE(p.utilization, 1.0 + 1e-9) << m.mode;
      EXPECT_NEAR(p.offered_load, p.rate * p.service_mean_ms / 1e3, 1e-9 * p.offered_load);
      EXPECT_EQ(p.within_sla, p.ttft_p99_ms <= r.sla_ms && p.offered_load < 1) << m.mode;
      if (p.within_sla) best_ok = std::max(best_ok, p.rate);
    }
    EXPECT_DOUBLE_EQ(m.sustainable_qps, best_ok) << m.mode;
  }
  EXPECT_EQ(points, measured);

  // An SLA nothing meets: one load point per mode (the grid stops at the first miss, and
  // there is nothing to bisect), sustainable 0. One everything meets: the overload still
  // counts as a miss.
  bench::QpsOptions strict = o;
  strict.sla_ms = 1e-6;
  for (const bench::QpsModeResult& m : bench::run_qps(strict).modes) {
    ASSERT_EQ(m.points.size(), 1u) << m.mode;
    EXPECT_FALSE(m.points[0].within_sla);
    EXPECT_EQ(m.sustainable_qps, 0.0);
  }
  bench::QpsOptions loose = o;
  loose.sla_ms = 1e9;
  const bench::QpsResult lr = bench::run_qps(loose);
  EXPECT_EQ(lr.sla_ms, 1e9);
  for (const bench::QpsModeResult& m : lr.modes) {
    // 10^4 x capacity overloads the server whatever the SLA: the grid stops there.
    ASSERT_GE(m.points.size(), 2u) << m.mode;
    EXPECT_FALSE(m.points.back().within_sla) << m.mode;
    EXPECT_GE(m.points.back().offered_load, 1.0) << m.mode;
    EXPECT_LT(m.sustainable_qps, m.points.back().rate) << m.mode;
  }
}

TEST(BenchModule, QpsRefusesBadOptions) {
  bench::QpsOptions o = tiny_qps();
  o.max_segments = 9;  // more than the corpus
  EXPECT_THROW(bench::run_qps(o), hypic::Error);
  o = tiny_qps();
  o.cold_share = 1.5;
  EXPECT_THROW(bench::run_qps(o), hypic::Error);
  o = tiny_qps();
  o.modes = {"fast"};
  EXPECT_THROW(bench::run_qps(o), hypic::Error);
}

TEST(BenchModule, ScalingOneRankMeasuresAndSimulates) {
  const hypic::cluster::Communicator comm = hypic::cluster::Communicator::world().duplicate();
  if (comm.size() != 1) GTEST_SKIP() << "the unit tests run as one process";
  bench::ScalingOptions o;
  o.model = tiny();
  o.tokens = 160;
  o.segments = 4;
  o.question_tokens = 4;
  int ready = 0, serial = 0;
  bench::ScalingProgress progress;
  progress.query_ready = [&](const bench::ScalingResult& r) {
    ++ready;
    EXPECT_EQ(r.segments.size(), 4u);
  };
  progress.serial_done = [&](const bench::ScalingResult&) { ++serial; };
  const bench::ScalingResult r = bench::run_scaling(comm.get(), o, progress);
  EXPECT_EQ(ready, 1);
  EXPECT_EQ(serial, 1);
  ASSERT_TRUE(r.root);
  EXPECT_EQ(r.ranks, 1);
  ASSERT_EQ(r.segments.size(), 4u);
  int64_t tokens = 0;
  double compute = 0, compose = 0, bytes = 0;
  for (const bench::ScalingSegment& s : r.segments) {
    EXPECT_GE(s.tokens, 16);
    EXPECT_TRUE(positive(s.compute_s) && positive(s.bytes));
    EXPECT_GE(s.compose_s, 0.0);
    tokens += s.tokens;
    compute += s.compute_s;
    compose += s.compose_s;
    bytes += s.bytes;
  }
  EXPECT_EQ(tokens, 160);
  EXPECT_NEAR(compute, r.compute_s, 1e-12);
  EXPECT_NEAR(compose, r.composition_s, 1e-12);
  EXPECT_NEAR(bytes, r.entry_bytes, 1e-6);
  EXPECT_TRUE(positive(r.question_s));
  EXPECT_DOUBLE_EQ(r.serial_ttft_s, r.compute_s + r.composition_s + r.question_s);
  // 1 worker (one policy), then 2, 8 and 16 workers with three policies each.
  ASSERT_EQ(r.rows.size(), 10u);
  EXPECT_EQ(r.rows[0].workers, 1);
  EXPECT_EQ(r.rows[0].policy, "lpt");
  ASSERT_TRUE(r.rows[0].measured);
  EXPECT_DOUBLE_EQ(r.rows[0].measured->ttft_s, r.serial_ttft_s);
  EXPECT_DOUBLE_EQ(r.rows[0].measured->speedup, 1.0);
  const int workers[] = {2, 2, 2, 8, 8, 8, 16, 16, 16};
  const char* policies[] = {"lpt", "lpt-static", "round-robin"};
  for (size_t i = 1; i < r.rows.size(); ++i) {
    EXPECT_EQ(r.rows[i].workers, workers[i - 1]);
    EXPECT_EQ(r.rows[i].policy, policies[(i - 1) % 3]);
    EXPECT_FALSE(r.rows[i].measured);  // one rank: no workers to measure
  }
  for (const bench::ScalingRow& row : r.rows) {
    EXPECT_TRUE(positive(row.simulated_ttft_s));
    EXPECT_TRUE(positive(row.simulated_speedup));
    EXPECT_GE(row.simulated_steals, 0);
  }
  o.tokens = 40;  // under 16 tokens per segment
  EXPECT_THROW(bench::run_scaling(comm.get(), o), hypic::Error);
}

}  // namespace bench_module_test
}  // namespace
