// Loader for Hugging Face Llama-family model folders: config.json plus safetensors weights, in one
// file (model.safetensors) or sharded (model.safetensors.index.json naming the shard of each
// tensor).
//
// Each file is opened and its header checked by common/model/safetensors_file.hpp. Every tensor is
// widened to fp32 into buffers the returned ModelWeights owns, so the files are unmapped again
// before the function returns.
#pragma once

#include <string>

#include "common/model/safetensors_file.hpp"  // kMaxSafetensorsHeaderBytes
#include "common/model/weights.hpp"

namespace kvheap {

/// \brief Loads a Hugging Face model folder (config.json + F32/F16/BF16 safetensors) as fp32.
///
/// The model is named after the folder. Throws InputError naming the file and tensor for a
/// missing config.json or weight file, a path that is not a regular file, invalid JSON, an absurd
/// header length, an unknown dtype, a missing tensor (with the shape it should have), a shape that
/// does not match config.json,
/// data_offsets that fall outside the file or disagree with shape x dtype size, tensors whose
/// byte ranges overlap or leave gaps or trailing bytes in the data region (the format requires
/// them to cover it exactly), or tensors the model does not use (apart from RoPE inv_freq buffers
/// and a tied checkpoint's lm_head.weight).
[[nodiscard]] ModelWeights load_safetensors(const std::string& dir);

}  // namespace kvheap
