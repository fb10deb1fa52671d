// One test main for unit and MPI tests: MPI_Init -> Kokkos::initialize -> GoogleTest,
// torn down in reverse.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "common/startup.hpp"

int main(int argc, char** argv) {
  hypic::reexec_for_blas_kernel(argc, argv);
  MPI_Init(&argc, &argv);
  int result = 0;
  {
    Kokkos::initialize(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
      // Only rank 0 prints results; failures on other ranks still fail the exit code.
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
    }
    result = RUN_ALL_TESTS();
    Kokkos::finalize();
  }
  int any_failed = 0;
  MPI_Allreduce(&result, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
