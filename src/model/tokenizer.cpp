#include "model/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "common/files.hpp"
#include "hypic/error.hpp"
#include "model/unicode.hpp"

namespace hypic::model {
namespace {

using nlohmann::json;

// The pre-tokenizer pattern `tokenizers` uses inside ByteLevel when use_regex is true.
// Kimi-Linear's split pattern (tokenization_kimi.py) written for PCRE2: its character-class
// intersections [X&&[^\p{Han}]] (Rust regex syntax, which tiktoken compiles) become
// (?:(?!\p{Han})[X]), the same set of code points; the rest is as published.
constexpr const char* kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)"
    R"((?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+)"
    R"((?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr int kKimiReservedSpecial = 256 + 2;  // num_reserved_special_tokens + 2

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Unicode White_Space, which is what `\s` means to Oniguruma (the regex engine behind
// `tokenizers`). PCRE2's \s also matches U+180E, so patterns are rewritten to this class.
constexpr const char* kWhiteSpaceClass =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// GPT-2's reversible byte <-> printable-character table: printable Latin-1 bytes stand for
// themselves, the other 68 bytes map to U+0100.. in byte order.
std::array<char32_t, 256> byte_to_char_table() {
  std::array<char32_t, 256> t{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    t[b] = printable ? char32_t(b) : next++;
  }
  return t;
}

// Rewrites \s and \S to the White_Space class (see kWhiteSpaceClass). \S inside a character
// class cannot be expressed that way and is refused.
std::string rewrite_whitespace_escapes(const std::string& pattern, const std::string& origin) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (e == 'S') {
        HYPIC_REQUIRE(!in_class, origin +
                                     ": pre-tokenizer pattern uses \\S inside a character class, "
                                     "which hypic cannot translate; rewrite it as [^...]");
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

class Regex {
 public:
  Regex(const std::string& pattern, bool literal, const std::string& origin) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    const std::string translated = literal ? pattern : rewrite_whitespace_escapes(pattern, origin);
    uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
    if (literal) options |= PCRE2_LITERAL;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                          options, &err, &err_off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error(origin + ": PCRE2 cannot compile the pre-tokenizer pattern at offset " +
                  std::to_string(err_off) + " (" + reinterpret_cast<char*>(msg) +
                  "); the pattern uses a construct PCRE2 lacks");
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(begin, end) for every non-empty match in s, left to right.
  //
  // Memory for backtracking: a repeated group (Kimi's `(?:(?!\p{Han})[...])*`) keeps a frame
  // per repetition, so one match over a long word needs room in proportion to its length:
  // PCRE2's default 32 kB JIT stack (on the thread's stack) ran out at about 8,000 letters.
  // Long subjects get a JIT stack on the heap of kJitBytesPerByte per subject byte (and the
  // interpreter a heap limit to match), so any word that fits in memory matches, in bounded
  // memory and without touching the thread's stack.
  template <typename F>
  void for_each_match(std::string_view s, pcre2_match_data* md, F&& f) const {
    PCRE2_SIZE start = 0;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    constexpr size_t kJitBytesPerByte = 32, kSmallSubject = 2048;
    std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> stack(nullptr,
                                                                            &pcre2_jit_stack_free);
    std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(
        nullptr, &pcre2_match_context_free);
    if (s.size() > kSmallSubject) {
      const size_t room = (s.size() + 4096) * kJitBytesPerByte;
      context.reset(pcre2_match_context_create(nullptr));
      HYPIC_REQUIRE(context != nullptr, "tokenizer: out of memory for the pre-tokenizer");
      if (jit_) {
        stack.reset(pcre2_jit_stack_create(32 * 1024, room, nullptr));
        HYPIC_REQUIRE(stack != nullptr, "tokenizer: out of memory for the pre-tokenizer");
        pcre2_jit_stack_assign(context.get(), nullptr, stack.get());
      }
      pcre2_set_heap_limit(context.get(), static_cast<uint32_t>(std::min<size_t>(
                                              room / 1024 + 20 * 1024, UINT32_MAX)));  // kB
    }
    while (start < s.size()) {
      const int rc = jit_ ? pcre2_jit_match(code_, subject, s.size(), start, 0, md, context.get())
                          : pcre2_match(code_, subject, s.size(), start, PCRE2_NO_UTF_CHECK, md,
                                        context.get());
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw Error(std::string("tokenizer: pre-tokenizer pattern failed to match: ") +
                    reinterpret_cast<char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[1] > ov[0]) {
        f(size_t(ov[0]), size_t(ov[1]));
        start = ov[1];
      } else {  // empty match: step over one code point
        start = ov[0] + 1;
        while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
      }
    }
  }
  pcre2_match_data* new_match_data() const {
    return pcre2_match_data_create_from_pattern(code_, nullptr);
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

struct MatchData {
  explicit MatchData(pcre2_match_data* m) : md(m) {}
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* md;
};

struct PreStep {
  enum Kind { kSplit, kByteLevel } kind = kSplit;
  std::shared_ptr<Regex> regex;  // Split pattern, or the GPT-2 pattern of ByteLevel(use_regex)
  bool remove_matches = false;   // Split behaviour "Removed" (otherwise "Isolated")
  bool add_prefix_space = false;
};

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, normalized = false, lstrip = false, rstrip = false, single_word = false;
};

bool is_word_byte(unsigned char c) {
  return std::isalnum(c) || c == '_';
}

}  // namespace

struct Tokenizer::Impl {
  std::string origin;
  bool byte_fallback = false;
  int32_t byte_offset = 0;
  std::string text_refusal;  // non-empty: encode() refuses with this message

  // Byte-level BPE.
  std::unordered_map<std::string, int32_t> vocab;  // stored (byte-level) form -> id
  std::vector<std::string> id_token;               // id -> stored form
  std::vector<std::string> id_bytes;               // id -> decoded bytes
  std::vector<uint8_t> id_special;
  std::unordered_map<std::string, int32_t> raw_vocab;  // decoded bytes -> id (ignore_merges)
  size_t max_raw_token_bytes = SIZE_MAX;  // longest key of raw_vocab (tiktoken: set on load)
  std::array<int32_t, 256> byte_id{};
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (a,b) -> (rank, id)
  size_t merge_count = 0;
  bool ignore_merges = false;
  int32_t unk_id = -1;
  bool nfc = false;
  bool tiktoken = false;  // rank-based byte BPE (from_tiktoken): raw_vocab holds the ranks
  std::vector<PreStep> steps;
  std::vector<AddedToken> added;
  std::array<bool, 256> added_first_byte{};  // some added token starts with this byte
  std::string pattern_summary;

  // Per-word merge cache.
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kCacheMaxWord = 256;
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void encode_into(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  void split_added(std::string_view text, bool normalized_pass, bool parse_special,
                   std::vector<std::pair<std::string_view, int32_t>>& pieces) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void add_normalizer(const nlohmann::json& n);
  void add_pre_tokenizer(const nlohmann::json& p);
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_ranks(std::string_view word, std::vector<int32_t>& out) const;
};

Tokenizer::Tokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

// ---- loading -------------------------------------------------------------------------------

namespace {

bool get_bool(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string get_string(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// "a list", "a string", ... for a message naming a field's unexpected form.
std::string json_kind(const json& v) {
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  return "a number";
}

// Bytes a stored token decodes to under the ByteLevel decoder: every character mapped back
// to its byte, or the token's own UTF-8 when some character is outside the byte table.
std::string decoded_bytes(const std::string& token,
                          const std::unordered_map<char32_t, unsigned char>& char_byte) {
  std::string out;
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < token.size()) {
    if (!unicode::next_code_point(token, pos, cp)) return token;
    auto it = char_byte.find(cp);
    if (it == char_byte.end()) return token;
    out += static_cast<char>(it->second);
  }
  return out;
}

}  // namespace

void Tokenizer::Impl::add_normalizer(const json& n) {
  Impl& t = *this;
  if (n.is_null()) return;
  const std::string type = get_string(n, "type");
  if (type == "NFC") {
    t.nfc = true;
  } else if (type == "Sequence") {
    for (const auto& s : n.value("normalizers", json::array())) add_normalizer(s);
  } else {
    throw Error(origin + ": normalizer '" + type +
                "' is not supported (hypic implements NFC, Sequence and none)");
  }
}

void Tokenizer::Impl::add_pre_tokenizer(const json& p) {
  Impl& t = *this;
  if (p.is_null()) return;
  const std::string type = get_string(p, "type");
  if (type == "Sequence") {
    for (const auto& s : p.value("pretokenizers", json::array())) add_pre_tokenizer(s);
  } else if (type == "Split") {
    const json& pat = p.at("pattern");
    const bool literal = pat.contains("String");
    const std::string text =
        literal ? pat.at("String").get<std::string>() : pat.at("Regex").get<std::string>();
    const std::string behavior = get_string(p, "behavior");
    HYPIC_REQUIRE(behavior == "Isolated" || behavior == "Removed",
                  origin + ": Split behavior '" + behavior +
                      "' is not supported (hypic implements Isolated and Removed)");
    HYPIC_REQUIRE(!get_bool(p, "invert", false),
                  origin + ": Split with invert=true is not supported");
    PreStep s;
    s.kind = PreStep::kSplit;
    s.regex = std::make_shared<Regex>(text, literal, origin);
    s.remove_matches = behavior == "Removed";
    t.steps.push_back(std::move(s));
    if (!t.pattern_summary.empty()) t.pattern_summary += " + ";
    t.pattern_summary += "Split";
  } else if (type == "ByteLevel") {
    PreStep s;
    s.kind = PreStep::kByteLevel;
    s.add_prefix_space = get_bool(p, "add_prefix_space", false);
    if (get_bool(p, "use_regex", true))
      s.regex = std::make_shared<Regex>(kGpt2Pattern, false, origin);
    if (!t.pattern_summary.empty()) t.pattern_summary += " + ";
    t.pattern_summary += s.regex ? "ByteLevel(GPT-2 regex)" : "ByteLevel";
    t.steps.push_back(std::move(s));
  } else {
    throw Error(origin + ": pre_tokenizer '" + type +
                "' is not supported (hypic implements Split, ByteLevel and Sequence)");
  }
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw Error(origin + ": not valid JSON (" + e.what() + ")");
  }
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.origin = origin;
  try {
    const json& model = j.at("model");
    const std::string type = get_string(model, "type");
    HYPIC_REQUIRE(
        type.empty() || type == "BPE",
        origin + ": model type '" + type + "' is not supported (hypic reads byte-level BPE)");
    HYPIC_REQUIRE(
        get_string(model, "continuing_subword_prefix").empty() &&
            get_string(model, "end_of_word_suffix").empty(),
        origin + ": BPE continuing_subword_prefix / end_of_word_suffix are not supported");
    HYPIC_REQUIRE(!get_bool(model, "byte_fallback", false),
                  origin + ": BPE byte_fallback (sentencepiece style) is not supported");
    t.ignore_merges = get_bool(model, "ignore_merges", false);

    t.add_normalizer(j.value("normalizer", json()));
    t.add_pre_tokenizer(j.value("pre_tokenizer", json()));
    HYPIC_REQUIRE(
        std::any_of(t.steps.begin(), t.steps.end(),
                    [](const PreStep& s) { return s.kind == PreStep::kByteLevel; }),
        origin + ": the pre_tokenizer has no ByteLevel step; hypic reads byte-level BPE only");
    if (j.contains("decoder") && !j["decoder"].is_null()) {
      const std::string dec = get_string(j["decoder"], "type");
      HYPIC_REQUIRE(dec == "ByteLevel",
                    origin + ": decoder '" + dec + "' is not supported (hypic decodes ByteLevel)");
    }

    // Ids index tables of max_id + 1 entries: a negative one would write before them, a huge
    // one allocate gigabytes, a fractional one overflow the conversion. Real vocabularies
    // stay far below 2^24.
    constexpr int64_t kIdLimit = int64_t{1} << 24;
    auto checked_id = [&](const std::string& token, const json& id) {
      HYPIC_REQUIRE(
          id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kIdLimit,
          origin + ": token '" + token + "' has id " + id.dump() + ", not an integer in [0, " +
              std::to_string(kIdLimit) + ")");
      return static_cast<int32_t>(id.get<int64_t>());
    };
    int32_t max_id = -1;
    for (const auto& [token, id] : model.at("vocab").items()) {
      const int32_t checked = checked_id(token, id);
      t.vocab.emplace(token, checked);
      max_id = std::max(max_id, checked);
    }
    std::vector<AddedToken> added;
    HYPIC_REQUIRE(!j.contains("added_tokens") || j.at("added_tokens").is_array(),
                  origin + ": added_tokens must be a list of {\"id\", \"content\", ...}, not " +
                      json_kind(j.at("added_tokens")));
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken at;
      at.content = a.at("content").get<std::string>();
      at.id = checked_id(at.content, a.at("id"));
      at.special = get_bool(a, "special", false);
      at.normalized = get_bool(a, "normalized", !at.special);
      at.lstrip = get_bool(a, "lstrip", false);
      at.rstrip = get_bool(a, "rstrip", false);
      at.single_word = get_bool(a, "single_word", false);
      HYPIC_REQUIRE(!at.content.empty(), origin + ": an added token has empty content");
      max_id = std::max(max_id, at.id);
      added.push_back(std::move(at));
    }
    HYPIC_REQUIRE(max_id >= 0, origin + ": the vocabulary is empty");
    t.id_token.assign(size_t(max_id) + 1, std::string());
    t.id_special.assign(size_t(max_id) + 1, 0);
    for (const auto& [token, id] : t.vocab) t.id_token[size_t(id)] = token;
    for (const auto& a : added) {
      t.id_token[size_t(a.id)] = a.content;
      t.id_special[size_t(a.id)] = a.special;
      t.added_first_byte[static_cast<unsigned char>(a.content[0])] = true;
    }
    t.added = std::move(added);

    const auto table = byte_to_char_table();
    std::unordered_map<char32_t, unsigned char> char_byte;
    for (int b = 0; b < 256; ++b) char_byte[table[b]] = static_cast<unsigned char>(b);
    t.id_bytes.resize(t.id_token.size());
    for (size_t id = 0; id < t.id_token.size(); ++id)
      t.id_bytes[id] = decoded_bytes(t.id_token[id], char_byte);
    for (const auto& [token, id] : t.vocab) t.raw_vocab.emplace(t.id_bytes[size_t(id)], id);
    for (int b = 0; b < 256; ++b) {
      std::string s;
      unicode::append_utf8(s, table[b]);
      auto it = t.vocab.find(s);
      t.byte_id[b] = it == t.vocab.end() ? -1 : it->second;
    }
    const std::string unk = get_string(model, "unk_token");
    if (!unk.empty() && t.vocab.count(unk)) t.unk_id = t.vocab.at(unk);

    const json& merges = model.at("merges");
    t.merges.reserve(merges.size());
    int32_t rank = 0;
    for (const auto& m : merges) {
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        HYPIC_REQUIRE(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                      origin + ": merge " + std::to_string(rank) + " '" + s +
                          "' is not of the form 'left right'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        HYPIC_REQUIRE(m.is_array() && m.size() == 2,
                      origin + ": merge " + std::to_string(rank) + " is neither 'a b' nor [a, b]");
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      auto ia = t.vocab.find(a), ib = t.vocab.find(b), iab = t.vocab.find(a + b);
      HYPIC_REQUIRE(ia != t.vocab.end() && ib != t.vocab.end() && iab != t.vocab.end(),
                    origin + ": merge " + std::to_string(rank) + " ('" + a + "', '" + b +
                        "') uses a token missing from the vocabulary");
      const uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
      t.merges.emplace(key, std::make_pair(rank, iab->second));
      ++rank;
    }
    t.merge_count = size_t(rank);
  } catch (const json::exception& e) {
    throw Error(origin + ": unexpected tokenizer.json layout (" + e.what() + ")");
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_json(read_regular_file(path, "tokenizer file"), path);
}

namespace {
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Standard base64 (with '=' padding) to bytes; false when `s` is not base64.
bool decode_base64(std::string_view s, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] != '='; ++i) {
    const int v = base64_value(s[i]);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  const size_t data = i;
  for (; i < s.size(); ++i)
    if (s[i] != '=') return false;
  // As Python's base64.b64decode (tiktoken's loader): a non-empty token, padded to a multiple
  // of 4 characters with at most two '='; one character past a multiple of 4 ("Q") is no
  // whole byte.
  const size_t padding = s.size() - data;
  return data > 0 && data % 4 != 1 && padding <= 2 && s.size() % 4 == 0;
}
}  // namespace

Tokenizer Tokenizer::from_tiktoken(const std::string& model_path, const std::string& config_path) {
  require_regular_file(model_path, "tokenizer file");
  std::ifstream in(model_path, std::ios::binary);
  HYPIC_REQUIRE(in.good(), "cannot open tokenizer file " + model_path);
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.origin = model_path;
  t.tiktoken = true;
  std::string line, bytes;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string where = model_path + ":" + std::to_string(line_no);
    HYPIC_REQUIRE(
        sp != std::string::npos && decode_base64(std::string_view(line).substr(0, sp), bytes),
        where + ": expected '<base64 token> <rank>' (the token must be valid padded base64)");
    int64_t rank = -1;
    try {
      size_t used = 0;
      rank = std::stoll(line.substr(sp + 1), &used);
      HYPIC_REQUIRE(used == line.size() - sp - 1, where + ": the rank is not an integer");
    } catch (const std::logic_error&) {
      throw Error(where + ": the rank is not an integer");
    }
    HYPIC_REQUIRE(rank == static_cast<int64_t>(t.id_bytes.size()),
                  where + ": rank " + std::to_string(rank) + " out of order (expected " +
                      std::to_string(t.id_bytes.size()) + ": ranks are the ids 0, 1, 2, ...)");
    HYPIC_REQUIRE(t.raw_vocab.emplace(bytes, static_cast<int32_t>(rank)).second,
                  where + ": the token appears twice");
    t.id_bytes.push_back(bytes);
  }
  require_read_to_end(in, model_path);  // a read error is not the end of the vocabulary
  const int32_t n = static_cast<int32_t>(t.id_bytes.size());
  HYPIC_REQUIRE(n > 0, model_path + ": no tokens");
  t.max_raw_token_bytes = 0;
  for (const std::string& b : t.id_bytes)
    t.max_raw_token_bytes = std::max(t.max_raw_token_bytes, b.size());
  t.byte_id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = t.raw_vocab.find(std::string(1, static_cast<char>(b)));
    HYPIC_REQUIRE(it != t.raw_vocab.end(), model_path + ": byte " + std::to_string(b) +
                                               " has no rank (every single byte must have one)");
    t.byte_id[b] = it->second;
  }
  // Stored forms: GPT-2's printable byte characters, as Kimi's get_vocab() shows them.
  const std::array<char32_t, 256> table = byte_to_char_table();
  t.id_token.resize(size_t(n) + kKimiReservedSpecial);
  t.id_special.assign(t.id_token.size(), 0);
  for (int32_t id = 0; id < n; ++id) {
    std::string s;
    for (unsigned char c : t.id_bytes[size_t(id)]) unicode::append_utf8(s, table[c]);
    t.id_token[size_t(id)] = s;
    t.vocab.emplace(std::move(s), id);
  }
  // Special tokens: ids n .. n+257, named by tokenizer_config.json where it names them.
  std::unordered_map<int32_t, std::string> names;
  if (!config_path.empty()) {
    const std::string text = read_regular_file(config_path, "tokenizer config");
    json cfg;
    try {
      cfg = json::parse(text);
    } catch (const std::exception& e) {
      throw Error(config_path + ": invalid JSON: " + e.what());
    }
    HYPIC_REQUIRE(cfg.is_object(), config_path + ": must be a JSON object");
    // Its special tokens' names: an object {"<id>": {"content": ...}}; any other form (a
    // list, a string) would leave them unnamed, and "[BOS]" would be encoded as text.
    HYPIC_REQUIRE(
        !cfg.contains("added_tokens_decoder") || cfg.at("added_tokens_decoder").is_object(),
        config_path +
            ": added_tokens_decoder must be an object {\"<id>\": {\"content\": "
            "...}}, not " +
            json_kind(cfg.at("added_tokens_decoder")));
    if (cfg.contains("added_tokens_decoder"))
      for (const auto& [key, value] : cfg.at("added_tokens_decoder").items()) {
        int32_t id = -1;
        try {
          id = static_cast<int32_t>(std::stol(key));
        } catch (const std::logic_error&) {
        }
        HYPIC_REQUIRE(id >= n && id < n + kKimiReservedSpecial && value.is_object() &&
                          value.contains("content") && value.at("content").is_string(),
                      config_path + ": added_tokens_decoder entry '" + key +
                          "' is not a special id in " + std::to_string(n) + ".." +
                          std::to_string(n + kKimiReservedSpecial - 1) + " with a content");
        names[id] = value.at("content").get<std::string>();
      }
  }
  for (int32_t id = n; id < n + kKimiReservedSpecial; ++id) {
    AddedToken a;
    auto it = names.find(id);
    a.content = it != names.end() ? it->second : "<|reserved_token_" + std::to_string(id) + "|>";
    HYPIC_REQUIRE(!a.content.empty(),
                  config_path + ": special token " + std::to_string(id) + " has an empty content");
    a.id = id;
    a.special = true;
    t.id_token[size_t(id)] = a.content;
    t.id_special[size_t(id)] = 1;
    t.added_first_byte[static_cast<unsigned char>(a.content[0])] = true;
    t.added.push_back(std::move(a));
  }
  t.id_bytes.resize(t.id_token.size());
  for (const AddedToken& a : t.added) t.id_bytes[size_t(a.id)] = a.content;
  PreStep split;
  split.kind = PreStep::kSplit;
  split.regex = std::make_shared<Regex>(kKimiPattern, false, model_path);
  t.steps.push_back(std::move(split));
  t.pattern_summary = "Kimi split pattern (tiktoken)";
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::byte_level(int32_t offset) {
  HYPIC_REQUIRE(offset >= 0, "byte-level tokenizer offset must be non-negative");
  auto impl = std::make_shared<Impl>();
  impl->byte_fallback = true;
  impl->byte_offset = offset;
  impl->origin = "byte-level fallback";
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::for_model(const std::string& path, Fallback fallback) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::path(path).extension() == ".json")
    return from_file(path);
  const fs::path file = fs::path(path) / "tokenizer.json";
  if (fs::is_regular_file(file, ec)) return from_file(file.string());
  const fs::path tik = fs::path(path) / "tiktoken.model";
  if (fs::is_regular_file(tik, ec)) {
    const fs::path cfg = fs::path(path) / "tokenizer_config.json";
    return from_tiktoken(tik.string(), fs::is_regular_file(cfg, ec) ? cfg.string() : "");
  }
  Tokenizer t = byte_level(0);
  t.impl_->origin = "byte-level fallback (no tokenizer.json in " + path + ")";
  if (fallback == Fallback::kRefuseText)
    t.impl_->text_refusal =
        "the model folder '" + path +
        "' has no tokenizer.json (nor tiktoken.model, the form Kimi-Linear ships), so its "
        "text cannot be turned into token ids (one token per byte would give wrong answers); "
        "add the model's tokenizer.json (or tiktoken.model), give token ids "
        "instead of text, or pass --byte-tokenizer to use byte-level tokens";
  return t;
}

void Tokenizer::require_text_support() const {
  if (!impl_->text_refusal.empty()) throw Error(impl_->text_refusal);
}

// ---- encoding ------------------------------------------------------------------------------

void Tokenizer::Impl::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    const int32_t id = byte_id[static_cast<unsigned char>(word[i])];
    if (id < 0) {
      if (unk_id >= 0) {
        sym.push_back({unk_id, 0, 0, true});
      }
      continue;  // a byte without a vocabulary entry is dropped, as `tokenizers` does
    }
    sym.push_back({id, 0, 0, true});
  }
  const int32_t n = static_cast<int32_t>(sym.size());
  for (int32_t i = 0; i < n; ++i) {
    sym[i].prev = i - 1;
    sym[i].next = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, new_id;
  };
  // Lowest rank first; on equal rank, leftmost first.
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    auto it = merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    return it == merges.end() ? nullptr : &it->second;
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    if (auto* m = lookup(sym[i].id, sym[i + 1].id)) queue.push({m->first, i, m->second});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int32_t right_pos = left.next;
    auto* m = lookup(left.id, sym[right_pos].id);
    if (!m || m->second != top.new_id) continue;  // stale candidate
    left.id = top.new_id;
    sym[right_pos].alive = false;
    left.next = sym[right_pos].next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0)
      if (auto* p = lookup(sym[left.prev].id, left.id))
        queue.push({p->first, left.prev, p->second});
    if (left.next >= 0)
      if (auto* q = lookup(left.id, sym[left.next].id)) queue.push({q->first, top.pos, q->second});
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

void Tokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (tiktoken) {  // tiktoken: a piece that is a token is that token, whatever the merges
    auto it = raw_vocab.find(std::string(word));
    if (it != raw_vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_id[static_cast<unsigned char>(word[0])];
    if (id >= 0)
      out.push_back(id);
    else if (unk_id >= 0)
      out.push_back(unk_id);
    return;
  }
  if (ignore_merges) {
    auto it = raw_vocab.find(std::string(word));
    if (it != raw_vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWord) {
    if (tiktoken)
      merge_ranks(word, out);
    else
      merge_word(word, out);
    return;
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  if (tiktoken)
    merge_ranks(word, out);
  else
    merge_word(word, out);
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() >= kCacheCapacity) cache.clear();
  cache.emplace(std::move(key), std::vector<int32_t>(out.begin() + long(before), out.end()));
}

// tiktoken's byte-pair encoding: start from single bytes and merge, again and again, the
// adjacent pair whose concatenation has the lowest rank (leftmost on ties), until no
// adjacent concatenation is a token. tiktoken's own loop rescans the piece after every merge
// (quadratic: a run of 20k spaces took a second); this keeps the candidates in a heap ordered
// by (rank, start), which picks the same pair every time, in O(n log n). A popped candidate
// counts only while its two parts still span the bytes it was ranked for.
void Tokenizer::Impl::merge_ranks(std::string_view word, std::vector<int32_t>& out) const {
  const size_t n = word.size();
  // Part i covers [i, end[i]) while alive; next part starts at end[i], previous at prev[i].
  std::vector<size_t> end(n), prev(n);
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    end[i] = i + 1;
    prev[i] = i == 0 ? SIZE_MAX : i - 1;
  }
  constexpr int32_t kNone = INT32_MAX;
  auto rank_of = [&](size_t begin, size_t stop) {  // rank of word[begin, stop), or kNone
    if (stop - begin > max_raw_token_bytes) return kNone;
    auto it = raw_vocab.find(std::string(word.substr(begin, stop - begin)));
    return it == raw_vocab.end() ? kNone : it->second;
  };
  struct Candidate {
    int32_t rank;
    size_t begin, stop;  // the left part starts at begin, the right part ends at stop
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.begin > b.begin;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto consider = [&](size_t left) {  // pushes the pair (left, its right neighbour)
    if (left == SIZE_MAX || end[left] >= n) return;
    const size_t stop = end[end[left]];
    const int32_t r = rank_of(left, stop);
    if (r != kNone) queue.push({r, left, stop});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (!alive[c.begin] || end[c.begin] >= n || end[end[c.begin]] != c.stop) continue;  // stale
    const size_t right = end[c.begin];
    alive[right] = 0;
    end[c.begin] = c.stop;
    if (c.stop < n) prev[c.stop] = c.begin;
    consider(prev[c.begin]);
    consider(c.begin);
  }
  std::vector<size_t> starts;
  for (size_t i = 0; i < n; i = end[i]) starts.push_back(i);
  starts.push_back(n);
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    auto it = raw_vocab.find(std::string(word.substr(starts[i], starts[i + 1] - starts[i])));
    HYPIC_REQUIRE(it != raw_vocab.end(), origin +
                                             ": a byte has no rank (the file lacks some of "
                                             "the 256 single bytes)");
    out.push_back(it->second);
  }
}

