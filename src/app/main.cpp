// The hypic command: parse, call, report. Every error a user can act on is caught here
// and printed as one line with a non-zero exit code.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <exception>

#include "app/commands.hpp"
#include "cluster/watch.hpp"
#include "common/startup.hpp"

int main(int argc, char** argv) {
  hypic::reexec_for_blas_kernel(argc, argv);
  MPI_Init(&argc, &argv);
  int rc = 0;
  {
    // Kokkos must not see hypic's own flags; give it only the program name.
    int kokkos_argc = 1;
    Kokkos::initialize(kokkos_argc, argv);
    CLI::App app{"hypic: position-independent caching for hybrid-attention language models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("hypic ") + HYPIC_VERSION);
    hypic::app::register_commands(app);
    try {
      app.parse(argc, argv);
      rc = hypic::app::run_selected(app);
    } catch (const CLI::ParseError& e) {
      rc = app.exit(e);
    } catch (const hypic::cluster::WorkerDied& e) {
      // Printed the moment the death was seen, unless the signal handler had already done so.
      if (!e.printed()) std::fprintf(stderr, "hypic: error: %s\n", e.what());
      rc = 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hypic: error: %s\n", e.what());
      rc = 1;
    }
    Kokkos::finalize();
  }
  if (rc != 0) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, rc);  // one rank's error ends the whole job
  }
  MPI_Finalize();
  return rc;
}
