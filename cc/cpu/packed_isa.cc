// One ISA's packed-panel GEMM (compiled once per ISA, like gemm_isa.cc; see gemm.h for the
// layout). The recurrent GEMM of an RNN step multiplies a small state [B, k] by the same weights
// every step: Eigen repacks those weights on every call, which at B = 32 costs as much as the
// multiply. Packed once per op call, the weights stream from L2 straight into a register tile.
// The same register tiles also serve gemm_isa.cc's one-off products (SlabbedBlock), copying B a
// slab at a time.
#ifndef TF_LSTM_GEMM_ISA
#error "build with -DTF_LSTM_GEMM_ISA=<isa>"
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "cc/cpu/gemm.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TF_LSTM_PACKED_SIMD 1
#endif

namespace tf_lstm_ops {
namespace gemm {
namespace TF_LSTM_GEMM_ISA {
namespace {

// Column `col` of the packed operand at row 0 (rows follow every kPanelWidth values).
template <typename A>
const A* PanelColumn(const A* packed, int64_t k, int64_t col) {
  return packed + col / kPanelWidth * kPanelWidth * k + col % kPanelWidth;
}

#if defined(TF_LSTM_PACKED_SIMD)

// One SIMD register of A: what the tile kernel needs, per ISA.
template <typename A>
struct Vec;
#if defined(__AVX512F__)
constexpr int kTileVecs = 4;  // 6 x 4 accumulators of the 32 zmm registers
template <>
struct Vec<float> {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V Splat(float x) { return _mm512_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static __mmask16 Mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V LoadFirst(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static void StoreFirst(float* p, V v, int n) { _mm512_mask_storeu_ps(p, Mask(n), v); }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
};
template <>
struct Vec<double> {
  using V = __m512d;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm512_setzero_pd(); }
  static V Load(const double* p) { return _mm512_loadu_pd(p); }
  static V Splat(double x) { return _mm512_set1_pd(x); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_pd(a, b); }
  static void Store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static __mmask8 Mask(int n) { return static_cast<__mmask8>((1u << n) - 1); }
  static V LoadFirst(const double* p, int n) { return _mm512_maskz_loadu_pd(Mask(n), p); }
  static void StoreFirst(double* p, V v, int n) { _mm512_mask_storeu_pd(p, Mask(n), v); }
  static double Sum(V v) { return _mm512_reduce_add_pd(v); }
};
#else  // AVX2 + FMA
constexpr int kTileVecs = 2;  // 6 x 2 accumulators of the 16 ymm registers
// Lane masks for maskload/maskstore: lane i is on when i < n.
inline __m256i FirstLanes32(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256i FirstLanes64(int n) {
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}
template <>
struct Vec<float> {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V Splat(float x) { return _mm256_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V LoadFirst(const float* p, int n) { return _mm256_maskload_ps(p, FirstLanes32(n)); }
  static void StoreFirst(float* p, V v, int n) { _mm256_maskstore_ps(p, FirstLanes32(n), v); }
  static float Sum(V v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
  }
};
template <>
struct Vec<double> {
  using V = __m256d;
  static constexpr int kLanes = 4;
  static V Zero() { return _mm256_setzero_pd(); }
  static V Load(const double* p) { return _mm256_loadu_pd(p); }
  static V Splat(double x) { return _mm256_set1_pd(x); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_pd(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_pd(a, b); }
  static void Store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V LoadFirst(const double* p, int n) { return _mm256_maskload_pd(p, FirstLanes64(n)); }
  static void StoreFirst(double* p, V v, int n) { _mm256_maskstore_pd(p, FirstLanes64(n), v); }
  static double Sum(V v) {
    const __m128d x = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(x, _mm_unpackhi_pd(x, x)));
  }
};
#endif
constexpr int kTileRows = 6;
// Long float sums (SlabbedBlockSimd): FMA chains of kWideChain values of k; the slabs' sums in
// double, in rows of kWideLd (one column tile).
constexpr int64_t kWideChain = 32;
constexpr int64_t kWideLd = int64_t{kTileVecs} * Vec<float>::kLanes;
constexpr int64_t kBlockRows = kSlabBlockRows;  // SlabbedBlockSimd: A's kBlockRows x kDepth in L2

// This thread's double sums of one row block by one column tile (192 KiB with AVX-512; 4x fewer
// rows per block measured 10-40 % slower), allocated on a thread's first long sum: on the heap,
// not the stack, nor a thread_local array (each thread that touches any of the library's
// thread_locals would allocate all of them).
double* WideSums() {
  static thread_local std::unique_ptr<double[]> sums;
  if (!sums) sums.reset(new double[kBlockRows * kWideLd]);
  return sums.get();
}

// C[kRows, kVecs·lanes] (+)= A[kRows, k]·B. A is row-major (lda), or with kTransA stored
// [k, kRows] (A[r, p] at a[p·lda + r]); B's vector v of row p is at b[v] + p·ldb_row (ldb_row is
// kPanelWidth for packed panels, B's leading dimension for a row-major B). Only the first
// `last_lanes` lanes of the last vector are stored, and with kMaskB only those are loaded from B
// (an unpacked B has no padding to read). Each output is one FMA chain over p = 0..k-1 (then
// + C): the same order whatever the tiling, so results do not depend on how callers split m or n.
// With kWide (float deep products, see SlabbedBlockSimd; k is one slab) the chain restarts every
// kWideChain values of p, the chains' sums are added up in A in L1, and that sum is added into
// `wide` (double, rows kWideLd apart) instead of C.
template <typename A, int kRows, int kVecs, bool kTransA, bool kMaskB, bool kWide>
void Tile(int64_t k, const A* a, int64_t lda, const A* const* b, int64_t ldb_row,
          bool accumulate, A* c, int64_t ldc, int last_lanes, double* wide) {
  using X = Vec<A>;
  typename X::V acc[kRows][kVecs];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) acc[r][v] = X::Zero();  // (k = 0: C gets zeros)
  }
  alignas(64) A chain_sums[kWide ? kRows * kVecs * X::kLanes : 1];
  if constexpr (kWide) std::fill(chain_sums, chain_sums + kRows * kVecs * X::kLanes, A(0));
  for (int64_t p0 = 0; p0 < k; p0 += kWide ? kWideChain : k) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
      for (int v = 0; v < kVecs; ++v) acc[r][v] = X::Zero();
    }
    const int64_t p1 = kWide ? std::min(k, p0 + kWideChain) : k;
    for (int64_t p = p0; p < p1; ++p) {
      typename X::V bv[kVecs];
#pragma GCC unroll 8
      for (int v = 0; v < kVecs; ++v) {
        bv[v] = kMaskB && v + 1 == kVecs ? X::LoadFirst(b[v] + p * ldb_row, last_lanes)
                                         : X::Load(b[v] + p * ldb_row);
      }
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const typename X::V av = X::Splat(kTransA ? a[p * lda + r] : a[r * lda + p]);
#pragma GCC unroll 8
        for (int v = 0; v < kVecs; ++v) acc[r][v] = X::Fma(av, bv[v], acc[r][v]);
      }
    }
    if constexpr (kWide) {
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
        for (int v = 0; v < kVecs; ++v) {
          A* sums = chain_sums + (r * kVecs + v) * X::kLanes;
          X::Store(sums, X::Add(X::Load(sums), acc[r][v]));
        }
      }
    }
  }
  if constexpr (kWide) {  // (a plain loop: the compiler converts and adds whole vectors)
    for (int r = 0; r < kRows; ++r) {
      const A* sums = chain_sums + r * kVecs * X::kLanes;
      double* row = wide + r * kWideLd;
      for (int j = 0; j < kVecs * X::kLanes; ++j) row[j] += sums[j];
    }
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      A* dst = c + r * ldc + v * X::kLanes;
      if (v + 1 < kVecs || last_lanes == X::kLanes) {
        X::Store(dst, accumulate ? X::Add(X::Load(dst), acc[r][v]) : acc[r][v]);
      } else {
        X::StoreFirst(dst, accumulate ? X::Add(X::LoadFirst(dst, last_lanes), acc[r][v])
                                      : acc[r][v], last_lanes);
      }
    }
  }
}

