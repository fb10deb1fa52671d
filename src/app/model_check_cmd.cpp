// `hypic model check`: every tensor value of a checkpoint is finite. One NaN weight turns
// every logit into NaN, so this names the first non-finite tensor and where in it.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "hypic/error.hpp"
#include "model/safetensors.hpp"

namespace hypic::app {
namespace {

// "[i, j, k]": the multi-index of flat element `flat` in a row-major tensor of `shape`.
std::string index_of(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) break;
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return model::shape_to_string(idx);
}

int run_check(const std::string& dir) {
  const model::SafetensorsCheckpoint ckpt(dir);
  uint64_t tensors = 0, values = 0;
  for (const std::string& name : ckpt.names()) {
    const model::TensorInfo& info = ckpt.info(name);
    if (!dtype_is_float(info.dtype)) continue;  // integers are always finite
    const Tensor t = ckpt.read(name);
    const float* x = t.data();
    int64_t first = -1, bad = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (std::isfinite(x[i])) continue;
      if (first < 0) first = i;
      ++bad;
    }
    if (first >= 0)
      throw Error(ckpt.file_of(name) + ": tensor '" + name + "' " + info.shape_str() + " holds " +
                  std::to_string(bad) + " non-finite value" + (bad == 1 ? "" : "s") +
                  ", the first " + (std::isnan(x[first]) ? "NaN" : "Inf") + " at " +
                  index_of(first, info.shape) + " (tensors are checked in name order; " +
                  std::to_string(tensors) + " before it are finite)");
    ++tensors;
    values += static_cast<uint64_t>(t.numel());
  }
  std::printf("%s: OK, all %" PRIu64 " floating-point tensors (%" PRIu64 " values) are finite\n",
              dir.c_str(), tensors, values);
  return 0;
}

}  // namespace

void add_model_check_command(CLI::App& model) {
  auto* check = model.add_subcommand(
      "check", "Check that every tensor of a checkpoint holds finite values (no NaN or Inf)");
  auto dir = std::make_shared<std::string>();
  check->add_option("--model", *dir, "Model folder (safetensors files)")->required();
  on_run(check, [dir] { return run_check(*dir); });
}

}  // namespace hypic::app
