// Serving latencies (common/serving/latency.hpp) on hand-made traces whose answers are known: the
// percentile interpolation, and TTFT, TPOT, inter-token and queueing times of requests whose
// every token time is given.
#include <gtest/gtest.h>

#include <vector>

#include "common/serving/latency.hpp"

namespace kvheap {
namespace {

TEST(Latency, PercentilesInterpolateBetweenTheClosestRanks) {
  const std::vector<double> four = {4, 1, 3, 2};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(percentile(four, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(four, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(four, 90), 3.7);  // rank 2.7: 3 + 0.7 x (4 - 3)
  EXPECT_DOUBLE_EQ(percentile(four, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(four, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  std::vector<double> hundred;
  for (int i = 1; i <= 101; ++i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(hundred, 99), 100);
  const Distribution d = distribution(four);
  EXPECT_EQ(d.count, 4u);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.p90, 3.7);
}

RequestRecord record(double arrival, double admitted, std::vector<double> tokens) {
  RequestRecord r;
  r.arrival_seconds = arrival;
  r.admitted_seconds = admitted;
  r.token_seconds = std::move(tokens);
  r.generated.assign(r.token_seconds.size(), 5);
  if (!r.token_seconds.empty()) r.first_token_seconds = r.token_seconds.front();
  return r;
}

TEST(Latency, TtftTpotItlAndQueueingOfAKnownTrace) {
  ServeResult res;
  // A: arrives at 0, admitted at 0.5, tokens at 1, 2, 4: TTFT 1, TPOT (4 - 1) / 2 = 1.5,
  // gaps 1 and 2, queueing 0.5.
  res.requests.push_back(record(0.0, 0.5, {1.0, 2.0, 4.0}));
  // B: arrives at 1, admitted at 1, one token at 4: TTFT 3, no TPOT, no gap, queueing 0.
  res.requests.push_back(record(1.0, 1.0, {4.0}));
  // C: arrives at 2, admitted at 3, tokens at 3.5 and 4: TTFT 1.5, TPOT 0.5, gap 0.5, queue 1.
  res.requests.push_back(record(2.0, 3.0, {3.5, 4.0}));
  // D: turned away: no admission, no token; it counts in none of them.
  res.requests.push_back(record(2.5, -1, {}));
  // E: its first token was a stop token (nothing generated): it has a TTFT and nothing else.
  RequestRecord e = record(3.0, 3.0, {});
  e.first_token_seconds = 3.25;
  res.requests.push_back(e);

  const Latencies l = latencies(res);
  EXPECT_EQ(l.ttft.count, 4u);
  EXPECT_DOUBLE_EQ(l.ttft.mean, (1.0 + 3.0 + 1.5 + 0.25) / 4);
  EXPECT_DOUBLE_EQ(l.ttft.p50, 1.25);  // sorted 0.25, 1, 1.5, 3
  EXPECT_DOUBLE_EQ(l.ttft.p99, 1.5 + 0.97 * 1.5);
  EXPECT_EQ(l.tpot.count, 2u);
  EXPECT_DOUBLE_EQ(l.tpot.mean, (1.5 + 0.5) / 2);
  EXPECT_EQ(l.itl.count, 3u);  // 1, 2, 0.5
  EXPECT_DOUBLE_EQ(l.itl.p50, 1.0);
  EXPECT_DOUBLE_EQ(l.itl.mean, 3.5 / 3);
  EXPECT_EQ(l.queueing.count, 4u);  // A, B, C, E
  EXPECT_DOUBLE_EQ(l.queueing.mean, (0.5 + 0 + 1 + 0) / 4);
  EXPECT_DOUBLE_EQ(l.queueing.p50, 0.25);
}

}  // namespace
}  // namespace kvheap