// Tile<kRows, vecs> for vecs in [1, kMaxVecs].
template <typename A, int kRows, int kMaxVecs, bool kTransA, bool kMaskB, bool kWide>
void TileOfRows(int vecs, int64_t k, const A* a, int64_t lda, const A* const* b, int64_t ldb_row,
                bool accumulate, A* c, int64_t ldc, int last_lanes, double* wide) {
  if constexpr (kMaxVecs > 1) {
    if (vecs < kMaxVecs) {
      return TileOfRows<A, kRows, kMaxVecs - 1, kTransA, kMaskB, kWide>(
          vecs, k, a, lda, b, ldb_row, accumulate, c, ldc, last_lanes, wide);
    }
  }
  Tile<A, kRows, kMaxVecs, kTransA, kMaskB, kWide>(k, a, lda, b, ldb_row, accumulate, c, ldc,
                                                   last_lanes, wide);
}

// A tile shape: up to kRows rows by kVecs vectors of accumulators.
template <int kRowsMax, int kVecsMax>
struct TileShape {
  static constexpr int kRows = kRowsMax, kVecs = kVecsMax;
};
using WideTiles = TileShape<kTileRows, kTileVecs>;  // 6 x 4 (AVX-512), 6 x 2 (AVX2)
// Taller, narrower tiles for the recurrent products with AVX-512 (PackedBlockSimd picks them by the
// batch's rows): B streams from L2 into every row tile, and a 5 x 4 tile (32 rows are 6, 6, 5, 5,
// 5, 5) needs 12.8 bytes of B per FMA against 6 x 4's 10.7 and 8 x 3's 8. In isolation 32 x 512 x
// 256 products with 5-row tiles ran ~15 % below those with only 6-row ones, and 8 x 3 tiles ~5-15 %
// faster than 6 x 4 (best and median of repeated runs, noisy 2-core VM). (AVX2's 16 registers hold
// no taller tile than 6 x 2.)
constexpr bool kHasTallTiles = kTileVecs == 4;
using TallTiles = TileShape<8, 3>;
// Products of 1-3 rows (an RNN step at batch 1-3): every output is one FMA chain, and these
// rows want more columns per tile than the wide tiles have (FewRowTiles; the sums do not change):
// - AVX2: a 1 x 2 tile has two chains, too few to cover the FMA latency: it ran at a quarter of
//   the FMA rate and below the rate at which L2 delivers B, which bounds a product of so few rows.
//   So 1 x 8, 2 x 4 and 3 x 3 tiles, eight or more chains within 16 registers (packed, 512 x 256,
//   one thread, Zen 5: 1 row 6.9 -> 4.3 us, 3 rows 8.5 -> 6.6).
// - AVX-512, a row-major B read in place (kInPlace: each k a new row of B, 4 KiB or more apart):
//   8 vectors, 512 bytes of each row per k instead of 256 (256 rows 4 KiB apart, 512 columns: 1 row
//   8.0 -> 5.2 us, 2 rows 7.9 -> 5.8, 3 rows 7.9 -> 7.4). Packed panels keep 4 vectors (8 were
//   3-13 % slower).
template <int kRows, bool kInPlace>
constexpr int kFewRowVecs =
    kTileVecs == 2 ? (kRows == 1 ? 8 : kRows == 2 ? 4 : 3) : (kInPlace ? 8 : kTileVecs);
