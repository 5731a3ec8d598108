#include "common/model/gguf_quants.hpp"

#include <array>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "base/error.hpp"
#include "base/half.hpp"

// Every product here multiplies a half-precision scale (11 significant bits) by integers whose
// bits add up to at most 13 (Q6_K: a 7-bit scale and a 6-bit value): 24 bits or fewer, exact in
// fp32. Only the final add of a minimum rounds, once, whether or not the compiler fuses it, so
// the results are the reference's bits (tests/common/test_gguf.cpp).

namespace kvheap {

namespace {

constexpr int kQK = 32;    // values in a block of the 32-value types
constexpr int kQKK = 256;  // values in a K-quant super-block

/// ggml's type names by id; "" where no type ever had the id.
constexpr std::array<std::string_view, 43> kTypeNames = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",    "NVFP4",    "Q1_0",
    "Q2_0"};

float half_at(const std::byte* p) {
  std::uint16_t h = 0;
  std::memcpy(&h, p, sizeof h);
  return fp16_to_float(h);
}

auto u8(const std::byte* p) { return static_cast<std::uint8_t>(*p); }

// The 6-bit scale and minimum of sub-block j of a Q4_K/Q5_K super-block, from its 12 packed bytes.
void scale_min_k4(int j, const std::byte* s, int& sc, int& m) {
  if (j < 4) {
    sc = u8(s + j) & 63;
    m = u8(s + j + 4) & 63;
  } else {
    sc = (u8(s + j + 4) & 0xF) | ((u8(s + j - 4) >> 6) << 4);
    m = (u8(s + j + 4) >> 4) | ((u8(s + j) >> 6) << 4);
  }
}

// Each block: [d: f16][qs: 16 bytes], value = d * (nibble - 8); low nibbles first.
void q4_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q = u8(b + 2 + j);
    y[j] = d * static_cast<float>((q & 0xF) - 8);
    y[j + kQK / 2] = d * static_cast<float>((q >> 4) - 8);
  }
}

// [d][m][qs: 16], value = d * nibble + m.
void q4_1(const std::byte* b, float* y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q = u8(b + 4 + j);
    y[j] = d * static_cast<float>(q & 0xF) + m;
    y[j + kQK / 2] = d * static_cast<float>(q >> 4) + m;
  }
}

// The fifth bits of a Q5 block: bit i of the little-endian 32-bit word belongs to value i.
std::uint32_t high_bits(const std::byte* p) {
  return static_cast<std::uint32_t>(u8(p)) | static_cast<std::uint32_t>(u8(p + 1)) << 8 |
         static_cast<std::uint32_t>(u8(p + 2)) << 16 | static_cast<std::uint32_t>(u8(p + 3)) << 24;
}

// [d][qh: 4][qs: 16], value = d * (5-bit value - 16).
void q5_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  const std::uint32_t qh = high_bits(b + 2);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q = u8(b + 6 + j);
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int h1 = static_cast<int>((qh >> (j + kQK / 2)) & 1u) << 4;
    y[j] = d * static_cast<float>(((q & 0xF) | h0) - 16);
    y[j + kQK / 2] = d * static_cast<float>(((q >> 4) | h1) - 16);
  }
}

// [d][m][qh: 4][qs: 16], value = d * 5-bit value + m.
void q5_1(const std::byte* b, float* y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  const std::uint32_t qh = high_bits(b + 4);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q = u8(b + 8 + j);
    const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
    const int h1 = static_cast<int>((qh >> (j + kQK / 2)) & 1u) << 4;
    y[j] = d * static_cast<float>((q & 0xF) | h0) + m;
    y[j + kQK / 2] = d * static_cast<float>((q >> 4) | h1) + m;
  }
}

// [d][qs: 32 int8], value = q * d.
void q8_0(const std::byte* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < kQK; ++j)
    y[j] = static_cast<float>(static_cast<std::int8_t>(u8(b + 2 + j))) * d;
}

// Q4_K: [d][dmin][scales: 12][qs: 128]; Q5_K adds [qh: 32] before qs. Eight sub-blocks of 32,
// value = (d*sc) * q - (dmin*m); sub-blocks 2i and 2i+1 share 32 bytes of qs, low nibbles then
// high, and in Q5_K bit j of qh[l] is the fifth bit of value l of sub-block j.
template <bool kFifthBit>
void k_quant(const std::byte* b, float* y) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  const std::byte* scales = b + 4;
  const std::byte* qh = b + 16;
  const std::byte* qs = b + (kFifthBit ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc = 0;
    int m = 0;
    scale_min_k4(j, scales, sc, m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    const int shift = (j % 2) * 4;
    const std::byte* q = qs + (j / 2) * 32;
    for (int l = 0; l < 32; ++l) {
      int v = (u8(q + l) >> shift) & 0xF;
      if constexpr (kFifthBit) v |= ((u8(qh + l) >> j) & 1) << 4;
      y[j * 32 + l] = dl * static_cast<float>(v) - ml;
    }
  }
}

