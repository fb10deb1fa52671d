#include "app/device_option.hpp"

#include <cstdio>

#include "hypic/error.hpp"
#include "hypic/kernels/device.hpp"

namespace hypic::app {

void add_device_option(CLI::App* sub, std::string& device) {
  device = "auto";
  sub->add_option("--device", device,
                  "cpu or cuda (default: cuda when built with CUDA and a GPU is visible, else cpu)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
}

DeviceChoice choose_device(const std::string& device, bool device_path) {
  DeviceChoice d;
  if (device == "cpu") {  // the CUDA module is not even loaded (kernels/cuda/module_loader.cpp)
    d.backend = &kernels::host_backend();
    d.name = "cpu";
    d.label = "cpu";
    return d;
  }
  const kernels::DeviceInfo info = kernels::cuda_device_info();
  const bool gpu = info.compiled && info.count > 0;
  if (device == "cuda") {
    HYPIC_REQUIRE(info.compiled,
                  "--device cuda: hypic was not compiled with CUDA (reconfigure with "
                  "-DHYPIC_CUDA=ON and a CUDA toolkit)");
    HYPIC_REQUIRE(info.count > 0, "--device cuda: no CUDA device visible (" + info.description +
                                      "); use --device cpu");
    HYPIC_REQUIRE(device_path,
                  "--device cuda: this benchmark measures the host path only; use --device cpu");
  }
  if (device == "cuda" || (device == "auto" && gpu && device_path)) {
    d.backend = &kernels::cuda_backend();
    d.name = "cuda";
    d.label = "cuda (" + info.description + ")";
    return d;
  }
  d.backend = &kernels::host_backend();
  d.name = "cpu";
  d.label = "cpu";
  if (device == "auto" && gpu && !device_path)
    d.label += " (a GPU is visible, but this benchmark measures the host path)";
  return d;
}

void print_device(const DeviceChoice& d) {
  std::printf("device: %s\n", d.label.c_str());
}

cluster::GpuPlan bind_rank_gpu(const DeviceChoice& d, MPI_Comm comm,
                               const cluster::WorldInfo& world) {
  cluster::GpuPlan plan = cluster::bind_gpus(comm, world, d.backend->device() != Device::Host);
  if (world.rank == 0) std::printf("entries: %s\n", plan.label().c_str());
  return plan;
}

}  // namespace hypic::app
