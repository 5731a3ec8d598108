// The chapter pages: every chapter's README.md has the template's sections, in order, and its
// "The code to read" lists every source of the chapter's folder with a line count that is true
// within 10 %.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/model/model_config.hpp"
#include "tests/support/source_tree.hpp"

namespace kvheap {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSections = {
    "Why",     "The picture", "Data structures", "The code to read", "Correctness checkpoint",
    "Results", "Run it"};

std::vector<fs::path> chapter_folders() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(test::source_dir() / "chapters"))
    if (e.is_directory()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

long line_count(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::count(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>(), '\n');
}

/// The lines of the section whose heading starts with "## <name>".
std::vector<std::string> section(const std::vector<std::string>& page, const std::string& name) {
  std::vector<std::string> out;
  bool in = false;
  for (const std::string& line : page) {
    if (line.rfind("## ", 0) == 0)
      in = line.rfind("## " + name, 0) == 0;
    else if (in)
      out.push_back(line);
  }
  return out;
}

TEST(Docs, EveryChapterPageHasTheTemplatesSectionsInOrder) {
  ASSERT_GE(chapter_folders().size(), 5u);
  for (const fs::path& folder : chapter_folders()) {
    const std::vector<std::string> page = lines_of(folder / "README.md");
    ASSERT_FALSE(page.empty()) << folder << " has no README.md";
    std::size_t next = 0;
    for (const std::string& line : page)
      if (next < kSections.size() && line.rfind("## " + kSections[next], 0) == 0) ++next;
    EXPECT_EQ(next, kSections.size()) << folder.filename() << "/README.md lacks '## "
                                      << kSections[std::min(next, kSections.size() - 1)]
                                      << "' (or has it out of order); the sections are Why, The "
                                         "picture, Data structures, The code "
                                         "to read, Correctness checkpoint, Results, Run it";
  }
}

TEST(Docs, ChapterOneNamesEveryPreset) {
  std::string page;
  for (const std::string& line :
       lines_of(test::source_dir() / "chapters" / "01_cpu_reference" / "README.md"))
    page += line + "\n";
  for (const std::string& name : preset_names())
    EXPECT_NE(page.find("`" + name + "`"), std::string::npos)
        << "chapters/01_cpu_reference/README.md does not name the preset " << name;
}

TEST(Docs, CodeToReadListsEveryChapterSourceWithATrueLineCount) {
  const fs::path root = test::source_dir();
  // "`chapters/03_paged_blocks/block_pool.cpp` (89 lines)", or a path inside the chapter's folder.
  const std::regex entry(R"re(`([A-Za-z0-9_./]+\.(?:cpp|hpp|cu|cuh))`[^`(]*\((\d+)\s+lines\))re");
  for (const fs::path& folder : chapter_folders()) {
    const std::string chapter = "chapters/" + folder.filename().string() + "/";
    std::vector<std::string> listed;
    // The section as one line: an entry's "(N lines)" may wrap onto the next line of the page.
    std::string text;
    for (const std::string& line : section(lines_of(folder / "README.md"), "The code to read"))
      text += line + " ";
    {
      const std::string& line = text;
      for (auto it = std::sregex_iterator(line.begin(), line.end(), entry);
           it != std::sregex_iterator(); ++it) {
        std::string path = (*it)[1].str();
        if (path.find('/') == std::string::npos) path = chapter + path;
        const long claimed = std::stol((*it)[2].str());
        ASSERT_TRUE(fs::is_regular_file(root / path))
            << chapter << "README.md lists " << path << ", which does not exist";
        const long actual = line_count(root / path);
        EXPECT_EQ(actual, claimed) << chapter << "README.md says " << path << " has " << claimed
                                   << " lines; it has " << actual;
        listed.push_back(path);
      }
    }
    for (const auto& e : fs::directory_iterator(folder)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh") continue;
      const std::string path = chapter + e.path().filename().string();
      EXPECT_NE(std::find(listed.begin(), listed.end(), path), listed.end())
          << chapter << "README.md's 'The code to read' does not list " << path;
    }
  }
}

}  // namespace
}  // namespace kvheap
