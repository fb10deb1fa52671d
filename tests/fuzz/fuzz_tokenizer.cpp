// tokenizer.json, then encoding: the input is the tokenizer.json text, a NUL byte, and a text
// to encode (with and without special tokens) and decode back.
#include <vector>

#include "fuzz_util.hpp"
#include "model/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [json_text, text] = hypic_fuzz::split_at_nul(data, size);
  hypic_fuzz::expect_clean([&, json_text = json_text, text = text] {
    const auto tok = hypic::model::Tokenizer::from_json(std::string(json_text), "fuzz.json");
    (void)tok.describe();
    for (bool special : {true, false}) {
      hypic_fuzz::expect_clean([&] {
        const std::vector<int32_t> ids = tok.encode(text, special);
        for (int32_t id : ids)
          if (id < 0 || id >= tok.vocab_size()) __builtin_trap();  // an id it cannot produce
        (void)tok.decode(ids, !special);
      });
    }
    // Decoding any ids: the text's bytes taken as ids, known or not.
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c) * 7 - 3);
    (void)tok.decode(ids);
  });
  return 0;
}
