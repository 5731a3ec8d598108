# cmake -DPROGRAM=<benchmark program> -P check_bench_listing.cmake
#
# Runs PROGRAM --benchmark_list_tests=true and fails unless it exits 0 having printed at least one
# line and nothing but benchmark names (family/config/...: letters, digits and _ . : / -). A
# listing runs no benchmark, so a table (empty, or of numbers nobody asked for) or a refusal to
# run on this machine is a bug. A peak measured around the runs prints nothing itself; the test's
# 60 s limit is all that notices one.
execute_process(COMMAND "${PROGRAM}" --benchmark_list_tests=true
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --benchmark_list_tests=true exited ${rc}:\n${out}${err}")
endif()
string(STRIP "${out}" out)
if(out STREQUAL "")
  message(FATAL_ERROR "${PROGRAM} --benchmark_list_tests=true listed no benchmark:\n${err}")
endif()
string(REPLACE "\n" ";" lines "${out}")
list(LENGTH lines count)
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^[A-Za-z0-9_.:-]+/[A-Za-z0-9_.:/-]+$")
    message(FATAL_ERROR
            "${PROGRAM} --benchmark_list_tests=true printed a line that is not a benchmark name: "
            "'${line}'\nWhole output:\n${out}")
  endif()
endforeach()
message(STATUS "${count} benchmark names, nothing else")
