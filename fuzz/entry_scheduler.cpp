// The scheduler fuzz target: arrivals and steps of chapter 5's Scheduler over chapter 4's
// SharedBlockManager, every planned batch run through shared_view (as a sharing cache's
// prepare() does) onto a stand-in storage that records the token written to every slot.
//
//   byte 0: pool size (1..64 blocks)   byte 1: block size (1..8)   byte 2: rows per step (1..32)
//   byte 3: requests running at most (1..8)
//   then pairs (op, arg): op % 4 = 0 submits a request: the first 1 + arg % (4 x block_size)
//   tokens of one of three prompts that begin alike (arg / 64 picks it), generating up to
//   1 + (op / 4) % 16 tokens; it must be refused (InputError) exactly when it could not fit the
//   whole pool alone. op % 4 = 1..3 runs one step; each logit row "samples" token arg % 3, and
//   the request finishes at its limit or when the step's op has bit 7 set.
//
// After every step: the batch fit the pool (shared_view never ran out), no more rows than
// the budget and no more running requests than the cap, every position of every request with a
// logit row reads back its own token, and the manager's invariants hold. At the end the remaining
// requests are served to completion within a bounded number of steps, and then only the prefix
// index holds blocks.
#include <map>
#include <stdexcept>
#include <vector>

#include "base/error.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "chapters/05_batched_scheduler/scheduler.hpp"
#include "fuzz/entry_points.hpp"
#include "fuzz/fuzz_support.hpp"

namespace kvheap {

namespace {
using fuzz::require;

struct Server {
  ch04::SharedBlockManager m;
  ch05::Scheduler s;
  int block_size, budget, max_running;
  std::vector<int> storage;  // slot -> token written there, -1 if none
  std::map<int, int> limit;  // request -> max_new_tokens
  std::map<int, int> fed;    // request -> tokens sampled so far

  Server(int num_blocks, int bs, int rows, int running)
      : m(num_blocks, bs, 1),
        s(m, {rows, running}),
        block_size(bs),
        budget(rows),
        max_running(running),
        storage(static_cast<std::size_t>(num_blocks) * bs, -1) {}

  /// One step; `token` is what every logit row samples, `stop` finishes them all early.
  void step(int token, bool stop) {
    const StepPlan plan = s.schedule();
    require(plan.batch.size() <= budget, "a batch has more rows than the budget");
    require(s.num_running() <= max_running, "more requests run than the cap allows");
    require(!plan.batch.rows.empty() || s.idle(), "an empty batch while requests wait");
    ch04::SharedView sb;
    try {
      sb = ch04::shared_view(m, plan.batch);
    } catch (const ResourceError& e) {
      require(false, std::string("a planned batch did not fit the pool: ") + e.what());
    }
    for (const ch04::BlockCopy& c : sb.copies)
      for (int k = 0; k < c.slots; ++k)
        storage[static_cast<std::size_t>(c.dst) * block_size + k] =
            storage[static_cast<std::size_t>(c.src) * block_size + k];
    for (std::size_t r = 0; r < plan.batch.rows.size(); ++r)
      storage[sb.view.slot_mapping[r]] = plan.batch.rows[r].token;
    m.check_invariants();
    std::size_t j = 0;
    for (const BatchRow& row : plan.batch.rows) {
      if (!row.wants_logits) continue;
      require(j < plan.logit_requests.size(), "more logit rows than logit requests");
      const int id = plan.logit_requests[j++];
      const std::vector<int>& toks = s.tokens(id);
      require(row.pos + 1 == static_cast<int>(toks.size()), "logits on a row that is not last");
      for (int p = 0; p <= row.pos; ++p)
        require(storage[m.slot_of(row.seq, p)] == toks[p],
                "a request reads a token it did not write there");
      if (++fed[id] == limit[id] || stop) {
        s.finish(id);
      } else {
        s.append(id, token);
      }
    }
    require(j == plan.logit_requests.size(), "fewer logit rows than logit requests");
  }
};
}  // namespace

FuzzOutcome fuzz_scheduler(std::span<const std::uint8_t> input, std::string* why) {
  (void)why;  // every input is a valid program: refusals inside it are checked, not returned
  if (input.size() < 4) return FuzzOutcome::Accepted;
  const int bs = 1 + input[1] % 8;
  Server w(1 + input[0] % 64, bs, 1 + input[2] % 32, 1 + input[3] % 8);
  std::vector<std::vector<int>> prompts(3, std::vector<int>(4 * bs));
  for (int p = 0; p < 3; ++p)
    for (int t = 0; t < 4 * bs; ++t)
      prompts[p][t] = t < (p + 1) * bs / 2 ? t % 3 : (t * (p + 2)) % 3;
  for (std::size_t i = 4; i + 1 < input.size(); i += 2) {
    const std::uint8_t op = input[i], arg = input[i + 1];
    if (op % 4 == 0) {
      const std::vector<int>& base = prompts[(arg / 64) % 3];
      const std::vector<int> prompt(base.begin(), base.begin() + 1 + arg % (4 * bs));
      const int max_new = 1 + (op / 4) % 16;
      const bool fits =
          w.m.blocks_for(static_cast<long>(prompt.size()) + max_new - 1) <= w.m.pool().num_blocks();
      try {
        const int id = w.s.submit(prompt, max_new);
        require(fits, "a request that cannot fit the pool alone was accepted");
        w.limit[id] = max_new;
      } catch (const InputError&) {
        require(!fits, "a request that fits the pool alone was refused");
      }
    } else if (!w.s.idle()) {
      w.step(arg % 3, (op & 0x80) != 0);
    }
  }
  for (int steps = 0; !w.s.idle(); ++steps) {
    require(steps < 100000, "the scheduler made no progress");
    w.step(0, false);
  }
  w.m.check_invariants();
  require(w.m.pool().num_used() == static_cast<int>(w.m.index().size()),
          "blocks other than cached ones are in use once every request finished");
  return FuzzOutcome::Accepted;
}

int fuzz_scheduler_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_scheduler({data, size}, nullptr);
  return 0;
}

}  // namespace kvheap
