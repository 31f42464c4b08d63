# ctest check for forward_loop's errors: cmake -DEXE=<forward_loop> -P forward_loop_errors.cmake
# A bad flag prints the usage text; a bad GCPRESSURE_* variable is not a
# command-line mistake and prints only the error (issue 12). Both exit 2.
if(NOT EXE)
  message(FATAL_ERROR "usage: cmake -DEXE=<forward_loop> -P forward_loop_errors.cmake")
endif()
execute_process(COMMAND ${EXE} --iters nope ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--iters: 'nope' \\(expected an integer" OR NOT err MATCHES "usage: forward_loop")
  message(FATAL_ERROR "bad flag: expected exit 2 with the error and the usage text, got ${rc}:\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env GCPRESSURE_GC_BUDGET=lots ${EXE} --iters 1
  ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "GCPRESSURE_GC_BUDGET" OR err MATCHES "usage: forward_loop")
  message(FATAL_ERROR "bad variable: expected exit 2 with the error and no usage text, got ${rc}:\n${err}")
endif()
execute_process(COMMAND ${EXE} --workload nope ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "unknown workload 'nope'")
  message(FATAL_ERROR "bad workload: expected exit 2 naming it, got ${rc}:\n${err}")
endif()
execute_process(COMMAND ${EXE} --devices 0 ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--devices: '0' \\(expected an integer in \\[1, 64\\]")
  message(FATAL_ERROR "bad device count: expected exit 2 naming it, got ${rc}:\n${err}")
endif()
message(STATUS "forward_loop: flag and environment errors reported as promised")
