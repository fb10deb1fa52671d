#include "app/run_options.hpp"

#include <mpi.h>

#include "app/commands.hpp"
#include "cluster/world.hpp"
#include "hypic/kernels/threads.hpp"
#include "model/checkpoint.hpp"

namespace hypic::app {
namespace {
struct RunOptions {
  int threads = 0;  // 0: choose (cluster::choose_threads)
  std::string threads_source;
  std::string weights_dtype = "auto";
};
RunOptions& options() {
  static RunOptions o;
  return o;
}
}  // namespace

namespace {
void add_threads_option(CLI::App* command) {
  command
      ->add_option("--threads", options().threads,
                   "threads for this rank's kernels and BLAS products (default 0: "
                   "OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK, else the rank's CPUs shared "
                   "among the ranks of its node)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            long long value = 0;
            if (CLI::detail::lexical_cast(text, value) && value >= 0 &&
                value <= cluster::kMaxThreads)
              return "";
            return "must be a whole number from 0 to " + std::to_string(cluster::kMaxThreads) +
                   " (the most threads a rank may run), not '" + text + "'";
          },
          ""));
}

void add_weights_dtype_option(CLI::App* command) {
  if (command->get_option_no_throw("--weights-dtype") == nullptr)
    command
        ->add_option("--weights-dtype", options().weights_dtype,
                     "dtype of the projection weights in memory: auto (as the checkpoint stores "
                     "them: bf16 stays bf16), f32, or bf16 (half the memory)")
        ->check(CLI::IsMember({"auto", "f32", "bf16"}));
}

// Every command and subcommand, except those with a --threads of their own (bench kernels
// and bench forward take a list of counts).
void add_to_every_command(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands({})) {
    if (sub->get_name().empty()) continue;  // an option group
    if (sub->get_option_no_throw("--threads") == nullptr) add_threads_option(sub);
    add_weights_dtype_option(sub);
    add_to_every_command(sub);
  }
}
}  // namespace

void add_run_options(CLI::App& app) {
  add_threads_option(&app);
  add_weights_dtype_option(&app);
  add_to_every_command(&app);
}

void apply_run_options() {
  const cluster::WorldInfo world = cluster::describe_world(MPI_COMM_WORLD);
  const cluster::ThreadChoice choice = cluster::choose_threads(options().threads, world);
  kernels::set_threads(choice.threads);
  options().threads_source = choice.source;
  model::set_default_weights_dtype(model::parse_weights_dtype(options().weights_dtype));
}

std::string threads_header() {
  std::string line =
      "threads: " + std::to_string(kernels::threads()) + " (" + kernels::threading_description();
  if (!options().threads_source.empty()) line += "; from " + options().threads_source;
  return line + ")";
}

}  // namespace hypic::app
