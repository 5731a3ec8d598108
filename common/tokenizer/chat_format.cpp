// The four chat formats, written out as docs/pages/chat_formats.md states them.
#include "common/tokenizer/chat_format.hpp"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/error.hpp"
#include "common/util/file_checks.hpp"
#include "common/model/gguf_file.hpp"
#include "common/model/gguf_loader.hpp"

namespace kvheap {

namespace {

constexpr std::array<ChatFormat, 5> kFormats = {ChatFormat::Llama3, ChatFormat::Qwen2,
                                                ChatFormat::Qwen3, ChatFormat::Mistral,
                                                ChatFormat::ChatML};

std::string known_names() {
  std::string s;
  for (const ChatFormat f : kFormats)
    s += (s.empty() ? "" : ", ") + std::string(chat_format_name(f));
  return s;
}

// The special tokens each format writes; the last one ends the assistant's turn.
std::vector<std::string_view> specials_of(ChatFormat f) {
  switch (f) {
    case ChatFormat::Llama3:
      return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatFormat::Qwen2: return {"<|im_start|>", "<|im_end|>"};
    case ChatFormat::Qwen3: return {"<|im_start|>", "<think>", "</think>", "<|im_end|>"};
    case ChatFormat::Mistral: return {"<s>", "</s>"};
    case ChatFormat::ChatML: return {"<|im_start|>", "<|im_end|>"};
  }
  return {};
}

// Jinja's trim: the white space Python's str.strip() removes, for ASCII text.
std::string_view trim(std::string_view s) {
  const std::size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1);
}

// model_type from the folder's config.json, or "" when `model` is not such a folder.
std::string model_type_of(const std::string& model) {
  std::error_code ec;
  const std::filesystem::path config = std::filesystem::path(model) / "config.json";
  if (!std::filesystem::is_directory(model, ec) || !std::filesystem::exists(config, ec)) return "";
  const std::string text =
      read_regular_file(config.string(), "model config", "a Hugging Face config.json", 16 << 20);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  const auto it = j.find("model_type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "llama";
}

}  // namespace

std::string_view chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::Llama3: return "llama3";
    case ChatFormat::Qwen2: return "qwen2";
    case ChatFormat::Qwen3: return "qwen3";
    case ChatFormat::Mistral: return "mistral";
    case ChatFormat::ChatML: return "chatml";
  }
  return "?";
}

ChatFormat parse_chat_format(std::string_view name) {
  for (const ChatFormat f : kFormats)
    if (chat_format_name(f) == name) return f;
  throw UsageError(
      fmt::format("--chat-format {:?} is not a chat format kvheap knows; expected "
                  "one of {}",
                  name, known_names()));
}

ChatFormat detect_chat_format(const std::string& model, const Tokenizer& tok) {
  const std::string type = model_type_of(model);
  if (type == "qwen2") return ChatFormat::Qwen2;
  if (type == "qwen3") return ChatFormat::Qwen3;
  if (type == "mistral") return ChatFormat::Mistral;
  if (type == "llama" && tok.special_id("<|start_header_id|>") >= 0 &&
      tok.special_id("<|eot_id|>") >= 0)
    return ChatFormat::Llama3;
  const std::string what =
      type.empty()
          ? fmt::format("model '{}' is not a Hugging Face folder with a config.json", model)
          : fmt::format("model_type '{}' of '{}' with {} has none", type, model, tok.describe());
  throw InputError(fmt::format(
      "--chat: no known chat format fits: {}. kvheap knows {} (docs/pages/chat_formats.md) and "
      "does not interpret a chat_template; give --chat-format, or the prompt text with --prompt",
      what, known_names()));
}

