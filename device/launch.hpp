// kvheap::launch: the one way kvheap launches a kernel, in .cu files only.
//
//   __global__ void scale(float* x, float s, int n);              // in some .cu file
//   kvheap::launch<scale>(dim3(blocks), dim3(256), 0, stream, x, 2.0f, n);
//
// Under nvcc it is the triple-chevron launch followed by cudaGetLastError (and, with
// KVHEAP_CUDA_SYNC=1, a stream synchronisation so asynchronous faults are pinned on the kernel
// that caused them). In the simulator it runs the grid on the CPU before returning. Either way a
// failure throws kvheap::LaunchError naming the kernel: "kernel block_sum<256> failed: ...".
// The kernel is a template argument so its name is known at compile time in both builds.
#pragma once

#include <cstddef>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "base/error.hpp"
#include "device/cuda_compat.hpp"
#include "device/device.hpp"

#if defined(KVHEAP_SIM)
#include <array>

#include "device/sim/sim.hpp"
#endif

namespace kvheap {

namespace detail {

/// \brief An empty tag carrying a kernel's parameter types, so launch_impl can deduce them.
template <class... P>
struct KernelParams {};

/// \brief Extracts the parameter types of a kernel's function-pointer type `F`.
template <class F>
struct KernelTraits;
/// \brief KernelTraits for a kernel `void(P...)`.
template <class... P>
struct KernelTraits<void (*)(P...)> {
  using Params = KernelParams<P...>;  ///< the kernel's parameter types, as a KernelParams tag
};
/// \brief KernelTraits for a kernel `void(P...) noexcept`.
template <class... P>
struct KernelTraits<void (*)(P...) noexcept> {
  using Params = KernelParams<P...>;  ///< the kernel's parameter types, as a KernelParams tag
};

/// \brief The kernel's name as the compiler spells the template argument: "block_sum<256>".
template <auto Kernel>
constexpr std::string_view kernel_name() {
  // GCC: "... [with auto Kernel = block_sum<256>; std::string_view = ...]"
  // Clang: "... [Kernel = &block_sum<256>]"
  std::string_view p = __PRETTY_FUNCTION__;
  const std::size_t start = p.find("Kernel = ");
  if (start == std::string_view::npos) return p;
  p.remove_prefix(start + 9);
  if (!p.empty() && p.front() == '&') p.remove_prefix(1);
  const std::size_t end = p.find_first_of(";]");
  return p.substr(0, end);
}

/// \brief Converts an argument to its parameter type as a call would (implicitly).
template <class P>
P pass(std::type_identity_t<P> value) {
  return value;
}

/// \brief The body of kvheap::launch, with the kernel's parameter types `P` deduced from the tag.
template <auto Kernel, class... P, class... Args>
void launch_impl(KernelParams<P...>, dim3 grid, dim3 block, std::size_t smem_bytes,
                 cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(P) == sizeof...(Args),
                "kvheap::launch: wrong number of kernel arguments");
  static_assert((!std::is_reference_v<P> && ...), "kernel parameters are passed by value");
  static_assert((std::is_trivially_copyable_v<P> && ...),
                "kernel parameters must be trivially copyable");
  constexpr std::string_view name = kernel_name<Kernel>();
#if defined(KVHEAP_SIM)
  using Tuple = std::tuple<std::remove_cv_t<P>...>;
  const Tuple params(pass<P>(std::forward<Args>(args))...);
  // Pointer parameters, so the simulator can refuse host pointers before anything runs.
  std::array<sim::PointerArg, sizeof...(P) + 1> pointers{};
  std::size_t n_pointers = 0;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    auto note = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      if constexpr (std::is_pointer_v<std::tuple_element_t<J, Tuple>>) {
        pointers[n_pointers++] =
            sim::PointerArg{static_cast<int>(J), static_cast<const void*>(std::get<J>(params)),
                            std::is_const_v<std::remove_pointer_t<std::tuple_element_t<J, Tuple>>>};
      }
    };
    (note(std::integral_constant<std::size_t, I>{}), ...);
  }
  (std::index_sequence_for<P...>{});
  const std::string readable = readable_kernel_name(name);  // for the fault handler's messages
  sim::LaunchSpec spec;
  spec.kernel_name = readable;
  spec.kernel = reinterpret_cast<const void*>(Kernel);
  spec.grid = grid;
  spec.block = block;
  spec.dynamic_smem_bytes = smem_bytes;
  spec.stream = stream;
  spec.run_thread = [](const void* packed) {
    std::apply(Kernel, *static_cast<const Tuple*>(packed));
  };
  spec.args = &params;
  spec.pointer_args = std::span<const sim::PointerArg>(pointers.data(), n_pointers);
  const cudaError_t launched = sim::launch_kernel(spec);
  // Read as nvcc's path below reads it: this launch's error, else one an earlier call left unread.
  const cudaError_t last = cudaGetLastError();
  if (launched != cudaSuccess) {
    throw LaunchError(launch_failure(name, launched, sim::last_error_detail()));
  }
  if (last != cudaSuccess) {
    throw LaunchError(launch_failure(name, last, "an earlier runtime call's error, left unread"));
  }
#else
  Kernel<<<grid, block, smem_bytes, stream>>>(pass<P>(std::forward<Args>(args))...);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    throw LaunchError(launch_failure(name, e, "launch refused"));
  }
  if (sync_after_launch()) {
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
      throw LaunchError(launch_failure(name, e, "while running (KVHEAP_CUDA_SYNC=1)"));
    }
  }
#endif
}

}  // namespace detail

/// \brief Launches `Kernel` on `grid` x `block` threads with `smem_bytes` of dynamic shared
/// memory on `stream`; arguments convert to the kernel's parameter types as in a call.
/// Throws LaunchError naming the kernel when the launch (or, in the simulator, the run) fails.
template <auto Kernel, class... Args>
void launch(dim3 grid, dim3 block, std::size_t smem_bytes, cudaStream_t stream, Args&&... args) {
  using Traits = detail::KernelTraits<std::remove_cv_t<decltype(Kernel)>>;
  detail::launch_impl<Kernel>(typename Traits::Params{}, grid, block, smem_bytes, stream,
                              std::forward<Args>(args)...);
}

/// \brief Lets `Kernel` use `smem_bytes` of dynamic shared memory: above 48 KiB a GPU needs the
/// kernel's opt-in attribute, whose value must not change afterwards, so each kernel (every
/// template instance its own) asks for one size, the first time this is called on each device
/// (the attribute belongs to the device's context). Throws ResourceError when the device refuses
/// the size.
template <auto Kernel>
void allow_dynamic_smem(std::size_t smem_bytes) {
  static std::mutex mutex;
  static std::set<int> devices;  // where the attribute is set
  int device = 0;
  KVHEAP_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard lock(mutex);
  if (devices.contains(device)) return;
  KVHEAP_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(Kernel),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes)));
  devices.insert(device);
}

/// \brief Blocks of `Kernel` that one SM of the current device holds at once, at `threads` per
/// block and `smem_bytes` of dynamic shared memory (cudaOccupancyMaxActiveBlocksPerMultiprocessor).
/// In the simulator the same limits of an sm_90 apply, with registers unknown and taken at the
/// most a thread may have (device/sim/runtime.cpp). Throws ResourceError on failure.
template <auto Kernel>
int max_active_blocks(int threads, std::size_t smem_bytes) {
  int blocks = 0;
  KVHEAP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, reinterpret_cast<const void*>(Kernel), threads, smem_bytes));
  return blocks;
}

}  // namespace kvheap
