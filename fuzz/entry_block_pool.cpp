// The block-pool fuzz target: the input is a program of allocator operations, run against
// chapter 3's BlockManager and checked after every step against a plain model of what each
// sequence should hold.
//
//   byte 0: pool size (1..64 blocks)     byte 1: block size (1..17)     byte 2: free-list shuffle
//   then pairs (op, arg): op % 4 = 0 admit a sequence reserving arg % (4 x block_size + 1) tokens,
//   1 append a token to live sequence arg, 2 free live sequence arg, 3 misuse (free or append to a
//   sequence that is not live, which must be refused with an InputError and change nothing).
//
// Chapter 4's sharing (fork, copy-on-write, prefix reuse) has its own target,
// fuzz/entry_shared_blocks.cpp.
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "base/error.hpp"
#include "chapters/03_paged_blocks/block_manager.hpp"
#include "fuzz/entry_points.hpp"
#include "fuzz/fuzz_support.hpp"

namespace kvheap {

namespace {
using fuzz::require;

// Every live position maps to a distinct physical slot, and the model's lengths hold.
void check_against_model(const ch03::BlockManager& m, const std::map<int, int>& model) {
  m.check_invariants();
  std::set<std::int64_t> slots;
  std::size_t tokens = 0;
  for (auto [seq, len] : model) {
    require(m.is_live(seq) && m.length(seq) == len, "a sequence's length differs from the model");
    for (int p = 0; p < len; ++p)
      require(slots.insert(m.slot_of(seq, p)).second, "two positions share a physical slot");
    tokens += len;
  }
  require(m.tokens_held() == tokens, "tokens_held differs from the model");
  require(m.live_sequences().size() == model.size(), "live sequences differ from the model");
}
}  // namespace

FuzzOutcome fuzz_block_pool(std::span<const std::uint8_t> input, std::string* why) {
  (void)why;  // every input is a valid program: refusals inside it are checked, not returned
  if (input.size() < 3) return FuzzOutcome::Accepted;
  const int num_blocks = 1 + input[0] % 64;
  const int block_size = 1 + input[1] % 17;
  ch03::BlockManager m(num_blocks, block_size, input[2]);
  std::map<int, int> model;                   // live sequence -> length
  std::map<std::int64_t, int> owner_of_slot;  // every held position's slot -> its sequence
  auto pick = [&](std::uint8_t arg) {
    auto it = model.begin();
    std::advance(it, arg % model.size());
    return it;
  };
  for (std::size_t i = 3; i + 1 < input.size(); i += 2) {
    const std::uint8_t op = input[i] % 4, arg = input[i + 1];
    if (op == 0) {
      const int tokens = arg % (4 * block_size + 1);
      if (m.can_allocate(tokens)) {
        const int seq = m.allocate(tokens);
        require(!model.count(seq), "allocate returned a live sequence id");
        model[seq] = 0;
      } else {
        const int free_before = m.pool().num_free();
        bool refused = false;
        try {
          (void)m.allocate(tokens);
        } catch (const ResourceError&) {
          refused = true;
        }
        require(refused && m.pool().num_free() == free_before,
                "a refused admission changed the pool");
      }
    } else if (op == 1 && !model.empty()) {
      auto it = pick(arg);
      if (m.can_append(it->first)) {
        const std::int64_t slot = m.append_slot(it->first);
        require(owner_of_slot.emplace(slot, it->first).second,
                "append_slot handed out a slot another position holds");
        ++it->second;
      } else {
        bool refused = false;
        try {
          (void)m.append_slot(it->first);
        } catch (const ResourceError&) {
          refused = true;
        }
        require(refused, "can_append said no but append_slot went ahead");
      }
    } else if (op == 2 && !model.empty()) {
      auto it = pick(arg);
      m.free(it->first);
      std::erase_if(owner_of_slot, [&](const auto& e) { return e.second == it->first; });
      model.erase(it);
    } else if (op == 3) {
      int dead = arg % 70;
      while (model.count(dead)) ++dead;
      bool refused = false;
      try {
        (arg & 1) ? m.free(dead) : (void)m.append_slot(dead);
      } catch (const InputError&) {
        refused = true;
      }
      require(refused, "an operation on a sequence that is not live was accepted");
    }
    check_against_model(m, model);
  }
  for (auto [seq, len] : model) m.free(seq);
  require(m.pool().num_free() == num_blocks, "blocks leaked once every sequence was freed");
  return FuzzOutcome::Accepted;
}

int fuzz_block_pool_one(const std::uint8_t* data, std::size_t size) {
  (void)fuzz_block_pool({data, size}, nullptr);
  return 0;
}

}  // namespace kvheap
