# gcpressure_forward: the forward loop as a library (bench/forward/forward.hpp),
# used by examples/forward_loop, the forward/* benchmarks and the CI matrix.
# Included from examples/CMakeLists.txt and bench/CMakeLists.txt (whichever
# comes first defines it), so that either builds without the other.
include_guard(GLOBAL)

set(_fwd_dir ${CMAKE_CURRENT_LIST_DIR})
add_library(gcpressure_forward STATIC
  ${_fwd_dir}/cli.cpp
  ${_fwd_dir}/compute.cpp
  ${_fwd_dir}/loop.cpp
  ${_fwd_dir}/replica.cpp
  ${_fwd_dir}/report.cpp
  ${_fwd_dir}/workload.cpp)
target_include_directories(gcpressure_forward PUBLIC ${_fwd_dir})
# forward_loop --version (report.cpp): the project's version and whether CUDA is built in.
set_source_files_properties(${_fwd_dir}/report.cpp PROPERTIES COMPILE_DEFINITIONS
  "FWD_GCPRESSURE_VERSION=\"${PROJECT_VERSION}\";FWD_WITH_CUDA=$<BOOL:${GCPRESSURE_WITH_CUDA}>")
# Boehm: the loop allocates host GC objects itself (a runtime would).
target_link_libraries(gcpressure_forward PUBLIC gcpressure::gc_bridge PRIVATE PkgConfig::BDWGC)
if(GCPRESSURE_WITH_CUDA)
  # cuBLAS SGEMM + the bias/relu kernel; cuBLAS linked dynamically.
  add_library(gcpressure_forward_cuda STATIC ${_fwd_dir}/cuda_kernels.cu)
  target_link_libraries(gcpressure_forward_cuda PUBLIC CUDA::cublas CUDA::cudart_static)
  set_target_properties(gcpressure_forward_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  target_link_libraries(gcpressure_forward PRIVATE gcpressure_forward_cuda)
endif()
