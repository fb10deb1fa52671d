// Ranks and GPUs (cluster/gpu_plan.hpp): the device each rank takes and the path entries take,
// as pure functions of what the ranks see.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster/gpu_plan.hpp"
#include "hypic/error.hpp"

namespace {
using hypic::cluster::choose_entry_path;
using hypic::cluster::EntryPath;
using hypic::cluster::local_device;
using hypic::cluster::RankGpu;

TEST(GpuPlan, LocalRankPicksTheDevice) {
  EXPECT_EQ(local_device(0, 0), -1);  // no GPU: the host
  EXPECT_EQ(local_device(0, 3), -1);
  for (int lr = 0; lr < 4; ++lr) EXPECT_EQ(local_device(1, lr), 0);   // --gpus-per-task=1
  for (int lr = 0; lr < 8; ++lr) EXPECT_EQ(local_device(8, lr), lr);  // 8 visible, 8 ranks
  EXPECT_EQ(local_device(2, 3), 1);                                   // more ranks: round robin
  EXPECT_EQ(local_device(2, 4), 0);
  EXPECT_THROW(local_device(2, -1), hypic::Error);
}

TEST(GpuPlan, OneRankKeepsEntriesInProcess) {
  EXPECT_EQ(choose_entry_path({{"n0", "GPU-a"}}, "").path, EntryPath::InProcess);
  EXPECT_EQ(choose_entry_path({{"n0", ""}}, "no nccl").path, EntryPath::InProcess);
}

TEST(GpuPlan, OwnGpuPerRankWithNcclTakesNccl) {
  // Slurm --gpus-per-task=1: every rank sees index 0, but the UUIDs differ.
  const std::vector<RankGpu> ranks = {
      {"n0", "GPU-a"}, {"n0", "GPU-b"}, {"n1", "GPU-c"}, {"n1", "GPU-d"}};
  const auto c = choose_entry_path(ranks, "");
  EXPECT_EQ(c.path, EntryPath::Nccl);
  EXPECT_EQ(c.reason, "one GPU per rank");
  EXPECT_STREQ(hypic::cluster::entry_path_name(c.path), "nccl");
}

TEST(GpuPlan, SharedGpuOrNoNcclGoesThroughHostMemory) {
  // One GPU, three ranks on the node.
  auto c = choose_entry_path({{"n0", "GPU-a"}, {"n0", "GPU-a"}, {"n0", "GPU-a"}}, "");
  EXPECT_EQ(c.path, EntryPath::HostMpi);
  EXPECT_EQ(c.reason, "ranks 0 and 1 share GPU GPU-a on n0");
  // Round robin over two GPUs for three ranks: ranks 0 and 2 share.
  c = choose_entry_path({{"n0", "GPU-a"}, {"n0", "GPU-b"}, {"n0", "GPU-a"}}, "");
  EXPECT_EQ(c.path, EntryPath::HostMpi);
  EXPECT_EQ(c.reason, "ranks 0 and 2 share GPU GPU-a on n0");
  // The same UUID string on two nodes is two GPUs (the key is node and GPU).
  EXPECT_EQ(choose_entry_path({{"n0", "GPU-a"}, {"n1", "GPU-a"}}, "").path, EntryPath::Nccl);
  // Without NCCL: host memory, with the build's reason.
  c = choose_entry_path({{"n0", "GPU-a"}, {"n1", "GPU-b"}}, "built without NCCL");
  EXPECT_EQ(c.path, EntryPath::HostMpi);
  EXPECT_EQ(c.reason, "built without NCCL");
  // A rank computing on the host.
  c = choose_entry_path({{"n0", "GPU-a"}, {"n0", ""}}, "");
  EXPECT_EQ(c.path, EntryPath::HostMpi);
  EXPECT_EQ(c.reason, "rank 1 computes on the host");
  EXPECT_STREQ(hypic::cluster::entry_path_name(c.path), "host-mpi");
}

TEST(GpuPlan, ThisBuildSaysWhyItHasNoNcclEntryPath) {
  // Entries between GPUs go through host memory and MPI in every build today; the reason says so.
  EXPECT_FALSE(hypic::cluster::nccl_entry_transfer_missing().empty());
}

}  // namespace
