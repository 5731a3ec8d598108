// fuzz_make_seeds: writes the seed corpus of every fuzz target (fuzz/corpus/<target>/), small
// valid inputs made with the same checkpoint writers the loader tests use, plus a few broken
// ones. Seeds named valid_* must be accepted; tests/common/test_fuzz_regressions.cpp checks that.
//
//   build/<preset>/fuzz/fuzz_make_seeds fuzz/corpus
#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz/entry_points.hpp"
#include "fuzz/fuzz_support.hpp"
#include "tests/support/checkpoint_writers.hpp"
#include "tests/support/gguf_writer.hpp"
#include "tests/support/source_tree.hpp"

namespace fs = std::filesystem;
using namespace kvheap;

namespace {

fs::path g_out;
fs::path g_tmp;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_out / target);
  test::write_bytes((g_out / target / name).string(), bytes);
}

std::string join(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts)
    out += (out.empty() ? "" : std::string(kFuzzPartSeparator)) + p;
  return out;
}

// The smallest shape that still has grouped-query attention: 1 layer, 2 query heads over 1 KV
// head, head_dim 4, vocabulary 8. It matches the fixed config.json of fuzz_safetensors.
ModelConfig tiny(bool tied) {
  ModelConfig c = preset("tiny");
  c.name = "seed";
  c.dim = 8;
  c.hidden_dim = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.vocab_size = 8;
  c.max_seq_len = 4;
  c.tied_embeddings = tied;
  return c;
}

void llama2c_seeds() {
  const std::string path = (g_tmp / "m.bin").string();
  for (int version : {0, 1}) {
    for (bool tied : {true, false}) {
      test::write_llama2c(test::random_weights(tiny(tied), 7), path, version);
      const std::string bytes = test::read_bytes(path);
      const std::string kind = fmt::format("v{}_{}", version, tied ? "tied" : "untied");
      seed("fuzz_llama2c_loader", "valid_" + kind + ".bin", bytes);
      if (tied) {
        seed("fuzz_llama2c_loader", "truncated_" + kind + ".bin",
             bytes.substr(0, bytes.size() / 2));
        seed("fuzz_llama2c_loader", "trailing_" + kind + ".bin", bytes + std::string(4, '\0'));
      }
    }
  }
}

// One safetensors folder as fuzz_safetensors reads it: config.json, separator, model.safetensors.
std::string folder_input(const ModelConfig& c, DType dtype, bool with_index = false) {
  const ModelWeights w = test::random_weights(c, 11);
  const fs::path dir = g_tmp / "hf";
  fs::remove_all(dir);
  test::write_safetensors(w, dir.string(), dtype);
  const std::string config = test::read_bytes((dir / "config.json").string());
  const std::string st = test::read_bytes((dir / "model.safetensors").string());
  if (!with_index) return join({config, st});
  nlohmann::json map = nlohmann::json::object();
  for (const test::NamedTensor& t : test::hf_tensors(w)) map[t.name] = "model.safetensors";
  return join({config, st, nlohmann::json{{"weight_map", map}}.dump()});
}

void safetensors_seeds() {
  ModelConfig hf = tiny(true);
  hf.rope_style = RopeStyle::Halves;
  hf.stop_ids = {2};
  const std::string with_config = folder_input(hf, DType::F32);
  // Without a separator the input is only model.safetensors, next to the fixed config.json.
  seed("fuzz_safetensors", "valid_weights_only.safetensors",
       with_config.substr(with_config.find(kFuzzPartSeparator) + kFuzzPartSeparator.size()));
  seed("fuzz_safetensors", "valid_f32.folder", with_config);
  seed("fuzz_safetensors", "valid_f16.folder", folder_input(hf, DType::F16));
  ModelConfig untied = hf;
  untied.tied_embeddings = false;
  seed("fuzz_safetensors", "valid_bf16_untied.folder", folder_input(untied, DType::BF16));
  ModelConfig qwen = hf;
  qwen.attention_bias = true;
  seed("fuzz_safetensors", "valid_qwen2_biases.folder", folder_input(qwen, DType::F32));
  ModelConfig qwen3 = hf;
  qwen3.qk_norm = true;  // per-head q_norm/k_norm gains, model_type "qwen3"
  seed("fuzz_safetensors", "valid_qwen3_qk_norm.folder", folder_input(qwen3, DType::BF16));
  ModelConfig llama3 = hf;
  llama3.rope_scaling = {true, 8.0f, 1.0f, 4.0f, 2};
  seed("fuzz_safetensors", "valid_llama3_rope_scaling.folder", folder_input(llama3, DType::BF16));
  seed("fuzz_safetensors", "valid_index.folder", folder_input(hf, DType::F32, true));
  static constexpr char kLong[] = "\xff\xff\0\0\0\0\0\0{}";  // 65535-byte header, 2 present
  seed("fuzz_safetensors", "header_too_long.safetensors", std::string(kLong, sizeof kLong - 1));
}

