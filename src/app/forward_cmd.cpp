// `hypic forward`: logits of a token sequence, written to HDF5 for cross-checking.
#include <cstdio>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "model/checkpoint.hpp"
#include "model/forward.hpp"
#include "store/hdf5.hpp"

namespace hypic::app {

void add_forward_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "forward",
      "Prefill token ids and write the logits [tokens, vocab] as float32 dataset 'logits'");
  struct Args {
    std::string model, input_ids, out;
    std::string device;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--model", args->model, "Hugging Face model folder")->required();
  sub->add_option("--input-ids", args->input_ids, "JSON list of token ids")->required();
  sub->add_option("--out", args->out, "output HDF5 file")->required();
  add_device_option(sub, args->device);
  on_run(sub, [args] {
    const DeviceChoice device = choose_device(args->device);
    print_device(device);
    auto loaded = model::load_checkpoint(args->model);
    std::printf("%s\n", model::load_summary(loaded).c_str());
    const auto ids = read_token_ids(args->input_ids, loaded.config.vocab_size);
    require_fits_context(loaded.config, args->input_ids, ids.size(), 0);
    model::Model net(std::move(loaded.config),
                     model::to_backend(std::move(loaded.weights), *device.backend),
                     *device.backend);
    auto cache = net.new_cache();
    const Tensor logits = net.prefill(ids, cache, model::LogitsMode::All);
    h5::write_f32_dataset(
        args->out, "logits", logits.data(),
        {static_cast<hsize_t>(logits.dim(0)), static_cast<hsize_t>(logits.dim(1))});
    std::printf("wrote logits [%lld, %lld] to %s\n", static_cast<long long>(logits.dim(0)),
                static_cast<long long>(logits.dim(1)), args->out.c_str());
    return 0;
  });
}

}  // namespace hypic::app
