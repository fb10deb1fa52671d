#include "app/io_util.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.hpp"
#include "hypic/error.hpp"
#include "model/checkpoint.hpp"

namespace hypic::app {

namespace {

// Reads a token-id file as a stream of JSON events (nlohmann's SAX interface), keeping only the
// ids: a document tree of ten million ids took 870 MB and most of a minute under the
// sanitizers before the context check could refuse them. The checks and their order are those
// of a reader over the whole tree: a syntax error anywhere first, then "not a list", then "no
// tokens", then the first element that is not an integer or not in the vocabulary.
class TokenIdReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit TokenIdReader(int vocab_size) : vocab_(vocab_size) {}

  bool null() override { return element(Kind::other); }
  bool boolean(bool) override { return element(Kind::other); }
  bool number_integer(number_integer_t v) override {
    return element(Kind::integer, v >= 0 && v < vocab_, v, [v] { return std::to_string(v); });
  }
  bool number_unsigned(number_unsigned_t v) override {
    return element(Kind::integer, v < static_cast<uint64_t>(std::max(vocab_, 0)),
                   static_cast<int64_t>(v), [v] { return std::to_string(v); });
  }
  bool number_float(number_float_t, const string_t&) override { return element(Kind::other); }
  bool string(string_t&) override { return element(Kind::other); }
  bool binary(binary_t&) override { return element(Kind::other); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) top_is_object_ = true;
    element(Kind::other);
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1 && top_is_object_) {
      // A repeated key: the last value counts, as in a document tree.
      in_ids_ = k == "input_ids";
      if (in_ids_) {
        ids_seen_ = true;
        ids_are_list_ = false;
        ids_.clear();
        count_ = 0;
        problem_.clear();
      }
    }
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 0) top_is_array_ = true;
    if (depth_ == 1 && top_is_object_ && in_ids_) ids_are_list_ = true;
    element(Kind::other);  // an array inside the list is an element that is not an integer
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    syntax_error_ = e.what();
    return false;
  }

  const std::string& syntax_error() const { return syntax_error_; }

  // After a successful parse: the ids, or hypic::Error naming `path` and the first problem.
  std::vector<int32_t> take(const std::string& path) {
    HYPIC_REQUIRE(
        top_is_array_ || (ids_seen_ && ids_are_list_),
        "token-id file '" + path + "' must hold a list of ints or {\"input_ids\": [...]}");
    HYPIC_REQUIRE(count_ > 0, "token-id file '" + path + "' holds no tokens");
    HYPIC_REQUIRE(problem_.empty(), "token-id file '" + path + "': " + problem_);
    return std::move(ids_);
  }

 private:
  enum class Kind { integer, other };

  // The depth of the list's elements: 1 in a top-level list, 2 in {"input_ids": [...]}.
  bool in_list() const {
    if (top_is_array_) return depth_ == 1;
    return top_is_object_ && in_ids_ && ids_are_list_ && depth_ == 2;
  }
  // `written` prints the id as the file has it, only for the message.
  bool element(Kind kind, bool in_range = false, int64_t value = 0,
               const std::function<std::string()>& written = {}) {
    if (!in_list()) return true;
    const uint64_t position = count_++;
    if (!problem_.empty()) return true;
    if (kind != Kind::integer) {
      problem_ = "element " + std::to_string(position) + " is not an integer";
    } else if (!in_range) {
      problem_ = "id " + written() + " at position " + std::to_string(position) +
                 " is outside the vocabulary [0, " + std::to_string(vocab_) + ")";
    } else {
      ids_.push_back(static_cast<int32_t>(value));
    }
    return true;
  }

  int vocab_;
  int depth_ = 0;
  bool top_is_array_ = false, top_is_object_ = false;
  bool in_ids_ = false, ids_seen_ = false, ids_are_list_ = false;
  uint64_t count_ = 0;
  std::vector<int32_t> ids_;
  std::string problem_, syntax_error_;
};

}  // namespace

std::vector<int32_t> read_token_ids(const std::string& path, int vocab_size) {
  const std::string text = read_regular_file(path, "token-id file");
  TokenIdReader reader(vocab_size);
  if (!nlohmann::json::sax_parse(text, &reader)) {
    throw Error("token-id file '" + path + "' is not valid JSON: " + reader.syntax_error());
  }
  return reader.take(path);
}

void require_fits_context(const model::ModelConfig& cfg, const std::string& source,
                          size_t prompt_tokens, int64_t new_tokens) {
  const std::string why =
      model::context_overflow(cfg, static_cast<int64_t>(prompt_tokens), new_tokens);
  HYPIC_REQUIRE(why.empty(), source + ": " + why);
}

void write_text_file(const std::string& path, const std::string& text) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::ofstream out(path);
  out << text;
  HYPIC_REQUIRE(out.good(), "cannot write '" + path + "'");
}

uint64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      uint64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

nlohmann::json read_json_file(const std::string& path) {
  model::check_config_file_size(path);  // a config.json: its size is checked before reading
  const std::string text = read_regular_file(path, "JSON file");
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int> parse_count_list(const std::string& text, const std::string& flag, long max) {
  const std::string what = flag + " '" + text + "': expected counts in [1, " + std::to_string(max) +
                           "] separated by commas";
  std::vector<int> out;
  for (const std::string& item : split_list(text)) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    HYPIC_REQUIRE(*end == '\0' && errno == 0 && v >= 1 && v <= max, what);
    out.push_back(static_cast<int>(v));
  }
  HYPIC_REQUIRE(!out.empty(), what);
  return out;
}

}  // namespace hypic::app
