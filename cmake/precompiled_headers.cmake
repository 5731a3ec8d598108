# Precompiled headers: the third-party headers that many sources include (Eigen, fmt, and
# GoogleTest in the tests), parsed once per build folder instead of once per file. Parsing
# <gtest/gtest.h> alone takes 2.5 s of each test file's compile on two cores, <Eigen/Core> 3.3 s;
# loading their precompiled form takes 0.5 s and 0.3 s. nlohmann-json stays out: its precompiled
# form takes 1.3 s to load, and only one source in six includes it.
#
# Two headers are precompiled, each by a target of its own, and every C++ target of the project
# reuses one of them (REUSE_FROM): a target that links GoogleTest reuses the tests' header, every
# other target the libraries' one. A compiler uses a precompiled header only when it was built
# with the same flags, so the two targets link what gives the consumers their flags (-fopenmp,
# FMT_SHARED, GTEST_HAS_PTHREAD); macros such as KVHEAP_SIM that these headers never read may
# differ. -DKVHEAP_PCH=OFF builds without them, as scripts/lint.sh does so that clang-tidy sees
# each file's own includes. With clang (the fuzz preset) they are off by default: there, sources
# compiled more slowly with the precompiled header than without.

set(_kvheap_pch_headers <algorithm> <cmath> <cstdint> <cstring> <filesystem> <functional> <map>
                        <memory> <random> <span> <string> <vector> <Eigen/Core> <fmt/format.h>)

# Adds the targets that build the two precompiled headers, then makes every C++ target under the
# source tree reuse one of them. Called once, after every target has been added.
function(kvheap_precompile_headers)
  if(NOT KVHEAP_PCH)
    return()
  endif()
  set(anchor "${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp")
  add_library(kvheap_pch_lib OBJECT "${anchor}")
  target_link_libraries(kvheap_pch_lib PRIVATE Eigen3::Eigen fmt::fmt OpenMP::OpenMP_CXX)
  target_precompile_headers(kvheap_pch_lib PRIVATE ${_kvheap_pch_headers})
  if(TARGET GTest::gtest)
    add_library(kvheap_pch_test OBJECT "${anchor}")
    target_link_libraries(kvheap_pch_test PRIVATE Eigen3::Eigen fmt::fmt OpenMP::OpenMP_CXX
                                                  GTest::gtest)
    target_precompile_headers(kvheap_pch_test PRIVATE ${_kvheap_pch_headers} <gtest/gtest.h>)
  endif()
  _kvheap_reuse_pch("${PROJECT_SOURCE_DIR}")
endfunction()

# Makes the C++ targets of one directory, and of the directories below it, reuse a precompiled
# header.
function(_kvheap_reuse_pch dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(no_pch ${target} DISABLE_PRECOMPILE_HEADERS)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|OBJECT_LIBRARY)$" OR target MATCHES "^kvheap_pch_"
       OR no_pch)
      continue()
    endif()
    # A target with sanitizer flags of its own (the libFuzzer programs) would need a header
    # precompiled with them: clang refuses one built without.
    get_target_property(options ${target} COMPILE_OPTIONS)
    if(options MATCHES "-fsanitize")
      continue()
    endif()
    get_target_property(libs ${target} LINK_LIBRARIES)
    if(TARGET kvheap_pch_test AND libs MATCHES "(^|;)(GTest::|kvheap_test_support)")
      target_precompile_headers(${target} REUSE_FROM kvheap_pch_test)
    else()
      target_precompile_headers(${target} REUSE_FROM kvheap_pch_lib)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    _kvheap_reuse_pch("${subdir}")
  endforeach()
endfunction()
