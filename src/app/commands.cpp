#include "app/commands.hpp"

#include <map>
#include <string>

#include "model/hub_cache.hpp"

namespace hypic::app {
namespace {
std::map<const CLI::App*, std::function<int()>>& runners() {
  static std::map<const CLI::App*, std::function<int()>> r;
  return r;
}

// Every `--model` of every command, however deep, also takes a hub id (model/hub_cache.hpp):
// resolved here, at parsing, so each command sees a folder.
void resolve_model_options(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name().empty()) continue;  // an option group: searched by get_option below
    if (CLI::Option* opt = sub->get_option_no_throw("--model")) {
      opt->description(opt->get_description() +
                       ", or a hub id org/name[@revision] found offline in the Hugging Face "
                       "cache (HF_HUB_CACHE, HF_HOME)");
      opt->transform(CLI::Validator(
          [](std::string& text) {
            text = model::resolve_model_location(text);
            return std::string();
          },
          ""));
    }
    resolve_model_options(*sub);
  }
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
  resolve_model_options(app);
}

int run_selected(CLI::App& app) {
  return run_parsed(app);
}

}  // namespace hypic::app
