#pragma once
// Text <-> token ids. Reads a Hugging Face tokenizer.json for byte-level BPE (the
// Qwen2 / Qwen3 / Qwen3.5 family, GPT-2 style) and reproduces the `tokenizers` library's
// encode and decode; a model folder without tokenizer.json gets a byte-level fallback.
// What is supported, and where it differs, is in docs/tokenizer.md.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hypic::model {

class Tokenizer {
 public:
  // Reads a tokenizer.json. Throws hypic::Error naming the file and the unsupported or
  // malformed part.
  static Tokenizer from_file(const std::string& path);
  // The same from the JSON text itself; `origin` names it in messages and describe().
  static Tokenizer from_json(const std::string& json_text, const std::string& origin);
  // A tiktoken-style BPE as Kimi-Linear ships it: `model_path` holds one "base64(bytes) rank"
  // line per token (ranks 0..n-1, every single byte among them); Kimi's split pattern; the
  // 256 + 2 special ids n .. n+257, named from `config_path`'s added_tokens_decoder (its
  // tokenizer_config.json; "" = none) and otherwise <|reserved_token_<id>|>. Encodes as the
  // tiktoken library does (whole piece first, then the lowest-ranked adjacent merge).
  static Tokenizer from_tiktoken(const std::string& model_path, const std::string& config_path);
  // The fallback: token id = byte value + offset (256 ids), no merges, no special tokens.
  static Tokenizer byte_level(int32_t offset = 0);
  // What for_model gives a folder without tokenizer.json: the byte-level fallback, or one
  // that still decodes bytes but refuses to encode text (naming the missing file), so text
  // commands never run silently on the wrong tokens.
  enum class Fallback { kByteLevel, kRefuseText };
  // DIR/tokenizer.json when it exists (or `path` itself when it names a .json file), else
  // DIR/tiktoken.model (with DIR/tokenizer_config.json when present), otherwise the
  // byte-level fallback with offset 0 (refusing text, per `fallback`).
  static Tokenizer for_model(const std::string& path, Fallback fallback = Fallback::kByteLevel);
  // Throws hypic::Error when this tokenizer refuses text (see Fallback::kRefuseText).
  void require_text_support() const;

  // Token ids of `text` (valid UTF-8, else hypic::Error with the byte offset). No BOS/EOS or
  // template is added. With parse_special false, special added tokens written in the text
  // are encoded as plain text (the `encode_special_tokens` mode of `tokenizers`), which is
  // what untrusted documents want; non-special added tokens are still recognised.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // Text of `ids`: byte-level reversal, invalid UTF-8 replaced by U+FFFD as `tokenizers`
  // does. Ids the tokenizer does not know are skipped (as `tokenizers` does).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // One line for `hypic model info`: which tokenizer is in use and its sizes.
  std::string describe() const;

  bool is_byte_fallback() const;
  // One more than the largest id the tokenizer can produce.
  int32_t vocab_size() const;
  // Id of a vocabulary entry (its stored, byte-level form) or an added token's content.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The stored form of an id ("" when unknown).
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // Empties the per-word merge cache (benchmarks measure the cold path with it).
  void clear_cache() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Encode throughput in MB/s (1e6 bytes of UTF-8 input per second): `text` is encoded
// repeatedly for at least `min_seconds` after one warm-up; the best pass counts.
// `cold_cache` clears the per-word merge cache before every pass.
double tokenizer_bench_mb_per_s(const Tokenizer& tok, const std::string& text,
                                double min_seconds = 0.5, bool cold_cache = false);

}  // namespace hypic::model
