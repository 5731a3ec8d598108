// Chat prompts: a message (and a system message) wrapped in the chat format of the model's
// family, for --chat. docs/pages/chat_formats.md states each format exactly, with its source;
// Jinja chat_template files are not interpreted.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/tokenizer/tokenizer.hpp"

namespace kvheap {

/// \brief The chat formats kvheap knows.
enum class ChatFormat {
  Llama3,   ///< Meta-Llama-3-Instruct's header tokens
  Qwen2,    ///< ChatML with Qwen2.5's default system message
  Qwen3,    ///< ChatML with an empty think block (thinking off)
  Mistral,  ///< mistral-common's v1 [INST] format
  ChatML,   ///< plain ChatML: a system turn only when there is a system message (SmolLM2)
};

/// \brief A chat format and the system message a model's template writes when the user gives
/// none ("" for no system turn; Qwen2's own default is part of its format).
struct ChatSetup {
  ChatFormat format = ChatFormat::ChatML;  ///< how a conversation is written
  std::string default_system;              ///< the template's system message, if any
};

/// \brief "llama3", "qwen2", "qwen3", "mistral" or "chatml".
[[nodiscard]] std::string_view chat_format_name(ChatFormat f);

/// \brief The format named `name`; throws UsageError listing the known names for another.
[[nodiscard]] ChatFormat parse_chat_format(std::string_view name);

/// \brief The format of model `model` (a Hugging Face folder: its config.json's model_type) with
/// tokenizer `tok`: qwen2, qwen3 and mistral by model_type, llama3 for model_type llama when the
/// tokenizer has Llama 3's header tokens. Throws InputError naming the model_type and the known
/// formats when none fits (Llama 2, TinyLlama, a preset or a llama2.c file), and saying that a
/// chat_template is not interpreted.
[[nodiscard]] ChatFormat detect_chat_format(const std::string& model, const Tokenizer& tok);

/// \brief The chat setup of `model`: a GGUF file's by its tokenizer.chat_template, recognised
/// without interpreting it (Llama 3's header tokens; ChatML, as Qwen2.5's with its default system
/// message, Qwen3's with its think block, or plain with the system message a template writes
/// when the conversation has none; Mistral's [INST]); anything else as detect_chat_format.
/// Throws InputError naming the file for a GGUF template it does not recognise, or none.
[[nodiscard]] ChatSetup detect_chat_setup(const std::string& model, const Tokenizer& tok);

/// \brief The chat setup a GGUF chat_template (the text of the key) describes, or nullopt when
/// it is none that kvheap writes.
[[nodiscard]] std::optional<ChatSetup> chat_setup_of_template(std::string_view chat_template);

/// \brief The prompt text of format `f` for `message`, after `system` when it is not empty.
[[nodiscard]] std::string chat_prompt(ChatFormat f, std::string_view system,
                                      std::string_view message);

/// \brief Id of the token that ends an assistant turn in format `f` (<|eot_id|>, <|im_end|>,
/// </s>). Throws InputError when `tok` lacks it or any other special token the format writes.
[[nodiscard]] int chat_end_of_turn(ChatFormat f, const Tokenizer& tok);

}  // namespace kvheap
