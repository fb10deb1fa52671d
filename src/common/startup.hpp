#pragma once
// Process start-up shared by the hypic command and the test mains.
namespace hypic {

// Settings that libraries read once, when they load (before main), are fixed here by
// re-executing this program once with them in the environment; must run before MPI_Init or
// any thread starts. Returns only when no re-exec was needed or it failed (then the defaults
// stay and blas_info() reports the kernel that runs).
// - OpenBLAS picks its kernel when it loads; when it mis-detects the CPU
//   (kernels::blas_recommended_coretype), OPENBLAS_CORETYPE is set.
// - OpenMP threads wait passively (OMP_WAIT_POLICY=passive) unless the user chose a policy
//   (OMP_WAIT_POLICY or GOMP_SPINCOUNT): spinning workers cost a scheduler slice per parallel
//   loop whenever other processes share the cores (ranks of an unbound job, a busy node).
void reexec_for_runtime_settings(int argc, char** argv);

// Whether the command line selects a command that needs neither MPI nor OpenMP's settings:
// `tokenize`, `model info`, `inspect`, `--help` / `--version` (and a command line with no
// command). main() then skips the re-exec above and MPI_Init (whose singleton start launches
// Open MPI's runtime daemon): together about a second of start-up.
bool is_light_command(int argc, char** argv);

// With HYPIC_STARTUP_TRACE set, prints one line to stderr saying whether this process
// re-executed itself and initialised MPI (for tests); otherwise nothing.
void trace_startup(bool mpi_initialised);

// Keeps freed memory in the process for reuse instead of returning it to the system, unless
// the user set glibc's own MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_: blocks up to
// 32 MiB (glibc's largest threshold) come from the heap, and up to 1 GiB of free heap stays
// mapped. Each query builds caches of several MiB (K/V rows, scratch) and drops them; handed
// back each time, their pages were faulted in and zeroed again by the kernel on the next
// query (about a fifth of pic's junction pass on the small preset, docs/engine.md). The same
// for every mode. No-op where glibc's mallopt is not available.
void keep_freed_memory();

}  // namespace hypic
