#include "cluster/world.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "hypic/error.hpp"

namespace hypic::cluster {

namespace {

bool mpi_active() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

// This process's CPU affinity as one bit per CPU, CPU_SETSIZE bits.
std::vector<unsigned char> affinity_bits() {
  std::vector<unsigned char> bits(CPU_SETSIZE / 8, 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    // No affinity information: assume every online CPU.
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned cpu = 0; cpu < n && cpu < CPU_SETSIZE; ++cpu) bits[cpu / 8] |= 1u << (cpu % 8);
    return bits;
  }
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) bits[cpu / 8] |= static_cast<unsigned char>(1u << (cpu % 8));
  }
  return bits;
}

int count_bits(const std::vector<unsigned char>& bits) {
  int n = 0;
  for (unsigned char b : bits) n += __builtin_popcount(b);
  return n;
}

std::optional<int> parse_positive(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || value <= 0 || value > 1 << 24) {
    return std::nullopt;
  }
  return static_cast<int>(value);
}

std::string split_job_message(int mpi_size, const LauncherSize& launched) {
  return "MPI reports " + std::to_string(mpi_size) + " rank but the launcher started " +
         std::to_string(launched.size) + " processes (" + launched.variable + "=" +
         std::to_string(launched.size) +
         "): they did not join one MPI job, so each would run the whole job alone; launch "
         "with the mpirun of the MPI hypic was built with (Open MPI), or srun --mpi=pmix";
}

}  // namespace

// ---- Communicator ------------------------------------------------------------------------

Communicator::~Communicator() {
  release();
}

Communicator::Communicator(Communicator&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      owned_(std::exchange(other.owned_, false)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

void Communicator::release() noexcept {
  // After MPI_Finalize the communicator is gone with the library; freeing it would be an error.
  if (owned_ && comm_ != MPI_COMM_NULL && mpi_active()) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
  owned_ = false;
}

Communicator Communicator::view(MPI_Comm comm) {
  return Communicator(comm, false);
}

Communicator Communicator::adopt(MPI_Comm comm) {
  return Communicator(comm, true);
}

int Communicator::rank() const {
  int r = 0;
  check_mpi(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
  return r;
}

int Communicator::size() const {
  int s = 0;
  check_mpi(MPI_Comm_size(comm_, &s), "MPI_Comm_size");
  return s;
}

Communicator Communicator::duplicate() const {
  MPI_Comm copy = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(comm_, &copy), "MPI_Comm_dup");
  return adopt(copy);
}

Communicator Communicator::split_shared() const {
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank(), MPI_INFO_NULL, &node),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  return adopt(node);
}

// ---- job and node layout -----------------------------------------------------------------

WorldInfo describe_world(MPI_Comm comm) {
  WorldInfo info;
  if (!mpi_active()) {  // a command that runs without MPI (common/startup.hpp): one process
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    info.processor_name = host;
    info.own_cpus = info.node_cpus = std::max(1, count_bits(affinity_bits()));
    return info;
  }
  const Communicator whole = Communicator::view(comm);
  info.rank = whole.rank();
  info.size = whole.size();
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  check_mpi(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
  info.processor_name.assign(name, static_cast<size_t>(len));

  const Communicator node = whole.split_shared();
  info.local_rank = node.rank();
  info.local_size = node.size();

  std::vector<unsigned char> own = affinity_bits();
  std::vector<unsigned char> all(own.size(), 0);
  check_mpi(MPI_Allreduce(own.data(), all.data(), static_cast<int>(own.size()), MPI_UNSIGNED_CHAR,
                          MPI_BOR, node.get()),
            "MPI_Allreduce(affinity)");
  info.own_cpus = std::max(1, count_bits(own));
  info.node_cpus = std::max(1, count_bits(all));
  return info;
}

int blas_threads_per_rank(int node_cpus, int local_ranks, int own_cpus) {
  const int share = std::max(1, node_cpus) / std::max(1, local_ranks);
  return std::max(1, std::min(share, std::max(1, own_cpus)));
}

ThreadChoice choose_threads(int requested, const WorldInfo& info, const EnvLookup& env) {
  HYPIC_REQUIRE(requested <= kMaxThreads, "--threads " + std::to_string(requested) +
                                              " is more than the " + std::to_string(kMaxThreads) +
                                              " threads a rank may run");
  if (requested > 0) return {requested, "--threads"};
  if (const std::optional<std::string> omp = env("OMP_NUM_THREADS")) {
    if (const std::optional<int> n = parse_positive(omp->substr(0, omp->find(',')))) {
      HYPIC_REQUIRE(*n <= kMaxThreads, "OMP_NUM_THREADS=" + *omp + " is more than the " +
                                           std::to_string(kMaxThreads) + " threads a rank may run");
      return {*n, "OMP_NUM_THREADS"};
    }
  }
  if (const std::optional<std::string> slurm = env("SLURM_CPUS_PER_TASK")) {
    if (const std::optional<int> n = parse_positive(*slurm))
      return {std::max(1, std::min(*n, info.own_cpus)), "SLURM_CPUS_PER_TASK"};
  }
  const int share = blas_threads_per_rank(info);
  if (info.local_size > 1)
    return {share, "this rank's share of " + std::to_string(info.node_cpus) + " CPUs among " +
                       std::to_string(info.local_size) + " ranks on the node"};
  return {share, "the CPUs this process may run on"};
}

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::optional<LauncherSize> launcher_world_size(const EnvLookup& env) {
  static const char* const kVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                           "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS",
                                           "SLURM_NTASKS"};
  for (const char* variable : kVariables) {
    const std::optional<std::string> text = env(variable);
    if (!text) continue;
    if (const std::optional<int> size = parse_positive(*text)) {
      return LauncherSize{*size, variable};
    }
  }
  return std::nullopt;
}

void check_world_size(int expected, int mpi_size, const EnvLookup& env) {
  const std::optional<LauncherSize> launched = launcher_world_size(env);
  const bool split_job = mpi_size == 1 && launched && launched->size > 1;
  if (expected > 0) {
    if (mpi_size == expected) return;
    if (split_job) throw WorldSizeError(split_job_message(mpi_size, *launched));
    throw WorldSizeError("asked for " + std::to_string(expected) + " ranks (--ranks " +
                         std::to_string(expected) + ") but MPI_COMM_WORLD has " +
                         std::to_string(mpi_size) + "; launch with mpirun -n " +
                         std::to_string(expected) + " (or srun -n " + std::to_string(expected) +
                         "), or pass --ranks " + std::to_string(mpi_size));
  }
  if (!launched || launched->size == mpi_size) return;
  if (split_job) throw WorldSizeError(split_job_message(mpi_size, *launched));
  throw WorldSizeError("MPI_COMM_WORLD has " + std::to_string(mpi_size) +
                       " ranks but the launcher set " + launched->variable + "=" +
                       std::to_string(launched->size) +
                       "; launch with a matching process count, or pass --ranks " +
                       std::to_string(mpi_size) + " to accept this size");
}

void check_world_size(int expected) {
  int size = 0;
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  check_world_size(expected, size);
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string(what) + " failed: " + std::string(text, static_cast<size_t>(len)));
}

}  // namespace hypic::cluster