template <int kRows, bool kInPlace>
using FewRowTiles = TileShape<kRows, kFewRowVecs<kRows, kInPlace>>;

// C[m, n] (+)= op(A)·B over register tiles of Shape: B's column c at column(c) + p·ldb_row for
// row p (packed panels, or a row-major B), op(A) as in Tile. Column tiles outer: a tile's k x
// tile-columns slice of B is reused by every row tile from L1/L2. With kWide (WideTiles only),
// n <= kWideLd and the products are added into `wide` (double, [m, kWideLd]) instead of C. The
// tile shape decides the speed, never the sums (each output is one chain in increasing k).
template <typename A, bool kTransA, bool kMaskB, bool kWide = false, typename Shape = WideTiles,
          typename Column>
void TiledProduct(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, Column column,
                  int64_t ldb_row, bool accumulate, A* c, int64_t ldc, double* wide = nullptr) {
  constexpr int kLanes = Vec<A>::kLanes;
  constexpr int kRowsMax = Shape::kRows, kVecsMax = Shape::kVecs;
  static_assert(!kWide || std::is_same_v<Shape, WideTiles>, "kWideLd is WideTiles' width");
  constexpr int64_t kTileCols = int64_t{kVecsMax} * kLanes;
  using TileFn = void (*)(int, int64_t, const A*, int64_t, const A* const*, int64_t, bool, A*,
                          int64_t, int, double*);
  // (entries past kRowsMax are never called: they name the kRowsMax one, not new kernels)
  static constexpr TileFn kByRows[8] = {
      TileOfRows<A, 1, kVecsMax, kTransA, kMaskB, kWide>,
      TileOfRows<A, std::min(2, kRowsMax), kVecsMax, kTransA, kMaskB, kWide>,
      TileOfRows<A, std::min(3, kRowsMax), kVecsMax, kTransA, kMaskB, kWide>,
      TileOfRows<A, std::min(4, kRowsMax), kVecsMax, kTransA, kMaskB, kWide>,
      TileOfRows<A, std::min(5, kRowsMax), kVecsMax, kTransA, kMaskB, kWide>,
      TileOfRows<A, std::min(6, kRowsMax), kVecsMax, kTransA, kMaskB, kWide>,
      TileOfRows<A, std::min(7, kRowsMax), kVecsMax, kTransA, kMaskB, kWide>,
      TileOfRows<A, std::min(8, kRowsMax), kVecsMax, kTransA, kMaskB, kWide>};
  for (int64_t c0 = 0; c0 < n; c0 += kTileCols) {
    const int64_t cols = std::min(kTileCols, n - c0);
    const int vecs = static_cast<int>((cols + kLanes - 1) / kLanes);
    const int last_lanes = static_cast<int>(cols - int64_t{vecs - 1} * kLanes);
    const A* b[kVecsMax];
    for (int v = 0; v < vecs; ++v) b[v] = column(c0 + int64_t{v} * kLanes);
    // Row tiles as even as they can be (32 rows: 6, 6, 5, 5, 5, 5, not 6 x 5 + 2): a tile of
    // few rows has too few independent FMA chains to hide the FMA latency (AVX2's 2 x 2 tile runs
    // at half speed).
    const int64_t tiles = (m + kRowsMax - 1) / kRowsMax;
    for (int64_t t = 0, r0 = 0; t < tiles; ++t) {
      const int rows = static_cast<int>((m - r0) / (tiles - t) + ((m - r0) % (tiles - t) != 0));
      kByRows[rows - 1](vecs, k, a + r0 * (kTransA ? 1 : lda), lda, b, ldb_row, accumulate,
                        c + r0 * ldc + c0, ldc, last_lanes, kWide ? wide + r0 * kWideLd : nullptr);
      r0 += rows;
    }
  }
}

