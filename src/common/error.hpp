#pragma once
// hypic::Error and require() live with the kernels (kernels/include/hypic/error.hpp) so that the
// Tensor and the backends, which sit below src/, can throw the same error type.
#include "hypic/error.hpp"
