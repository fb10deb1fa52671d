#pragma once
// The forward pass of a Qwen3-Next / Qwen3.5 hybrid model over token ids, continuing from
// (and advancing) an InferenceCache: prefill of any block of tokens at any position,
// single-token decode, greedy generation.
#include <cstdint>
#include <functional>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "hypic/tensor.hpp"
#include "model/cache.hpp"
#include "model/config.hpp"
#include "model/layers.hpp"
#include "model/weights.hpp"

namespace hypic::model {

// Logits for every new token, only the last one, or none (the cache is all that is wanted:
// junction windows, prefix snapshots; prefill then returns an empty [0, vocab] tensor).
enum class LogitsMode { All, Last, None };

// A junction window (MATH.md §5): n tokens run at the current end of the cache, after which
// the caller's splice appends `spliced` more positions (its segment's cached part).
struct Window {
  const int32_t* tokens = nullptr;
  int n = 0;
  int64_t spliced = 0;
};
// Called once per window and layer, after the window has passed that layer: appends what
// follows the window to the layer's cache (linear: T·S + S(R|0) and the conv tail;
// attention: the re-rotated cached K and V).
using SpliceFn = std::function<void(int window, int layer, LayerCache& cache)>;

// Owns its scratch buffers: use one Model per thread. Every op runs on `backend` (the host
// unless told otherwise); weights and caches must be that backend's memory.
class Model {
 public:
  Model(ModelConfig cfg, ModelWeights weights,
        const kernels::Backend& backend = kernels::host_backend());

  const ModelConfig& config() const { return cfg_; }
  const ModelWeights& weights() const { return weights_; }
  const kernels::Backend& backend() const { return *backend_; }
  // A cache in the backend's memory (zeros, no tokens).
  InferenceCache new_cache() const {
    return InferenceCache::empty(cfg_, backend_->device() == Device::Host ? nullptr : backend_);
  }

  // Runs `tokens` through every layer at positions cache.n_tokens … and advances the cache.
  // Returns logits [tokens, vocab] (All) or [1, vocab] (Last). Long inputs are processed in
  // blocks of max_block_tokens() (a multiple of the delta rule's chunk, so results do not
  // depend on it beyond rounding) to bound scratch memory.
  Tensor prefill(const std::vector<int32_t>& tokens, InferenceCache& cache, LogitsMode mode);
  // Every window of a composed prompt, layer by layer: each layer's products run once over
  // all windows' tokens, while the conv, the delta rule and attention continue the cache
  // window by window, `splice` appending each window's cached rest in between. Equal to
  // prefilling window 1, splicing its rest in every layer, prefilling window 2, ... (the
  // per-row products are the same; tested). Blocks of at most max_block_tokens() rows;
  // windows may be empty (splice only). Advances cache.n_tokens by every n + spliced.
  // LogitsMode::Last returns the logits [1, vocab] of the last window's last token (a
  // composed prompt's question, run as its last window: one pass over the weights for the
  // windows and the question); the last window must then hold tokens. None returns [0, vocab].
  Tensor prefill_windows(const std::vector<Window>& windows, InferenceCache& cache,
                         const SpliceFn& splice, LogitsMode mode = LogitsMode::None);
  // One token after the cached ones; logits [1, vocab].
  Tensor decode_step(int32_t token, InferenceCache& cache);
  // Prefills `prompt`, then picks the arg-max token n_new times (decoding each pick except
  // the last). Returns the n_new generated ids.
  std::vector<int32_t> generate_greedy(const std::vector<int32_t>& prompt, int n_new,
                                       InferenceCache& cache);

  int max_block_tokens() const { return max_block_; }
  void set_max_block_tokens(int n);
  ForwardTimes& times() { return ws_.times; }
  // When set, every block appends the residual stream after the embedding and after each
  // decoder layer ([T, hidden] each, before the final norm) to *sink; null turns it off.
  void capture_hidden_states(std::vector<Tensor>* sink) { capture_ = sink; }
  // The residual stream of the last token processed by the latest prefill or decode step,
  // after the last decoder layer and before the final norm ([hidden]; empty before any).
  const std::vector<float>& last_hidden() const { return last_hidden_; }

 private:
  // One block through the network, advancing the cache; writes the logits of its last
  // logit_rows tokens (0 … T) to `logits`.
  void run_block(const int32_t* tokens, int T, InferenceCache& cache, int logit_rows,
                 float* logits);
  // The block's rows as spans (positions set from the cache), with splice(splice_ids[i], l, ·)
  // after span i in layer l when splice_ids[i] >= 0, and `spliced[i]` positions it adds.
  void run_spans(const int32_t* tokens, std::vector<Span>& spans,
                 const std::vector<int>& splice_ids, const std::vector<int64_t>& spliced,
                 const SpliceFn* splice, InferenceCache& cache, int logit_rows, float* logits);
  void capture(const float* h, int T);

  ModelConfig cfg_;
  ModelWeights weights_;
  const kernels::Backend* backend_;
  Workspace ws_;
  std::vector<float> last_hidden_;
  int max_block_ = 2048;
  std::vector<Tensor>* capture_ = nullptr;
};

// Index of the largest value (the first one on ties, as torch.argmax).
int32_t argmax(const float* x, int64_t n);

// Greedy choice under a no-repeat-n-gram rule (Hugging Face's no_repeat_ngram_size, applied to
// the generated tokens only, so an answer may still quote its prompt): the largest of the
// `n` logits among the tokens that would not make an `ngram`-gram of `generated` occur twice.
// Plain argmax when ngram <= 0, and when every token is banned (it cannot be with ngram >= 2
// and a vocabulary larger than the answer).
int32_t argmax_no_repeat(const float* x, int64_t n, const std::vector<int32_t>& generated,
                         int ngram);

}  // namespace hypic::model