// TiledProduct (not kWide) with FewRowTiles for 1-3 rows (kMaskB: B read in place), Shape's
// tiles otherwise.
template <typename A, bool kTransA, bool kMaskB, typename Shape = WideTiles, typename Column>
void TiledProductAnyRows(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, Column column,
                         int64_t ldb_row, bool accumulate, A* c, int64_t ldc) {
  auto few_rows = [&](auto rows) {
    using Few = FewRowTiles<decltype(rows)::value, kMaskB>;
    if constexpr (Few::kVecs == kTileVecs) {
      return false;  // Shape's tiles are as wide (no kernels compiled for it)
    } else {
      TiledProduct<A, kTransA, kMaskB, false, Few>(m, n, k, a, lda, column, ldb_row, accumulate,
                                                   c, ldc);
      return true;
    }
  };
  if (m == 1 && few_rows(std::integral_constant<int, 1>{})) return;
  if (m == 2 && few_rows(std::integral_constant<int, 2>{})) return;
  if (m == 3 && few_rows(std::integral_constant<int, 3>{})) return;
  TiledProduct<A, kTransA, kMaskB, false, Shape>(m, n, k, a, lda, column, ldb_row, accumulate, c,
                                                 ldc);
}

template <typename A>
void PackedBlockSimd(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const A* packed,
                     bool accumulate, A* c, int64_t ldc) {
  auto panels = [&](int64_t col) { return PanelColumn(packed, k, col); };
  if constexpr (kHasTallTiles) {
    // A row tile of r rows reads 64 / r bytes of B per FMA: tall tiles where they make the
    // smallest row tile taller (not at 12 or 18 rows, which split into 6-row tiles either way
    // and ran faster four vectors wide).
    auto smallest_tile = [m](int64_t max_rows) { return m / ((m + max_rows - 1) / max_rows); };
    if (smallest_tile(TallTiles::kRows) > smallest_tile(kTileRows)) {
      TiledProduct<A, false, false, false, TallTiles>(m, n, k, a, lda, panels, kPanelWidth,
                                                      accumulate, c, ldc);
      return;
    }
  }
  TiledProductAnyRows<A, false, false>(m, n, k, a, lda, panels, kPanelWidth, accumulate, c, ldc);
}

