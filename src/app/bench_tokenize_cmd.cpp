// `hypic bench tokenize`: encode throughput of the tokenizer a model folder uses
// (bench/tokenize.hpp measures; this command parses, calls and reports).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "bench/tokenize.hpp"
#include "common/files.hpp"
#include "hypic/error.hpp"
#include "model/tokenizer.hpp"

namespace hypic::app {
namespace {

std::string read_text(const std::string& path) {
  return read_regular_file(path, "--text file");
}

}  // namespace

void add_bench_tokenize(CLI::App& bench) {
  auto* sub = bench.add_subcommand("tokenize", "Tokenizer encode throughput (MB/s)");
  struct Args {
    std::string model, text, json;
    double seconds = 1.0;
    size_t sample_bytes = 4 << 20;
    bool byte_tokenizer = false;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--model", args->model, "model folder (its tokenizer.json) or a tokenizer.json")
      ->required();
  add_byte_tokenizer_flag(sub, &args->byte_tokenizer);
  sub->add_option("--text", args->text, "UTF-8 text file to encode (default: a mixed sample)");
  sub->add_option("--sample-bytes", args->sample_bytes, "size of the default sample")
      ->capture_default_str();
  sub->add_option("--seconds", args->seconds, "minimum timed seconds per measurement")
      ->capture_default_str();
  sub->add_option("--json", args->json, "write the figures to this JSON file");
  on_run(sub, [args] {
    HYPIC_REQUIRE(args->seconds > 0 && args->seconds <= 86400,
                  "--seconds must be a number of seconds in (0, 86400]");
    const model::Tokenizer tok = model::Tokenizer::for_model(
        args->model, args->byte_tokenizer ? model::Tokenizer::Fallback::kByteLevel
                                          : model::Tokenizer::Fallback::kRefuseText);
    tok.require_text_support();
    const std::string text =
        args->text.empty() ? bench::sample_text(args->sample_bytes) : read_text(args->text);
    std::printf("tokenizer: %s\n", tok.describe().c_str());
    const bench::TokenizeResult r = bench::run_tokenize(tok, text, args->seconds);
    std::printf("text: %zu bytes, %zu tokens (%.2f bytes/token)\n", r.bytes, r.tokens,
                double(r.bytes) / double(std::max<size_t>(r.tokens, 1)));
    std::printf(
        "encode: %.1f MB/s with the per-word merge cache, %.1f MB/s with it emptied per pass\n",
        r.mb_per_s_cached, r.mb_per_s_cold_cache);
    if (!args->json.empty()) {
      const nlohmann::json j = {{"tokenizer", tok.describe()},
                                {"bytes", r.bytes},
                                {"tokens", r.tokens},
                                {"mb_per_s_cached", r.mb_per_s_cached},
                                {"mb_per_s_cold_cache", r.mb_per_s_cold_cache}};
      write_text_file(args->json, j.dump(2) + "\n");
      std::printf("figures written to %s\n", args->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
