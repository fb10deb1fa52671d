#pragma once
// An interactive query session over a growing set of documents (`hypic chat`, docs/eval.md):
// documents added from files, folders or typed text, questions answered over all of them or
// chosen ones in the current caching mode, each answer shown with its TTFT and cache
// statistics. One command line at a time through handle(); the command (src/app/chat_cmd.cpp)
// reads the lines, prompts on a terminal, and wires the workers (set_cold_source).
#include <cstdio>
#include <istream>
#include <memory>
#include <string>

#include "model/forward.hpp"
#include "model/tokenizer.hpp"
#include "pic/engine.hpp"

namespace hypic::eval {

struct ChatOptions {
  std::string store;  // the user's store for the starting junction ("": session stores only)
  std::string mode = "pic", junction = "8", dtype = "bf16";
  int max_new_tokens = 32;
  int no_repeat_ngram = 0;  // > 0: no n-gram of this size twice in an answer (pic::Query)
  double memory_budget_mib = 1024;
};

class ChatSession {
 public:
  // `interactive` adds the hints a person at a terminal needs; output goes to `out`.
  ChatSession(model::Model& model, std::string fingerprint, const model::Tokenizer& tok,
              ChatOptions options, bool interactive, std::FILE* out = stdout);
  ~ChatSession();  // closes the stores, removes the session stores
  ChatSession(const ChatSession&) = delete;
  ChatSession& operator=(const ChatSession&) = delete;

  // Where the engines of entry modes get cold segments (null: computed in place). Set before
  // the first question.
  void set_cold_source(pic::ColdSource* cold);
  // One command line (`help` lists them); `in` supplies the lines of a multi-line add-text.
  // Returns false when the session should end; throws hypic::Error for a command that fails.
  bool handle(const std::string& line, std::istream& in);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hypic::eval