// Products of a few rows by a B stored [n, k] (op(B) = Bᵀ): C[m, n] (+)= A·Bᵀ as dot products of
// A's rows with B's rows, both contiguous in k, so B streams once from memory, in place. This is
// the shape of an RNN step at batch 1-3 on weights stored [gates·units, k] (cuDNN's R, the input
// projection of one step): the tiles above would need B transposed into panels or slabs first,
// which costs more than the product itself when each value of B is used once or twice. Each
// output is summed in kLanes interleaved FMA chains over k, added in a fixed order: deterministic
// and independent of how callers split m or n (but not the same rounding as the tiles' one chain).
static_assert(kDotMaxRows == 3,  // gemm.h; DotBlockSimd's cases below are written for it
              "3 rows x 4 columns of accumulators fit AVX2's 16 registers");
constexpr int kDotCols = 4;

template <typename A, int kRows, int kCols>
void DotTile(int64_t k, const A* a, int64_t lda, const A* b, int64_t ldb, bool accumulate, A* c,
             int64_t ldc) {
  using X = Vec<A>;
  typename X::V acc[kRows][kCols];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < kCols; ++j) acc[r][j] = X::Zero();
  }
  const int64_t whole = k / X::kLanes * X::kLanes;
  auto step = [&](int64_t p, auto load) {
    typename X::V bv[kCols];
#pragma GCC unroll 4
    for (int j = 0; j < kCols; ++j) bv[j] = load(b + j * ldb + p);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const typename X::V av = load(a + r * lda + p);
#pragma GCC unroll 4
      for (int j = 0; j < kCols; ++j) acc[r][j] = X::Fma(av, bv[j], acc[r][j]);
    }
  };
  for (int64_t p = 0; p < whole; p += X::kLanes) step(p, [](const A* q) { return X::Load(q); });
  if (whole < k) {
    const int rest = static_cast<int>(k - whole);
    step(whole, [rest](const A* q) { return X::LoadFirst(q, rest); });
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < kCols; ++j) {
      const A sum = X::Sum(acc[r][j]);
      A* dst = c + r * ldc + j;
      *dst = accumulate ? *dst + sum : sum;
    }
  }
}

template <typename A, int kRows>
void DotRows(int64_t n, int64_t k, const A* a, int64_t lda, const A* b, int64_t ldb,
             bool accumulate, A* c, int64_t ldc) {
  int64_t j = 0;
  for (; j + kDotCols <= n; j += kDotCols) {
    DotTile<A, kRows, kDotCols>(k, a, lda, b + j * ldb, ldb, accumulate, c + j, ldc);
  }
  for (; j < n; ++j) DotTile<A, kRows, 1>(k, a, lda, b + j * ldb, ldb, accumulate, c + j, ldc);
}

template <typename A>
void DotBlockSimd(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const A* b,
                  int64_t ldb, bool accumulate, A* c, int64_t ldc) {
  for (int64_t r0 = 0; r0 < m; r0 += kDotMaxRows) {
    const A* a_rows = a + r0 * lda;
    A* c_rows = c + r0 * ldc;
    switch (std::min<int64_t>(kDotMaxRows, m - r0)) {
      case 1:
        DotRows<A, 1>(n, k, a_rows, lda, b, ldb, accumulate, c_rows, ldc);
        break;
      case 2:
        DotRows<A, 2>(n, k, a_rows, lda, b, ldb, accumulate, c_rows, ldc);
        break;
      default:
        DotRows<A, 3>(n, k, a_rows, lda, b, ldb, accumulate, c_rows, ldc);
    }
  }
}

