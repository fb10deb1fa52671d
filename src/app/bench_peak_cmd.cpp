// `hypic bench peak`: the machine's floating-point peak per instruction set, measured by
// register-resident loops (src/bench/peak.*, kernels/host/cpu.cpp), with the CPU model named.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "bench/peak.hpp"
#include "hypic/error.hpp"

namespace hypic::app {

void add_bench_peak(CLI::App& bench) {
  auto* sub = bench.add_subcommand(
      "peak",
      "Floating-point peak per instruction set (AVX2 FMA, AVX-512 FMA, AVX-512 BF16, AMX) from "
      "register-resident loops, per thread count");
  struct Args {
    bench::PeakOptions options;
    std::string json;
  };
  auto a = std::make_shared<Args>();
  sub->add_option("--thread-counts", a->options.threads,
                  "thread counts to measure (default: 1 and --threads)")
      ->delimiter(',');
  sub->add_option("--seconds", a->options.seconds, "seconds per timed run")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str();
  sub->add_option("--reps", a->options.reps, "timed runs per rate (the best counts)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  sub->add_option("--json", a->json, "write the figures to this JSON file");
  on_run(sub, [a] {
    for (const int t : a->options.threads)
      if (t < 1 || t > 4096) throw Error("bench peak: --thread-counts must be 1 to 4096");
    const bench::PeakResult r = bench::run_peak(a->options);
    std::printf("CPU: %s; instruction sets usable here: %s\n", r.cpu_model.c_str(), r.isa.c_str());
    std::printf("%-18s %8s %12s %14s\n", "loop", "threads", "GFLOP/s", "GFLOP/s/thread");
    nlohmann::json rows = nlohmann::json::array();
    for (const bench::PeakRate& rate : r.rates) {
      if (rate.available)
        std::printf("%-18s %8d %12.1f %14.1f\n", rate.loop.c_str(), rate.threads, rate.gflops,
                    rate.gflops_per_thread);
      else
        std::printf("%-18s %8s %12s   (%s)\n", rate.loop.c_str(), "-", "-", rate.why_not.c_str());
      nlohmann::json row = {{"loop", rate.loop}, {"available", rate.available}};
      if (rate.available) {
        row["threads"] = rate.threads;
        row["gflops"] = rate.gflops;
        row["gflops_per_thread"] = rate.gflops_per_thread;
      } else {
        row["why_not"] = rate.why_not;
      }
      rows.push_back(row);
    }
    if (!a->json.empty()) {
      const nlohmann::json j = {{"bench", "peak"},
                                {"cpu_model", r.cpu_model},
                                {"isa", r.isa},
                                {"seconds", a->options.seconds},
                                {"reps", a->options.reps},
                                {"rates", rows}};
      write_text_file(a->json, j.dump(2) + "\n");
      std::printf("figures written to %s\n", a->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
