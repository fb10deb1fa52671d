// `hypic bench tokenize`: encode throughput of the tokenizer a model folder uses.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "common/error.hpp"
#include "model/tokenizer.hpp"

namespace hypic::app {

void add_bench_tokenize(CLI::App& bench);

namespace {

// A mixed sample when no --text is given: English prose, code, numbers, CJK and accents.
std::string sample_text(size_t bytes) {
  static const char* const kParts[] = {
      "Position-independent caching lets a prompt reuse segments in any order; ",
      "the router finds 40 hits and 3 colds, and rank 2 recomputes 1,024 tokens. ",
      "It's what we've wanted: they'd agree. ",
      "def encode(text):\n    return [vocab[t] for t in split(text)]\n",
      "位置无关缓存可以重复使用文档片段。",
      "Zoë's café serves crème brûlée at 3.50 EUR.\n\n",
  };
  std::string out;
  for (size_t i = 0; out.size() < bytes; ++i) out += kParts[i % (sizeof kParts / sizeof *kParts)];
  return out;
}

}  // namespace

void add_bench_tokenize(CLI::App& bench) {
  auto* sub = bench.add_subcommand("tokenize", "Tokenizer encode throughput (MB/s)");
  struct Args {
    std::string model, text, json;
    double seconds = 1.0;
    size_t sample_bytes = 4 << 20;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--model", args->model, "model folder (its tokenizer.json) or a tokenizer.json")
      ->required();
  sub->add_option("--text", args->text, "UTF-8 text file to encode (default: a mixed sample)");
  sub->add_option("--sample-bytes", args->sample_bytes, "size of the default sample")
      ->capture_default_str();
  sub->add_option("--seconds", args->seconds, "minimum timed seconds per measurement")
      ->capture_default_str();
  sub->add_option("--json", args->json, "write the figures to this JSON file");
  on_run(sub, [args] {
    const model::Tokenizer tok = model::Tokenizer::for_model(args->model);
    std::string text;
    if (args->text.empty()) {
      text = sample_text(args->sample_bytes);
    } else {
      std::ifstream in(args->text, std::ios::binary);
      require(in.good(), "cannot open --text file " + args->text);
      std::ostringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    require(!text.empty(), "the text to encode is empty");
    std::printf("tokenizer: %s\n", tok.describe().c_str());
    const size_t tokens = tok.encode(text).size();
    const double warm = model::tokenizer_bench_mb_per_s(tok, text, args->seconds, false);
    const double cold = model::tokenizer_bench_mb_per_s(tok, text, args->seconds, true);
    std::printf("text: %zu bytes, %zu tokens (%.2f bytes/token)\n", text.size(), tokens,
                double(text.size()) / double(std::max<size_t>(tokens, 1)));
    std::printf(
        "encode: %.1f MB/s with the per-word merge cache, %.1f MB/s with it emptied per pass\n",
        warm, cold);
    if (!args->json.empty()) {
      const nlohmann::json j = {{"tokenizer", tok.describe()},
                                {"bytes", text.size()},
                                {"tokens", tokens},
                                {"mb_per_s_cached", warm},
                                {"mb_per_s_cold_cache", cold}};
      write_text_file(args->json, j.dump(2) + "\n");
      std::printf("figures written to %s\n", args->json.c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
