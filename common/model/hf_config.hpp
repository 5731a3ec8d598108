// Reading a Hugging Face config.json into a ModelConfig (Llama, Mistral, Qwen2 and Qwen3 families),
// and the stop tokens of a model folder (generation_config.json before config.json).
//
// Split from the safetensors loader because the config decides everything the weights are checked
// against: a wrong head count here would turn into a confusing shape error there.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/model/model_config.hpp"

namespace kvheap {

/// \brief Converts a parsed config.json into a validated ModelConfig named `name`.
///
/// Reads hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
/// num_key_value_heads (default: num_attention_heads), head_dim (default: hidden_size /
/// num_attention_heads; 128 for model_type "qwen3", as transformers' Qwen3Config), vocab_size,
/// max_position_embeddings, rope_theta (default 10000), rms_norm_eps (default 1e-6),
/// tie_word_embeddings (default false), bos_token_id (default 1), eos_token_id (an id or a list;
/// default 2), attention_bias (default: true for model_type "qwen2"), rope_scaling (absent, null,
/// "default" or "llama3"), and rope_parameters (transformers 5's form of rope_theta and the
/// scaling, which wins over the other two). model_type "qwen3" sets qk_norm. RoPE rotates halves,
/// as Hugging Face checkpoints expect. `where` names the file in error messages. Throws InputError
/// naming the key for a missing or mistyped field, a number that overflows or underflows a 32-bit
/// float, an unsupported model_type, hidden_act or rope_scaling type, a partial_rotary_factor
/// other than 1, a rope_theta that disagrees with rope_parameters, a sliding_window smaller than
/// max_position_embeddings (unless use_sliding_window is false, or absent for Qwen), or a shape
/// that fails ModelConfig::validate().
[[nodiscard]] ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& name,
                                          const std::string& where);

/// \brief Reads `dir`/config.json and parses it with parse_hf_config, naming the model after the
/// folder; stop_ids then come from load_hf_stop_ids' rule. Throws InputError when config.json is
/// missing, or when it or generation_config.json is not a regular file (a directory, FIFO or
/// device), is larger than 16 MiB, or is not a valid JSON object.
[[nodiscard]] ModelConfig load_hf_config(const std::string& dir);

/// \brief The token ids that end generation for the Hugging Face model folder `dir`.
///
/// "eos_token_id" (an id or a list) of `dir`/generation_config.json when the file exists and sets
/// it, since transformers generates with that file's settings in preference to config.json's;
/// otherwise config.json's (default 2). Qwen3-0.6B is the case in point: config.json names
/// 151645 (<|im_end|>), generation_config.json [151645, 151643] (<|endoftext|> too). Throws
/// InputError as load_hf_config does, and for an id outside config.json's vocabulary.
[[nodiscard]] std::vector<int> load_hf_stop_ids(const std::string& dir);

}  // namespace kvheap
