// `hypic info`: what this build and this machine give hypic.
#include <H5public.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "app/commands.hpp"
#include "app/run_options.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/cpu.hpp"
#include "hypic/kernels/device.hpp"

namespace hypic::app {

void print_build_info(std::FILE* out) {
  const auto blas = kernels::blas_info();
  std::fprintf(out, "hypic %s\n", HYPIC_VERSION);
  std::fprintf(out, "  CPU    : %s (%s)\n", kernels::cpu_model().c_str(),
               kernels::cpu_isa_summary().c_str());
  std::fprintf(out, "  BLAS   : %s, kernel %s, one thread per GEMM tile%s%s\n",
               blas.library.c_str(), blas.kernel.c_str(), blas.note.empty() ? "" : "; ",
               blas.note.c_str());
  std::fprintf(out, "  %s\n", threads_header().c_str());
  std::fprintf(out, "  Kokkos : %d.%d.%d, host execution space %s\n", KOKKOS_VERSION / 10000,
               KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100,
               Kokkos::DefaultHostExecutionSpace::name());
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
#ifdef H5_HAVE_PARALLEL
  const char* hdf5_mode = "parallel";
#else
  const char* hdf5_mode = "serial";
#endif
  std::fprintf(out, "  HDF5   : %u.%u.%u %s\n", maj, min, rel, hdf5_mode);
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi_version, &len);
  std::string mpi(mpi_version, static_cast<size_t>(len));
  if (auto nl = mpi.find_first_of("\n,"); nl != std::string::npos) mpi.resize(nl);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::fprintf(out, "  MPI    : %s, %d rank(s)\n", mpi.c_str(), size);
  const auto dev = kernels::cuda_device_info();
  std::fprintf(out, "  CUDA   : %s\n", dev.description.c_str());
}

void add_info_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("info", "Print the build configuration and the BLAS kernel in use");
  auto device_check = std::make_shared<bool>(false);
  sub->add_flag("--device-check", *device_check,
                "Also run the main CUDA kernels against the host ones (needs a GPU; the op harness "
                "checks every op)");
  on_run(sub, [device_check] {
    print_build_info(stdout);
    if (*device_check) {
      const auto dev = kernels::cuda_device_info();
      if (dev.compiled && dev.count == 0)
        throw std::runtime_error("--device-check needs a CUDA device, and none is visible (" +
                                 dev.description + ")");
      std::fflush(stdout);
      std::printf("%s", kernels::cuda::self_check().c_str());
    }
    return 0;
  });
}

}  // namespace hypic::app
