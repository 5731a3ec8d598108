// gemm() in the simulator, with Eigen on the CPU (KVHEAP_CUDA=sim).
//
// Half-precision operands are widened to float first, which is exact; the products and their
// fp32 sums then follow Eigen's order, which differs from cuBLAS's only by rounding.
#include <Eigen/Core>

#include <algorithm>
#include <string>
#include <vector>

#include "device/device.hpp"
#include "device/gemm.hpp"
#include "device/sim/counters.hpp"
#include "device/sim/sim.hpp"

namespace kvheap {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::size_t element_bytes(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

void check_operand(const char* name, const void* p, std::size_t bytes) {
  const std::size_t room = sim::bytes_available(p);
  if (sim::classify_pointer(p) != sim::PointerKind::Device || room < bytes) {
    throw InputError("gemm: " + std::string(name) + " must be device memory of at least " +
                     std::to_string(bytes) + " bytes; it has " + std::to_string(room));
  }
}

// The operand as a float matrix (a copy, widened when it is half precision).
RowMatrix widen(DType dtype, const void* p, int rows, int cols) {
  RowMatrix out(rows, cols);
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  float* dst = out.data();
  if (dtype == DType::F32) {
    const auto* src = static_cast<const float*>(p);
    std::copy(src, src + count, dst);
  } else if (dtype == DType::F16) {
    const auto* src = static_cast<const __half*>(p);
    for (std::size_t i = 0; i < count; ++i) dst[i] = __half2float(src[i]);
  } else {
    const auto* src = static_cast<const __nv_bfloat16*>(p);
    for (std::size_t i = 0; i < count; ++i) dst[i] = __bfloat162float(src[i]);
  }
  return out;
}

}  // namespace

BlasHandle::BlasHandle() = default;
BlasHandle::~BlasHandle() = default;

void gemm(BlasHandle& /*blas*/, DType dtype, const void* a, const void* b, float* c,
          GemmShape shape, cudaStream_t stream) {
  detail::check_gemm_shape(shape);
  const auto [m, n, k] = shape;
  if (m == 0 || n == 0) return;
  const auto mm = static_cast<std::size_t>(m);
  const auto nn = static_cast<std::size_t>(n);
  const auto kk = static_cast<std::size_t>(k);
  check_operand("C", c, mm * nn * sizeof(float));
  if (k > 0) {
    check_operand("A", a, mm * kk * element_bytes(dtype));
    check_operand("B", b, nn * kk * element_bytes(dtype));
  }
  KVHEAP_CUDA_CHECK(cudaStreamQuery(stream));  // rejects a dead stream, as cuBLAS would
  sim::detail::count(sim::detail::Count::Launch);
  // This host code plays the device's part, so it may touch device memory.
  sim::ScopedDeviceAccess access;
  Eigen::Map<RowMatrix> out(c, m, n);
  if (k == 0) {
    out.setZero();
    return;
  }
  const RowMatrix ma = widen(dtype, a, m, k);
  const RowMatrix mb = widen(dtype, b, n, k);
  out.noalias() = ma * mb.transpose();
}

}  // namespace kvheap
