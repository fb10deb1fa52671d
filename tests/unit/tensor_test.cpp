// The Tensor: host f32 access checked against its device and dtype, zero-copy hand-over to and
// from std::vector, amortised row appends (the KV cache), and the DType table the file formats
// rely on.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hypic/error.hpp"
#include "hypic/kernels/backend.hpp"
#include "hypic/tensor.hpp"

namespace {
namespace tensor_test {
using hypic::Device;
using hypic::DType;
using hypic::Tensor;

TEST(Tensor, DefaultIsEmptyHostF32) {
  const Tensor t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.bytes(), 0u);
  EXPECT_TRUE(t.is_host_f32());
}

TEST(Tensor, FromVectorAndTakeVectorDoNotCopy) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const float* p = v.data();
  Tensor t = Tensor::from_vector({2, 3}, std::move(v));
  EXPECT_EQ(t.data(), p);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_FLOAT_EQ(t[4], 5.0f);
  std::vector<float> back = t.take_vector();
  EXPECT_EQ(back.data(), p);
  EXPECT_TRUE(t.empty());
  EXPECT_THROW(Tensor::from_vector({4}, {1, 2, 3}), hypic::Error);
}

TEST(Tensor, ValuesCopiesAndMoves) {
  Tensor a({2, 2}, 1.5f);
  for (float& x : a.values()) x += 1.0f;
  EXPECT_EQ(a.to_vector(), std::vector<float>(4, 2.5f));
  Tensor b = a;  // deep copy
  b[0] = 7.0f;
  EXPECT_FLOAT_EQ(a[0], 2.5f);
  Tensor c = std::move(b);
  EXPECT_FLOAT_EQ(c[0], 7.0f);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): a moved-from tensor is empty
}

TEST(Tensor, AppendRowsGrowsTheFirstDimension) {
  Tensor k({0, 2, 3});
  const std::vector<float> rows(12, 1.0f);
  k.append_rows(rows.data(), 2);
  k.append_rows(rows.data(), 1);
  EXPECT_EQ(k.shape(), (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(k.numel(), 18);
  EXPECT_THROW(k.reshape({5, 4}), hypic::Error);
  k.reshape({9, 2});
  EXPECT_EQ(k.dim(0), 9);
}

TEST(Tensor, HostAccessChecksDtype) {
  Tensor h({3}, DType::BF16, Device::Host);
  EXPECT_EQ(h.bytes(), 6u);
  EXPECT_FALSE(h.is_host_f32());
  EXPECT_NE(h.raw(), nullptr);
  try {
    h.data();
    FAIL() << "data() of a bf16 tensor must throw";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 on host"), std::string::npos) << e.what();
  }
  EXPECT_THROW(h.to_vector(), hypic::Error);
  const Tensor copy = h;  // raw bytes copy
  EXPECT_EQ(std::memcmp(copy.raw(), h.raw(), 6), 0);
}

TEST(Tensor, DeviceTensorsNeedTheirAllocator) {
  EXPECT_THROW(Tensor({2}, DType::F32, Device::Cuda, nullptr), hypic::Error);
  EXPECT_THROW(Tensor({2}, DType::F32, Device::Cuda, &hypic::kernels::host_backend()),
               hypic::Error);
}

// The store and the safetensors files spell dtypes from this table; the bytes per element
// decide file layouts.
TEST(DType, NamesAndSizesAreTheFormatsOwn) {
  EXPECT_STREQ(hypic::dtype_name(DType::F32), "f32");
  EXPECT_STREQ(hypic::dtype_name(DType::BF16), "bf16");
  EXPECT_STREQ(hypic::dtype_name(DType::F16), "f16");
  EXPECT_EQ(hypic::dtype_size(DType::F32), 4u);
  EXPECT_EQ(hypic::dtype_size(DType::BF16), 2u);
  EXPECT_EQ(hypic::dtype_size(DType::I64), 8u);
  EXPECT_TRUE(hypic::dtype_is_float(DType::F16));
  EXPECT_FALSE(hypic::dtype_is_float(DType::I32));
}

TEST(Backends, CudaBackendExplainsWhenNotCompiledAndHostRunsEverything) {
  const hypic::kernels::Backend& host = hypic::kernels::host_backend();
  EXPECT_STREQ(host.name(), "host");
  EXPECT_EQ(host.device(), Device::Host);
  EXPECT_EQ(&hypic::kernels::backend_for(Device::Host), &host);
#ifndef HYPIC_WITH_CUDA
  try {
    hypic::kernels::cuda_backend();
    FAIL() << "a build without CUDA has no cuda backend";
  } catch (const hypic::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not compiled with CUDA"), std::string::npos);
  }
#else
  const hypic::kernels::Backend& cuda = hypic::kernels::cuda_backend();
  EXPECT_STREQ(cuda.name(), "cuda");
  // Since issue #14 the cuda backend runs every op (each checked by the op harness on a GPU).
  for (int i = 0; i < static_cast<int>(hypic::kernels::Op::kCount); ++i)
    EXPECT_TRUE(cuda.supports(static_cast<hypic::kernels::Op>(i)))
        << hypic::kernels::op_name(static_cast<hypic::kernels::Op>(i));
  try {  // bad dims are refused on the host side, without touching the device
    cuda.family_chunked({}, {}, {}, nullptr, nullptr, nullptr, 64);
    FAIL() << "expected the cuda backend to refuse empty dims";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bad dims"), std::string::npos) << e.what();
  }
#endif
}

}  // namespace tensor_test
}  // namespace

// HYPIC_REQUIRE builds its message only when the check fails (hot paths call it per op).
TEST(Require, BuildsTheMessageOnlyOnFailure) {
  int built = 0;
  const auto message = [&] {
    ++built;
    return std::string("sizes differ");
  };
  HYPIC_REQUIRE(1 + 1 == 2, message());
  EXPECT_EQ(built, 0);
  try {
    HYPIC_REQUIRE(1 + 1 == 3, message());
    FAIL() << "a failed check must throw";
  } catch (const hypic::Error& e) {
    EXPECT_STREQ(e.what(), "sizes differ");
  }
  EXPECT_EQ(built, 1);
}
