/*! \file
    \brief ch01_cpu_reference: a Llama-family decoder on the CPU, serving requests with the
    naive max_seq_len reservation.

    What is new in this chapter:
      1. the decoder itself, batch-first (common/forward/forward_cpu.cpp), and the CPU twin of the
         attention kernel every later chapter reads its cache through;
      2. ReservedCache: each admitted request reserves max_seq_len positions, and the report
         shows how much of that reservation holds no token;
      3. static batches: requests are admitted while a reservation fits the KV budget.

    Sample command:
      build/cpu/bin/ch01_cpu_reference --model stories15m --num-seqs 4 --max-new-tokens 64
*/
#include <memory>
#include <utility>

#include "chapters/01_cpu_reference/admission.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "common/program/chapter.hpp"
#include "common/serving/static_batches.hpp"

using namespace kvheap;

int main(int argc, char** argv) {
  Chapter chapter;
  chapter.name = "01_cpu_reference";
  chapter.title = "kvheap chapter 1: the CPU reference decoder with max_seq_len reservation";
  chapter.cpu_only = true;
  chapter.one_request_flat = true;
  chapter.kv_in_host_memory = true;  // reservations are made in host memory as requests come
  chapter.make_policy = [](const Run& run) {
    auto cache = std::make_unique<ch01::ReservedCache>(run.config, run.kv, run.budget_cap);
    return std::make_unique<StaticBatches>(
        std::make_unique<ch01::ReservationAdmission<ch01::ReservedCache>>(std::move(cache),
                                                                          run.budget_cap));
  };
  return run_chapter(chapter, argc, argv);
}
