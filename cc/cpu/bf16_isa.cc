// The bfloat16 packed-panel GEMM with AVX512-BF16's VDPBF16PS (compiled only into the
// avx512_bf16 build; gemm_dispatch.cc calls it only on CPUs that have the instruction). Two bf16
// products per fp32 lane per instruction: twice the fp32 FMA rate, and bf16 x bf16 products are
// exact in fp32, so a product of bf16 operands accumulated in fp32 is what the fp32 GEMM of the
// same (converted) values computes, up to summation order.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cc/cpu/gemm.h"

namespace tf_lstm_ops {
namespace gemm {
namespace avx512_bf16 {
namespace {

constexpr int kTileRows = 6;
constexpr int kTileVecs = 4;  // 6 x 4 fp32 accumulators; a vector of B is one panel's k pair

// A(r, 2q) and A(r, 2q + 1) as one 32-bit lane (the first in the low half, as VDPBF16PS pairs
// them); a half pair (k odd, the last pair) is only A(r, 2q), so nothing past k is read.
inline __m512 PairOf(const uint16_t* a) {
  uint32_t bits;
  std::memcpy(&bits, a, sizeof(bits));
  return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(bits)));
}
inline __m512 HalfPairOf(const uint16_t* a) {
  return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(a[0])));
}

// C[kRows, kVecs·16] (+)= A[kRows, k]·B, A row-major (lda), B's panel v at b[v]. One dot-product
// chain per output in increasing k.
template <int kRows, int kVecs>
void Tile(int64_t k, const uint16_t* a, int64_t lda, const uint16_t* const* b, bool accumulate,
          float* c, int64_t ldc, int last_lanes) {
  __m512 acc[kRows][kVecs];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  // One step of pair q; the packed half pair's second row is zero.
  auto pair_step = [&](int64_t q, auto pair_of) {
    __m512bh bv[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b[v] + q * 2 * kPanelWidth));
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(pair_of(a + r * lda + 2 * q));
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  };
  const int64_t full_pairs = k / 2;
  // (lambdas, not function pointers: each step's loads inline into the unrolled loop)
  for (int64_t q = 0; q < full_pairs; ++q) {
    pair_step(q, [](const uint16_t* p) { return PairOf(p); });
  }
  if (k % 2 != 0) pair_step(full_pairs, [](const uint16_t* p) { return HalfPairOf(p); });
  const __mmask16 last_mask = static_cast<__mmask16>((1u << last_lanes) - 1);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      float* dst = c + r * ldc + v * 16;
      const __mmask16 mask = v + 1 < kVecs ? static_cast<__mmask16>(0xFFFF) : last_mask;
      const __m512 sum =
          accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), acc[r][v]) : acc[r][v];
      _mm512_mask_storeu_ps(dst, mask, sum);
    }
  }
}

template <int kRows>
void TileOfRows(int vecs, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* const* b,
                bool accumulate, float* c, int64_t ldc, int last_lanes) {
  switch (vecs) {
    case 1:
      return Tile<kRows, 1>(k, a, lda, b, accumulate, c, ldc, last_lanes);
    case 2:
      return Tile<kRows, 2>(k, a, lda, b, accumulate, c, ldc, last_lanes);
    case 3:
      return Tile<kRows, 3>(k, a, lda, b, accumulate, c, ldc, last_lanes);
    default:
      return Tile<kRows, 4>(k, a, lda, b, accumulate, c, ldc, last_lanes);
  }
}

}  // namespace

// A whole panel's complete row pairs (gemm.h's layout, k / 2 of them): op(B)'s rows 2q and
// 2q + 1 interleaved, 16 columns. Row-major B: two rows' 16 values unpacked into pairs.
// Transposed B (op(B)'s columns contiguous): a pair is one 32-bit word of a column, so a packed
// row is a gather of 16 words ldb values apart; false (nothing written) when the gather's int32
// indices (uint16 offsets) cannot reach them.
bool PackPanelPairsBf16(bool trans_b, int64_t k, const uint16_t* b, int64_t ldb,
                        uint16_t* panel) {
  const int64_t pairs = k / 2;
  if (!trans_b) {
    for (int64_t q = 0; q < pairs; ++q) {
      const uint16_t* even = b + 2 * q * ldb;
      const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(even));
      const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + ldb));
      // Per 128-bit lane: lo holds the pairs of columns 0-3 and 8-11, hi of 4-7 and 12-15.
      const __m256i lo = _mm256_unpacklo_epi16(e, o), hi = _mm256_unpackhi_epi16(e, o);
      uint16_t* row = panel + q * 2 * kPanelWidth;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 16),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    return true;
  }
  if (15 * ldb + k > (int64_t{1} << 30)) return false;
  const __m512i columns = _mm512_mullo_epi32(
      _mm512_set1_epi32(static_cast<int>(ldb)),
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512i words = _mm512_mask_i32gather_epi32(
        _mm512_setzero_si512(), static_cast<__mmask16>(0xFFFF),
        _mm512_add_epi32(columns, _mm512_set1_epi32(static_cast<int>(2 * q))), b, 2);
    _mm512_storeu_si512(panel + q * 2 * kPanelWidth, words);
  }
  return true;
}

void PackedBlockBf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                     const uint16_t* packed, bool accumulate, float* c, int64_t ldc) {
  constexpr int64_t kTileCols = int64_t{kTileVecs} * kPanelWidth;
  using TileFn = void (*)(int, int64_t, const uint16_t*, int64_t, const uint16_t* const*, bool,
                          float*, int64_t, int);
  static constexpr TileFn kByRows[kTileRows] = {TileOfRows<1>, TileOfRows<2>, TileOfRows<3>,
                                                TileOfRows<4>, TileOfRows<5>, TileOfRows<6>};
  const int64_t panel_size = PackedSizeBf16(k, kPanelWidth);
  for (int64_t c0 = 0; c0 < n; c0 += kTileCols) {
    const int64_t cols = std::min(kTileCols, n - c0);
    const int vecs = static_cast<int>((cols + kPanelWidth - 1) / kPanelWidth);
    const int last_lanes = static_cast<int>(cols - int64_t{vecs - 1} * kPanelWidth);
    const uint16_t* b[kTileVecs];
    for (int v = 0; v < vecs; ++v) b[v] = packed + (c0 / kPanelWidth + v) * panel_size;
    for (int64_t r0 = 0; r0 < m; r0 += kTileRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m - r0));
      kByRows[rows - 1](vecs, k, a + r0 * lda, lda, b, accumulate, c + r0 * ldc + c0, ldc,
                        last_lanes);
    }
  }
}

}  // namespace avx512_bf16
}  // namespace gemm
}  // namespace tf_lstm_ops
