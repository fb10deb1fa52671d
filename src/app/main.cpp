// The hypic command: parse, call, report. Every error a user can act on is caught here
// and printed as one line with a non-zero exit code.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/run_options.hpp"
#include "cluster/watch.hpp"
#include "cluster/world.hpp"
#include "common/startup.hpp"
#include "hypic/error.hpp"
#include "store/hdf5.hpp"

namespace {

// The deepest subcommand the command line selected ("hypic", "hypic model", ...).
const CLI::App* selected_command(const CLI::App* app, std::string* path) {
  *path = "hypic";
  for (bool descended = true; descended;) {
    descended = false;
    for (const CLI::App* sub : app->get_subcommands({})) {
      if (!sub->parsed() || sub->get_name().empty()) continue;  // "": an option group
      *path += " " + sub->get_name();
      app = sub;
      descended = true;
      break;
    }
  }
  return app;
}

// A command-line error as one line, like every other error; an unknown command is named
// together with the commands there are.
std::string one_line_parse_error(const CLI::App* app, const CLI::Error& e) {
  std::string path;
  const CLI::App* command = selected_command(app, &path);
  std::string message = e.what();
  const std::vector<std::string> rest = command->remaining();
  const std::vector<const CLI::App*> subs =
      command->get_subcommands([](const CLI::App* sub) { return !sub->get_name().empty(); });
  if (e.get_name() == "RequiredError" && !rest.empty() && !subs.empty() &&
      rest.front().rfind('-', 0) != 0) {
    message = "unknown command '" + rest.front() + "'";
    if (command != app) message += " for '" + path + "'";
    std::string names;
    for (const CLI::App* sub : subs) names += (names.empty() ? "" : ", ") + sub->get_name();
    message += " (commands: " + names + ")";
  }
  for (char& c : message)
    if (c == '\n' || c == '\r') c = ' ';
  return "hypic: error: " + message + "; see `" + path + " --help`\n";
}

}  // namespace

int main(int argc, char** argv) {
  // Past the file-size limit (ulimit -f) a write then fails with EFBIG, which the store
  // reports in one line, instead of SIGXFSZ killing the process without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  // tokenize, model info and inspect use neither MPI nor OpenMP threads: they skip the
  // re-exec and MPI's start (about a second together; common/startup.hpp).
  const bool light = hypic::is_light_command(argc, argv);
  if (!light) hypic::reexec_for_runtime_settings(argc, argv);
  hypic::keep_freed_memory();
  // PMIx's shared-memory data store fails to start under a file-size limit (ulimit -f) and
  // buried hypic's line under 16 lines of Open MPI errors; its hash store needs no files.
  setenv("PMIX_MCA_gds", "hash", /*overwrite=*/0);
  if (!light) MPI_Init(&argc, &argv);
  hypic::trace_startup(!light);
  bool every_rank_failed = false;  // an error all ranks found alike: no MPI_Abort
  int rc = 0;
  {
    // Kokkos must not see hypic's own flags; give it only the program name.
    int kokkos_argc = 1;
    Kokkos::initialize(kokkos_argc, argv);
    CLI::App app{"hypic: position-independent caching for hybrid-attention language models"};
    app.require_subcommand(1);
    app.failure_message(one_line_parse_error);
    app.set_version_flag("--version", std::string("hypic ") + HYPIC_VERSION);
    hypic::app::register_commands(app);
    hypic::app::add_run_options(app);
    try {
      app.parse(argc, argv);
      hypic::app::apply_run_options();
      rc = hypic::app::run_selected(app);
    } catch (const CLI::ParseError& e) {
      rc = app.exit(e);
    } catch (const hypic::cluster::WorkerDied& e) {
      // Printed the moment the death was seen, unless the signal handler had already done so.
      if (!e.printed()) std::fprintf(stderr, "hypic: error: %s\n", e.what());
      rc = 1;
    } catch (const hypic::cluster::WorldSizeError& e) {
      // Every rank found the same mismatch: rank 0 says it once, all end without MPI_Abort.
      int rank = 0;
      if (!light) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == 0) std::fprintf(stderr, "hypic: error: %s\n", e.what());
      every_rank_failed = true;
      rc = 1;
    } catch (const hypic::Error& e) {
      std::fprintf(stderr, "hypic: error: %s\n", e.what());
      rc = 1;
    } catch (const std::bad_alloc&) {
      // Sizes are checked before large allocations; this names the command at least.
      std::string path;
      selected_command(&app, &path);
      std::fprintf(stderr,
                   "hypic: error: `%s` ran out of memory (std::bad_alloc): an input or option "
                   "asks for more memory than this machine has; try smaller inputs\n",
                   path.c_str());
      rc = 1;
    } catch (const std::exception& e) {
      // Not one of hypic's own messages (a library's): say which command it stopped.
      std::string path;
      selected_command(&app, &path);
      std::fprintf(stderr, "hypic: error: `%s` failed: %s\n", path.c_str(), e.what());
      rc = 1;
    }
    Kokkos::finalize();
  }
  if (rc != 0 && !light && !every_rank_failed) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, rc);  // one rank's error ends the whole job
  }
  if (hypic::h5::unreleased_object_seen()) {  // HDF5's teardown would crash (store/hdf5.hpp)
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  if (!light) MPI_Finalize();
  return rc;
}
