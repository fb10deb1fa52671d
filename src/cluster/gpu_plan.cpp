#include "cluster/gpu_plan.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "hypic/error.hpp"
#include "hypic/kernels/device.hpp"

namespace hypic::cluster {

int local_device(int visible, int local_rank) {
  if (visible <= 0) return -1;
  HYPIC_REQUIRE(local_rank >= 0, "negative local rank " + std::to_string(local_rank));
  return local_rank % visible;
}

const char* entry_path_name(EntryPath p) {
  switch (p) {
    case EntryPath::InProcess:
      return "in-process";
    case EntryPath::Nccl:
      return "nccl";
    case EntryPath::HostMpi:
      return "host-mpi";
  }
  return "?";
}

EntryPathChoice choose_entry_path(const std::vector<RankGpu>& ranks,
                                  const std::string& nccl_missing) {
  if (ranks.size() <= 1) return {EntryPath::InProcess, "one rank: entries stay in its memory"};
  for (size_t r = 0; r < ranks.size(); ++r)
    if (ranks[r].gpu.empty())
      return {EntryPath::HostMpi, "rank " + std::to_string(r) + " computes on the host"};
  std::map<std::pair<std::string, std::string>, size_t> first;  // (node, gpu) -> rank
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto [it, fresh] = first.emplace(std::make_pair(ranks[r].node, ranks[r].gpu), r);
    if (!fresh)
      return {EntryPath::HostMpi, "ranks " + std::to_string(it->second) + " and " +
                                      std::to_string(r) + " share GPU " + ranks[r].gpu + " on " +
                                      ranks[r].node};
  }
  if (!nccl_missing.empty()) return {EntryPath::HostMpi, nccl_missing};
  return {EntryPath::Nccl, "one GPU per rank"};
}

std::string entry_path_override(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return "";
  if (v == "host-mpi") return "HYPIC_ENTRY_PATH=host-mpi";
  throw Error("HYPIC_ENTRY_PATH=" + v + ": expected auto or host-mpi");
}

std::string nccl_entry_transfer_missing() {
  const std::string forced = entry_path_override(std::getenv("HYPIC_ENTRY_PATH"));
  return forced.empty() ? kernels::nccl_missing() : forced;
}

std::string GpuPlan::label() const {
  std::string s = std::string(entry_path_name(entries.path)) + " (" + entries.reason + ")";
  if (device >= 0) s += "; this rank: CUDA device " + std::to_string(device) + " " + gpu;
  return s;
}

namespace {

// Every rank's string, gathered to all ranks (fixed-width records: the strings are short).
std::vector<std::string> allgather(MPI_Comm comm, const std::string& mine, int size) {
  constexpr int kWidth = 256;
  std::vector<char> out(static_cast<size_t>(kWidth) * static_cast<size_t>(size), '\0');
  char buf[kWidth] = {};
  std::strncpy(buf, mine.c_str(), kWidth - 1);
  MPI_Allgather(buf, kWidth, MPI_CHAR, out.data(), kWidth, MPI_CHAR, comm);
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) all.emplace_back(out.data() + static_cast<size_t>(r) * kWidth);
  return all;
}

}  // namespace

GpuPlan bind_gpus(MPI_Comm comm, const WorldInfo& world, bool on_gpu) {
  GpuPlan plan;
  if (on_gpu) {
    plan.device = local_device(kernels::cuda_device_info().count, world.local_rank);
    HYPIC_REQUIRE(plan.device >= 0, "rank " + std::to_string(world.rank) + " sees no CUDA device");
    kernels::cuda::set_device(plan.device);
    plan.gpu = kernels::cuda::device_uuid(plan.device);
  }
  const std::vector<std::string> nodes = allgather(comm, world.processor_name, world.size);
  const std::vector<std::string> gpus = allgather(comm, plan.gpu, world.size);
  std::vector<RankGpu> ranks;
  for (int r = 0; r < world.size; ++r)
    ranks.push_back({nodes[static_cast<size_t>(r)], gpus[static_cast<size_t>(r)]});
  // NCCL is asked about (which loads the CUDA module) only when the ranks compute on GPUs; on
  // the host the path is host-mpi whatever it says, but a bad HYPIC_ENTRY_PATH is still refused.
  std::string nccl;
  if (on_gpu)
    nccl = nccl_entry_transfer_missing();
  else
    entry_path_override(std::getenv("HYPIC_ENTRY_PATH"));
  plan.entries = choose_entry_path(ranks, nccl);
  if (plan.entries.path == EntryPath::Nccl) plan.link = open_nccl_link(comm);
  return plan;
}

std::shared_ptr<kernels::DeviceLink> open_nccl_link(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  kernels::NcclId id{};
  if (rank == 0) id = kernels::nccl_unique_id();
  MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, comm);
  try {
    return kernels::nccl_link(id, size, rank);
  } catch (const std::exception& e) {
    throw Error(std::string("rank ") + std::to_string(rank) + ": NCCL could not connect the " +
                std::to_string(size) + " ranks (" + e.what() +
                "); HYPIC_ENTRY_PATH=host-mpi sends entries through host memory and MPI instead");
  }
}

}  // namespace hypic::cluster
