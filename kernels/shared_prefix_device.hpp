// A shared-prefix plan's arrays in device memory, owned, and the SharedPrefixView over them: for
// code that calls cuda::shared_prefix_attention outside a cache (tests, benchmarks). The device
// cache uploads the same arrays in its pass's one staged upload instead.
#pragma once

#include <algorithm>
#include <vector>

#include "device/buffers.hpp"
#include "kernels/shared_prefix_attention.hpp"

namespace kvheap {

/// \brief Device copies of SharedPrefixArrays(plan, row_seq, n_ctx) and the view over them.
class DeviceSharedPrefix {
 public:
  /// \brief Builds the arrays of `plan` for a batch whose row i is of sequence row_seq[i] and
  /// attends n_ctx[i] positions, and uploads them.
  DeviceSharedPrefix(const SharedPrefixPlan& plan, const std::vector<int>& row_seq,
                     const std::vector<int>& n_ctx) {
    const SharedPrefixArrays a(plan, row_seq, n_ctx);
    const std::vector<int>* parts[] = {&a.prefix_len, &a.prefix_begin, &a.prefix_seq, &a.group_rows,
                                       &a.group_size, &a.first,        &a.own_ctx,    &a.path_at,
                                       &a.path_group, &a.path_member};
    for (const std::vector<int>* part : parts)  // an empty part still gets a (one-int) buffer
      buffers_.push_back(DeviceBuffer<int>::from_host(part->empty() ? std::vector<int>{0} : *part));
    view_.groups = plan.groups();
    view_.widest = a.widest;
    view_.max_prefix =
        a.prefix_len.empty() ? 0 : *std::max_element(a.prefix_len.begin(), a.prefix_len.end());
    view_.max_own = a.own_ctx.empty() ? 0 : *std::max_element(a.own_ctx.begin(), a.own_ctx.end());
    const int* SharedPrefixView::*fields[] = {
        &SharedPrefixView::prefix_len, &SharedPrefixView::prefix_begin,
        &SharedPrefixView::prefix_seq, &SharedPrefixView::group_rows,
        &SharedPrefixView::group_size, &SharedPrefixView::first,
        &SharedPrefixView::own_ctx,    &SharedPrefixView::path_at,
        &SharedPrefixView::path_group, &SharedPrefixView::path_member};
    for (std::size_t k = 0; k < buffers_.size(); ++k) view_.*fields[k] = buffers_[k].data();
  }

  /// \brief The view cuda::shared_prefix_attention takes (valid while this object lives).
  [[nodiscard]] const SharedPrefixView& view() const { return view_; }

 private:
  std::vector<DeviceBuffer<int>> buffers_;
  SharedPrefixView view_;
};

}  // namespace kvheap
