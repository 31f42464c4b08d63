# Runs forward_loop.scm and checks its JSON summary (the last line printed):
#   cmake -DGUILE=<guile wrapper> -DSCRIPT=forward_loop.scm "-DARGS=a|b|c"
#         -DMIN_ITERS=200 -DMIN_RATIO=20 -P check_forward_loop.cmake
# Asserts: iterations >= MIN_ITERS, total allocation >= MIN_RATIO x hard limit,
# peak reserved <= hard limit, zero OOMs, some arrays finalized. With
# -DSKIP_WITHOUT_GPU=ON (the CUDA test only) prints GCPRESSURE_TEST_SKIPPED
# (ctest: skipped) when the backend is not available here (no GPU); without
# it an "unsupported" error is a failure like any other (issue 25: a failure
# on the host backend must never read as a skip).
cmake_minimum_required(VERSION 3.24)
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${GUILE} ${SCRIPT} ${_args}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  if(SKIP_WITHOUT_GPU AND err MATCHES "unsupported")
    # The test's SKIP_REGULAR_EXPRESSION matches this line (ctest: skipped).
    message(STATUS "GCPRESSURE_TEST_SKIPPED: the backend is not available here:\n${err}")
    return()
  endif()
  message(FATAL_ERROR "forward_loop.scm failed (${rc}):\n${out}\n${err}")
endif()
string(STRIP "${out}" out)
string(REGEX REPLACE ".*\n" "" last "${out}")
message(STATUS "summary: ${last}")
if(err)
  message(STATUS "stderr:\n${err}")
endif()
foreach(k iterations ooms peak_reserved_bytes hard_limit_bytes total_allocated_bytes collections_minor
          collections_full collections_full_steady gc_seconds wall_seconds finalized policy backend)
  string(JSON v ERROR_VARIABLE jerr GET "${last}" ${k})
  if(jerr)
    message(FATAL_ERROR "summary has no '${k}': ${jerr}\n${out}")
  endif()
  set(${k} "${v}")
endforeach()
set(fail "")
if(iterations LESS MIN_ITERS)
  string(APPEND fail "iterations ${iterations} < ${MIN_ITERS}\n")
endif()
math(EXPR need "${hard_limit_bytes} * ${MIN_RATIO}")
if(total_allocated_bytes LESS need)
  string(APPEND fail "total allocation ${total_allocated_bytes} < ${MIN_RATIO} x hard limit ${hard_limit_bytes}\n")
endif()
if(peak_reserved_bytes GREATER hard_limit_bytes)
  string(APPEND fail "peak reserved ${peak_reserved_bytes} > hard limit ${hard_limit_bytes}\n")
endif()
if(NOT ooms EQUAL 0)
  string(APPEND fail "${ooms} OOMs\n")
endif()
if(finalized EQUAL 0)
  string(APPEND fail "no device array was finalized: nothing was reclaimed by the collector\n")
endif()
if(fail)
  message(FATAL_ERROR "forward_loop.scm (${policy}, ${backend}):\n${fail}${out}")
endif()
math(EXPR ratio "${total_allocated_bytes} / ${hard_limit_bytes}")
message(STATUS "ok: ${policy}/${backend}: ${iterations} iterations, allocated ${ratio}x the hard limit, "
               "peak reserved ${peak_reserved_bytes} <= ${hard_limit_bytes}, 0 OOMs, "
               "${collections_minor} minor + ${collections_full} full (${collections_full_steady} blocking steady), "
               "gc ${gc_seconds} s of ${wall_seconds} s, ${finalized} finalized")
