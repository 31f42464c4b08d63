# The standalone build of libgcpressure_torch.so (CMakeLists.txt includes
# this when examples/torch is the top-level source folder): core from this
# checkout and nothing else. CUDA as in the root build: on when nvcc is
# found (PATH or /usr/local/cuda/bin), unless -DGCPRESSURE_WITH_CUDA=OFF (a host-only library still loads
# and runs the host backend; install() then refuses, naming the reason).
set(GCPRESSURE_TORCH_STANDALONE ON)
# Optimised unless asked otherwise, as the root build: an unset build type
# compiles without optimisation, and the allocation path is then ~4x slower
# (measured on the H200: 3.9 vs 1.0 us per alloc+free pair).
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Build type" FORCE)
endif()
option(GCPRESSURE_TORCH_TESTS "Standalone: add the plug-in's ctests too" OFF)
if(GCPRESSURE_TORCH_TESTS)
  enable_testing()
endif()
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(_gcp_root ${CMAKE_CURRENT_SOURCE_DIR}/../..)
if(NOT EXISTS ${_gcp_root}/core/CMakeLists.txt)
  message(FATAL_ERROR "gcpressure_torch: ${_gcp_root}/core not found; build from a gcpressure checkout")
endif()
if(NOT DEFINED GCPRESSURE_WITH_CUDA)
  find_program(_gcp_nvcc nvcc HINTS /usr/local/cuda/bin)
  set(GCPRESSURE_WITH_CUDA OFF)
  if(_gcp_nvcc)
    set(CMAKE_CUDA_COMPILER ${_gcp_nvcc})
    set(GCPRESSURE_WITH_CUDA ON)
  endif()
endif()
if(GCPRESSURE_WITH_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures (H100/H200: 90)")
  # CMake < 3.26 has no C++20 flag for nvcc 13 (core asks for cxx_std_20).
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
message(STATUS "gcpressure_torch standalone: CUDA ${GCPRESSURE_WITH_CUDA}")
find_package(Threads REQUIRED)
include(GNUInstallDirs)
add_subdirectory(${_gcp_root}/core ${CMAKE_BINARY_DIR}/core)