std::optional<ChatSetup> chat_setup_of_template(std::string_view t) {
  const auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>")) return ChatSetup{ChatFormat::Llama3, ""};
  if (has("[INST]") && has("[/INST]")) return ChatSetup{ChatFormat::Mistral, ""};
  if (!has("<|im_start|>") || !has("<|im_end|>")) return std::nullopt;
  if (has("<think>")) return ChatSetup{ChatFormat::Qwen3, ""};
  if (has("You are Qwen, created by Alibaba Cloud.")) return ChatSetup{ChatFormat::Qwen2, ""};
  // A system message written as a literal, "<|im_start|>system\n...<|im_end|>", is the one the
  // template inserts when the conversation has none; one built from a message's content has
  // Jinja between the two markers instead.
  ChatSetup setup{ChatFormat::ChatML, ""};
  for (const std::string_view open :
       {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    const std::size_t at = t.find(open);
    if (at == std::string_view::npos) continue;
    const std::size_t begin = at + open.size();
    const std::size_t end = t.find("<|im_end|>", begin);
    if (end == std::string_view::npos) continue;
    const std::string_view body = t.substr(begin, end - begin);
    if (body.find_first_of("'\"{}+") != std::string_view::npos) continue;
    std::string text;
    for (std::size_t i = 0; i < body.size(); ++i) {  // Jinja's \n escape inside a literal
      if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == 'n') {
        text += '\n';
        ++i;
      } else {
        text += body[i];
      }
    }
    setup.default_system = text;
    break;
  }
  return setup;
}

ChatSetup detect_chat_setup(const std::string& model, const Tokenizer& tok) {
  if (!is_gguf_file(model)) return {detect_chat_format(model, tok), ""};
  const std::string chat_template = GgufFile(model).string_or("tokenizer.chat_template");
  if (chat_template.empty())
    throw InputError(fmt::format(
        "--chat: GGUF file '{}' has no tokenizer.chat_template; give --chat-format ({}), or the "
        "prompt text with --prompt",
        model, known_names()));
  std::optional<ChatSetup> setup = chat_setup_of_template(chat_template);
  if (!setup)
    throw InputError(fmt::format(
        "--chat: the tokenizer.chat_template of GGUF file '{}' is none of the formats kvheap "
        "writes ({}; docs/pages/chat_formats.md), and kvheap does not interpret Jinja; give "
        "--chat-format, or the prompt text with --prompt",
        model, known_names()));
  return *setup;
}

std::string chat_prompt(ChatFormat f, std::string_view system, std::string_view message) {
  const bool has_system = !system.empty();
  switch (f) {
    case ChatFormat::Llama3: {
      std::string s = "<|begin_of_text|>";
      if (has_system)
        s +=
            fmt::format("<|start_header_id|>system<|end_header_id|>\n\n{}<|eot_id|>", trim(system));
      return s + fmt::format(
                     "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n",
                     trim(message));
    }
    case ChatFormat::Qwen2:
      return fmt::format(
          "<|im_start|>system\n{}<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>"
          "assistant\n",
          has_system ? system
                     : "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
          message);
    case ChatFormat::Qwen3: {
      std::string s;
      if (has_system) s = fmt::format("<|im_start|>system\n{}<|im_end|>\n", system);
      return s + fmt::format(
                     "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
                     "<think>\n\n</think>\n\n",
                     message);
    }
    case ChatFormat::Mistral:
      return has_system ? fmt::format("<s>[INST] {}\n\n{} [/INST]", system, message)
                        : fmt::format("<s>[INST] {} [/INST]", message);
    case ChatFormat::ChatML: {
      std::string s;
      if (has_system) s = fmt::format("<|im_start|>system\n{}<|im_end|>\n", system);
      return s + fmt::format("<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", message);
    }
  }
  return "";
}

int chat_end_of_turn(ChatFormat f, const Tokenizer& tok) {
  int id = -1;
  for (const std::string_view special : specials_of(f)) {
    id = tok.special_id(special);
    if (id < 0)
      throw InputError(
          fmt::format("--chat: the {} chat format writes the token {}, which {} does "
                      "not have; the tokenizer is of another family",
                      chat_format_name(f), special, tok.describe()));
  }
  return id;
}

}  // namespace kvheap
