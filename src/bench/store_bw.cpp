#include "bench/store_bw.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "bench/timing.hpp"
#include "hypic/error.hpp"
#include "store/segment_store.hpp"

namespace hypic::bench {
namespace {
namespace fs = std::filesystem;

// What a writer reports to the parent: its write and read intervals on the monotonic clock
// (shared by every process of the machine), or a failure.
struct WriterTimes {
  double write_start = 0, write_end = 0, read_start = 0, read_end = 0;
  char error[400] = {0};
};

double monotonic_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// One writer process: makes its entries, says it is ready, waits for the go, puts them all
// into its own store, then reads them all back (each get checks the checksum).
[[noreturn]] void writer_main(const StoreBenchOptions& o, const std::string& path, int index,
                              int ready_fd, int go_fd) {
  WriterTimes t;
  try {
    // One entry: arrays like a linear layer's T and S (square), 16 of them.
    const int64_t total = std::max<int64_t>(
        16, static_cast<int64_t>(std::llround(o.entry_mib * 1048576.0 / sizeof(float))));
    const int64_t per = total / 16;
    const int64_t side = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(double(per))));
    std::mt19937 rng(1234u + static_cast<unsigned>(index));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<store::Entry> entries(static_cast<size_t>(o.entries_per_writer));
    std::vector<std::string> keys;
    for (size_t e = 0; e < entries.size(); ++e) {
      entries[e].n_tokens = 512;
      for (int a = 0; a < 16; ++a) {
        Tensor x({side, per / side});
        float* v = x.data();
        for (int64_t i = 0; i < x.numel(); ++i) v[i] = normal(rng);
        char name[32];
        std::snprintf(name, sizeof name, "linear/%d/%c", a / 2, a % 2 == 0 ? 'S' : 'T');
        entries[e].arrays.emplace(name, std::move(x));
      }
      keys.push_back(store::entry_key("bench-store", {index, static_cast<int32_t>(e)}, 8));
    }
    store::StoreOptions so;
    so.model_fingerprint = "bench-store";
    so.dtype = o.dtype;
    store::SegmentStore st = store::SegmentStore::create(path, so);
    char go = 0;
    if (!write_all(ready_fd, &go, 1) || !read_all(go_fd, &go, 1)) std::_Exit(3);
    t.write_start = monotonic_s();
    for (size_t e = 0; e < entries.size(); ++e) st.put(keys[e], entries[e]);
    t.write_end = monotonic_s();
    if (!write_all(ready_fd, &go, 1) || !read_all(go_fd, &go, 1)) std::_Exit(3);
    t.read_start = monotonic_s();
    for (const std::string& k : keys) {
      const std::optional<store::Entry> got = st.get(k);
      HYPIC_REQUIRE(got && got->arrays.size() == 16, "entry " + k + " did not read back");
    }
    t.read_end = monotonic_s();
    st.close();
  } catch (const std::exception& e) {
    std::snprintf(t.error, sizeof t.error, "%s", e.what());
  }
  write_all(ready_fd, &t, sizeof t);
  std::_Exit(0);
}

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { HYPIC_REQUIRE(::pipe(fd) == 0, std::string("pipe: ") + std::strerror(errno)); }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
};

// One run with `writers` processes: {write seconds, read seconds}, first start to last end.
std::pair<double, double> one_run(const StoreBenchOptions& o, int writers) {
  std::vector<pid_t> pids;
  std::vector<Pipe> ready(static_cast<size_t>(writers));
  Pipe go;
  std::vector<std::string> paths;
  for (int w = 0; w < writers; ++w)
    paths.push_back((fs::path(o.folder) / ("bench-store.w" + std::to_string(w) + ".h5")).string());
  std::fflush(stdout);
  std::fflush(stderr);
  for (int w = 0; w < writers; ++w) {
    const pid_t pid = ::fork();
    HYPIC_REQUIRE(pid >= 0, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) writer_main(o, paths[static_cast<size_t>(w)], w, ready[w].fd[1], go.fd[0]);
    pids.push_back(pid);
  }
  auto wait_ready = [&] {
    for (Pipe& p : ready) {
      char c;
      if (!read_all(p.fd[0], &c, 1)) return false;
    }
    return true;
  };
  auto release = [&] {
    const std::vector<char> bytes(static_cast<size_t>(writers), 1);
    return write_all(go.fd[1], bytes.data(), bytes.size());
  };
  bool ok = wait_ready() && release() && wait_ready() && release();
  std::vector<WriterTimes> times(static_cast<size_t>(writers));
  for (int w = 0; w < writers && ok; ++w)
    ok = read_all(ready[w].fd[0], &times[w], sizeof(WriterTimes));
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  for (const std::string& p : paths) {
    std::error_code ec;
    fs::remove(p, ec);
  }
  HYPIC_REQUIRE(ok, "bench store: a writer process ended early (out of memory, or the folder " +
                        o.folder + " is full?)");
  for (const WriterTimes& t : times)
    HYPIC_REQUIRE(t.error[0] == '\0', std::string("bench store: a writer failed: ") + t.error);
  double ws = 1e300, we = 0, rs = 1e300, re = 0;
  for (const WriterTimes& t : times) {
    ws = std::min(ws, t.write_start);
    we = std::max(we, t.write_end);
    rs = std::min(rs, t.read_start);
    re = std::max(re, t.read_end);
  }
  return {we - ws, re - rs};
}

}  // namespace

std::vector<StoreBenchRow> run_store_bench(const StoreBenchOptions& o) {
  HYPIC_REQUIRE(!o.folder.empty(), "bench store: --dir is required");
  HYPIC_REQUIRE(fs::is_directory(o.folder), "bench store: --dir " + o.folder + " is not a folder");
  HYPIC_REQUIRE(!o.writers.empty(), "bench store: give at least one writer count");
  for (int w : o.writers)
    HYPIC_REQUIRE(w >= 1 && w <= 256,
                  "bench store: a writer count must be in [1, 256], got " + std::to_string(w));
  HYPIC_REQUIRE(o.entries_per_writer >= 1, "bench store: --entries must be >= 1");
  HYPIC_REQUIRE(std::isfinite(o.entry_mib) && o.entry_mib > 0 && o.entry_mib <= 4096,
                "bench store: --entry-mib must be in (0, 4096]");
  HYPIC_REQUIRE(o.reps >= 1, "bench store: --reps must be >= 1");
  HYPIC_REQUIRE(o.dtype == DType::F32 || o.dtype == DType::BF16 || o.dtype == DType::F16,
                "bench store: --dtype must be f32, bf16 or f16");
  std::vector<StoreBenchRow> rows;
  for (int w : o.writers) {
    StoreBenchRow row;
    row.writers = w;
    row.entries = static_cast<uint64_t>(w) * static_cast<uint64_t>(o.entries_per_writer);
    const int64_t total = std::max<int64_t>(
        16, static_cast<int64_t>(std::llround(o.entry_mib * 1048576.0 / sizeof(float))));
    const int64_t per = total / 16;
    const int64_t side = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(double(per))));
    const double elements = 16.0 * static_cast<double>(side * (per / side));
    row.stored_bytes = static_cast<double>(row.entries) * elements * dtype_size(o.dtype);
    std::vector<double> ws, rs;
    for (int r = 0; r < o.reps; ++r) {
      const auto [wt, rt] = one_run(o, w);
      ws.push_back(wt);
      rs.push_back(rt);
    }
    row.write_s = median(ws);
    row.read_s = median(rs);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace hypic::bench
