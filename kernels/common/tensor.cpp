#include "hypic/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace hypic {
namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {{DType::F32, "f32", 4},   {DType::F16, "f16", 2},
                                 {DType::BF16, "bf16", 2}, {DType::I32, "i32", 4},
                                 {DType::I64, "i64", 8},   {DType::F64, "f64", 8},
                                 {DType::I8, "i8", 1},     {DType::U8, "u8", 1},
                                 {DType::I16, "i16", 2},   {DType::BOOL, "bool", 1}};

const DTypeInfo& info(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e;
  throw Error("internal: unknown dtype " + std::to_string(static_cast<int>(d)));
}
}  // namespace

size_t dtype_size(DType d) {
  return info(d).size;
}
const char* dtype_name(DType d) {
  return info(d).name;
}
bool dtype_is_float(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16;
}
const char* device_name(Device d) {
  return d == Device::Host ? "host" : "cuda";
}

Tensor::Tensor(std::vector<int64_t> shape, DType dtype, Device device, const Allocator* allocator)
    : shape_(std::move(shape)), n_(count(shape_)), dtype_(dtype), device_(device) {
  if (device == Device::Host) {
    if (dtype == DType::F32)
      f32_.assign(n_, 0.0f);
    else
      raw_.assign(bytes(), 0);
    return;
  }
  if (allocator == nullptr || allocator->device() != device)
    throw Error(std::string("a ") + device_name(device) + " tensor needs that device's allocator");
  alloc_ = allocator;
  if (bytes() > 0) {
    dev_ = alloc_->allocate(bytes());
    dev_bytes_ = bytes();
  }
}

Tensor Tensor::from_vector(std::vector<int64_t> shape, std::vector<float> values) {
  // Checks without building the message on success (this runs per array of every entry).
  if (count(shape) != values.size())
    throw Error("Tensor::from_vector: " + std::to_string(values.size()) +
                " values for a shape of " + std::to_string(count(shape)) + " elements");
  Tensor t;
  t.shape_ = std::move(shape);
  t.n_ = values.size();
  t.f32_ = std::move(values);
  return t;
}

Tensor::Tensor(const Tensor& other)
    : shape_(other.shape_),
      n_(other.n_),
      dtype_(other.dtype_),
      device_(other.device_),
      f32_(other.f32_),
      raw_(other.raw_),
      alloc_(other.alloc_) {
  if (other.dev_ != nullptr && bytes() > 0) {  // a tight copy (a snapshot), no room to append
    dev_ = alloc_->allocate(bytes());
    dev_bytes_ = bytes();
    alloc_->copy_within(dev_, other.dev_, bytes());
  }
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    Tensor copy(other);
    *this = std::move(copy);
  }
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : shape_(std::move(other.shape_)),
      n_(std::exchange(other.n_, 0)),
      dtype_(other.dtype_),
      device_(other.device_),
      f32_(std::move(other.f32_)),
      raw_(std::move(other.raw_)),
      dev_(std::exchange(other.dev_, nullptr)),
      dev_bytes_(std::exchange(other.dev_bytes_, 0)),
      alloc_(other.alloc_) {
  other.shape_.clear();
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    release();
    shape_ = std::move(other.shape_);
    other.shape_.clear();
    n_ = std::exchange(other.n_, 0);
    dtype_ = other.dtype_;
    device_ = other.device_;
    f32_ = std::move(other.f32_);
    raw_ = std::move(other.raw_);
    dev_ = std::exchange(other.dev_, nullptr);
    dev_bytes_ = std::exchange(other.dev_bytes_, 0);
    alloc_ = other.alloc_;
  }
  return *this;
}

Tensor::~Tensor() {
  release();
}

void Tensor::release() noexcept {
  if (dev_ != nullptr) alloc_->deallocate(dev_);
  dev_ = nullptr;
  dev_bytes_ = 0;
}

void Tensor::wrong_kind(const char* what) const {
  throw Error(std::string("Tensor::") + what + " needs a host f32 tensor, this one is " +
              dtype_name(dtype_) + " on " + device_name(device_) + " " + shape_str());
}

void Tensor::reshape_mismatch(const std::vector<int64_t>& shape) const {
  Tensor probe;
  probe.shape_ = shape;
  throw Error("Tensor::reshape: element count mismatch (" + shape_str() + " to " +
              probe.shape_str() + ")");
}