void gguf_seeds() {
  seed("fuzz_gguf", "valid_tiny_llama.gguf", test::tiny_model_gguf().bytes());
  // Every tensor type, quantized blocks next to their values (tests/data/gguf/quants.gguf).
  seed("fuzz_gguf", "every_tensor_type.gguf",  // architecture kvheap-quant-test: refused
       test::read_bytes((test::source_dir() / "tests" / "data" / "gguf" / "quants.gguf").string()));
  test::GgufWriter spm;
  spm.string("tokenizer.ggml.model", "llama");
  spm.strings("tokenizer.ggml.tokens",
              {"<unk>", "<s>", "</s>", "<0x41>", "\u2581", "a", "b", "\u2581a", "ab"});
  spm.f32s("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2, -3, -0.5f, -0.25f});
  spm.i32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1, 1, 1, 1});
  seed("fuzz_gguf", "valid_spm_vocab.gguf", spm.bytes());
  test::GgufWriter qwen = test::tiny_model_gguf();
  qwen.string("tokenizer.ggml.pre", "qwen2");  // a repeated key: refused
  seed("fuzz_gguf", "repeated_key.gguf", qwen.bytes());
  seed("fuzz_gguf", "version_1.gguf", test::tiny_model_gguf().bytes(1));
}

void tokenizer_seeds() {
  const std::string story = "Once upon a time, there was a little girl. She was happy.";
  // Selector byte 1 loads the vocabulary with exactly the records it holds.
  seed("fuzz_tokenizer", "valid_builtin_vocab.tok",
       join({"\x01" + fuzz::builtin_vocab_bytes(), story}));
  seed("fuzz_tokenizer", "valid_story.txt", story);
  seed("fuzz_tokenizer", "valid_utf8.txt",
       "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82 ok");
  static constexpr char kBroken[] = "\xC3(\xE6\x97 \xFF\x80 \xF0\x9F\0x";
  seed("fuzz_tokenizer", "valid_invalid_utf8.bin", std::string(kBroken, sizeof kBroken - 1));
  // A vocabulary without byte tokens: encoding anything outside it is an error, not a crash.
  std::string small(4, '\0');
  for (const char* p : {"<unk>", "\n<s>\n", "\n</s>\n", " ", "a", "b", "ab", " ab"}) {
    const float score = -1.0f;
    const auto len = static_cast<std::int32_t>(std::string(p).size());
    small.append(reinterpret_cast<const char*>(&score), 4);
    small.append(reinterpret_cast<const char*>(&len), 4);
    small.append(p);
  }
  seed("fuzz_tokenizer", "valid_no_byte_tokens.tok", join({"\x01" + small, "abab ab"}));
  seed("fuzz_tokenizer", "missing_byte_token.tok", join({"\x01" + small, "abc"}));
  seed("fuzz_tokenizer", "one_token_short.tok", join({std::string(1, '\0') + small, "ab"}));
}

std::string data_file(const std::string& name) {
  return test::read_bytes((test::source_dir() / "tests" / "data" / "tokenizers" / name).string());
}