// C[m, n] (+)= op(A)·op(B), op(B) [k, n] stored row-major [k, n] (ldb), or [n, k] when kTransB,
// with no packed copy of B kept: op(B) is cut into slabs of kDepth rows by one column tile, each
// copied into a contiguous zero-padded buffer on the stack (a row-major B's rows are often 4 KiB
// apart, which maps a tile's rows onto the same few L1 sets) and reused there by every row tile;
// C accumulates slab by slab in increasing p. A product of a few rows reads B in place instead
// (copying would cost more than it saves): a row-major B through the tiles, a transposed one by
// DotBlockSimd.
// Long float sums (long_sum: gemm::Sum::kLong, the weight gradients summed over every time step
// and batch row; k > kDepth) are summed more accurately: an FMA chain's rounding error grows with
// its length, and one chain per slab made those gradients several times less accurate than a
// per-step computation. There each output is summed in FMA chains of kWideChain, the chains of a
// slab in float, the slabs in double, then rounded once into C: as accurate as a per-step
// computation, at about 3 % (0-9 %) more time for these products (the flush of a chain is a
// load, an add and a store per vector).
template <typename A, bool kTransA, bool kTransB>
void SlabbedBlockSimd(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const A* b,
                      int64_t ldb, bool accumulate, A* c, int64_t ldc, bool long_sum) {
  constexpr int64_t kDepth = 256;
  constexpr int64_t kTileCols = int64_t{kTileVecs} * Vec<A>::kLanes;
  constexpr bool kCanWide = std::is_same_v<A, float>;
  const bool wide = kCanWide && long_sum && k > kDepth;
  const int64_t a_step = kTransA ? lda : 1;  // from A's column p to p + 1
  double* const wide_acc = wide ? WideSums() : nullptr;
  // C's [rows, cols] block at `dst` (+)= the double sums, rounded once.
  auto flush_wide = [&](int64_t rows, int64_t cols, A* dst) {
    for (int64_t r = 0; r < rows; ++r) {
      const double* sums = wide_acc + r * kWideLd;
      A* row = dst + r * ldc;
      for (int64_t j = 0; j < cols; ++j) {
        row[j] = static_cast<A>(accumulate ? static_cast<double>(row[j]) + sums[j] : sums[j]);
      }
    }
  };
  if (kTransB && !kTransA && m <= kDotMaxRows && (!long_sum || k <= kDepth)) {
    // (a long sum's lanes would be chains of k / kLanes: the wide sums below keep them short)
    return DotBlockSimd(m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
  if (!kTransB && m < 2 * kTileRows) {
    if constexpr (kCanWide) {
      if (wide) {
        for (int64_t c0 = 0; c0 < n; c0 += kTileCols) {
          const int64_t cols = std::min(kTileCols, n - c0);
          std::fill(wide_acc, wide_acc + m * kWideLd, 0.0);
          for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
            TiledProduct<A, kTransA, true, true>(
                m, cols, std::min(kDepth, k - p0), a + p0 * a_step, lda,
                [&](int64_t col) { return b + p0 * ldb + c0 + col; }, ldb, false, c, ldc,
                wide_acc);
          }
          flush_wide(m, cols, c + c0);
        }
        return;
      }
    }
    for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
      TiledProductAnyRows<A, kTransA, true>(
          m, n, std::min(kDepth, k - p0), a + p0 * a_step, lda,
          [&](int64_t col) { return b + p0 * ldb + col; }, ldb, accumulate || p0 > 0, c, ldc);
    }
    return;
  }
  alignas(64) A slab[kDepth * kTileCols];
  // op(B)[p0 : p0 + depth, c0 : c0 + cols] into the slab, rows kTileCols apart, zero-padded.
  auto copy_slab = [&](int64_t p0, int64_t depth, int64_t c0, int64_t cols) {
    if constexpr (kTransB) {
      // op(B)'s rows are B's columns: 16 of them at a time, each B row's piece read in one go
      // (B's rows are often a multiple of 4 KiB apart: reading one value from each of 64 rows
      // would keep missing L1), written into 16 slab rows that stay in L1.
      for (int64_t p = 0; p < depth; p += 16) {
        const int64_t ps = std::min<int64_t>(16, depth - p);
        for (int64_t j = 0; j < cols; ++j) {
          const A* src = b + (c0 + j) * ldb + p0 + p;
          for (int64_t q = 0; q < ps; ++q) slab[(p + q) * kTileCols + j] = src[q];
        }
        for (int64_t q = 0; q < ps; ++q) {
          std::fill(slab + (p + q) * kTileCols + cols, slab + (p + q + 1) * kTileCols, A(0));
        }
      }
    } else if (cols == kTileCols) {
      // Whole rows of a tile through vector registers: std::copy_n of a 256-byte row compiled
      // to `rep movsq`, whose start-up cost made this copy ~80 % of the weight gradients' time
      // outside the tiles.
      for (int64_t p = 0; p < depth; ++p) {
        const A* src = b + (p0 + p) * ldb + c0;
        A* row = slab + p * kTileCols;
#pragma GCC unroll 4
        for (int v = 0; v < kTileVecs; ++v) {
          Vec<A>::Store(row + v * Vec<A>::kLanes, Vec<A>::Load(src + v * Vec<A>::kLanes));
        }
      }
    } else {
      for (int64_t p = 0; p < depth; ++p) {
        A* row = slab + p * kTileCols;
        std::copy_n(b + (p0 + p) * ldb + c0, cols, row);
        std::fill(row + cols, row + kTileCols, A(0));
      }
    }
  };
  for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, m - i0);
    const A* a_block = a + i0 * (kTransA ? 1 : lda);
    for (int64_t c0 = 0; c0 < n; c0 += kTileCols) {
      const int64_t cols = std::min(kTileCols, n - c0);
      if (wide) std::fill(wide_acc, wide_acc + rows * kWideLd, 0.0);
      for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
        const int64_t depth = std::min(kDepth, k - p0);
        copy_slab(p0, depth, c0, cols);
        auto slab_column = [&](int64_t col) { return slab + col; };
        if constexpr (kCanWide) {
          if (wide) {
            TiledProduct<A, kTransA, false, true>(rows, cols, depth, a_block + p0 * a_step, lda,
                                                  slab_column, kTileCols, false, c, ldc,
                                                  wide_acc);
            continue;
          }
        }
        TiledProduct<A, kTransA, false>(rows, cols, depth, a_block + p0 * a_step, lda,
                                        slab_column, kTileCols, accumulate || p0 > 0,
                                        c + i0 * ldc + c0, ldc);
      }
      if (wide) flush_wide(rows, cols, c + i0 * ldc + c0);
    }
  }
}

