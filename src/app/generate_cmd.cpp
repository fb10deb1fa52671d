// `hypic generate`: greedy continuation of a token sequence, with its speed.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "model/checkpoint.hpp"
#include "model/forward.hpp"

namespace hypic::app {

void add_generate_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("generate", "Greedy generation from token ids (prints the new ids)");
  struct Args {
    std::string model, input_ids;
    std::string device;
    int max_new_tokens = 16;
    int no_repeat_ngram = 0;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--model", args->model, "Hugging Face model folder")->required();
  sub->add_option("--input-ids", args->input_ids, "JSON list of token ids (the prompt)")
      ->required();
  sub->add_option("--max-new-tokens", args->max_new_tokens, "tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--no-repeat-ngram", args->no_repeat_ngram,
                  "never generate the same N tokens in a row twice (0: plain greedy)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  add_device_option(sub, args->device);
  on_run(sub, [args] {
    const DeviceChoice device = choose_device(args->device);
    print_device(device);
    auto loaded = model::load_checkpoint(args->model);
    std::printf("%s\n", model::load_summary(loaded).c_str());
    const auto ids = read_token_ids(args->input_ids, loaded.config.vocab_size);
    require_fits_context(loaded.config, args->input_ids, ids.size(), args->max_new_tokens);
    model::Model net(std::move(loaded.config),
                     model::to_backend(std::move(loaded.weights), *device.backend),
                     *device.backend);
    auto cache = net.new_cache();

    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const Tensor first = net.prefill(ids, cache, model::LogitsMode::Last);
    const auto t1 = Clock::now();
    std::vector<int32_t> out{model::argmax(first.data(), first.numel())};
    for (model::LayerCache& lc : cache.layers)  // every step's K/V rows: appends in place
      lc.reserve_kv(cache.n_tokens + args->max_new_tokens - 1);
    while (static_cast<int>(out.size()) < args->max_new_tokens) {
      const Tensor logits = net.decode_step(out.back(), cache);
      out.push_back(
          model::argmax_no_repeat(logits.data(), logits.numel(), out, args->no_repeat_ngram));
    }
    const auto t2 = Clock::now();

    std::printf("generated:");
    for (int32_t id : out) std::printf(" %d", id);
    std::printf("\n");
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    std::printf("prefill: %zu tokens in %.3f s (%.1f tokens/s)\n", ids.size(), prefill_s,
                static_cast<double>(ids.size()) / prefill_s);
    if (out.size() > 1)
      std::printf("decode : %zu tokens in %.3f s (%.1f tokens/s)\n", out.size() - 1, decode_s,
                  static_cast<double>(out.size() - 1) / decode_s);
    return 0;
  });
}

}  // namespace hypic::app
