// A picture of the pool: who owns which block, and how full it is (--pool-map).
#pragma once

#include <string>

#include "chapters/03_paged_blocks/block_manager.hpp"

namespace kvheap::ch03 {

/// \brief Writes an SVG map of the pool: one cell per block in physical order, coloured by the
/// sequence that owns it and filled to the share of its slots in use; free blocks are grey.
void write_pool_map(const BlockManager& m, const std::string& path, const std::string& title);

}  // namespace kvheap::ch03