// [ql: 128][qh: 64][scales: 16 int8][d]: sixteen sub-blocks of 16, value = (d*sc) * (q - 32).
// Each half of 128 values takes 64 bytes of ql (low nibbles of values 0-63, high of 64-127) and
// 32 of qh (two bits for each of four values).
void q6_k(const std::byte* b, float* y) {
  const std::byte* ql = b;
  const std::byte* qh = b + 128;
  const std::byte* scales = b + 192;
  const float d = half_at(b + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int h = u8(qh + l);
      const int q[4] = {
          ((u8(ql + l) & 0xF) | (((h >> 0) & 3) << 4)) - 32,
          ((u8(ql + l + 32) & 0xF) | (((h >> 2) & 3) << 4)) - 32,
          ((u8(ql + l) >> 4) | (((h >> 4) & 3) << 4)) - 32,
          ((u8(ql + l + 32) >> 4) | (((h >> 6) & 3) << 4)) - 32,
      };
      for (int k = 0; k < 4; ++k) {
        const int value = k * 32 + l;  // within this half
        const auto sc = static_cast<std::int8_t>(u8(scales + value / 16));
        y[value] = (d * static_cast<float>(sc)) * static_cast<float>(q[k]);
      }
    }
    y += 128;
    ql += 64;
    qh += 32;
    scales += 8;
  }
}

template <void (*Block)(const std::byte*, float*)>
void blocks(const std::byte* src, float* dst, std::size_t n, int block, int bytes) {
  for (std::size_t i = 0; i < n / block; ++i) Block(src + i * bytes, dst + i * block);
}

}  // namespace

std::string ggml_type_name(std::uint32_t type) {
  return type < kTypeNames.size() ? std::string(kTypeNames[type]) : std::string();
}

bool ggml_type_supported(std::uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return true;
  }
  return false;
}

GgmlTypeLayout ggml_type_layout(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return {1, 4};
    case GgmlType::F16:
    case GgmlType::BF16: return {1, 2};
    case GgmlType::Q4_0: return {kQK, 2 + kQK / 2};
    case GgmlType::Q4_1: return {kQK, 4 + kQK / 2};
    case GgmlType::Q5_0: return {kQK, 2 + 4 + kQK / 2};
    case GgmlType::Q5_1: return {kQK, 4 + 4 + kQK / 2};
    case GgmlType::Q8_0: return {kQK, 2 + kQK};
    case GgmlType::Q4_K: return {kQKK, 4 + 12 + kQKK / 2};
    case GgmlType::Q5_K: return {kQKK, 4 + 12 + kQKK / 8 + kQKK / 2};
    case GgmlType::Q6_K: return {kQKK, kQKK / 2 + kQKK / 4 + kQKK / 16 + 2};
  }
  throw std::logic_error("ggml_type_layout: unsupported type " +
                         ggml_type_name(static_cast<std::uint32_t>(type)));
}

void dequantize(GgmlType type, const std::byte* src, float* dst, std::size_t n) {
  const GgmlTypeLayout t = ggml_type_layout(type);
  if (n % t.block != 0)
    throw std::logic_error("dequantize: " + std::to_string(n) + " values are not whole blocks of " +
                           ggml_type_name(static_cast<std::uint32_t>(type)));
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case GgmlType::F16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = half_at(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, src + 2 * i, sizeof h);
        dst[i] = bf16_to_float(h);
      }
      return;
    case GgmlType::Q4_0: return blocks<q4_0>(src, dst, n, t.block, t.block_bytes);
    case GgmlType::Q4_1: return blocks<q4_1>(src, dst, n, t.block, t.block_bytes);
    case GgmlType::Q5_0: return blocks<q5_0>(src, dst, n, t.block, t.block_bytes);
    case GgmlType::Q5_1: return blocks<q5_1>(src, dst, n, t.block, t.block_bytes);
    case GgmlType::Q8_0: return blocks<q8_0>(src, dst, n, t.block, t.block_bytes);
    case GgmlType::Q4_K: return blocks<k_quant<false>>(src, dst, n, t.block, t.block_bytes);
    case GgmlType::Q5_K: return blocks<k_quant<true>>(src, dst, n, t.block, t.block_bytes);
    case GgmlType::Q6_K: return blocks<q6_k>(src, dst, n, t.block, t.block_bytes);
  }
}

}  // namespace kvheap
