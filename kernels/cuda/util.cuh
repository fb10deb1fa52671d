#pragma once
// Small helpers shared by the CUDA kernels: launch checks, grid sizes, block reductions and
// stream-ordered scratch memory. Every op runs on the compute stream, the legacy default
// stream (as cuBLAS's handle does), so ops are ordered without explicit synchronisation; the
// upload and NCCL streams are non-blocking streams ordered against it by events only.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "check.cuh"

namespace hypic::kernels::cuda {

constexpr int kThreads = 256;

// Blocks of kThreads covering n work items (at least one, at most the grid's x limit).
inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 2147483647 ? 2147483647 : b));
}

// After every kernel launch (and cuBLAS call): a launch that failed (bad configuration, too
// much shared memory) is reported under the kernel's name; with HYPIC_CUDA_SYNC_DEBUG=1 the
// compute stream is also synchronised, so a fault while the kernel runs names it too instead
// of surfacing at a later copy.
inline void check_launch(const char* what) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess) fail(launch, std::string("launch of kernel ") + what);
  if (sync_debug()) {
    const cudaError_t run = cudaStreamSynchronize(cudaStreamLegacy);
    if (run != cudaSuccess)
      fail(run, std::string("kernel ") + what + " (synchronised by HYPIC_CUDA_SYNC_DEBUG=1)");
  }
}

// Device scratch for one op, from the stream-ordered pool: freed in stream order when the
// object goes out of scope, so a kernel queued before the free still sees valid memory.
class Scratch {
 public:
  explicit Scratch(size_t bytes) {
    if (bytes > 0) check(cudaMallocAsync(&p_, bytes, 0), "cudaMallocAsync (scratch)");
  }
  ~Scratch() {
    if (p_ != nullptr) cudaFreeAsync(p_, 0);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
};

// A host array copied into scratch (small tables: inverse frequencies, cos/sin).
template <class T>
class Upload {
 public:
  Upload(const T* host, size_t n) : buf_(n * sizeof(T)) {
    if (n > 0)
      check(cudaMemcpyAsync(buf_.as<T>(), host, n * sizeof(T), cudaMemcpyHostToDevice, 0),
            "cudaMemcpyAsync H2D (table)");
  }
  const T* get() const { return buf_.as<T>(); }

 private:
  Scratch buf_;
};

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `shared` holds 32 floats. Safe to call repeatedly (synchronises before reuse).
__device__ inline float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += shared[w];
  return total;
}

__device__ inline float sigmoidf_(float x) {
  return 1.0f / (1.0f + expf(-x));
}

}  // namespace hypic::kernels::cuda
