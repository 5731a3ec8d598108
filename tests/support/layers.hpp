// The layering rule of the source tree, and a scan that finds every edge breaking it.
//
// kvheap's folders form layers, bottom up:
//
//   base -> device -> kernels -> common -> chapters/01_... -> chapters/02_... -> ...
//
// and common/ in its own layers, bottom up:
//
//   util -> model -> tokenizer -> measure -> cache -> forward -> serving -> program
//
// (each sub-folder's CUDA host code sits in its cuda/ sub-folder and ranks with it).
// A file may include, and a target may link, only what sits in its own folder or below it: a later
// chapter may use an earlier one, never the reverse. tests/, bench/ and fuzz/ sit on top and may
// use anything. The edges come from the tree itself: the #include lines of every .hpp, .cpp, .cu
// and .cuh file, and the target_link_libraries edges (and the LIBS of kvheap's CMake helpers) of
// every CMakeLists.txt. A second rule keeps CPU-only headers out of device code.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvheap::layers {

/// \brief The folder a tree path belongs to, as the rule sees it: "base", "device", "kernels",
/// "common/cache" (common/cache/cuda/ included), "chapters/03_paged_blocks", "tests", "bench" or
/// "fuzz"; "common" for a file directly in common/; "" for anything else (cmake/, docs/, scripts/,
/// top-level files, a sub-folder of common/ that is not one of its layers), which the rule does
/// not cover.
[[nodiscard]] std::string folder_of(const std::string& tree_path);

/// \brief The folder's height in the layering: a folder may use folders of the same or a lower
/// rank. -1 for a folder the rule does not cover.
[[nodiscard]] int rank_of(const std::string& folder);

/// \brief One use of a folder by another: a file's #include or a target's link.
struct Edge {
  std::string from;   ///< folder of the including file or linking target
  std::string to;     ///< folder of the included file or linked target
  std::string where;  ///< "kernels/rope.hpp:4 includes common/program/cli.hpp", or the CMake link
};

/// \brief Every #include "..." edge between two different covered folders.
[[nodiscard]] std::vector<Edge> include_edges(const std::filesystem::path& root);

/// \brief Every link edge between targets of two different covered folders: target_link_libraries
/// and the LIBS arguments of kvheap_add_chapter, kvheap_add_test and kvheap_add_bench, and the
/// device layer that kvheap_cuda_sources links.
[[nodiscard]] std::vector<Edge> link_edges(const std::filesystem::path& root);

/// \brief The edges of `edges` that point up: rank_of(to) > rank_of(from).
[[nodiscard]] std::vector<Edge> upward(const std::vector<Edge>& edges);

/// \brief How many edges go from each folder to each other one.
[[nodiscard]] std::map<std::pair<std::string, std::string>, int> count(
    const std::vector<Edge>& edges);

/// \brief The includes of chapter files that reach past what a chapter may use of the layers
/// below: base/, and of common/ only cache/, serving/, program/ and the model config
/// (common/model/model_config.hpp), so that a chapter reads as its policy over those. Chapter 1's
/// reserved cache, the oracle that computes its own attention over host reservations, may also use
/// the CPU twins of the kernels, host buffers and the host-memory check. As "where includes x".
[[nodiscard]] std::vector<std::string> chapter_includes_past_their_layers(
    const std::filesystem::path& root);

/// \brief CPU-only headers that device code reaches: for every .cu file of the tree, each header
/// of its #include "..." closure (the .cu file included) that includes Eigen, an x86 SIMD header
/// (<immintrin.h> & co.) or <omp.h>, or is a CPU twin's SIMD header (kernels/*_simd.hpp), as
/// "kernels/x.cu -> kernels/a.hpp -> kernels/b.hpp includes <Eigen/Core>". nvcc would parse
/// them in every .cu file for nothing. The scan follows every include, whatever #if surrounds it.
[[nodiscard]] std::vector<std::string> cpu_headers_in_device_code(
    const std::filesystem::path& root);

}  // namespace kvheap::layers