std::vector<float> Tensor::to_f32_vector() const {
  if (dtype_ == DType::BF16) {
    std::vector<uint16_t> bits(n_);
    if (n_ > 0) {
      if (device_ == Device::Host)
        std::memcpy(bits.data(), raw_.data(), bytes());
      else
        alloc_->copy_to_host(bits.data(), dev_, bytes());
    }
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) {
      const uint32_t b = static_cast<uint32_t>(bits[i]) << 16;
      std::memcpy(&out[i], &b, sizeof(float));
    }
    return out;
  }
  return to_vector();
}

std::vector<float> Tensor::to_vector() const {
  if (dtype_ != DType::F32)
    throw Error(std::string("Tensor::to_vector needs an f32 tensor, this one is ") +
                dtype_name(dtype_));
  if (device_ == Device::Host) return f32_;
  std::vector<float> out(n_);
  if (n_ > 0) alloc_->copy_to_host(out.data(), dev_, bytes());
  return out;
}

std::vector<float> Tensor::take_vector() {
  check_host_f32("take_vector");
  std::vector<float> out = std::move(f32_);
  f32_.clear();
  shape_.clear();
  n_ = 0;
  return out;
}

void* Tensor::raw() {
  if (device_ != Device::Host) return dev_;
  return dtype_ == DType::F32 ? static_cast<void*>(f32_.data()) : raw_.data();
}

const void* Tensor::raw() const {
  if (device_ != Device::Host) return dev_;
  return dtype_ == DType::F32 ? static_cast<const void*>(f32_.data()) : raw_.data();
}

void Tensor::grow_device(size_t needed_bytes) {
  if (needed_bytes <= dev_bytes_) return;
  void* grown = alloc_->allocate(needed_bytes);
  if (bytes() > 0) alloc_->copy_within(grown, dev_, bytes());
  if (dev_ != nullptr) alloc_->deallocate(dev_);
  dev_ = grown;
  dev_bytes_ = needed_bytes;
}

void Tensor::append_rows(const float* rows, int64_t n_rows) {
  if (device_ != Device::Host && dtype_ == DType::F32) {
    if (rank() < 1) throw Error("Tensor::append_rows needs a tensor of rank 1 or more");
    if (n_rows <= 0) return;
    size_t row_floats = 1;
    for (size_t i = 1; i < shape_.size(); ++i) row_floats *= static_cast<size_t>(shape_[i]);
    const size_t add = static_cast<size_t>(n_rows) * row_floats * sizeof(float);
    const size_t old_bytes = bytes();
    if (old_bytes + add > dev_bytes_) grow_device(std::max(old_bytes + add, dev_bytes_ * 3 / 2));
    if (add > 0) alloc_->copy_within(static_cast<char*>(dev_) + old_bytes, rows, add);
    shape_[0] += n_rows;
    n_ = count(shape_);
    return;
  }
  check_host_f32("append_rows");
  if (rank() < 1) throw Error("Tensor::append_rows needs a tensor of rank 1 or more");
  size_t row_floats = 1;
  for (size_t i = 1; i < shape_.size(); ++i) row_floats *= static_cast<size_t>(shape_[i]);
  f32_.insert(f32_.end(), rows, rows + static_cast<size_t>(n_rows) * row_floats);
  shape_[0] += n_rows;
  n_ = f32_.size();
}

void Tensor::reserve_rows(int64_t total_rows) {
  if (device_ != Device::Host && dtype_ == DType::F32) {
    if (rank() < 1) throw Error("Tensor::reserve_rows needs a tensor of rank 1 or more");
    size_t row_floats = 1;
    for (size_t i = 1; i < shape_.size(); ++i) row_floats *= static_cast<size_t>(shape_[i]);
    grow_device(static_cast<size_t>(std::max<int64_t>(total_rows, 0)) * row_floats * sizeof(float));
    return;
  }
  check_host_f32("reserve_rows");
  if (rank() < 1) throw Error("Tensor::reserve_rows needs a tensor of rank 1 or more");
  size_t row_floats = 1;
  for (size_t i = 1; i < shape_.size(); ++i) row_floats *= static_cast<size_t>(shape_[i]);
  f32_.reserve(static_cast<size_t>(std::max<int64_t>(total_rows, 0)) * row_floats);
}

Tensor Tensor::to(Device device, const Allocator* allocator) const {
  if (device == device_) return *this;
  Tensor out(shape_, dtype_, device, allocator);
  if (bytes() == 0) return out;
  if (device_ == Device::Host)
    out.alloc_->copy_from_host(out.dev_, raw(), bytes());
  else  // device to host
    alloc_->copy_to_host(out.raw(), dev_, bytes());
  return out;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "]";
}

}  // namespace hypic
