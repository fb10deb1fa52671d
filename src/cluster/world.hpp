#pragma once
// The MPI context hypic runs in: who this rank is, where it runs, and whether the job is the
// size the user asked for. Also the node layout (ranks per node) that decides how many BLAS
// threads each rank may use.
#include <mpi.h>

#include <functional>
#include <optional>
#include <string>

#include "hypic/error.hpp"

namespace hypic::cluster {

// A communicator handle. Communicators this class creates (duplicate, split) are freed when
// the handle goes away; a view of MPI_COMM_WORLD (or any communicator passed to view()) is not.
class Communicator {
 public:
  Communicator() = default;
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  static Communicator world() { return view(MPI_COMM_WORLD); }
  static Communicator view(MPI_Comm comm);   // not owned: never freed here
  static Communicator adopt(MPI_Comm comm);  // owned: MPI_Comm_free at destruction

  MPI_Comm get() const { return comm_; }
  bool valid() const { return comm_ != MPI_COMM_NULL; }
  bool owned() const { return owned_; }
  int rank() const;
  int size() const;

  // A private copy with the same ranks: its messages never match another communicator's.
  Communicator duplicate() const;
  // The ranks that share memory with this one (one node), ordered as in this communicator.
  Communicator split_shared() const;

 private:
  Communicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {}
  void release() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
};

// Where this rank sits in the job and on its node.
struct WorldInfo {
  int rank = 0;
  int size = 1;
  std::string processor_name;
  int local_rank = 0;  // rank among the ranks of this node
  int local_size = 1;  // ranks on this node
  int node_cpus = 1;   // CPUs the ranks of this node may run on together (union of affinities)
  int own_cpus = 1;    // CPUs this rank may run on (its affinity mask)
};

// Collective over `comm`: every rank must call it.
WorldInfo describe_world(MPI_Comm comm = MPI_COMM_WORLD);

// BLAS threads for one rank: the node's CPUs shared evenly among its ranks, never more than
// the rank's own affinity allows, at least 1. A launcher that binds each rank to one core
// therefore gets 1 thread per rank; an unbound job on a 16-CPU node with 4 ranks gets 4.
int blas_threads_per_rank(int node_cpus, int local_ranks, int own_cpus);
inline int blas_threads_per_rank(const WorldInfo& info) {
  return blas_threads_per_rank(info.node_cpus, info.local_size, info.own_cpus);
}

// The threads one rank gives its kernels and products (kernels::set_threads), and where the
// number came from, for the run header.
// The most threads one rank runs (--threads, OMP_NUM_THREADS, bench thread lists): more is
// refused with one line, not handed to OpenMP (100000 crashed inside libgomp).
inline constexpr int kMaxThreads = 1024;

struct ThreadChoice {
  int threads = 1;
  std::string source;  // "--threads", "OMP_NUM_THREADS", ...
};

// Reads one environment variable; nullopt when unset. Injected so that tests can pretend to be
// launched by Slurm or another MPI.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<std::string> process_env(const std::string& name);

// The number of processes the launcher says it started, and the variable that says so.
struct LauncherSize {
  int size = 0;
  std::string variable;  // e.g. "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"
};
// Looks, in this order, at OMPI_COMM_WORLD_SIZE (Open MPI's mpirun), PMI_SIZE (MPICH/Hydra,
// Intel MPI, srun --mpi=pmi2), MV2_COMM_WORLD_SIZE (MVAPICH), SLURM_STEP_NUM_TASKS and
// SLURM_NTASKS (srun; SLURM_NTASKS alone also inside an sbatch script). The first one set and
// parseable as a positive integer wins; nullopt when none is.
std::optional<LauncherSize> launcher_world_size(const EnvLookup& env = process_env);

// In this order: `requested` > 0 (--threads); OMP_NUM_THREADS (its first entry); Slurm's
// SLURM_CPUS_PER_TASK (capped by the rank's affinity mask); else the rank's share of its node
// (blas_threads_per_rank: all of the rank's CPUs when it is alone, cores / local ranks when
// several share a node without binding, so an unbound mpirun never oversubscribes).
ThreadChoice choose_threads(int requested, const WorldInfo& info,
                            const EnvLookup& env = process_env);

// Refuses a job whose MPI size is not the one asked for, with one actionable line.
// - expected > 0 (for example `--ranks N`): mpi_size must equal it.
// - expected <= 0 (not asked): mpi_size must equal the launcher's count, when there is one.
// In both cases, mpi_size 1 while the launcher started several processes gets its own message:
// the processes did not join one MPI job (a launcher of another MPI, or srun without the
// right --mpi plugin), so each would do the whole job alone.
// An explicit `expected` takes precedence over the environment: `--ranks 1` inside a Slurm
// allocation of 4 tasks is accepted.
// Its refusal: every rank of the job finds the same mismatch at the same point, so the command's
// edge prints it once (rank 0) and every rank ends quietly, without MPI_Abort.
class WorldSizeError : public Error {
 public:
  using Error::Error;
};
void check_world_size(int expected, int mpi_size, const EnvLookup& env = process_env);
// The same for MPI_COMM_WORLD.
void check_world_size(int expected);

// Throws hypic::Error "<what> failed: <MPI's reason>" unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* what);

}  // namespace hypic::cluster
