#include "bench/rag_corpus.hpp"

#include <cmath>
#include <filesystem>

#include "cluster/distributed.hpp"
#include "store/segment_store.hpp"

namespace hypic::bench {

std::vector<std::vector<int32_t>> random_documents(int count, int tokens, int vocab,
                                                   std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<std::vector<int32_t>> docs(static_cast<size_t>(count));
  for (auto& d : docs)
    for (int t = 0; t < tokens; ++t) d.push_back(tok(rng));
  return docs;
}

std::vector<double> zipf_weights(size_t count, double s) {
  std::vector<double> w(count);
  for (size_t i = 0; i < count; ++i) w[i] = 1.0 / std::pow(double(i + 1), s);
  return w;
}

std::vector<size_t> draw_distinct(const std::vector<double>& weights, int k, std::mt19937_64& rng) {
  std::vector<double> w = weights;
  std::vector<size_t> out;
  for (int s = 0; s < k; ++s) {
    std::discrete_distribution<size_t> pick(w.begin(), w.end());
    const size_t d = pick(rng);
    w[d] = 0.0;  // without replacement
    out.push_back(d);
  }
  return out;
}

WarmedStore warm_store(model::Model& net, const std::string& fingerprint,
                       const pic::JunctionSpec& junction, const std::string& dtype,
                       const std::vector<std::vector<int32_t>>& docs, const std::string& path) {
  store::StoreOptions so;
  so.model_fingerprint = fingerprint;
  so.junction = junction.store_code();
  so.dtype = store::parse_dtype(dtype);
  store::SegmentStore st = store::SegmentStore::create(path, so);
  cluster::WarmupOptions wo;  // the one warm-up path, here in this process alone
  wo.junction = junction;
  const cluster::WarmupResult warm =
      cluster::warmup_across_ranks(MPI_COMM_SELF, net, fingerprint, docs, &st, wo);
  return {warm.total, warm.seconds, st.stats().file_bytes};
}

StorePath::StorePath(const std::string& given, const std::string& stem) : path_(given) {
  if (path_.empty()) {
    temp_dir_.emplace(stem);
    path_ = temp_dir_->create_file(stem + ".h5");
  }
}

StorePath::~StorePath() = default;  // the private folder goes with its store

}  // namespace hypic::bench
