// The shared-blocks fuzz target: a program of allocator operations run against chapter 4's
// SharedBlockManager, with a stand-in storage that records the token written to every slot and
// makes every copy-on-write the manager asks for.
//
//   byte 0: pool size (1..64 blocks)     byte 1: block size (1..9)     byte 2: free-list shuffle
//   then pairs (op, arg): op % 6 = 0 admit the first arg % (4 x block_size + 1) tokens of one of
//   three prompts that begin alike (arg / 64 picks it), prefilling what the index does not hold;
//   1 fork live sequence arg; 2 append token arg % 3 to live sequence arg / 3; 3 free live
//   sequence arg; 4 one batch (shared_view) appending to the first arg % 4 + 1 live
//   sequences, all or nothing; 5 misuse (fork, free or append to a sequence that is not live, or
//   a batch row that rewrites a held position), which must be refused with an InputError and
//   change nothing.
//
// After every step each live sequence's every position must read back its own token through its
// page table, the manager's invariants must hold, and at the end only the prefix index may hold
// blocks.
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "chapters/04_cow_prefix_sharing/shared_block_manager.hpp"
#include "chapters/04_cow_prefix_sharing/shared_cache.hpp"
#include "fuzz/entry_points.hpp"
#include "fuzz/fuzz_support.hpp"

namespace kvheap {

namespace {
using fuzz::require;

/// The manager, the storage stand-in and the expected tokens of every live sequence.
struct World {
  ch04::SharedBlockManager m;
  int block_size;
  std::vector<int> storage;             // slot -> token written there, -1 if none
  std::map<int, std::vector<int>> seq;  // live sequence -> its tokens

  World(int num_blocks, int bs, std::uint8_t shuffle)
      : m(num_blocks, bs, shuffle),
        block_size(bs),
        storage(static_cast<std::size_t>(num_blocks) * bs, -1) {}

