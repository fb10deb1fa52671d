// `hypic tokenize`: what a text becomes under a model's tokenizer, one token per line with
// its piece (like llama.cpp's llama-tokenize), or only the id list.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "common/files.hpp"
#include "hypic/error.hpp"
#include "model/tokenizer.hpp"

namespace hypic::app {
namespace {

// A piece as one printable line: quotes, backslashes and control bytes escaped.
std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "tokenize", "Print the token ids (and pieces) a text becomes under a model's tokenizer");
  struct Args {
    std::string model, text, file;
    bool ids_only = false, no_special = false, byte_tokenizer = false;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("--model", args->model, "Model folder (its tokenizer.json) or a tokenizer.json")
      ->required();
  auto* text = sub->add_option("--text", args->text, "Text to tokenize");
  auto* file = sub->add_option("--file", args->file, "UTF-8 file whose content is tokenized");
  text->excludes(file);
  sub->add_flag("--byte-tokenizer", args->byte_tokenizer,
                "Without a tokenizer in the model folder, one token per byte (else refused)");
  sub->add_flag("--ids-only", args->ids_only, "Print only the ids, as one list");
  sub->add_flag("--no-parse-special", args->no_special,
                "Encode special tokens written in the text as plain text");
  on_run(sub, [args, text, file] {
    HYPIC_REQUIRE(text->count() + file->count() == 1, "tokenize needs --text or --file");
    // As every command that turns text into ids: no tokenizer, no text (unless asked for).
    const model::Tokenizer tok = model::Tokenizer::for_model(
        args->model, args->byte_tokenizer ? model::Tokenizer::Fallback::kByteLevel
                                          : model::Tokenizer::Fallback::kRefuseText);
    tok.require_text_support();
    const std::string input =
        file->count() > 0 ? read_regular_file(args->file, "--file") : args->text;
    const std::vector<int32_t> ids = tok.encode(input, !args->no_special);
    if (args->ids_only) {
      std::string line = "[";
      for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
      std::printf("%s]\n", line.c_str());
      return 0;
    }
    for (int32_t id : ids) std::printf("%6d -> '%s'\n", id, escaped(tok.decode({id})).c_str());
    std::fprintf(stderr, "%zu tokens from %zu bytes (%s)\n", ids.size(), input.size(),
                 tok.describe().c_str());
    return 0;
  });
}

}  // namespace hypic::app
