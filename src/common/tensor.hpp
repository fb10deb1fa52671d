#pragma once
// A minimal owning, row-major float32 tensor. Compute kernels take raw pointers and
// dimensions (kernels/include), so this type stays on the engine side of the boundary.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace hypic {

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape, float fill = 0.0f)
      : shape_(std::move(shape)), data_(count(shape_), fill) {}
  Tensor(std::initializer_list<int64_t> shape, float fill = 0.0f)
      : Tensor(std::vector<int64_t>(shape), fill) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  float& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  std::vector<float>& vec() { return data_; }
  const std::vector<float>& vec() const { return data_; }

  // Same data, new shape with the same element count.
  void reshape(std::vector<int64_t> shape) {
    require(count(shape) == data_.size(), "Tensor::reshape: element count mismatch");
    shape_ = std::move(shape);
  }
  size_t bytes() const { return data_.size() * sizeof(float); }

  static size_t count(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
  std::string shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
    return s + "]";
  }

 private:
  std::vector<int64_t> shape_;
  std::vector<float> data_;
};

}  // namespace hypic
