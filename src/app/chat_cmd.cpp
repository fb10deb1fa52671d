// `hypic chat`: an interactive session over a growing set of documents. Documents are
// added from files, folders or typed text; each question is answered over all of them or
// over chosen ones, in the current caching mode, and the answer is shown with its TTFT and
// cache statistics. On a terminal it prompts and explains itself; with stdin from a pipe
// it reads the same commands line by line without prompts, so sessions can be scripted.
//
// MPI: as `hypic serve`. Rank 0 reads the commands (mpirun forwards stdin to rank 0) and
// composes; ranks 1 … N−1 are scatter workers that compute each question's cold segments.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/pic_inputs.hpp"
#include "cluster/distributed.hpp"
#include "cluster/messages.hpp"
#include "cluster/watch.hpp"
#include "cluster/world.hpp"
#include "eval/chat_session.hpp"
#include "hypic/error.hpp"
#include "pic/engine.hpp"

namespace hypic::app {
namespace {

struct ChatArgs {
  std::string model, store, mode = "pic", junction = "8", dtype = "bf16", device;
  int max_new_tokens = 32;
  int no_repeat_ngram = 0;
  double memory_budget_mib = 1024;
  int ranks = 0;
  bool byte_tokenizer = false;
};

int run_chat(const ChatArgs& a) {
  HYPIC_REQUIRE(a.max_new_tokens > 0, "--max-new-tokens must be at least 1");
  HYPIC_REQUIRE(a.no_repeat_ngram >= 0, "--no-repeat-ngram must be 0 (off) or a size");
  const DeviceChoice device = choose_device(a.device);
  cluster::check_world_size(a.ranks);
  const cluster::Communicator comm = cluster::Communicator::world().duplicate();
  const cluster::WorldInfo world = cluster::describe_world(comm.get());
  if (world.rank == 0) print_device(device);
  const cluster::GpuPlan gpus = bind_rank_gpu(device, comm.get(), world);
  if (world.rank != 0) {  // a worker: each task carries its junction window, so `junction W`
                          // in the session needs nothing here
    LoadedPicModel m = load_pic_model(a.model, *device.backend);
    cluster::run_worker(comm.get(), *m.model, pic::JunctionSpec::parse(a.junction),
                        gpus.link.get());
    return 0;
  }
  const bool interactive = isatty(fileno(stdin)) != 0;
  LoadedPicModel m = load_pic_model(a.model, *device.backend, a.byte_tokenizer);
  m.tokenizer.require_text_support();  // a chat is all text
  eval::ChatOptions options;
  options.store = a.store;
  options.mode = a.mode;
  options.junction = a.junction;
  options.dtype = a.dtype;
  options.max_new_tokens = a.max_new_tokens;
  options.no_repeat_ngram = a.no_repeat_ngram;
  options.memory_budget_mib = a.memory_budget_mib;
  eval::ChatSession s(*m.model, m.fingerprint, m.tokenizer, options, interactive);
  std::unique_ptr<cluster::RemoteColdSource> cold;
  if (world.size > 1) {
    cold = std::make_unique<cluster::RemoteColdSource>(
        comm.get(), *m.model, cluster::CostModel(0.0, 1.0, 0.0),
        "the session's stores keep the entries written so far; start the session again",
        gpus.link.get());
    s.set_cold_source(cold.get());
  }
  if (interactive)
    std::printf("hypic chat: model %s, mode %s, junction %s. Type help for the commands.\n",
                a.model.c_str(), a.mode.c_str(), a.junction.c_str());
  std::string line;
  while (true) {
    if (interactive) {
      std::printf("hypic> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    try {
      if (!s.handle(line, std::cin)) break;
    } catch (const cluster::WorkerFailure&) {
      throw;  // the workers cannot go on: the job ends
    } catch (const cluster::WorkerDied&) {
      throw;
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "chat: error: %s\n", e.what());
    }
    std::fflush(stdout);
  }
  if (interactive) std::printf("\n");
  if (cold) {
    cold.reset();
    cluster::shutdown_workers(comm.get());
  }
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto* sub = app.add_subcommand("chat", "Ask questions over documents, interactively");
  auto a = std::make_shared<ChatArgs>();
  sub->add_option("--model", a->model, "Hugging Face model folder")->required();
  add_byte_tokenizer_flag(sub, &a->byte_tokenizer);
  sub->add_option("--store", a->store,
                  "segment store for the chosen junction (created if absent; default: a "
                  "session store removed at the end)");
  sub->add_option("--mode", a->mode, "full | prefix | pic | pic-addition")->capture_default_str();
  sub->add_option("--junction", a->junction, "junction window: tokens, or a share in (0,1]")
      ->capture_default_str();
  sub->add_option("--max-new-tokens", a->max_new_tokens, "answer length")->capture_default_str();
  sub->add_option("--no-repeat-ngram", a->no_repeat_ngram,
                  "greedy decoding never repeats an n-gram of this many tokens within an answer "
                  "(0: off)")
      ->capture_default_str();
  sub->add_option("--memory-budget", a->memory_budget_mib, "MiB of RAM for the memory tier")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "element type of stores created here")
      ->capture_default_str();
  sub->add_option("--ranks", a->ranks,
                  "MPI ranks this job must have (0: whatever the launcher started)")
      ->capture_default_str();
  add_device_option(sub, a->device);
  on_run(sub, [a] { return run_chat(*a); });
}

}  // namespace hypic::app
