#pragma once
// Ranks and GPUs (issue #14): which GPU each rank computes on, and which path segment entries
// take from the workers to the combine rank. The decisions are pure functions of what the
// ranks see (tested on the host, tests/unit/gpu_plan_test.cpp); bind_gpus applies them under
// MPI and every rank gets the same answer.
//
// One rank per GPU: under Slurm's --gpus-per-task (or a CUDA_VISIBLE_DEVICES per rank) each
// rank sees one GPU, its own: index 0. When several are visible (mpirun on a multi-GPU node,
// srun --gpus-per-node), the rank's index among the ranks of its node
// (MPI_Comm_split_type(SHARED), the same number as OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID)
// picks one, round robin when there are more ranks than GPUs. Whether two ranks then share a
// GPU is told by the GPUs' UUIDs, not by indices: index 0 of two ranks is the same GPU without
// --gpus-per-task and two different ones with it.
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "cluster/world.hpp"
#include "hypic/kernels/device_link.hpp"

namespace hypic::cluster {

// The CUDA device (index among the `visible` ones) of the rank with this local rank; -1 when
// none is visible.
int local_device(int visible, int local_rank);

// What one rank computes on: its node and its GPU's UUID (empty: it computes on the host).
struct RankGpu {
  std::string node;
  std::string gpu;
};

enum class EntryPath {
  InProcess,  // one rank: entries never leave the process
  Nccl,       // worker GPU → combine GPU through NCCL, MPI for control
  HostMpi,    // worker → host memory → MPI → host memory → combine rank
};
const char* entry_path_name(EntryPath p);  // "in-process", "nccl", "host-mpi"

struct EntryPathChoice {
  EntryPath path = EntryPath::InProcess;
  std::string reason;  // one line: why this path
};

// The path for a job of ranks.size() ranks (index = rank). NCCL only when every rank has a GPU
// of its own (no two ranks on one node with the same UUID) and `nccl_missing` is empty; else
// host memory and MPI, with the first reason found. `nccl_missing`: why this build cannot send
// entries through NCCL (empty when it can).
EntryPathChoice choose_entry_path(const std::vector<RankGpu>& ranks,
                                  const std::string& nccl_missing);

// Why entries cannot go through NCCL in this run; empty when they can: the build lacks CUDA or
// NCCL, or the environment says HYPIC_ENTRY_PATH=host-mpi (the way around a network NCCL cannot
// use; "auto" or unset: choose as above).
std::string nccl_entry_transfer_missing();
// HYPIC_ENTRY_PATH's value → the reason it gives for host memory and MPI ("" for auto or
// unset); anything else throws hypic::Error naming the accepted values.
std::string entry_path_override(const char* value);

struct GpuPlan {
  int device = -1;  // this rank's CUDA device index (-1: host)
  std::string gpu;  // its UUID
  EntryPathChoice entries;
  // The NCCL path: this rank's link to the others (null on every other path). Give it to
  // run_worker and RemoteColdSource (cluster/distributed.hpp).
  std::shared_ptr<kernels::DeviceLink> link;
  std::string label() const;  // the run header's "entries: …" text
};

// Collective over `comm`. With `on_gpu`, picks and makes current this rank's device
// (before anything is allocated there), then gathers every rank's node and GPU and chooses
// the entry path; on the NCCL path, rank 0 makes NCCL's unique id, MPI_Bcast sends it to all,
// and every rank opens its link (open_nccl_link).
GpuPlan bind_gpus(MPI_Comm comm, const WorldInfo& world, bool on_gpu);

// Collective over `comm`: the NCCL link of every rank (the id made on rank 0 and broadcast).
std::shared_ptr<kernels::DeviceLink> open_nccl_link(MPI_Comm comm);

}  // namespace hypic::cluster
