#pragma once
// The one tensor type of hypic: an owning, row-major array that knows its element type (DType)
// and where its memory lives (Device). Host memory is a std::vector (amortised growth for KV
// appends, zero-copy hand-over to and from std::vector<float>); device memory comes from an
// Allocator (a kernels::Backend is one), so the forward pass and the composition can keep
// their tensors on a device between ops.
//
// Why here and not in src/common: the backends (kernels/) allocate, copy and compute on
// tensors, and kernels must not include src/ headers (the layering runs src/ -> kernels/).
// This header, hypic/error.hpp and kernels/common/tensor.cpp are the shared base of both.
//
// DType is the single element-type enum of the project: safetensors files, the segment store's
// payload and the linear summaries' storage estimates all use it. The on-disk spellings stay
// with their formats (safetensors "F32"/"BF16", the store's "f32"/"bf16"/"f16" = dtype_name).
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "hypic/error.hpp"

namespace hypic {

enum class DType { F32, F16, BF16, I32, I64, F64, I8, U8, I16, BOOL };
size_t dtype_size(DType d);       // bytes per element
const char* dtype_name(DType d);  // "f32", "bf16", "f16", "i32", ... (the store's spelling)
bool dtype_is_float(DType d);     // F32, F16, BF16: the types hypic computes with

enum class Device { Host, Cuda };
const char* device_name(Device d);  // "host", "cuda"

// Device memory for tensors that do not live on the host. Implemented by the backends
// (kernels/include/hypic/kernels/backend.hpp); the host needs none (tensors own vectors).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  virtual void* allocate(size_t bytes) const = 0;
  // On a device, the block is freed after the work queued so far (CUDA: stream-ordered), so a
  // caller need not wait for the ops that still read it.
  virtual void deallocate(void* ptr) const noexcept = 0;
  // Copies between this allocator's memory and the host, or within its memory.
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) const = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) const = 0;
  virtual void copy_within(void* dst, const void* src, size_t bytes) const = 0;
};

// A view of contiguous elements (C++17 has no std::span): loops, size, indexing.
template <class T>
class Span {
 public:
  Span(T* p, size_t n) : p_(p), n_(n) {}
  T* begin() const { return p_; }
  T* end() const { return p_ + n_; }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_;
  size_t n_;
};

class Tensor {
 public:
  Tensor() = default;
  // Host f32, filled.
  explicit Tensor(std::vector<int64_t> shape, float fill = 0.0f)
      : shape_(std::move(shape)), n_(count(shape_)), f32_(n_, fill) {}
  Tensor(std::initializer_list<int64_t> shape, float fill = 0.0f)
      : Tensor(std::vector<int64_t>(shape), fill) {}
  // Uninitialised-on-device / zeroed-on-host tensor of any dtype. Device::Host needs no
  // allocator; another device needs the allocator of that device (a backend).
  Tensor(std::vector<int64_t> shape, DType dtype, Device device,
         const Allocator* allocator = nullptr);
  // Host f32 tensor adopting `values` without a copy (values.size() must match the shape).
  static Tensor from_vector(std::vector<int64_t> shape, std::vector<float> values);

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return static_cast<int64_t>(numel_()); }
  bool empty() const { return numel_() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_host_f32() const { return device_ == Device::Host && dtype_ == DType::F32; }
  size_t bytes() const { return numel_() * dtype_size(dtype_); }

  // Host f32 access. data() checks device and dtype (once per call, never per element);
  // operator[] is meant for loops and does not.
  float* data() {
    check_host_f32("data");
    return f32_.data();
  }
  const float* data() const {
    check_host_f32("data");
    return f32_.data();
  }
  float& operator[](int64_t i) { return f32_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return f32_[static_cast<size_t>(i)]; }
  // All elements as a range (replaces the former vec()): for loops, size(), begin()/end().
  Span<float> values() { return {data(), f32_.size()}; }
  Span<const float> values() const { return {data(), f32_.size()}; }
  // A host f32 copy of the elements, from any device (f32 tensors only).
  std::vector<float> to_vector() const;
  // The same for f32 or bf16 tensors (bf16 widened exactly): weights kept in bf16.
  std::vector<float> to_f32_vector() const;
  // Moves the host f32 elements out without a copy; leaves the tensor empty.
  std::vector<float> take_vector();

  // Untyped storage, on the tensor's device.
  void* raw();
  const void* raw() const;

  // Same data, new shape with the same element count.
  void reshape(std::vector<int64_t> shape) {
    if (count(shape) != n_) reshape_mismatch(shape);
    shape_ = std::move(shape);
  }
  // Appends rows to an f32 tensor of shape [n, ...] (growth amortised like a vector's): the
  // KV cache's append of every forward block and decode step. `rows` is memory of the tensor's
  // device; a device tensor grows its block geometrically (1.5×) and appends in place until
  // full, so n single-row appends cost O(log n) allocations.
  void append_rows(const float* rows, int64_t n_rows);
  // Room for `total_rows` rows in all (f32, host or device), so appends up to there never move
  // the data.
  void reserve_rows(int64_t total_rows);

  // A copy on `device` (allocator: that device's; null for the host). Same dtype.
  Tensor to(Device device, const Allocator* allocator = nullptr) const;

  static size_t count(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  std::string shape_str() const;

 private:
  size_t numel_() const { return n_; }
  void check_host_f32(const char* what) const {
    if (device_ != Device::Host || dtype_ != DType::F32) wrong_kind(what);
  }
  [[noreturn]] void wrong_kind(const char* what) const;
  [[noreturn]] void reshape_mismatch(const std::vector<int64_t>& shape) const;
  void release() noexcept;
  void grow_device(size_t needed_bytes);  // a device block of at least needed_bytes, data kept

  std::vector<int64_t> shape_;
  size_t n_ = 0;  // elements (a default tensor has none, though count({}) is 1)
  DType dtype_ = DType::F32;
  Device device_ = Device::Host;
  std::vector<float> f32_;          // host, F32
  std::vector<unsigned char> raw_;  // host, any other dtype
  void* dev_ = nullptr;             // device memory, owned through alloc_
  size_t dev_bytes_ = 0;            // its size (≥ bytes(): room for appended rows)
  const Allocator* alloc_ = nullptr;
};

}  // namespace hypic
