# forward_loop_lib: the forward loop shared by examples/forward_loop and the
# forward/* benchmarks of bench/. Included from examples/CMakeLists.txt and
# bench/CMakeLists.txt (whichever comes first defines it).
include_guard(GLOBAL)

set(_fwd_dir ${CMAKE_CURRENT_LIST_DIR})
add_library(forward_loop_lib STATIC ${_fwd_dir}/forward_loop_lib.cpp)
target_include_directories(forward_loop_lib PUBLIC ${_fwd_dir})
# Boehm: the loop allocates host GC objects itself (a runtime would).
target_link_libraries(forward_loop_lib PUBLIC gcpressure::gc_bridge PRIVATE PkgConfig::BDWGC)
if(GCPRESSURE_WITH_CUDA)
  # cuBLAS SGEMM + the bias/relu kernel; cuBLAS linked dynamically.
  add_library(forward_loop_cuda STATIC ${_fwd_dir}/forward_loop_cuda.cu)
  target_link_libraries(forward_loop_cuda PUBLIC CUDA::cublas CUDA::cudart_static)
  set_target_properties(forward_loop_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  target_link_libraries(forward_loop_lib PRIVATE forward_loop_cuda)
endif()