#endif  // TF_LSTM_PACKED_SIMD

// Portable loops (CPUs without AVX2/FMA, other architectures): a tile of kRows rows by one
// panel, left to the compiler to vectorise.
template <typename A>
void PackedBlockPortable(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
                         const A* packed, bool accumulate, A* c, int64_t ldc) {
  constexpr int64_t kRows = 4;
  for (int64_t c0 = 0; c0 < n; c0 += kPanelWidth) {
    const int64_t cols = std::min<int64_t>(kPanelWidth, n - c0);
    const A* panel = PanelColumn(packed, k, c0);
    for (int64_t r0 = 0; r0 < m; r0 += kRows) {
      const int64_t rows = std::min(kRows, m - r0);
      A acc[kRows][kPanelWidth] = {};
      for (int64_t p = 0; p < k; ++p) {
        const A* b_row = panel + p * kPanelWidth;
        for (int64_t r = 0; r < kRows; ++r) {
          const A av = r < rows ? a[(r0 + r) * lda + p] : A(0);
          for (int j = 0; j < kPanelWidth; ++j) acc[r][j] += av * b_row[j];
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        A* dst = c + (r0 + r) * ldc + c0;
        for (int64_t j = 0; j < cols; ++j) dst[j] = accumulate ? dst[j] + acc[r][j] : acc[r][j];
      }
    }
  }
}

}  // namespace

template <typename A>
void PackedBlock(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const A* packed,
                 bool accumulate, A* c, int64_t ldc) {
#if defined(TF_LSTM_PACKED_SIMD)
  PackedBlockSimd(m, n, k, a, lda, packed, accumulate, c, ldc);
#else
  PackedBlockPortable(m, n, k, a, lda, packed, accumulate, c, ldc);
#endif
}

template <typename A>
bool SlabbedBlock(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a,
                  int64_t lda, const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc,
                  bool long_sum) {
#if defined(TF_LSTM_PACKED_SIMD)
  auto run = [&](auto trans_a_c, auto trans_b_c) {
    SlabbedBlockSimd<A, decltype(trans_a_c)::value, decltype(trans_b_c)::value>(
        m, n, k, a, lda, b, ldb, accumulate, c, ldc, long_sum);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  if (trans_a) {
    trans_b ? run(Yes{}, Yes{}) : run(Yes{}, No{});
  } else {
    trans_b ? run(No{}, Yes{}) : run(No{}, No{});
  }
  return true;
#else
  return false;
#endif
}

// (Plain loops: the build's -O3 vectorises them for each ISA.)
void FloatToBf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof(bits));
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = ((bits >> 16) & 0x8000u) | 0x7FC0u;
    dst[i] = static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  }
}

void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t{src[i]} << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
}

