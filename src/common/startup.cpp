#include "common/startup.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "hypic/kernels/blas.hpp"

namespace hypic {

void reexec_for_blas_kernel(int argc, char** argv) {
  (void)argc;
  if (std::getenv("HYPIC_BLAS_REEXEC") != nullptr) return;  // already tried once
  const std::string coretype = kernels::blas_recommended_coretype();
  if (coretype.empty()) return;
  setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
  setenv("HYPIC_BLAS_REEXEC", "OpenBLAS auto-detected a generic core on this CPU", 1);
  execv("/proc/self/exe", argv);
  // execv failed: continue with the detected kernel; blas_info() shows which one runs.
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace hypic