// Normalised text without added tokens: pre-tokenize, then BPE every piece.
void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces{text}, next;
  std::deque<std::string> owned;  // pieces made by add_prefix_space (stable addresses)
  for (const PreStep& step : steps) {
    next.clear();
    for (std::string_view p : pieces) {
      if (step.kind == PreStep::kByteLevel && step.add_prefix_space && !p.empty() &&
          p.front() != ' ') {
        owned.push_back(" " + std::string(p));
        p = owned.back();
      }
      if (!step.regex) {
        next.push_back(p);
        continue;
      }
      MatchData data(step.regex->new_match_data());
      size_t last = 0;
      step.regex->for_each_match(p, data.md, [&](size_t b, size_t e) {
        if (b > last) next.push_back(p.substr(last, b - last));
        if (!step.remove_matches) next.push_back(p.substr(b, e - b));
        last = e;
      });
      if (last < p.size()) next.push_back(p.substr(last));
    }
    pieces.swap(next);
  }
  for (std::string_view p : pieces)
    if (!p.empty()) bpe_word(p, out);
}

// Splits `text` at added tokens (leftmost, then longest). Pieces that are not added tokens
// carry id -1. The first pass (raw text) matches tokens with normalized=false, the second
// (normalised pieces) those with normalized=true.
void Tokenizer::Impl::split_added(std::string_view text, bool normalized_pass, bool parse_special,
                                  std::vector<std::pair<std::string_view, int32_t>>& pieces) const {
  size_t last = 0, i = 0;
  auto trailing_space = [&](size_t from, size_t to) {  // start of the whitespace run before `to`
    size_t k = to;
    while (k > from) {
      size_t b = k - 1;
      while (b > from && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
      size_t p = b;
      char32_t cp = 0;
      if (!unicode::next_code_point(text, p, cp) || !unicode::is_white_space(cp)) break;
      k = b;
    }
    return k;
  };
  while (i < text.size()) {
    if (!added_first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const AddedToken* best = nullptr;
    for (const AddedToken& a : added) {
      if (a.normalized != normalized_pass || (a.special && !parse_special)) continue;
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (best && best->content.size() >= a.content.size()) continue;
      if (a.single_word) {
        const bool before_ok = i == 0 || !is_word_byte(static_cast<unsigned char>(text[i - 1]));
        const size_t e = i + a.content.size();
        const bool after_ok =
            e >= text.size() || !is_word_byte(static_cast<unsigned char>(text[e]));
        if (!before_ok || !after_ok) continue;
      }
      best = &a;
    }
    if (!best) {
      ++i;
      continue;
    }
    size_t start = i, end = i + best->content.size();
    if (best->lstrip) start = trailing_space(last, start);
    if (best->rstrip) {
      while (end < text.size()) {
        size_t p = end;
        char32_t cp = 0;
        if (!unicode::next_code_point(text, p, cp) || !unicode::is_white_space(cp)) break;
        end = p;
      }
    }
    if (start > last) pieces.emplace_back(text.substr(last, start - last), -1);
    pieces.emplace_back(text.substr(start, end - start), best->id);
    last = i = end;
  }
  if (last < text.size()) pieces.emplace_back(text.substr(last), -1);
}

void Tokenizer::Impl::encode_into(std::string_view text, bool parse_special,
                                  std::vector<int32_t>& out) const {
  std::vector<std::pair<std::string_view, int32_t>> raw;
  split_added(text, false, parse_special, raw);
  std::vector<std::pair<std::string_view, int32_t>> norm_pieces;
  for (const auto& [piece, id] : raw) {
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    const std::string normalized = nfc ? unicode::nfc(piece) : std::string(piece);
    norm_pieces.clear();
    split_added(normalized, true, parse_special, norm_pieces);
    for (const auto& [p, pid] : norm_pieces) {
      if (pid >= 0)
        out.push_back(pid);
      else
        encode_plain(p, out);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  require_text_support();
  const size_t bad = unicode::find_invalid_utf8(text);
  HYPIC_REQUIRE(bad == std::string_view::npos, "tokenizer: text is not valid UTF-8 at byte " +
                                                   std::to_string(bad) +
                                                   "; convert the input to UTF-8");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (impl_->byte_fallback) {
    for (unsigned char c : text) out.push_back(impl_->byte_offset + c);
    return out;
  }
  impl_->encode_into(text, parse_special, out);
  return out;
}

// ---- decoding and queries ------------------------------------------------------------------

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& t = *impl_;
  std::string bytes;
  if (t.byte_fallback) {
    for (int32_t id : ids)
      if (id >= t.byte_offset && id < t.byte_offset + 256)
        bytes += static_cast<char>(id - t.byte_offset);
    return unicode::to_valid_utf8(bytes);
  }
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= t.id_token.size() || t.id_token[size_t(id)].empty()) continue;
    if (skip_special && t.id_special[size_t(id)]) continue;
    bytes += t.id_bytes[size_t(id)];
  }
  return unicode::to_valid_utf8(bytes);
}

std::string Tokenizer::describe() const {
  const Impl& t = *impl_;
  char buf[512];
  if (t.byte_fallback) {
    std::snprintf(buf, sizeof buf,
                  "%s: token id = byte value + %d (ids %d..%d), no merges, no special tokens",
                  t.origin.c_str(), t.byte_offset, t.byte_offset, t.byte_offset + 255);
    return buf;
  }
  int specials = 0;
  for (const auto& a : t.added) specials += a.special;
  if (t.tiktoken) {
    std::snprintf(buf, sizeof buf,
                  "tiktoken BPE from %s: %zu ranked tokens, %zu special tokens, pre-tokenizer %s, "
                  "ids 0..%d",
                  t.origin.c_str(), t.raw_vocab.size(), t.added.size(), t.pattern_summary.c_str(),
                  vocab_size() - 1);
    return buf;
  }
  std::snprintf(buf, sizeof buf,
                "byte-level BPE from %s: %zu vocabulary entries, %zu merges, %zu added tokens "
                "(%d special), normalizer %s, pre-tokenizer %s, ids 0..%d",
                t.origin.c_str(), t.vocab.size(), t.merge_count, t.added.size(), specials,
                t.nfc ? "NFC" : "none", t.pattern_summary.c_str(), vocab_size() - 1);
  return buf;
}

bool Tokenizer::is_byte_fallback() const {
  return impl_->byte_fallback;
}

int32_t Tokenizer::vocab_size() const {
  return impl_->byte_fallback ? impl_->byte_offset + 256
                              : static_cast<int32_t>(impl_->id_token.size());
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const Impl& t = *impl_;
  if (t.byte_fallback) {
    if (token.size() == 1) return t.byte_offset + static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  for (const auto& a : t.added)
    if (a.content == token) return a.id;
  auto it = t.vocab.find(std::string(token));
  if (it != t.vocab.end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const Impl& t = *impl_;
  if (t.byte_fallback) {
    if (id < t.byte_offset || id >= t.byte_offset + 256) return {};
    return std::string(1, static_cast<char>(id - t.byte_offset));
  }
  if (id < 0 || size_t(id) >= t.id_token.size()) return {};
  return t.id_token[size_t(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  const Impl& t = *impl_;
  return !t.byte_fallback && id >= 0 && size_t(id) < t.id_special.size() &&
         t.id_special[size_t(id)];
}

void Tokenizer::clear_cache() const {
  std::lock_guard<std::mutex> lock(impl_->cache_mutex);
  impl_->cache.clear();
}

double tokenizer_bench_mb_per_s(const Tokenizer& tok, const std::string& text, double min_seconds,
                                bool cold_cache) {
  using Clock = std::chrono::steady_clock;
  HYPIC_REQUIRE(!text.empty(), "tokenizer benchmark: the text is empty");
  tok.encode(text);  // warm-up (and UTF-8 validation)
  double best = 0.0, total = 0.0;
  do {
    if (cold_cache) tok.clear_cache();
    const auto t0 = Clock::now();
    const auto ids = tok.encode(text);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    total += s;
    if (s > 0) best = std::max(best, double(text.size()) / s / 1e6);
    if (ids.empty()) break;
  } while (total < min_seconds);
  return best;
}

}  // namespace hypic::model