  /// Makes the copies the manager asked for, as a cache does before a batch's writes.
  void copy() {
    for (const ch04::BlockCopy& c : m.take_copies())
      for (int i = 0; i < c.slots; ++i)
        storage[static_cast<std::size_t>(c.dst) * block_size + i] =
            storage[static_cast<std::size_t>(c.src) * block_size + i];
  }
  void append(int s, int token) {
    const std::int64_t slot = m.append_slot(s, token);
    copy();
    storage[slot] = token;
    seq[s].push_back(token);
  }
  void check() const {
    m.check_invariants();
    for (const auto& [s, tokens] : seq) {
      require(m.is_live(s) && m.tokens(s) == tokens, "a sequence's tokens differ from the model");
      for (int p = 0; p < static_cast<int>(tokens.size()); ++p)
        require(storage[m.slot_of(s, p)] == tokens[p],
                "a position reads a token its sequence did not write there");
      // Every full block it holds can be found again from its tokens, whoever computed it first
      // and whatever was evicted since (a twin inherits an evicted block's index entry).
      std::vector<int> next = tokens;
      next.push_back(0);
      require(m.cached_blocks(next) == static_cast<long>(tokens.size()) / block_size,
              "a full block a live sequence holds cannot be found from its tokens");
    }
    require(m.live_sequences().size() == seq.size(), "live sequences differ from the model");
  }
  int pick(std::uint8_t arg) const {
    auto it = seq.begin();
    std::advance(it, arg % seq.size());
    return it->first;
  }
  template <class F>
  void expect_refused(F&& f, const char* what) {
    const int used = m.pool().num_used();
    bool refused = false;
    try {
      f();
    } catch (const InputError&) {
      refused = true;
    }
    require(refused, std::string(what) + " was accepted");
    require(m.pool().num_used() == used, std::string(what) + " changed the pool");
  }
};
}  // namespace

FuzzOutcome fuzz_shared_blocks(std::span<const std::uint8_t> input, std::string* why) {
  (void)why;  // every input is a valid program: refusals inside it are checked, not returned
  if (input.size() < 3) return FuzzOutcome::Accepted;
  const int num_blocks = 1 + input[0] % 64;
  const int bs = 1 + input[1] % 9;
  World w(num_blocks, bs, input[2]);
  // Three prompts over a three-token alphabet that share their first block or two.
  std::vector<std::vector<int>> prompts(3, std::vector<int>(4 * bs));
  for (int p = 0; p < 3; ++p)
    for (int t = 0; t < 4 * bs; ++t)
      prompts[p][t] = t < (p + 1) * bs / 2 ? t % 3 : (t * (p + 2)) % 3;
  for (std::size_t i = 3; i + 1 < input.size(); i += 2) {
    const std::uint8_t op = input[i] % 6, arg = input[i + 1];
    if (op == 0) {
      const std::vector<int>& base = prompts[(arg / 64) % 3];
      const std::vector<int> prompt(base.begin(), base.begin() + arg % (4 * bs + 1));
      const long cached = w.m.cached_blocks(prompt);
      const int s = w.m.allocate(prompt);
      require(w.m.length(s) == cached * bs, "allocate took other than the cached blocks");
      w.seq[s].assign(prompt.begin(), prompt.begin() + cached * bs);
      for (std::size_t t = cached * bs; t < prompt.size() && w.m.can_append(s); ++t)
        w.append(s, prompt[t]);
    } else if (op == 1 && !w.seq.empty()) {
      const int parent = w.pick(arg);
      const int child = w.m.fork(parent);
      require(!w.seq.count(child), "fork returned a live sequence id");
      w.seq[child] = w.seq[parent];
    } else if (op == 2 && !w.seq.empty()) {
      const int s = w.pick(arg / 3);
      if (w.m.can_append(s)) {
        w.append(s, arg % 3);
      } else {
        bool refused = false;
        try {
          (void)w.m.append_slot(s, arg % 3);
        } catch (const ResourceError&) {
          refused = true;
        }
        require(refused, "can_append said no but append_slot went ahead");
      }
    } else if (op == 3 && !w.seq.empty()) {
      const int s = w.pick(arg);
      w.m.free(s);
      w.seq.erase(s);
    } else if (op == 4 && !w.seq.empty()) {
      Batch b;
      int rows = arg % 4 + 1;
      for (const auto& [s, tokens] : w.seq) {
        if (rows-- == 0) break;
        b.rows.push_back({static_cast<int>(arg % 3), s, static_cast<int>(tokens.size()), true});
      }
      const int used = w.m.pool().num_used();
      try {
        const ch04::SharedView sb = ch04::shared_view(w.m, b);
        for (const ch04::BlockCopy& c : sb.copies)
          for (int k = 0; k < c.slots; ++k)
            w.storage[static_cast<std::size_t>(c.dst) * bs + k] =
                w.storage[static_cast<std::size_t>(c.src) * bs + k];
        for (std::size_t r = 0; r < b.rows.size(); ++r) {
          w.storage[sb.view.slot_mapping[r]] = b.rows[r].token;
          w.seq[b.rows[r].seq].push_back(b.rows[r].token);
        }
      } catch (const ResourceError&) {
        require(w.m.pool().num_used() == used, "a refused batch changed the pool");
      }
    } else if (op == 5) {
      int dead = arg % 70;
      while (w.seq.count(dead)) ++dead;
      switch (arg % 4) {
        case 0: w.expect_refused([&] { (void)w.m.fork(dead); }, "forking a dead sequence"); break;
        case 1: w.expect_refused([&] { w.m.free(dead); }, "freeing a dead sequence"); break;
        case 2:
          w.expect_refused([&] { (void)w.m.append_slot(dead, 0); }, "appending to a dead sequence");
          break;
        default:
          if (!w.seq.empty() && !w.seq.begin()->second.empty()) {
            Batch b;
            b.rows.push_back({0, w.seq.begin()->first, 0, true});  // position 0 is held
            w.expect_refused([&] { (void)ch04::shared_view(w.m, b); },
                             "a batch rewriting a held position");
          }
      }
    }
    w.check();
  }
  for (const auto& [s, tokens] : w.seq) w.m.free(s);
  w.m.check_invariants();
  require(w.m.pool().num_used() == static_cast<int>(w.m.index().size()),
          "blocks other than cached ones are in use once every sequence was freed");
  return FuzzOutcome::Accepted;
}

int fuzz_shared_blocks_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_shared_blocks({data, size}, nullptr);
  return 0;
}

}  // namespace kvheap
