// Loading the committed tokenizer test data.
#include "tests/support/tokenizer_data.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/tokenizer/tiktoken_file.hpp"
#include "common/tokenizer/tokenizer_json.hpp"
#include "tests/support/source_tree.hpp"

namespace kvheap::test {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read the test data file " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

std::string tokenizer_data(const std::string& name) {
  return (source_dir() / "tests" / "data" / "tokenizers" / name).string();
}

const nlohmann::json& tokenizer_reference() {
  static const nlohmann::json ref =
      nlohmann::json::parse(read_text(tokenizer_data("reference.json")));
  return ref;
}

std::string reference_case_text(const std::string& name) {
  const std::string hex = tokenizer_reference().at("cases").at(name).get<std::string>();
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string reference_tokenizer_json(const std::string& name) {
  const bool sentencepiece = name == "mistral" || name == "metaspace";
  const std::string base = read_text(
      tokenizer_data(sentencepiece ? "mistral_subset.tokenizer.json" : "qwen16k.tokenizer.json"));
  if (name == "qwen2" || name == "mistral") return base;
  nlohmann::json j = nlohmann::json::parse(base);
  const nlohmann::json overlay =
      nlohmann::json::parse(read_text(tokenizer_data(name + ".overlay.json")));
  for (const auto& [key, value] : overlay.items()) {
    if (key == "model") {
      for (const auto& [k, v] : value.items()) j["model"][k] = v;
    } else {
      j[key] = value;
    }
  }
  return j.dump();
}

std::unique_ptr<BpeTokenizer> reference_tokenizer(const std::string& name) {
  if (name == "llama3_tiktoken") return load_tiktoken(tokenizer_data("qwen16k.tiktoken"));
  return std::make_unique<BpeTokenizer>(
      parse_tokenizer_json(reference_tokenizer_json(name), name + ".tokenizer.json"));
}

}  // namespace kvheap::test
