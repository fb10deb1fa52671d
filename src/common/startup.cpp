#include "common/startup.hpp"

#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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

bool is_light_command(int argc, char** argv) {
  // The words of the command line that are not flags. Flags that take a value before the
  // command (hypic's options on the top level) have their value skipped.
  std::vector<std::string> words;
  for (int i = 1; i < argc && words.size() < 2; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--version") return true;  // parsing ends
    if (arg.rfind("-", 0) == 0) {
      if (words.empty() && (arg == "--threads" || arg == "--weights-dtype")) ++i;
      if (words.empty()) continue;
      break;  // the command's own flags start: its name is complete
    }
    words.push_back(arg);
  }
  if (words.empty()) return true;  // no command: CLI11 says so
  if (words[0] == "tokenize" || words[0] == "inspect") return true;
  return words[0] == "model" && words.size() > 1 && words[1] == "info";
}

void trace_startup(bool mpi_initialised) {
  if (std::getenv("HYPIC_STARTUP_TRACE") == nullptr) return;
  std::fprintf(stderr, "hypic: startup: re-executed %s, MPI initialised %s\n",
               std::getenv("HYPIC_REEXEC") != nullptr ? "yes" : "no",
               mpi_initialised ? "yes" : "no");
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
