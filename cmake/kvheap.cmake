# Helpers shared by every chapter, test and benchmark CMakeLists.

# Resolves KVHEAP_CUDA=auto|real|sim|off into KVHEAP_CUDA_MODE (real|sim|off) and enables what
# that mode needs: nvcc and the CUDA runtime for real, only the toolkit's headers for sim.
macro(kvheap_resolve_cuda_mode)
  set(_mode "${KVHEAP_CUDA}")
  if(NOT _mode MATCHES "^(auto|real|sim|off)$")
    message(FATAL_ERROR "KVHEAP_CUDA must be auto, real, sim or off; got '${_mode}'")
  endif()
  if(_mode STREQUAL "auto")
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(_mode real)
    else()
      set(_mode off)
    endif()
  endif()
  if(_mode STREQUAL "real")
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag (3.26 does); nvcc has had it since CUDA 12.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
  elseif(_mode STREQUAL "sim")
    # The simulator compiles .cu files as C++; the toolkit still supplies cuda_fp16.h and
    # cuda_bf16.h for the half types.
    find_package(CUDAToolkit REQUIRED)
  endif()
  set(KVHEAP_CUDA_MODE "${_mode}")
endmacro()

# kvheap_add_chapter(<folder> SOURCES <files...> [LIBS <targets...>] [PROGRAMS <names...>] [DEVICE])
# A chapter: its library kvheap_chNN (SOURCES, over kvheap_common and the earlier chapters in
# LIBS), its program ch<folder> (main.cpp), one program chNN_<name> per PROGRAMS entry (<name>.cpp),
# and, with the tests, its self-check as a test: ch<folder>.SelfCheck, and for a chapter that runs
# on a GPU (DEVICE) .SelfCheckCpu and, where there is CUDA code, .SelfCheckCuda. A self-check
# whose device is missing exits 77, which ctest counts as skipped.
function(kvheap_add_chapter folder)
  cmake_parse_arguments(ARG "DEVICE" "" "SOURCES;LIBS;PROGRAMS" ${ARGN})
  string(SUBSTRING "${folder}" 0 2 number)
  set(lib "kvheap_ch${number}")
  add_library(${lib} STATIC ${ARG_SOURCES})
  target_link_libraries(${lib} PUBLIC kvheap_common ${ARG_LIBS})
  set(programs "ch${folder}")
  add_executable(ch${folder} main.cpp)
  foreach(name IN LISTS ARG_PROGRAMS)
    add_executable(ch${number}_${name} ${name}.cpp)
    list(APPEND programs "ch${number}_${name}")
  endforeach()
  foreach(program IN LISTS programs)
    target_link_libraries(${program} PRIVATE ${lib})
    set_target_properties(${program} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
  endforeach()
  if(NOT KVHEAP_BUILD_TESTS)
    return()
  endif()
  set(checks "")
  if(NOT ARG_DEVICE)
    list(APPEND checks "SelfCheck")
  else()
    list(APPEND checks "SelfCheckCpu|--device|cpu")
    if(NOT KVHEAP_CUDA_MODE STREQUAL "off")
      list(APPEND checks "SelfCheckCuda|--device|cuda")
    endif()
  endif()
  foreach(check IN LISTS checks)
    string(REPLACE "|" ";" parts "${check}")
    list(POP_FRONT parts name)
    add_test(NAME ch${folder}.${name} COMMAND ch${folder} --self-check ${parts})
    set_tests_properties(ch${folder}.${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
    if(name STREQUAL "SelfCheckCuda")
      set_tests_properties(ch${folder}.${name} PROPERTIES LABELS device)
    endif()
  endforeach()
endfunction()

# kvheap_add_test(<name> SOURCES <files...> [LIBS <targets...>] [DEVICE])
# Adds a GoogleTest executable and registers each of its tests with ctest. DEVICE marks a test
# program some of whose tests reach the CUDA device: its tests get the label `device`, and the
# target gpu_check builds it (scripts/gpu-check.sh builds that target and runs `ctest -L device`).
function(kvheap_add_test name)
  cmake_parse_arguments(ARG "DEVICE" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kvheap_common kvheap_test_support GTest::gtest_main
                                        ${ARG_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/tests")
  set(labels "")
  if(ARG_DEVICE)
    set(labels LABELS device)
    add_dependencies(gpu_check ${name})
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES ENVIRONMENT "KVHEAP_BIN_DIR=${CMAKE_BINARY_DIR}/bin" ${labels})
endfunction()

# kvheap_add_bench(<name> SOURCES <files...> [LIBS <targets...>])
# Adds a Google Benchmark program, and with the tests a check that listing its benchmarks
# (--benchmark_list_tests) prints their names only: no peak measured, no empty table, no device.
function(kvheap_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kvheap_common benchmark::benchmark ${ARG_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bench")
  if(KVHEAP_BUILD_TESTS)
    add_test(NAME ${name}.ListingPrintsOnlyNames
             COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:${name}>
                     -P ${PROJECT_SOURCE_DIR}/cmake/check_bench_listing.cmake)
    set_tests_properties(${name}.ListingPrintsOnlyNames PROPERTIES TIMEOUT 60)
  endif()
endfunction()

# kvheap_cuda_sources(<target> <files...>)
# Adds .cu files to a target and links the device layer. KVHEAP_CUDA=real compiles them with
# nvcc; KVHEAP_CUDA=sim compiles them as C++ with the host compiler against the CPU simulator
# (KVHEAP_SIM, from kvheap_device), so every kernel also runs without a GPU.
function(kvheap_cuda_sources target)
  if(NOT KVHEAP_CUDA_MODE MATCHES "^(real|sim)$")
    message(FATAL_ERROR "kvheap_cuda_sources(${target}): .cu files need KVHEAP_CUDA=real or sim")
  endif()
  target_sources(${target} PRIVATE ${ARGN})
  if(KVHEAP_CUDA_MODE STREQUAL "sim")
    # An explicit LANGUAGE makes CMake (>= 3.20) pass "-x c++", so g++/clang++ read .cu as C++.
    # Stack-clash probes make a kernel with oversized local arrays hit its fiber's guard page
    # (and get a clear message) instead of jumping past it into another fiber's stack.
    # No FMA contraction: GCC's default (-ffp-contract=fast) fuses a*b+c wherever its optimiser
    # pairs them, so two instantiations of one kernel (another row locator) could round
    # differently; off, the same arithmetic gives the same bits, as the bitwise tests require.
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES
                                LANGUAGE CXX
                                COMPILE_OPTIONS "-fstack-clash-protection;-ffp-contract=off")
  else()
    # Lets device code call constexpr host functions (std::min, ...), as the simulator does.
    target_compile_options(${target} PRIVATE
                           $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  endif()
  target_link_libraries(${target} PUBLIC kvheap_device)
endfunction()
