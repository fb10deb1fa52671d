// The MPI context under a real launcher, at 1, 2 and 3 ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cluster/gpu_plan.hpp"
#include "cluster/world.hpp"
#include "hypic/error.hpp"

namespace hypic::cluster {
namespace {

TEST(ClusterWorld, SizeCheckAcceptsTheLaunchAndRefusesAnyOtherSize) {
  const Communicator world = Communicator::world();
  const int size = world.size();
  // ctest launches through mpirun, which sets OMPI_COMM_WORLD_SIZE to the same size.
  EXPECT_NO_THROW(check_world_size(size));
  EXPECT_NO_THROW(check_world_size(0));
  const auto launched = launcher_world_size();
  if (launched) {
    EXPECT_EQ(launched->size, size) << launched->variable;
  }
  try {
    check_world_size(size + 1);
    ADD_FAILURE() << "a size mismatch was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("asked for " + std::to_string(size + 1) + " ranks"), std::string::npos)
        << what;
  }
}

TEST(ClusterWorld, NodeLayoutIsConsistentAcrossRanks) {
  const WorldInfo info = describe_world(MPI_COMM_WORLD);
  EXPECT_EQ(info.rank, Communicator::world().rank());
  EXPECT_EQ(info.size, Communicator::world().size());

  // All ranks of this test run share one host: the local ranks are 0..size-1, each once.
  std::vector<int> local(static_cast<size_t>(info.size));
  MPI_Allgather(&info.local_rank, 1, MPI_INT, local.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::sort(local.begin(), local.end());
  for (int i = 0; i < info.size; ++i) EXPECT_EQ(local[static_cast<size_t>(i)], i);
  EXPECT_EQ(info.local_size, info.size);

  // Every rank of a node sees the same union of CPUs, and so the same thread budget.
  int lo = 0;
  int hi = 0;
  MPI_Allreduce(&info.node_cpus, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&info.node_cpus, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi);
  const int threads = blas_threads_per_rank(info);
  EXPECT_GE(threads, 1);
  EXPECT_LE(threads * info.local_size, std::max(info.node_cpus, info.local_size));
}

// Ranks computing on the host: every rank gets the same entry path, in-process alone and
// host memory + MPI otherwise, and no device.
TEST(ClusterWorld, HostRanksAgreeOnTheEntryPath) {
  const WorldInfo info = describe_world(MPI_COMM_WORLD);
  const GpuPlan plan = bind_gpus(MPI_COMM_WORLD, info, /*on_gpu=*/false);
  EXPECT_EQ(plan.device, -1);
  EXPECT_EQ(plan.entries.path, info.size == 1 ? EntryPath::InProcess : EntryPath::HostMpi);
  if (info.size > 1) {
    EXPECT_EQ(plan.entries.reason, "rank 0 computes on the host");
  }
  EXPECT_EQ(plan.label().rfind(entry_path_name(plan.entries.path), 0), 0u) << plan.label();
}

}  // namespace
}  // namespace hypic::cluster
