# cmake -DPROGRAM=<GPU benchmark program> [-DLISTED=ON] -DROWS=<n> -P check_bench_model.cmake
#
# Runs PROGRAM --model-only, which must work on any machine (the simulator included) and time
# nothing, and fails unless it exits 0, says its figures are a prediction and not a measurement,
# and prints ROWS table rows. With LISTED=ON, a Google Benchmark program: every benchmark its
# listing (--benchmark_list_tests) names must have its own row, so that no measured row of a GPU
# run is left without its model.
execute_process(COMMAND "${PROGRAM}" --model-only OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --model-only exited ${rc}:\n${out}${err}")
endif()
string(FIND "${out}" "a prediction, not a measurement" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${PROGRAM} --model-only does not say its figures are a model:\n${out}")
endif()
string(FIND "${out}" "nothing timed" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${PROGRAM} --model-only does not say that nothing was timed:\n${out}")
endif()
string(REGEX MATCHALL "\n\\| [^-|][^\n]*" rows "${out}")
list(LENGTH rows count)
math(EXPR count "${count} - 1")  # the header row
if(NOT count EQUAL ROWS)
  message(FATAL_ERROR "${PROGRAM} --model-only printed ${count} rows, expected ${ROWS}:\n${out}")
endif()
if(LISTED)
  execute_process(COMMAND "${PROGRAM}" --benchmark_list_tests=true OUTPUT_VARIABLE names
                  RESULT_VARIABLE rc)
  string(STRIP "${names}" names)
  string(REPLACE "\n" ";" names "${names}")
  list(LENGTH names listed)
  if(NOT listed EQUAL ROWS)
    message(FATAL_ERROR "${PROGRAM} lists ${listed} benchmarks, expected ${ROWS}")
  endif()
  foreach(name IN LISTS names)
    # The listing appends the run's settings (/min_time:0.200/manual_time) to the names given.
    string(REGEX REPLACE "/(min_time|manual_time|real_time|iterations|repeats|threads)[^/]*" ""
                         name "${name}")
    string(FIND "${out}" "| ${name} |" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${PROGRAM} --model-only has no row for ${name}:\n${out}")
    endif()
  endforeach()
endif()
message(STATUS "${count} model rows, each labelled a prediction")
