# A compiler cache: where ccache is installed (scripts/install-deps.sh installs it), every compile
# goes through it, so a build in a fresh clone (CI's, a second checkout) takes from the cache what
# an earlier build of the same sources, flags and compiler compiled, wherever either clone lies.
# Paths under the source tree are hashed relative to it (CCACHE_BASEDIR) and the build folder's
# path not at all (CCACHE_NOHASHDIR: debug line tables then name the folder that filled the
# cache). The precompiled headers (cmake/precompiled_headers.cmake) need the two sloppiness
# settings ccache documents for them. -DKVHEAP_CCACHE=OFF compiles without it; `ccache -s` shows
# its hits and misses.
#
# Nothing that differs between two clones may reach a compile command, or every clone misses:
# the source tree's path is compiled into one file only (tests/support/source_tree.cpp). And
# -march=native reads the same on every machine while it means another instruction set on
# another CPU, so where a build uses it, what the compiler expands it to is hashed too
# (CCACHE_EXTRAFILES): a cache filled on one CPU then never hands another CPU objects built for
# instructions it may lack.
option(KVHEAP_CCACHE "Compile through ccache where it is installed" ON)

function(kvheap_use_compiler_cache)
  if(NOT KVHEAP_CCACHE OR CMAKE_CXX_COMPILER_LAUNCHER)
    return()
  endif()
  find_program(KVHEAP_CCACHE_PROGRAM ccache)
  if(NOT KVHEAP_CCACHE_PROGRAM)
    message(STATUS "kvheap: ccache not found, compiling without a compiler cache")
    return()
  endif()
  set(native "")
  if(KVHEAP_NATIVE AND NOT KVHEAP_SANITIZE)
    # Run from / because clang's expansion names the folder it runs in.
    execute_process(COMMAND "${CMAKE_CXX_COMPILER}" -march=native "-###" -E -x c++ /dev/null
                    WORKING_DIRECTORY / OUTPUT_QUIET ERROR_VARIABLE expansion RESULT_VARIABLE failed)
    if(failed OR NOT expansion MATCHES "march|target-cpu")
      message(STATUS "kvheap: cannot tell what -march=native means here, so C++ compiles without "
                     "the compiler cache")
      set(CMAKE_CUDA_COMPILER_LAUNCHER "${CMAKE_COMMAND}" -E env
          "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1 "${KVHEAP_CCACHE_PROGRAM}"
          PARENT_SCOPE)
      return()
    endif()
    set(native_file "${CMAKE_BINARY_DIR}/kvheap_native_target.txt")
    file(WRITE "${native_file}" "${expansion}")
    set(native "CCACHE_EXTRAFILES=${native_file}")
  endif()
  set(env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
          "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime")
  # Only C++ sources get -march=native (CMakeLists.txt); nvcc's host code does not.
  foreach(lang C CXX)
    set(CMAKE_${lang}_COMPILER_LAUNCHER "${CMAKE_COMMAND}" -E env ${env} ${native}
                                        "${KVHEAP_CCACHE_PROGRAM}" PARENT_SCOPE)
  endforeach()
  set(CMAKE_CUDA_COMPILER_LAUNCHER "${CMAKE_COMMAND}" -E env ${env} "${KVHEAP_CCACHE_PROGRAM}"
      PARENT_SCOPE)
  message(STATUS "kvheap: compiling through ${KVHEAP_CCACHE_PROGRAM}")
endfunction()
