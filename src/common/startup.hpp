#pragma once
// Process start-up shared by the hypic command and the test mains.
namespace hypic {

// OpenBLAS picks its kernel when the library loads, before main. When it mis-detects the
// CPU (kernels::blas_recommended_coretype), re-execute this program once with
// OPENBLAS_CORETYPE set; must run before MPI_Init or any thread starts. Returns only when no
// re-exec was needed or it failed (then the slow generic kernel is used and reported).
void reexec_for_blas_kernel(int argc, char** argv);

}  // namespace hypic
