// The layering rule (tests/support/layers.hpp): no include or link points up, in the real tree,
// and a planted upward include or link is caught.
#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/layers.hpp"
#include "tests/support/source_tree.hpp"

namespace kvheap {
namespace {

namespace fs = std::filesystem;

std::string describe(const std::vector<layers::Edge>& edges) {
  std::string out;
  for (const layers::Edge& e : edges) out += "\n  " + e.where + " (" + e.from + " -> " + e.to + ")";
  return out;
}

TEST(Layering, NoIncludeOrLinkOfTheTreePointsUp) {
  const fs::path root = test::source_dir();
  const std::vector<layers::Edge> includes = layers::include_edges(root);
  const std::vector<layers::Edge> links = layers::link_edges(root);
  ASSERT_GT(includes.size(), 100u) << "the scan found almost no includes: wrong root?";
  ASSERT_GT(links.size(), 10u) << "the scan found almost no links: wrong root?";
  EXPECT_TRUE(layers::upward(includes).empty()) << describe(layers::upward(includes));
  EXPECT_TRUE(layers::upward(links).empty()) << describe(layers::upward(links));
}

TEST(Layering, FoldersAreRankedBottomUpAndChaptersInOrder) {
  EXPECT_EQ(layers::folder_of("kernels/rope.hpp"), "kernels");
  EXPECT_EQ(layers::folder_of("common/forward/cuda/forward_gpu.cpp"), "common/forward");
  EXPECT_EQ(layers::folder_of("common/CMakeLists.txt"), "common");
  EXPECT_EQ(layers::folder_of("common/misc/x.hpp"), "");
  EXPECT_EQ(layers::folder_of("chapters/03_paged_blocks/main.cpp"), "chapters/03_paged_blocks");
  EXPECT_EQ(layers::folder_of("docs/pages/bad_inputs.md"), "");
  EXPECT_LT(layers::rank_of("base"), layers::rank_of("device"));
  EXPECT_LT(layers::rank_of("device"), layers::rank_of("kernels"));
  EXPECT_LT(layers::rank_of("kernels"), layers::rank_of("common/util"));
  const char* const common[] = {"common/util",    "common/model",  "common/tokenizer",
                                "common/measure", "common/cache",  "common/forward",
                                "common/serving", "common/program"};
  for (std::size_t i = 1; i < std::size(common); ++i)
    EXPECT_LT(layers::rank_of(common[i - 1]), layers::rank_of(common[i])) << common[i];
  EXPECT_EQ(layers::rank_of("common"), layers::rank_of("common/program"));
  EXPECT_LT(layers::rank_of("common"), layers::rank_of("chapters/01_cpu_reference"));
  EXPECT_LT(layers::rank_of("chapters/03_paged_blocks"),
            layers::rank_of("chapters/04_cow_prefix_sharing"));
  EXPECT_LT(layers::rank_of("chapters/05_batched_scheduler"), layers::rank_of("tests"));
  EXPECT_EQ(layers::rank_of("tests"), layers::rank_of("fuzz"));
}

// common/ holds its CMakeLists.txt and its layers' folders, nothing else: a new folder must take
// its place in the order (tests/support/layers.cpp), and a new file a folder.
TEST(Layering, CommonHoldsOnlyItsLayers) {
  const fs::path common = test::source_dir() / "common";
  int folders = 0;
  for (const auto& e : fs::directory_iterator(common)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory()) {
      ++folders;
      EXPECT_NE(layers::rank_of(layers::folder_of("common/" + name + "/x.hpp")), -1)
          << "common/" << name << "/ is not one of common/'s layers";
      for (const auto& f : fs::recursive_directory_iterator(e.path())) {
        if (f.is_directory()) {
          EXPECT_EQ(f.path().filename(), "cuda") << fs::relative(f.path(), common).generic_string()
                                                 << ": a layer's only sub-folder is cuda/";
        }
      }
    } else {
      EXPECT_EQ(name, "CMakeLists.txt") << "common/" << name << " belongs in one of its layers";
    }
  }
  EXPECT_EQ(folders, 8);
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A small tree with one upward include between layers, one from an earlier chapter to a later
// one, and one upward link; the downward edges beside them are allowed.
TEST(Layering, PlantedUpwardIncludesAndLinksAreCaught) {
  const test::TempDir tmp;
  const fs::path root = tmp.path();
  write(root / "base/error.hpp", "#pragma once\n");
  write(root / "kernels/rope.hpp",
        "#pragma once\n#include \"base/error.hpp\"\n  # include \"common/program/cli.hpp\"\n");
  write(root / "common/program/cli.hpp", "#pragma once\n#include \"kernels/rope.hpp\"\n");
  write(root / "chapters/03_paged/pool.hpp", "#include \"chapters/04_shared/index.hpp\"\n");
  write(root / "chapters/04_shared/index.hpp", "#include \"chapters/03_paged/pool.hpp\"\n");
  write(root / "tests/test_all.cpp",
        "#include \"chapters/04_shared/index.hpp\"\n#include \"fuzz/x.hpp\"\n");
  write(root / "device/CMakeLists.txt",
        "add_library(dev STATIC d.cpp)  # the device layer\ntarget_link_libraries(dev PUBLIC\n"
        "  base_lib common_lib fmt::fmt)\n");
  write(root / "common/CMakeLists.txt",
        "add_library(common_lib STATIC c.cpp)\ntarget_link_libraries(common_lib PUBLIC dev)\n");
  write(root / "base/CMakeLists.txt", "add_library(base_lib STATIC b.cpp)\n");

  const std::vector<layers::Edge> up_includes = layers::upward(layers::include_edges(root));
  ASSERT_EQ(up_includes.size(), 2u) << describe(up_includes);
  EXPECT_EQ(up_includes[0].where,
            "chapters/03_paged/pool.hpp:1 includes chapters/04_shared/index.hpp");
  EXPECT_EQ(up_includes[1].where, "kernels/rope.hpp:3 includes common/program/cli.hpp");
  const std::vector<layers::Edge> up_links = layers::upward(layers::link_edges(root));
  ASSERT_EQ(up_links.size(), 1u) << describe(up_links);
  EXPECT_EQ(up_links[0].where, "device/CMakeLists.txt: dev links common_lib");
  EXPECT_EQ(layers::count(layers::link_edges(root)).size(), 3u)
      << "dev -> base and common, common -> dev";
}

std::string lines(const std::vector<std::string>& list) {
  std::string out;
  for (const std::string& s : list) out += "\n  " + s;
  return out;
}

TEST(Layering, ChaptersIncludeOnlyTheCacheServingProgramAndModelConfig) {
  const std::vector<std::string> found =
      layers::chapter_includes_past_their_layers(test::source_dir());
  EXPECT_TRUE(found.empty()) << lines(found);
}

TEST(Layering, PlantedChapterIncludePastItsLayersIsCaught) {
  const test::TempDir tmp;
  const fs::path root = tmp.path();
  write(root / "chapters/03_paged/pool.cpp",
        "#include \"chapters/03_paged/pool.hpp\"\n#include \"base/error.hpp\"\n"
        "#include \"common/cache/kv_cache.hpp\"\n#include \"common/model/model_config.hpp\"\n"
        "#include \"common/model/gguf_file.hpp\"\n#include \"kernels/rope.hpp\"\n"
        "#include \"common/util/host_buffer.hpp\"\n");
  write(root / "chapters/01_cpu_reference/reserved_cache.cpp",
        "#include \"common/util/host_buffer.hpp\"\n#include \"kernels/rope.hpp\"\n");
  const std::vector<std::string> found = layers::chapter_includes_past_their_layers(root);
  ASSERT_EQ(found.size(), 4u) << lines(found);
  EXPECT_EQ(found[0], "chapters/01_cpu_reference/reserved_cache.cpp:2 includes kernels/rope.hpp");
  EXPECT_EQ(found[1], "chapters/03_paged/pool.cpp:5 includes common/model/gguf_file.hpp");
  EXPECT_EQ(found[2], "chapters/03_paged/pool.cpp:6 includes kernels/rope.hpp");
  EXPECT_EQ(found[3], "chapters/03_paged/pool.cpp:7 includes common/util/host_buffer.hpp");
}

TEST(Layering, DeviceCodeIncludesNoCpuOnlyHeader) {
  const std::vector<std::string> found = layers::cpu_headers_in_device_code(test::source_dir());
  EXPECT_TRUE(found.empty()) << lines(found);
}

// A .cu file that reaches Eigen two includes down, and one that reaches a SIMD twin; a .cpp file
// may include both.
TEST(Layering, PlantedCpuHeaderInDeviceCodeIsCaught) {
  const test::TempDir tmp;
  const fs::path root = tmp.path();
  write(root / "kernels/a.cu", "#include \"kernels/a.hpp\"\n");
  write(root / "kernels/a.hpp", "#pragma once\n#if 0\n#include \"kernels/b.hpp\"\n#endif\n");
  write(root / "kernels/b.hpp", "#pragma once\n#include <Eigen/Core>\n");
  write(root / "kernels/c.cu", "#include \"kernels/c_simd.hpp\"\n");
  write(root / "kernels/c_simd.hpp", "#pragma once\n#include <immintrin.h>\n");
  write(root / "kernels/d.cpp", "#include \"kernels/b.hpp\"\n#include \"kernels/c_simd.hpp\"\n");
  const std::vector<std::string> found = layers::cpu_headers_in_device_code(root);
  ASSERT_EQ(found.size(), 3u) << lines(found);
  EXPECT_EQ(found[0], "kernels/a.cu -> kernels/a.hpp -> kernels/b.hpp includes <Eigen/Core>");
  EXPECT_EQ(found[1], "kernels/c.cu -> kernels/c_simd.hpp is a CPU SIMD header");
  EXPECT_EQ(found[2], "kernels/c.cu -> kernels/c_simd.hpp includes <immintrin.h>");
}

}  // namespace
}  // namespace kvheap
