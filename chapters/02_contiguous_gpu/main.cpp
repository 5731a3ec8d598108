/*! \file
    \brief ch02_contiguous_gpu: chapter 1's reservation as one contiguous array, on the GPU (or
    on the CPU twins with --device cpu), with the bytes each decode step moves against a peak
    measured at start.

    What is new in this chapter:
      1. the decode attention kernel, grouped-query aware with split-K (kernels/decode_attention.*),
         and the forward pass on the device (common/forward/cuda/forward_gpu.cpp);
      2. ContiguousCache: every reservation made up front, as a GPU server does when it starts;
      3. the achieved bandwidth against the device's copy peak: decoding is a bandwidth problem.

    Sample command:
      build/sim/bin/ch02_contiguous_gpu --device cuda --model tiny --num-seqs 2 --max-new-tokens 32
*/
#include <algorithm>
#include <memory>
#include <utility>

#include "chapters/01_cpu_reference/admission.hpp"
#include "chapters/02_contiguous_gpu/contiguous_cache.hpp"
#include "common/program/chapter.hpp"
#include "common/serving/static_batches.hpp"

using namespace kvheap;

int main(int argc, char** argv) {
  Chapter chapter;
  chapter.name = "02_contiguous_gpu";
  chapter.title = "kvheap chapter 2: the contiguous per-sequence cache on the GPU";
  chapter.default_device = "auto";
  chapter.one_request_flat = true;
  chapter.make_policy = [](const Run& run) {
    // One reservation per request, or as many as the budget holds: a static batch never uses more.
    const int requests = static_cast<int>(run.requests.size());
    const int slots =
        run.budget_cap > 0
            ? std::min(ch02::ContiguousCache::slots_for_budget(run.config, run.kv, run.budget_cap),
                       requests)
            : requests;
    auto cache =
        std::make_unique<ch02::ContiguousCache>(run.config, run.kv, slots, run.backend.memory());
    const std::size_t budget = run.budget_cap > 0 ? run.budget_cap : cache->bytes_reserved();
    return std::make_unique<StaticBatches>(
        std::make_unique<ch01::ReservationAdmission<ch02::ContiguousCache>>(std::move(cache),
                                                                            budget));
  };
  return run_chapter(chapter, argc, argv);
}
