#pragma once
// `--device cpu|cuda` for every command that computes: one helper, one line per command.
// Default (auto): cuda when the build has it and a GPU is visible, else cpu. The choice is
// printed in each run's header and written to metrics.json / the bench JSON.
#include <CLI/CLI.hpp>
#include <string>

#include "cluster/gpu_plan.hpp"
#include "cluster/world.hpp"
#include "hypic/kernels/backend.hpp"

namespace hypic::app {

// Adds --device to `sub`, parsed into `device` ("auto" unless given).
void add_device_option(CLI::App* sub, std::string& device);

struct DeviceChoice {
  const kernels::Backend* backend = nullptr;
  std::string name;   // "cpu" or "cuda": what metrics.json records
  std::string label;  // the header line's text: name, the GPU, and why when auto chose cpu
};

// Resolves the option. `device_path` says whether this command can compute on a device
// backend (false: bench compose / scaling, which measure the host path); when it cannot, auto
// means cpu (and the label says why) and an explicit "cuda" is refused. Throws hypic::Error (one
// line) for cuda without a compiled backend or a visible GPU.
DeviceChoice choose_device(const std::string& device, bool device_path = true);

// Prints "device: <label>" (the run header line).
void print_device(const DeviceChoice& d);

// The MPI commands (serve, warmup, eval, chat), collective, before the model is loaded: binds
// each rank to its GPU when computing on cuda (cluster::bind_gpus) and prints, on rank 0, the
// path segment entries take between ranks ("entries: …", also in metrics.json).
cluster::GpuPlan bind_rank_gpu(const DeviceChoice& d, MPI_Comm comm,
                               const cluster::WorldInfo& world);

}  // namespace hypic::app
