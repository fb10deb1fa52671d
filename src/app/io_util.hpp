#pragma once
// Small input/output helpers shared by the command files.
#include <cstdint>
#include <string>
#include <vector>

namespace hypic::app {

// Reads token ids from a JSON file: either a list of ints or {"input_ids": [...]}.
// Throws hypic::Error naming the file and what is wrong.
std::vector<int32_t> read_token_ids(const std::string& path, int vocab_size);

// Writes text to a file (creating parent folders); throws hypic::Error on failure.
void write_text_file(const std::string& path, const std::string& text);

// Peak resident memory of this process so far, bytes (VmHWM).
uint64_t peak_rss_bytes();

}  // namespace hypic::app
