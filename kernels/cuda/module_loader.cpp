// Linked instead of the .cu sources when HYPIC_CUDA is on: the CUDA backend lives in a shared
// module (libhypic_cuda.so, module_abi.hpp) opened with dlopen the first time a command asks for
// the CUDA device or NCCL, so that the binary itself does not link the CUDA runtime, cuBLAS or
// NCCL and a command that computes on the host never loads them. The functions below are those
// of kernels/cuda/not_compiled.cpp (a build without CUDA), forwarding to the module.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "module_abi.hpp"

#ifndef HYPIC_CUDA_MODULE_NAME
#error "HYPIC_CUDA_MODULE_NAME (the module's file name) is set by kernels/CMakeLists.txt"
#endif

namespace hypic::kernels {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string executable_dir() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "";
  std::string exe(buf.data(), static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string(".") : exe.substr(0, slash);
}

std::vector<std::string> module_candidates() {
  if (const char* forced = std::getenv("HYPIC_CUDA_MODULE"); forced != nullptr && *forced != '\0')
    return {forced};
  std::vector<std::string> paths;
  const std::string dir = executable_dir();
  if (!dir.empty()) paths.push_back(dir + "/" HYPIC_CUDA_MODULE_NAME);
#ifdef HYPIC_CUDA_MODULE_BUILD_PATH
  // The build tree's copy, for the test binaries built in another folder than hypic.
  if (paths.empty() || paths.front() != HYPIC_CUDA_MODULE_BUILD_PATH)
    paths.push_back(HYPIC_CUDA_MODULE_BUILD_PATH);
#endif
  return paths;
}

struct Loaded {
  const CudaModule* module = nullptr;
  std::string error;  // why it could not be loaded (one line)
};

Loaded open_module() {
  const std::vector<std::string> paths = module_candidates();
  std::string path = paths.empty() ? std::string(HYPIC_CUDA_MODULE_NAME) : paths.front();
  for (const std::string& p : paths)
    if (is_file(p)) {
      path = p;
      break;
    }
  Loaded r;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    r.error = "cannot load the CUDA backend module " + path + ": " +
              (why != nullptr ? why : "unknown dlopen error") +
              " (it is built beside the hypic binary when HYPIC_CUDA is on; HYPIC_CUDA_MODULE "
              "names another path)";
    return r;
  }
  using Entry = const CudaModule* (*)();
  const auto entry = reinterpret_cast<Entry>(dlsym(handle, HYPIC_CUDA_MODULE_ENTRY));
  if (entry == nullptr) {
    r.error = "the CUDA backend module " + path + " is not a hypic CUDA module (no " +
              HYPIC_CUDA_MODULE_ENTRY + ")";
    return r;
  }
  const CudaModule* m = entry();
  if (m == nullptr || m->abi != kCudaModuleAbi || m->backend_size != sizeof(Backend)) {
    r.error = "the CUDA backend module " + path +
              " was built from another version of hypic (module interface " +
              std::to_string(m != nullptr ? m->abi : -1) + ", this binary's " +
              std::to_string(kCudaModuleAbi) + "); rebuild both";
    return r;
  }
  r.module = m;
  return r;
}

// Whether a load was attempted (sticky_fault() never loads the module itself).
std::atomic<bool>& attempted() {
  static std::atomic<bool> a{false};
  return a;
}

const Loaded& loaded() {
  static const Loaded r = [] {  // once per process, thread-safe
    attempted() = true;
    return open_module();
  }();
  return r;
}

// The module, or hypic::Error naming its path and dlerror().
const CudaModule& module() {
  const Loaded& r = loaded();
  if (r.module == nullptr) throw Error(r.error);
  return *r.module;
}

}  // namespace

DeviceInfo cuda_device_info() {
  const Loaded& r = loaded();
  if (r.module == nullptr) return {true, 0, r.error};
  return r.module->device_info();
}

const Backend& cuda_backend() {
  return module().backend();
}

std::string nccl_missing() {
  const Loaded& r = loaded();
  return r.module == nullptr ? r.error : r.module->nccl_missing();
}
NcclId nccl_unique_id() {
  return module().nccl_unique_id();
}
std::unique_ptr<DeviceLink> nccl_link(const NcclId& id, int ranks, int rank) {
  return module().nccl_link(id, ranks, rank);
}

namespace cuda {
std::string self_check(float tol) {
  return module().self_check(tol);
}
void set_device(int index) {
  module().set_device(index);
}
std::string device_uuid(int index) {
  return module().device_uuid(index);
}
std::string sticky_fault() {
  // Never loads the module: no fault can have happened in a module not loaded.
  if (!attempted()) return "";
  const Loaded& r = loaded();
  return r.module == nullptr ? "" : r.module->sticky_fault();
}
void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const uint16_t* a,
               int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc) {
  module().gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
bool tensor_cores() {
  return module().tensor_cores();
}
void set_tensor_cores(bool on) {
  module().set_tensor_cores(on);
}
}  // namespace cuda
}  // namespace hypic::kernels
