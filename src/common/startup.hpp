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

}  // namespace hypic
