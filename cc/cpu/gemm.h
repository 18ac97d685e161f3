// Single-threaded row-major GEMM blocks, framework-free, built for several x86 ISAs and picked at
// run time (AVX-512 / AVX2+FMA / AVX), so one library is fast on new CPUs and still runs on every
// CPU TensorFlow itself runs on. Callers split large products across threads.
#ifndef TF_LSTM_OPS_CC_CPU_GEMM_H_
#define TF_LSTM_OPS_CC_CPU_GEMM_H_

#include <cstdint>

namespace tf_lstm_ops {
namespace gemm {

// Products (one Block call) of at most this many multiply-adds run on the ISA builds' register
// tiles, copying slabs of B; larger ones on Eigen's cache-blocked GEMM (gemm_isa.cc).
constexpr double kTiledMaxMacs = static_cast<double>(int64_t{1} << 27);

// The register tiles' products copy B one slab at a time for every block of this many rows of
// op(A) (a transposed B through a transposing copy, once per block).
constexpr int64_t kSlabBlockRows = 384;

// How a product sums over k. kPlain: each output is one FMA chain per 256-deep slab of k, the
// slabs added in A. kLong, for the long float sums over an RNN's time x batch rows (weight
// gradients; several times less accurate as one chain than a per-step computation): where the
// register tiles run the product (up to 2^27 multiply-adds) and k > 256, FMA chains of 32, a
// slab's chains added in float, the slabs in double, C rounded once (about 3 % more time). The
// same as kPlain for double, and for larger products (Eigen's blocking).
enum class Sum { kPlain, kLong };

// C[m,n] = op(A)·op(B) (+ C when accumulate). op(A) is [m,k]: A is stored row-major [m,k] with
// leading dimension lda, or [k,m] when trans_a; likewise op(B) is [k,n], stored [n,k] when
// trans_b. C is row-major with leading dimension ldc. Requires m, n, k > 0. Products of at most
// kDotMaxRows rows with trans_b (and not trans_a) read B in place as dot products (where the
// build has AVX2 or AVX-512); other small products copy slabs of a transposed B.
constexpr int kDotMaxRows = 3;
template <typename A>
void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
           const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc, Sum sum = Sum::kPlain);

// Packed-panel GEMM, for products that reuse one B many times (an RNN's recurrent weights, once
// per step): op(B) [k, n] is packed once into panels of kPanelWidth columns, zero-padded, each
// stored row-major [k, kPanelWidth] (panel q holds columns [q·kPanelWidth, (q+1)·kPanelWidth)),
// k·PaddedCols(n) values in all. The layout is the same on every ISA.
constexpr int kPanelWidth = 16;
inline int64_t PaddedCols(int64_t n) { return (n + kPanelWidth - 1) / kPanelWidth * kPanelWidth; }

// Packs op(B) ([k, n]; stored row-major [k, n] with leading dimension ldb, or [n, k] when
// trans_b) into `packed`.
template <typename A>
void PackPanels(bool trans_b, int64_t k, int64_t n, const A* b, int64_t ldb, A* packed);

// C[m,n] = A·B (+ C when accumulate): A row-major [m,k] (leading dimension lda), B packed by
// PackPanels from an operand with the same k and n, C row-major (ldc); only C's m x n block is
// written. Each output is summed in increasing k: the result does not depend on how a caller
// splits m or n. Requires m, n, k > 0.
template <typename A>
void PackedBlock(int64_t m, int64_t n, int64_t k, const A* a, int64_t lda, const A* packed,
                 bool accumulate, A* c, int64_t ldc);

// bfloat16 operands (their bits, as uint16_t) packed for a dot-product instruction: panels of
// kPanelWidth columns as above, each row pair (2q, 2q + 1) stored interleaved
// ([k/2][kPanelWidth][2], k rounded up to even and zero-padded), PackedSizeBf16(k, n) values.
inline int64_t PackedSizeBf16(int64_t k, int64_t n) { return (k + 1) / 2 * 2 * PaddedCols(n); }
void PackPanelsBf16(bool trans_b, int64_t k, int64_t n, const uint16_t* b, int64_t ldb,
                    uint16_t* packed);

// bfloat16 conversions (bf16 as its bits): float to bf16 rounds to nearest even, NaN to a quiet
// NaN of the same sign (0x7FC0 / 0xFFC0), exactly as Eigen::bfloat16(float) does; bf16 to float
// is exact. Vectorised by the ISA builds (Eigen's scalar conversion is a large share of a
// bfloat16 op's time at small batches).
void FloatToBf16(const float* src, uint16_t* dst, int64_t n);
void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n);

// Whether this CPU has a bf16 dot product (AVX512-BF16) for PackedBlockBf16. Without it the
// callers convert bf16 to fp32 and use the fp32 blocks instead.
bool HasBf16Dot();

// C[m,n] = A·B (+ C) for bf16 A (row-major, lda) and B (packed by PackPanelsBf16), fp32 C; the
// products are exact and summed in fp32 in increasing k (two at a time). Requires HasBf16Dot()
// (otherwise a slow portable loop runs) and m, n, k > 0.
void PackedBlockBf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                     const uint16_t* packed, bool accumulate, float* c, int64_t ldc);

// dst[j·ld_dst + i] = src[i·ld_src + j] for i < rows, j < cols: a transposing copy (the Keras <->
// cuDNN weight conversions of every Keras layer call), through 8 x 8 (double: 4 x 4) register
// blocks where the build has AVX. A is float, double, or uint16_t (half and bfloat16 bits: a
// plain loop).
template <typename A>
void Transpose(int64_t rows, int64_t cols, const A* src, int64_t ld_src, A* dst, int64_t ld_dst);

// The float FMA rate of one core with the selected build (register-only independent FMAs), in
// GFLOP/s, measured for about `seconds`: the benchmark's hardware peak.
double FmaPeakGflops(double seconds);

// Whether the blocks' products can run on the register tiles here (an AVX2 or AVX-512 build):
// otherwise every Block runs Eigen.
bool HasRegisterTiles();

// Whether the blocks run an AVX-512 build here (after TF_LSTM_OPS_CPU_ISA's cap): the engines'
// element-wise passes then run their AVX-512 variant too (cc/cpu/elementwise.h).
bool IsAvx512();

// The instruction set the blocks run with on this CPU ("avx512_bf16" (AVX-512 with the bf16
// dot product), "avx512", "avx2", "avx" or "generic").
const char* IsaName();

}  // namespace gemm
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_GEMM_H_
