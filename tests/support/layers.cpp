#include "tests/support/layers.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <sstream>

namespace kvheap::layers {

namespace fs = std::filesystem;

namespace {

// The rule, stated once: the layers bottom up, then the chapters in their order, then the folders
// that may use everything.
// common/ is itself layered: its sub-folders bottom up (each with its CUDA host code in a cuda/
// sub-folder of its own). A file directly in common/ (its CMakeLists.txt, which builds the one
// library of them all) ranks with the top one.
const std::vector<std::string> kLayers = {"base",           "device",        "kernels",
                                          "common/util",    "common/model",  "common/tokenizer",
                                          "common/measure", "common/cache",  "common/forward",
                                          "common/serving", "common/program"};
constexpr int kFirstChapterRank = 100;
const std::vector<std::string> kTop = {"tests", "bench", "fuzz"};
constexpr int kTopRank = 1000;

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".hpp" || ext == ".cpp" || ext == ".cu" || ext == ".cuh" || ext == ".h";
}

// Files under the covered folders, in a stable order; build output and hidden folders are skipped.
std::vector<fs::path> files(const fs::path& root, bool (*want)(const fs::path&)) {
  std::vector<fs::path> out;
  for (const char* top :
       {"base", "device", "kernels", "common", "chapters", "tests", "bench", "fuzz"}) {
    if (!fs::is_directory(root / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (e.is_regular_file() && want(e.path())) out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string tree_path(const fs::path& root, const fs::path& p) {
  return fs::relative(p, root).generic_string();
}

// One #include "..." line of the tree.
struct Include {
  std::string from;  // the including file's tree path
  int line;          // 1-based
  std::string to;    // the path in the quotes
};

// Every #include "..." of the covered source files, in file and line order.
std::vector<Include> includes_of(const fs::path& root) {
  static const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::vector<Include> out;
  for (const fs::path& file : files(root, is_source)) {
    const std::string from = tree_path(root, file);
    std::istringstream lines(read(file));
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
      ++number;
      std::smatch m;
      if (std::regex_search(line, m, include)) out.push_back({from, number, m[1].str()});
    }
  }
  return out;
}

// CMake commands of a file as (name, arguments), comments removed and quotes dropped.
std::vector<std::pair<std::string, std::vector<std::string>>> cmake_commands(
    const std::string& text) {
  std::string clean;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '"') {
      quoted = !quoted;
      clean += ' ';
      continue;
    }
    if (ch == '#' && !quoted) {
      while (i < text.size() && text[i] != '\n') ++i;
      clean += '\n';
      continue;
    }
    clean += ch;
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  std::size_t i = 0;
  while (i < clean.size()) {
    if (!(std::isalpha(static_cast<unsigned char>(clean[i])) || clean[i] == '_')) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < clean.size() &&
           (std::isalnum(static_cast<unsigned char>(clean[j])) || clean[j] == '_'))
      ++j;
    std::size_t k = j;
    while (k < clean.size() && (clean[k] == ' ' || clean[k] == '\t')) ++k;
    if (k >= clean.size() || clean[k] != '(') {
      i = j;
      continue;
    }
    int depth = 0;
    std::size_t end = k;
    for (; end < clean.size(); ++end) {
      if (clean[end] == '(') ++depth;
      if (clean[end] == ')' && --depth == 0) break;
    }
    std::istringstream args(clean.substr(k + 1, end - k - 1));
    std::vector<std::string> list;
    for (std::string a; args >> a;) list.push_back(a);
    std::string name = clean.substr(i, j - i);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    out.emplace_back(name, list);
    i = end + 1;
  }
  return out;
}

bool is_keyword(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isupper(c) != 0 || c == '_';
  });
}

// The LIBS arguments of a kvheap helper call: the words after LIBS up to the next keyword.
std::vector<std::string> libs_argument(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool in_libs = false;
  for (const std::string& a : args) {
    if (is_keyword(a)) {
      in_libs = a == "LIBS";
      continue;
    }
    if (in_libs) out.push_back(a);
  }
  return out;
}

}  // namespace

std::string folder_of(const std::string& tree_path) {
  const std::size_t slash = tree_path.find('/');
  if (slash == std::string::npos) return "";
  const std::string top = tree_path.substr(0, slash);
  if (top == "chapters") {
    const std::size_t second = tree_path.find('/', slash + 1);
    if (second == std::string::npos) return "";
    return tree_path.substr(0, second);
  }
  if (top == "common") {
    const std::size_t second = tree_path.find('/', slash + 1);
    if (second == std::string::npos) return top;
    const std::string sub = tree_path.substr(0, second);
    return std::find(kLayers.begin(), kLayers.end(), sub) != kLayers.end() ? sub : "";
  }
  if (std::find(kLayers.begin(), kLayers.end(), top) != kLayers.end()) return top;
  if (std::find(kTop.begin(), kTop.end(), top) != kTop.end()) return top;
  return "";
}

int rank_of(const std::string& folder) {
  const auto layer = std::find(kLayers.begin(), kLayers.end(), folder);
  if (layer != kLayers.end()) return static_cast<int>(layer - kLayers.begin());
  if (folder == "common") return static_cast<int>(kLayers.size()) - 1;
  if (std::find(kTop.begin(), kTop.end(), folder) != kTop.end()) return kTopRank;
  static const std::regex chapter(R"(chapters/(\d+)_.*)");
  std::smatch m;
  if (std::regex_match(folder, m, chapter)) return kFirstChapterRank + std::stoi(m[1].str());
  return -1;
}

