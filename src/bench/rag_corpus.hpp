#pragma once
// What the RAG-like benchmarks (bench ttft, bench qps) share: a random corpus, Zipf
// popularity, and a store warmed with the corpus through the one warm-up path.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/files.hpp"
#include "model/forward.hpp"
#include "pic/junction.hpp"

namespace hypic::bench {

// `count` documents of `tokens` random ids in [0, vocab) each.
std::vector<std::vector<int32_t>> random_documents(int count, int tokens, int vocab,
                                                   std::mt19937_64& rng);

// Popularity weights 1 / rank^s of `count` documents (rank 1 first).
std::vector<double> zipf_weights(size_t count, double s);

// `k` distinct indices drawn by `weights` without replacement, in the order drawn.
std::vector<size_t> draw_distinct(const std::vector<double>& weights, int k, std::mt19937_64& rng);

struct WarmedStore {
  size_t entries = 0;
  double seconds = 0;
  uint64_t file_bytes = 0;
};
// Creates the store at `path` and fills it with every document (cluster::warmup_across_ranks
// in this process alone).
WarmedStore warm_store(model::Model& net, const std::string& fingerprint,
                       const pic::JunctionSpec& junction, const std::string& dtype,
                       const std::vector<std::vector<int32_t>>& docs, const std::string& path);

// A store path: `given`, or a temporary file `stem`.h5 made empty (O_EXCL | O_NOFOLLOW) in a
// private folder (mkdtemp, mode 0700, a name nobody can predict) that is removed when this
// object goes, however the benchmark ends.
class StorePath {
 public:
  StorePath(const std::string& given, const std::string& stem);
  StorePath(const StorePath&) = delete;
  StorePath& operator=(const StorePath&) = delete;
  ~StorePath();
  const std::string& str() const { return path_; }

 private:
  std::optional<PrivateTempDir> temp_dir_;  // set when no path was given
  std::string path_;
};

}  // namespace hypic::bench
