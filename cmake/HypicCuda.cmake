# The CUDA backend: on by default when a CUDA compiler is found. Result: HYPIC_CUDA and,
# when on, the CUDA language enabled plus CUDA::cublas / CUDA::cudart and NCCL found (linked
# into the CUDA module only: kernels/CMakeLists.txt).
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS "/usr/local/cuda/bin/nvcc")
  set(CMAKE_CUDA_COMPILER "/usr/local/cuda/bin/nvcc" CACHE FILEPATH "CUDA compiler")
endif()
check_language(CUDA)
set(_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(_cuda_default ON)
endif()
option(HYPIC_CUDA "Build the CUDA backend (kernels/cuda)" ${_cuda_default})

set(HYPIC_CUDA_SUMMARY "off")
if(HYPIC_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "HYPIC_CUDA=ON but no CUDA compiler was found (set CUDACXX)")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (90 = Hopper)")
  endif()
  # One CUDA runtime in the link: the shared libcudart that CUDA::cudart, cuBLAS and NCCL use
  # (CMake's default for CUDA targets, Static, added -lcudart_static beside libcudart.so).
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_library(HYPIC_NCCL_LIB nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
               /usr/lib/x86_64-linux-gnu REQUIRED)
  find_path(HYPIC_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
            /usr/include REQUIRED)
  set(HYPIC_CUDA_SUMMARY
      "on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, arch ${CMAKE_CUDA_ARCHITECTURES}, cuBLAS, NCCL ${HYPIC_NCCL_LIB}; module libhypic_cuda.so beside hypic, loaded on first use)")
endif()
