// Ranks and GPUs (cluster/gpu_plan.hpp): the device each rank takes and the path entries take,
// as pure functions of what the ranks see.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster/gpu_plan.hpp"
#include "hypic/error.hpp"
#include "hypic/kernels/device.hpp"

namespace {
namespace gpu_plan_test {
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

TEST(GpuPlan, ThisBuildSaysWhetherItHasTheNcclEntryPath) {
  // A CUDA build links NCCL and can send entries device to device; one without CUDA says why
  // not, and that reason is what a multi-GPU run reports.
  const std::string missing = hypic::cluster::nccl_entry_transfer_missing();
  if (hypic::kernels::cuda_device_info().compiled) {
    EXPECT_EQ(missing, "");
  } else {
    EXPECT_EQ(missing, "built without CUDA and NCCL");
    const auto c = choose_entry_path({{"n0", "GPU-a"}, {"n1", "GPU-b"}}, missing);
    EXPECT_EQ(c.path, EntryPath::HostMpi);
    EXPECT_EQ(c.reason, "built without CUDA and NCCL");
  }
}

// The decision as a table: what the ranks see and what the build has -> path and reason.
TEST(GpuPlan, EntryPathOverrideFromTheEnvironment) {
  EXPECT_EQ(hypic::cluster::entry_path_override(nullptr), "");
  EXPECT_EQ(hypic::cluster::entry_path_override("auto"), "");
  EXPECT_EQ(hypic::cluster::entry_path_override("host-mpi"), "HYPIC_ENTRY_PATH=host-mpi");
  try {
    hypic::cluster::entry_path_override("nvlink");
    ADD_FAILURE() << "HYPIC_ENTRY_PATH=nvlink was accepted";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected auto or host-mpi"), std::string::npos)
        << e.what();
  }
  // The override is a reason for host memory and MPI like a missing NCCL.
  const auto choice = hypic::cluster::choose_entry_path(
      {{"n0", "GPU-a"}, {"n0", "GPU-b"}}, hypic::cluster::entry_path_override("host-mpi"));
  EXPECT_EQ(choice.path, EntryPath::HostMpi);
  EXPECT_EQ(choice.reason, "HYPIC_ENTRY_PATH=host-mpi");
}

TEST(GpuPlan, EntryPathTable) {
  struct Row {
    std::vector<RankGpu> ranks;
    std::string nccl_missing;
    EntryPath path;
    std::string reason;
  };
  const std::vector<Row> table = {
      {{{"n0", ""}}, "", EntryPath::InProcess, "one rank: entries stay in its memory"},
      {{{"n0", "GPU-a"}}, "", EntryPath::InProcess, "one rank: entries stay in its memory"},
      {{{"n0", ""}, {"n0", ""}}, "", EntryPath::HostMpi, "rank 0 computes on the host"},
      {{{"n0", "GPU-a"}, {"n0", "GPU-b"}}, "", EntryPath::Nccl, "one GPU per rank"},
      {{{"n0", "GPU-a"}, {"n1", "GPU-a"}}, "", EntryPath::Nccl, "one GPU per rank"},
      {{{"n0", "GPU-a"}, {"n0", "GPU-a"}},
       "",
       EntryPath::HostMpi,
       "ranks 0 and 1 share GPU GPU-a on n0"},
      {{{"n0", "GPU-a"}, {"n0", "GPU-b"}, {"n0", "GPU-b"}},
       "",
       EntryPath::HostMpi,
       "ranks 1 and 2 share GPU GPU-b on n0"},
      {{{"n0", "GPU-a"}, {"n0", "GPU-b"}},
       "built without CUDA and NCCL",
       EntryPath::HostMpi,
       "built without CUDA and NCCL"},
      // A shared GPU is reported before a missing NCCL (the first reason found).
      {{{"n0", "GPU-a"}, {"n0", "GPU-a"}},
       "built without CUDA and NCCL",
       EntryPath::HostMpi,
       "ranks 0 and 1 share GPU GPU-a on n0"},
      {{{"n0", "GPU-a"}, {"n0", ""}, {"n1", "GPU-c"}},
       "",
       EntryPath::HostMpi,
       "rank 1 computes on the host"},
  };
  for (size_t i = 0; i < table.size(); ++i) {
    const auto c = choose_entry_path(table[i].ranks, table[i].nccl_missing);
    EXPECT_EQ(c.path, table[i].path) << "row " << i;
    EXPECT_EQ(c.reason, table[i].reason) << "row " << i;
  }
}

TEST(GpuPlan, LabelSaysThePathItsReasonAndTheDevice) {
  hypic::cluster::GpuPlan plan;
  plan.entries = {EntryPath::HostMpi, "built without CUDA and NCCL"};
  EXPECT_EQ(plan.label(), "host-mpi (built without CUDA and NCCL)");
  plan.entries = {EntryPath::Nccl, "one GPU per rank"};
  plan.device = 1;
  plan.gpu = "GPU-b";
  EXPECT_EQ(plan.label(), "nccl (one GPU per rank); this rank: CUDA device 1 GPU-b");
  EXPECT_EQ(plan.link, nullptr);  // opened by bind_gpus on the NCCL path only
}

}  // namespace gpu_plan_test
}  // namespace
