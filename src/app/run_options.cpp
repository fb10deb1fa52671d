#include "app/run_options.hpp"

#include <mpi.h>

#include "app/commands.hpp"
#include "cluster/world.hpp"
#include "hypic/kernels/threads.hpp"

namespace hypic::app {
namespace {
struct RunOptions {
  int threads = 0;  // 0: choose (cluster::choose_threads)
  std::string threads_source;
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
      ->check(non_negative_count());
}

// Every command and subcommand, except those with a --threads of their own (bench kernels
// and bench forward take a list of counts).
void add_to_every_command(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands({})) {
    if (sub->get_name().empty()) continue;  // an option group
    if (sub->get_option_no_throw("--threads") == nullptr) add_threads_option(sub);
    add_to_every_command(sub);
  }
}
}  // namespace

void add_run_options(CLI::App& app) {
  add_threads_option(&app);
  add_to_every_command(&app);
}

void apply_run_options() {
  const cluster::WorldInfo world = cluster::describe_world(MPI_COMM_WORLD);
  const cluster::ThreadChoice choice = cluster::choose_threads(options().threads, world);
  kernels::set_threads(choice.threads);
  options().threads_source = choice.source;
}

std::string threads_header() {
  std::string line =
      "threads: " + std::to_string(kernels::threads()) + " (" + kernels::threading_description();
  if (!options().threads_source.empty()) line += "; from " + options().threads_source;
  return line + ")";
}

}  // namespace hypic::app
