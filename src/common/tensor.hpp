#pragma once
// The Tensor, its DType and Device live with the kernels (kernels/include/hypic/tensor.hpp):
// backends allocate and compute on them, and kernels must not include src/ headers.
#include "hypic/tensor.hpp"
