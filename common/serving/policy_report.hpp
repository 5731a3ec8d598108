// The chapters' own lines of the report, printed from a policy's PolicyStats: chapter 3's pool,
// chapter 4's sharing, chapter 5's scheduler, and what each says of a request.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>

#include "common/serving/policy_stats.hpp"
#include "common/serving/serve.hpp"

namespace kvheap {

/// \brief Prints the malloc_stats-style report of a pool.
void print_pool_stats(const PoolStats& s, std::ostream& os);

/// \brief The pool report as JSON (the "pool" object of --json).
nlohmann::json pool_stats_json(const PoolStats& s);

/// \brief Prints the sections `s` has, after the common report; `bytes_per_token` is the KV of
/// one position, all layers.
void print_policy_stats(const PolicyStats& s, const ServeResult& result,
                        std::size_t bytes_per_token, std::ostream& os);

/// \brief Adds the sections `s` has to the --json object `root` ("pool", "sharing",
/// "scheduler", and their keys of "metrics").
void add_policy_json(const PolicyStats& s, const ServeResult& result, std::size_t bytes_per_token,
                     nlohmann::json& root);

/// \brief Adds what the policy says of a request to its entry of "sequences".
void add_request_json(const RequestStats& r, nlohmann::json& entry);

/// \brief Text after a request's line of the report ("(prompt 0, 6 prompt tokens from the
/// cache)"); empty when the policy says nothing of it.
std::string describe_request(const RequestStats& r);

}  // namespace kvheap
