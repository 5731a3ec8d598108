// kvheap_layers [ROOT]: prints how often each folder of the tree includes and links each other
// one, then every edge that points up (tests/support/layers.hpp states the rule). Exit status 1
// when there is one. ROOT defaults to the source tree this program was built from.
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/support/layers.hpp"
#include "tests/support/source_tree.hpp"

int main(int argc, char** argv) {
  using namespace kvheap;
  const std::filesystem::path root = argc > 1 ? std::filesystem::path(argv[1]) : test::source_dir();
  if (!std::filesystem::is_directory(root)) {
    std::fprintf(stderr, "kvheap_layers: '%s' is not a folder; expected a kvheap source tree\n",
                 root.string().c_str());
    return 2;
  }
  const auto includes = layers::include_edges(root);
  const auto links = layers::link_edges(root);
  std::printf("| from | to | includes | links |\n|---|---|---:|---:|\n");
  auto inc = layers::count(includes), lnk = layers::count(links);
  for (const auto& [edge, n] : lnk) inc.try_emplace(edge, 0);
  for (const auto& [edge, n] : inc) {
    const auto l = lnk.find(edge);
    std::printf("| %s | %s | %d | %d |\n", edge.first.c_str(), edge.second.c_str(), n,
                l == lnk.end() ? 0 : l->second);
  }
  int up = 0;
  for (const auto* list : {&includes, &links})
    for (const layers::Edge& e : layers::upward(*list)) {
      std::printf("%s: points up (%s -> %s)\n", e.where.c_str(), e.from.c_str(), e.to.c_str());
      ++up;
    }
  std::printf("%d edge%s point%s up\n", up, up == 1 ? "" : "s", up == 1 ? "s" : "");
  return up == 0 ? 0 : 1;
}
