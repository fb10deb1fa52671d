#include "app/commands.hpp"

#include <map>
#include <string>

namespace hypic::app {
namespace {
std::map<const CLI::App*, std::function<int()>>& runners() {
  static std::map<const CLI::App*, std::function<int()>> r;
  return r;
}

int run_parsed(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    if (!sub->parsed()) continue;
    auto it = runners().find(sub);
    if (it != runners().end()) return it->second();
    return run_parsed(*sub);
  }
  return 0;
}
}  // namespace

void on_run(CLI::App* sub, std::function<int()> run) {
  runners()[sub] = std::move(run);
}

CLI::Validator non_negative_count() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        long long value = 0;
        if (CLI::detail::lexical_cast(text, value) && value >= 0) return "";
        return "must be a whole number, 0 or more, not '" + text + "'";
      },
      "");  // no description: the help text stays as it was
}

void add_byte_tokenizer_flag(CLI::App* sub, bool* byte_tokenizer) {
  sub->add_flag("--byte-tokenizer", *byte_tokenizer,
                "when the model folder has no tokenizer.json, turn text into one token per byte "
                "(without this flag such a folder refuses text)");
}

void register_commands(CLI::App& app) {
  add_info_command(app);
  add_model_commands(app);
  add_forward_command(app);
  add_generate_command(app);
  add_bench_commands(app);
  add_warmup_command(app);
  add_serve_command(app);
  add_inspect_command(app);
  add_store_commands(app);
  add_eval_command(app);
  add_chat_command(app);
  add_tokenize_command(app);
}

int run_selected(CLI::App& app) {
  return run_parsed(app);
}

}  // namespace hypic::app