namespace {
#if defined(__AVX__)
// One register block of Transpose: 8 rows of 8 floats, or 4 of 4 doubles.
inline void TransposeBlock(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // 4 x 4 transposes within each 128-bit half
    r[h] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {  // then the halves swapped between rows j and j + 4
    _mm256_storeu_ps(dst + j * ld_dst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ld_dst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
}
inline void TransposeBlock(const double* src, int64_t ld_src, double* dst, int64_t ld_dst) {
  __m256d r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_pd(src + i * ld_src);
  const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  const __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  _mm256_storeu_pd(dst, _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(dst + ld_dst, _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(dst + 2 * ld_dst, _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(dst + 3 * ld_dst, _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif
}  // namespace

template <typename A>
void Transpose(int64_t rows, int64_t cols, const A* src, int64_t ld_src, A* dst,
               int64_t ld_dst) {
  int64_t i0 = 0;
#if defined(__AVX__)
  constexpr int64_t kBlock = 32 / sizeof(A);  // one 256-bit register per row
  for (; i0 + kBlock <= rows; i0 += kBlock) {
    int64_t j0 = 0;
    for (; j0 + kBlock <= cols; j0 += kBlock) {
      TransposeBlock(src + i0 * ld_src + j0, ld_src, dst + j0 * ld_dst + i0, ld_dst);
    }
    for (int64_t j = j0; j < cols; ++j) {
      for (int64_t i = i0; i < i0 + kBlock; ++i) dst[j * ld_dst + i] = src[i * ld_src + j];
    }
  }
#endif
  for (int64_t i = i0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
  }
}

// The FMA peak of one core for this build: a loop of independent float FMAs on registers only
// (no loads, no stores), so "% of peak" can mean the hardware's rate, not another library's
// GEMM. kChains independent accumulators cover the FMA latency times the FMA ports (4 cycles x 2
// ports on current x86 cores); the builds without FMA run a multiply and an add per element.
double FmaPeakGflops(double seconds) {
  using Clock = std::chrono::steady_clock;
  constexpr int kChains = 12;  // of 16 ymm / 32 zmm registers: the rest hold the operands
  constexpr int64_t kInner = 1 << 16;
#if defined(TF_LSTM_PACKED_SIMD)
  using X = Vec<float>;
  constexpr int kLanes = X::kLanes;
  typename X::V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = X::Splat(1.0f + c * 1e-3f);
  const typename X::V mul = X::Splat(0.999999f), add = X::Splat(1e-7f);
#else
  constexpr int kLanes = 8;
  float acc[kChains][kLanes];
  for (int c = 0; c < kChains; ++c) std::fill(acc[c], acc[c] + kLanes, 1.0f + c * 1e-3f);
  volatile float mul_in = 0.999999f, add_in = 1e-7f;
  const float mul = mul_in, add = add_in;
#endif
  int64_t iterations = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    for (int64_t i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) {
#if defined(TF_LSTM_PACKED_SIMD)
        acc[c] = X::Fma(acc[c], mul, add);
#else
        for (int l = 0; l < kLanes; ++l) acc[c][l] = acc[c][l] * mul + add;
#endif
      }
    }
    // an empty asm that "reads and writes" the accumulators keeps the loop from being folded
#if defined(TF_LSTM_PACKED_SIMD)
    for (int c = 0; c < kChains; ++c) asm volatile("" : "+v"(acc[c]));
#else
    asm volatile("" : : "r"(&acc[0][0]) : "memory");
#endif
    iterations += kInner;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  float sink[kLanes];
#if defined(TF_LSTM_PACKED_SIMD)
  for (int c = 1; c < kChains; ++c) acc[0] = X::Add(acc[0], acc[c]);
  X::Store(sink, acc[0]);
#else
  std::copy_n(acc[0], kLanes, sink);
#endif
  volatile float keep = sink[0];
  (void)keep;
  return 2.0 * kLanes * kChains * static_cast<double>(iterations) / elapsed * 1e-9;
}

template void PackedBlock<float>(int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                                 bool, float*, int64_t);
template void PackedBlock<double>(int64_t, int64_t, int64_t, const double*, int64_t,
                                  const double*, bool, double*, int64_t);
template void Transpose<float>(int64_t, int64_t, const float*, int64_t, float*, int64_t);
template void Transpose<double>(int64_t, int64_t, const double*, int64_t, double*, int64_t);
template bool SlabbedBlock<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                  const float*, int64_t, bool, float*, int64_t, bool);
template bool SlabbedBlock<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                   const double*, int64_t, bool, double*, int64_t, bool);

}  // namespace TF_LSTM_GEMM_ISA
}  // namespace gemm
}  // namespace tf_lstm_ops
