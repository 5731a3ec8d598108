# A compiler cache: where ccache is installed (scripts/install-deps.sh installs it), every compile
# goes through it, so a build in a fresh clone (CI's, a second checkout) takes from the cache what
# an earlier build of the same sources, flags and compiler compiled, wherever either clone lies.
# Paths under the source tree are hashed relative to it (CCACHE_BASEDIR) and the build folder's
# path not at all (CCACHE_NOHASHDIR: debug line tables then name the folder that filled the
# cache). The precompiled headers (cmake/precompiled_headers.cmake) need the two sloppiness
# settings ccache documents for them. -DKVHEAP_CCACHE=OFF compiles without it; `ccache -s` shows
# its hits and misses.
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
  set(launcher
      "${CMAKE_COMMAND}" -E env "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "${KVHEAP_CCACHE_PROGRAM}")
  foreach(lang C CXX CUDA)
    set(CMAKE_${lang}_COMPILER_LAUNCHER "${launcher}" PARENT_SCOPE)
  endforeach()
  message(STATUS "kvheap: compiling through ${KVHEAP_CCACHE_PROGRAM}")
endfunction()
