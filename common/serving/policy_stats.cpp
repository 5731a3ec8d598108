#include "common/serving/policy_stats.hpp"

namespace kvheap {

KvOccupancy held_of_budget(std::size_t held, std::size_t budget) {
  return {held, 0, budget > held ? budget - held : 0};
}

double PoolStats::tail_waste() const {
  return slots_held > 0 ? 1.0 - static_cast<double>(tokens) / static_cast<double>(slots_held) : 0.0;
}

double PoolStats::reservation_waste() const {
  return reservation_slots > 0
             ? 1.0 - static_cast<double>(tokens) / static_cast<double>(reservation_slots)
             : 0.0;
}

}  // namespace kvheap
