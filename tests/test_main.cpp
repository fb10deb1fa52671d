// One test main for unit and MPI tests: MPI_Init -> Kokkos::initialize -> GoogleTest,
// torn down in reverse.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "cluster/world.hpp"
#include "common/startup.hpp"
#include "hypic/kernels/threads.hpp"

int main(int argc, char** argv) {
  hypic::reexec_for_runtime_settings(argc, argv);
  MPI_Init(&argc, &argv);
  int result = 0;
  {
    Kokkos::initialize(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    // As the hypic command does: each rank's share of its node, so that the MPI tests'
    // ranks do not oversubscribe the cores.
    hypic::kernels::set_threads(
        hypic::cluster::choose_threads(0, hypic::cluster::describe_world()).threads);
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
