#pragma once
// Options every command takes, added in one place to the root and to every registered command
// (`hypic forward --threads 4 ...` and `hypic --threads 4 forward ...` are the same):
// --threads N, the one thread count for the host kernels and BLAS products of this rank.
#include <CLI/CLI.hpp>
#include <string>

namespace hypic::app {

// Call after every command is registered.
void add_run_options(CLI::App& app);
// Sets this rank's threads from the options and the environment (cluster::choose_threads).
// Collective over MPI_COMM_WORLD: every rank calls it, after parsing and before the command.
void apply_run_options();
// One line for a run header: "threads: 2 (OpenMP 201511; from --threads)".
std::string threads_header();

}  // namespace hypic::app
