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
#include <fmt/format.h>

#include <memory>

#include "base/error.hpp"
#include "chapters/01_cpu_reference/admission.hpp"
#include "chapters/01_cpu_reference/reserved_cache.hpp"
#include "common/measure/bandwidth.hpp"
#include "common/program/chapter.hpp"

using namespace kvheap;

int main(int argc, char** argv) {
  Chapter chapter;
  chapter.name = "01_cpu_reference";
  chapter.title = "kvheap chapter 1: the CPU reference decoder with max_seq_len reservation";
  chapter.cpu_only = true;
  chapter.one_request_flat = true;
  // The reservation is made in host memory, so a budget the host cannot back is a promise the
  // cache would break mid-run: it is refused before the model is loaded.
  chapter.check_flags = [](const CommonOptions& o) {
    const std::size_t host = physical_memory_bytes();
    if (host == 0)
      throw ResourceError("cannot read this host's physical memory size (sysconf failed)");
    if (o.kv_budget_mb > static_cast<double>(host) / 1e6)
      throw ResourceError(fmt::format(
          "--kv-budget-mb {} asks for more than this host's physical memory ({:.0f} MB)",
          o.kv_budget_mb, static_cast<double>(host) / 1e6));
  };
  chapter.make_policy = [](const Run& run) {
    return std::make_unique<ch01::ReservationAdmission<ch01::ReservedCache>>(
        std::make_unique<ch01::ReservedCache>(run.config, run.kv, run.budget_cap), run.budget_cap);
  };
  return run_chapter(chapter, argc, argv);
}
