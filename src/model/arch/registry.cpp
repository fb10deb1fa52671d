// The registered architectures: one line each (defined in src/model/arch/<name>.cpp).
#include <algorithm>

#include "hypic/error.hpp"
#include "model/arch/arch.hpp"

namespace hypic::model {
namespace arch {
const ArchSpec& qwen3_next();
const ArchSpec& qwen3_5();
const ArchSpec& qwen3_5_moe();
const ArchSpec& minimax();
const ArchSpec& bailing_moe_linear();
const ArchSpec& kimi_linear();
}  // namespace arch

const std::vector<const ArchSpec*>& architectures() {
  // One architecture per line.
  // clang-format off
  static const std::vector<const ArchSpec*> all = {
      &arch::qwen3_next(),
      &arch::qwen3_5(),
      &arch::qwen3_5_moe(),
      &arch::minimax(),
      &arch::bailing_moe_linear(),
      &arch::kimi_linear(),
  };
  // clang-format on
  return all;
}

std::string supported_architectures() {
  std::string s;
  for (const ArchSpec* a : architectures()) s += (s.empty() ? "" : ", ") + std::string(a->name());
  return s;
}

const ArchSpec* arch_for_model_type(const std::string& model_type) {
  for (const ArchSpec* a : architectures()) {
    const std::vector<std::string> types = a->model_types();
    if (std::find(types.begin(), types.end(), model_type) != types.end()) return a;
  }
  return nullptr;
}

const ArchSpec& parse_arch(const std::string& name) {
  for (const ArchSpec* a : architectures())
    if (name == a->name()) return *a;
  throw Error("unknown architecture '" + name + "' (supported: " + supported_architectures() + ")");
}

}  // namespace hypic::model
