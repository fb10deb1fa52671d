#pragma once
// Small input/output helpers shared by the command files.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.hpp"

namespace hypic::app {

// Reads token ids from a JSON file: either a list of ints or {"input_ids": [...]}.
// Throws hypic::Error naming the file and what is wrong.
std::vector<int32_t> read_token_ids(const std::string& path, int vocab_size);

// Refuses (hypic::Error naming `source`) a prompt that with new_tokens generated ones would
// not fit the model's context (model::context_overflow), before anything is allocated.
void require_fits_context(const model::ModelConfig& cfg, const std::string& source,
                          size_t prompt_tokens, int64_t new_tokens);

// Parses a JSON file; throws hypic::Error "PATH: cannot open" or "PATH: invalid JSON: …".
nlohmann::json read_json_file(const std::string& path);

// Writes text to a file (creating parent folders); throws hypic::Error on failure.
void write_text_file(const std::string& path, const std::string& text);

// The non-empty items of a comma-separated list ("a,,b" gives a and b).
std::vector<std::string> split_list(const std::string& text);

// A comma-separated list of integer counts in [1, max] given to `flag`; throws hypic::Error
// "FLAG 'TEXT': expected counts in [1, MAX] separated by commas" on anything else.
std::vector<int> parse_count_list(const std::string& text, const std::string& flag, long max);

// Peak resident memory of this process so far, bytes (VmHWM).
uint64_t peak_rss_bytes();

}  // namespace hypic::app
