#include "app/io_util.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.hpp"
#include "hypic/error.hpp"
#include "model/checkpoint.hpp"

namespace hypic::app {

std::vector<int32_t> read_token_ids(const std::string& path, int vocab_size) {
  const std::string text = read_regular_file(path, "token-id file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("token-id file '" + path + "' is not valid JSON: " + e.what());
  }
  const nlohmann::json& ids = j.is_object() && j.contains("input_ids") ? j["input_ids"] : j;
  HYPIC_REQUIRE(ids.is_array(),
                "token-id file '" + path + "' must hold a list of ints or {\"input_ids\": [...]}");
  HYPIC_REQUIRE(!ids.empty(), "token-id file '" + path + "' holds no tokens");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    HYPIC_REQUIRE(ids[i].is_number_integer(), "token-id file '" + path + "': element " +
                                                  std::to_string(i) + " is not an integer");
    // An id past int64 (2^63) is unsigned JSON: compare it as such, and print it as written.
    const bool in_range =
        ids[i].is_number_unsigned()
            ? ids[i].get<uint64_t>() < static_cast<uint64_t>(std::max(vocab_size, 0))
            : ids[i].get<int64_t>() >= 0 && ids[i].get<int64_t>() < vocab_size;
    const int64_t v = in_range ? ids[i].get<int64_t>() : 0;
    HYPIC_REQUIRE(in_range, "token-id file '" + path + "': id " + ids[i].dump() + " at position " +
                                std::to_string(i) + " is outside the vocabulary [0, " +
                                std::to_string(vocab_size) + ")");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
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
