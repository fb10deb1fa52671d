#include "common/startup.hpp"

#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <string>

#include "hypic/kernels/blas.hpp"

namespace hypic {

void reexec_for_runtime_settings(int argc, char** argv) {
  (void)argc;
  if (std::getenv("HYPIC_REEXEC") != nullptr) return;  // already tried once
  bool changed = false;
  const std::string coretype = kernels::blas_recommended_coretype();
  if (!coretype.empty()) {
    setenv("OPENBLAS_CORETYPE", coretype.c_str(), 1);
    setenv("HYPIC_BLAS_REEXEC", "OpenBLAS auto-detected a generic core on this CPU", 1);
    changed = true;
  }
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
  if (!changed) return;
  setenv("HYPIC_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
  // execv failed: continue with the defaults; blas_info() shows which kernel runs.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("HYPIC_BLAS_REEXEC");
}

void keep_freed_memory() {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace hypic