// The BPE readers' seeds: small valid files cut from the committed test vocabularies, texts, and
// a few broken files. The whole files are too large to mutate quickly.
void bpe_seeds() {
  const std::string text =
      "Hello, world! It's 2024: caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD <|im_end|>";
  // tiktoken: the 256 byte ranks and the first merges of Qwen's vocabulary.
  const std::string tiktoken = data_file("qwen16k.tiktoken");
  std::size_t cut = 0;
  for (int line = 0; line < 400; ++line) cut = tiktoken.find('\n', cut) + 1;
  const std::string small = tiktoken.substr(0, cut);
  seed("fuzz_tiktoken", "valid_qwen400.tiktoken", join({small, text}));
  seed("fuzz_tiktoken", "valid_specials.tiktoken",
       join({small, "<|begin_of_text|>hi<|eot_id|><|start_header_id|>x"}));
  seed("fuzz_tiktoken", "duplicate_rank.tiktoken", "IQ== 0\nIg== 0\n");
  seed("fuzz_tiktoken", "missing_bytes.tiktoken", join({"IQ== 0\n", "!!"}));
  // tokenizer.json: the same 400 tokens, byte-level, and Mistral's first pieces,
  // SentencePiece-style.
  nlohmann::json qwen = nlohmann::json::parse(data_file("qwen16k.tokenizer.json"));
  nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
  for (const auto& [token, id] : qwen["model"]["vocab"].items())
    if (id.get<int>() < 400) vocab[token] = id;
  for (const nlohmann::json& m : qwen["model"]["merges"])
    if (vocab.contains(m[0].get<std::string>()) && vocab.contains(m[1].get<std::string>()) &&
        vocab.contains(m[0].get<std::string>() + m[1].get<std::string>()))
      merges.push_back(m);
  qwen["model"]["vocab"] = vocab;
  qwen["model"]["merges"] = merges;
  for (nlohmann::json& t : qwen["added_tokens"]) t["id"] = t["id"].get<int>() - 16384 + 400;
  seed("fuzz_tokenizer_json", "valid_qwen400.json", join({qwen.dump(), text}));
  nlohmann::json mistral = nlohmann::json::parse(data_file("mistral_subset.tokenizer.json"));
  nlohmann::json sp_vocab = nlohmann::json::object(), sp_merges = nlohmann::json::array();
  for (const auto& [token, id] : mistral["model"]["vocab"].items())
    if (id.get<int>() < 400) sp_vocab[token] = id;
  for (const nlohmann::json& m : mistral["model"]["merges"])
    if (sp_vocab.contains(m[0].get<std::string>()) && sp_vocab.contains(m[1].get<std::string>()) &&
        sp_vocab.contains(m[0].get<std::string>() + m[1].get<std::string>()))
      sp_merges.push_back(m);
  mistral["model"]["vocab"] = sp_vocab;
  mistral["model"]["merges"] = sp_merges;
  seed("fuzz_tokenizer_json", "valid_mistral400.json",
       join({mistral.dump(), "<s>[INST] " + text + " [/INST]"}));
  nlohmann::json broken = qwen;
  broken["model"]["merges"].push_back({"a", "no-such-token"});
  seed("fuzz_tokenizer_json", "merge_of_missing_token.json", broken.dump());
  broken = qwen;
  broken["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?<=a+)b";
  seed("fuzz_tokenizer_json", "invalid_regex.json", broken.dump());
  seed("fuzz_tokenizer_json", "not_json.json", "{\"model\": {\"type\": \"BPE\", ");
  // Encoding with the full test vocabularies: the reference cases' texts.
  const nlohmann::json ref = nlohmann::json::parse(data_file("reference.json"));
  for (const auto& [name, hex] : ref["cases"].items()) {
    std::string bytes;
    const std::string h = hex.get<std::string>();
    for (std::size_t i = 0; i + 1 < h.size(); i += 2)
      bytes += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
    seed("fuzz_bpe_encode", "valid_" + name + ".txt", bytes);
  }
}

void cli_seeds() {
  seed("fuzz_cli", "valid_prompt_ids.args", "--prompt-ids\n1, 5,9\n--max-new-tokens\n8\n--json");
  seed("fuzz_cli", "valid_prompt_text.args",
       "--tokenizer\ntokenizer.bin\n--prompt\nOnce upon a time\n--temperature\n0.8\n--top-p\n0.9");
  seed("fuzz_cli", "valid_all_flags.args",
       "--model\nstories15m\n--seed\n7\n--model-seed\n3\n--device\ncpu\n--kv-dtype\nbf16\n"
       "--kv-budget-mb\n12.5\n--threads\n1\n--ignore-eos\n--max-new-tokens=4\n--prompt-ids=1");
  seed("fuzz_cli", "valid_defaults.args", "");
  seed("fuzz_cli", "unknown_flag.args", "--frobnicate");
  seed("fuzz_cli", "malformed_number.args", "--max-new-tokens\nten");
  seed("fuzz_cli", "past_context.args", "--prompt-ids\n1,2,3\n--max-new-tokens\n95");
  seed("fuzz_cli", "prompt_without_tokenizer.args", "--prompt\nhello");
  seed("fuzz_cli", "chat_without_tokenizer.args", "--chat\nhello\n--system\nbe brief");
  seed("fuzz_cli", "system_without_chat.args", "--system\nbe brief");
}

void workload_seeds() {
  seed("fuzz_workload", "valid_seconds.jsonl",
       "{\"prompt_ids\":[1,5,9],\"max_new_tokens\":4,\"arrival_s\":0.25}\n\n"
       "{\"prompt\":\"hello there\",\"stop_ids\":[2],\"arrival_s\":0.5}\n{\"prompt_ids\":[1]}\n");
  seed("fuzz_workload", "valid_steps.jsonl",
       "{\"prompt_ids\":[1,2],\"arrival_step\":0}\n"
       "{\"prompt_ids\":[1,3],\"max_new_tokens\":0,\"arrival_step\":4}\n");
  seed("fuzz_workload", "mixed_arrivals.jsonl",
       "{\"prompt_ids\":[1],\"arrival_s\":1}\n{\"prompt_ids\":[1],\"arrival_step\":2}\n");
  seed("fuzz_workload", "past_context.jsonl", "{\"prompt_ids\":[1,2,3],\"max_new_tokens\":95}\n");
  seed("fuzz_workload", "unknown_field.jsonl", "{\"prompt_ids\":[1],\"max_new_token\":3}\n");
  seed("fuzz_workload", "not_an_object.jsonl", "[1,2,3]\n{\"prompt_ids\":");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds <corpus folder, e.g. fuzz/corpus>\n";
    return 2;
  }
  g_out = argv[1];
  g_tmp = fs::temp_directory_path() / fmt::format("kvheap-seeds-{}", ::getpid());
  fs::create_directories(g_tmp);
  llama2c_seeds();
  safetensors_seeds();
  gguf_seeds();
  tokenizer_seeds();
  bpe_seeds();
  cli_seeds();
  workload_seeds();
  fs::remove_all(g_tmp);
  std::cout << "seeds written under " << g_out.string() << "\n";
  return 0;
}
