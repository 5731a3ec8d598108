// Telling the tokenizer formats apart by their content, and finding them in a model folder.
#include "common/tokenizer/tokenizer_files.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"
#include "common/tokenizer/llama2c_tokenizer.hpp"
#include "common/tokenizer/tiktoken_file.hpp"
#include "common/model/gguf_loader.hpp"
#include "common/tokenizer/gguf_tokenizer.hpp"
#include "common/tokenizer/tokenizer_json.hpp"

namespace kvheap {

namespace {

namespace fs = std::filesystem;

constexpr const char* kExpected =
    "a llama2.c tokenizer.bin, a tokenizer.json, a tiktoken file or a GGUF file";

// The first bytes of a regular file, enough to tell the formats apart.
std::string head_of(const std::string& path) {
  const RegularFile file(path, "tokenizer", kExpected);
  std::string head(std::min<std::uint64_t>(file.size(), 512), '\0');
  std::size_t got = 0;
  while (got < head.size()) {
    const ssize_t n =
        ::pread(file.fd(), head.data() + got, head.size() - got, static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  head.resize(got);
  return head;
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

/// Most embedding rows a checkpoint pads past its tokenizer's ids.
constexpr int kMaxPaddingIds = 1024;

}  // namespace

std::string find_tokenizer_file(const std::string& dir) {
  const fs::path root(dir);
  if (is_file(root / "tokenizer.json")) return (root / "tokenizer.json").string();
  std::string sentencepiece;
  for (const fs::path& p : {root / "original" / "tokenizer.model", root / "tokenizer.model"}) {
    if (!is_file(p)) continue;
    if (looks_like_tiktoken(head_of(p.string()))) return p.string();
    sentencepiece = p.string();
  }
  if (!sentencepiece.empty())
    throw InputError(fmt::format(
        "model folder '{}' holds '{}', a SentencePiece model, which kvheap does not read; it "
        "reads the tokenizer.json that Hugging Face folders ship beside it",
        dir, sentencepiece));
  return "";
}

std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path, int model_rows) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = find_tokenizer_file(path);
    if (file.empty())
      throw InputError(
          fmt::format("tokenizer folder '{}' holds no tokenizer.json and no tiktoken "
                      "tokenizer.model (nor original/tokenizer.model); expected a "
                      "model folder or {}",
                      path, kExpected));
  }
  const std::string head = head_of(file);
  // A UTF-8 byte-order mark may open a JSON file; a .json name says JSON whatever follows, so
  // that a broken one is answered by the JSON reader, not read as llama2.c's binary format.
  const std::size_t bom = head.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  const std::size_t first = head.find_first_not_of(" \t\r\n", bom);
  std::unique_ptr<Tokenizer> tok;
  if (head.rfind("GGUF", 0) == 0) {
    tok = load_gguf_tokenizer(file);
  } else if (fs::path(file).extension() == ".json" ||
             (first != std::string::npos && head[first] == '{')) {
    tok = load_tokenizer_json(file);
  } else if (looks_like_tiktoken(head)) {
    tok = load_tiktoken(file);
  } else {  // llama2.c's binary format, whose own checks name what is wrong with it
    return std::make_unique<Llama2cTokenizer>(Llama2cTokenizer::load(file, model_rows));
  }
  if (tok->vocab_size() > model_rows)
    throw InputError(fmt::format(
        "{} can produce token ids up to {}, but the model's embedding has {} rows (vocab_size); "
        "the tokenizer belongs to a different model",
        tok->describe(), tok->vocab_size() - 1, model_rows));
  // Fewer ids than rows is padding (Qwen pads 151,669 ids to 151,936 rows); a gap of a thousand
  // ids or an eighth of the rows is another model's tokenizer, refused before it writes text.
  const int missing = model_rows - tok->vocab_size();
  if (missing >= kMaxPaddingIds || missing * 8 >= model_rows)
    throw InputError(fmt::format(
        "{} has {} token ids, but the model's embedding has {} rows (vocab_size): {} ids would "
        "have no text, more than padding explains (under {} and under an eighth of the rows); "
        "the tokenizer belongs to a different model; pass the model's own with --tokenizer",
        tok->describe(), tok->vocab_size(), model_rows, missing, kMaxPaddingIds));
  return tok;
}

std::unique_ptr<Tokenizer> model_folder_tokenizer(const std::string& model, int model_rows) {
  if (is_gguf_file(model))  // a GGUF file may carry no tokenizer: then there is none
    return GgufFile(model).find("tokenizer.ggml.model") == nullptr
               ? nullptr
               : load_tokenizer_file(model, model_rows);
  std::error_code ec;
  if (!fs::is_directory(model, ec)) return nullptr;
  const std::string file = find_tokenizer_file(model);
  return file.empty() ? nullptr : load_tokenizer_file(file, model_rows);
}

}  // namespace kvheap
