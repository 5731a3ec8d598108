#include "common/model_loader.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "base/error.hpp"
#include "common/file_checks.hpp"
#include "common/llama2c_loader.hpp"
#include "common/safetensors_loader.hpp"
#include "common/synthetic_weights.hpp"

namespace kvheap {

ModelWeights load_model(const std::string& spec, std::uint64_t seed) {
  if (is_preset(spec)) return make_synthetic_weights(preset(spec), seed);
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(spec, ec);
  if (fs::is_directory(st)) return load_safetensors(spec);
  if (fs::is_regular_file(st)) return load_llama2c(spec);
  // Something exists there but is neither: say what, rather than "not an existing file".
  if (fs::exists(st))
    require_regular_file(spec, "--model",
                         "a preset name, a llama2.c .bin file or a safetensors folder");
  throw InputError(fmt::format(
      "--model '{}' is neither a preset ({}) nor an existing llama2.c .bin file nor a safetensors "
      "folder",
      spec, fmt::join(preset_names(), ", ")));
}

}  // namespace kvheap
