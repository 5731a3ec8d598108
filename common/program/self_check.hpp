// --self-check: a chapter's run on the tiny model, every request's greedy ids compared with the
// reference forward pass (full recomputation without a cache), teacher-forced along the chapter's
// own tokens. run_chapter() runs it; this is what it checks against.
#pragma once

#include <iosfwd>
#include <vector>

#include "base/dtype.hpp"
#include "common/model/weights.hpp"
#include "common/program/cli.hpp"
#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief Greedy tokens each self-check request generates.
inline constexpr int kSelfCheckTokens = 12;

/// \brief The self-check's prompts: of the tiny model's vocabulary, beginning alike (so that a
/// sharing cache shares) and of different lengths (so that blocks fill unevenly).
[[nodiscard]] const std::vector<std::vector<int>>& self_check_prompts();

/// \brief The shared flags the self-check runs with: the tiny model, kSelfCheckTokens greedy
/// tokens that ignore EOS, and no peak measurement (a chapter then sets its own, to exercise its
/// idea).
void set_self_check_flags(CommonOptions& o);

/// \brief Compares every request's greedy ids with the reference forward pass; prints one line
/// per request and the disposition to `os`. True when every token agrees, up to a reported near
/// tie (the threshold of the `wt` weights and `kv` cache).
bool verify_against_reference(const ModelWeights& w, const std::vector<Request>& requests,
                              const ServeResult& res, DType wt, DType kv, std::ostream& os);

}  // namespace kvheap