std::vector<Edge> include_edges(const fs::path& root) {
  std::vector<Edge> out;
  for (const Include& i : includes_of(root)) {
    const std::string from = folder_of(i.from), to = folder_of(i.to);
    if (to.empty() || to == from) continue;
    out.push_back({from, to, i.from + ":" + std::to_string(i.line) + " includes " + i.to});
  }
  return out;
}

std::vector<Edge> link_edges(const fs::path& root) {
  const auto is_cmake = [](const fs::path& p) { return p.filename() == "CMakeLists.txt"; };
  const std::vector<fs::path> lists = files(root, is_cmake);
  // Pass 1: which folder defines each target.
  std::map<std::string, std::string> folder_of_target;
  for (const fs::path& list : lists) {
    const std::string folder = folder_of(tree_path(root, list));
    if (folder.empty()) continue;
    for (const auto& [name, args] : cmake_commands(read(list))) {
      if (args.empty()) continue;
      if (name == "add_library" || name == "add_executable" || name == "kvheap_add_test" ||
          name == "kvheap_add_bench") {
        folder_of_target[args[0]] = folder;
      } else if (name == "kvheap_add_chapter") {
        folder_of_target["ch" + args[0]] = folder;
        folder_of_target["kvheap_ch" + args[0].substr(0, args[0].find('_'))] = folder;
      }
    }
  }
  // Pass 2: the links between targets the tree defines.
  std::vector<Edge> out;
  const auto add = [&](const std::string& list, const std::string& target,
                       const std::vector<std::string>& libs) {
    const auto from = folder_of_target.find(target);
    if (from == folder_of_target.end()) return;
    for (const std::string& lib : libs) {
      const auto to = folder_of_target.find(lib);
      if (to == folder_of_target.end() || to->second == from->second) continue;
      out.push_back({from->second, to->second, list + ": " + target + " links " + lib});
    }
  };
  for (const fs::path& list : lists) {
    const std::string where = tree_path(root, list);
    for (const auto& [name, args] : cmake_commands(read(list))) {
      if (args.empty()) continue;
      if (name == "target_link_libraries") {
        add(where, args[0], std::vector<std::string>(args.begin() + 1, args.end()));
      } else if (name == "kvheap_add_test" || name == "kvheap_add_bench") {
        add(where, args[0], libs_argument(args));
      } else if (name == "kvheap_add_chapter") {
        add(where, "ch" + args[0], libs_argument(args));
      } else if (name == "kvheap_cuda_sources") {
        add(where, args[0], {"kvheap_device"});
      }
    }
  }
  return out;
}

std::vector<Edge> upward(const std::vector<Edge>& edges) {
  std::vector<Edge> out;
  for (const Edge& e : edges)
    if (rank_of(e.to) > rank_of(e.from)) out.push_back(e);
  return out;
}

std::map<std::pair<std::string, std::string>, int> count(const std::vector<Edge>& edges) {
  std::map<std::pair<std::string, std::string>, int> out;
  for (const Edge& e : edges) ++out[{e.from, e.to}];
  return out;
}

std::vector<std::string> chapter_includes_past_their_layers(const fs::path& root) {
  static const std::regex allowed(
      R"re((chapters/.*|base/.*|common/(cache|serving|program)/.*|common/model/model_config\.hpp))re");
  // The one exception, with its reason in the header.
  const std::string oracle = "chapters/01_cpu_reference/reserved_cache.cpp";
  static const std::regex oracle_allowed(
      R"re(kernels/(decode_attention_cpu|kv_write)\.hpp|common/util/host_buffer\.hpp|common/measure/bandwidth\.hpp)re");
  std::vector<std::string> out;
  for (const Include& i : includes_of(root)) {
    if (!i.from.starts_with("chapters/") || std::regex_match(i.to, allowed)) continue;
    if (i.from == oracle && std::regex_match(i.to, oracle_allowed)) continue;
    out.push_back(i.from + ":" + std::to_string(i.line) + " includes " + i.to);
  }
  return out;
}

std::vector<std::string> cpu_headers_in_device_code(const fs::path& root) {
  static const std::regex quoted(R"re(^\s*#\s*include\s*"([^"]+)")re");
  static const std::regex cpu_only(
      R"re(^\s*#\s*include\s*<(Eigen/[^>]+|[a-z]*intrin\.h|omp\.h)>)re");
  const auto is_cu = [](const fs::path& p) { return p.extension() == ".cu"; };
  std::vector<std::string> out;
  for (const fs::path& cu : files(root, is_cu)) {
    // Breadth-first over the project includes, remembering how each file was reached.
    std::map<std::string, std::string> via;  // tree path -> the chain that reached it
    std::vector<std::string> queue = {tree_path(root, cu)};
    via[queue[0]] = queue[0];
    for (std::size_t next = 0; next < queue.size(); ++next) {
      const std::string file = queue[next];
      if (file.ends_with("_simd.hpp")) out.push_back(via[file] + " is a CPU SIMD header");
      std::istringstream lines(read(root / file));
      for (std::string line; std::getline(lines, line);) {
        std::smatch m;
        if (std::regex_search(line, m, cpu_only)) {
          out.push_back(via[file] + " includes <" + m[1].str() + ">");
        } else if (std::regex_search(line, m, quoted) && fs::exists(root / m[1].str()) &&
                   !via.contains(m[1].str())) {
          via[m[1].str()] = via[file] + " -> " + m[1].str();
          queue.push_back(m[1].str());
        }
      }
    }
  }
  return out;
}

}  // namespace kvheap::layers
