// config.json: ModelConfig::from_json, then the round trip from_json(to_json(c)), which must
// accept what it wrote (docs/testing.md).
#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "model/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;  // not JSON: the JSON library's business, not ours
  hypic_fuzz::expect_clean([&] {
    const hypic::model::ModelConfig c = hypic::model::ModelConfig::from_json(j);
    (void)c.layout_string();
    (void)hypic::model::ModelConfig::from_json(c.to_json());  // throws nothing
  });
  return 0;
}
