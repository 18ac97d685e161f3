// Single-threaded row-major GEMM blocks, framework-free, built for several x86 ISAs and picked at
// run time (AVX-512 / AVX2+FMA / AVX), so one library is fast on new CPUs and still runs on every
// CPU TensorFlow itself runs on. Callers split large products across threads.
#ifndef TF_LSTM_OPS_CC_CPU_GEMM_H_
#define TF_LSTM_OPS_CC_CPU_GEMM_H_

#include <cstdint>

namespace tf_lstm_ops {
namespace gemm {

// C[m,n] = op(A)·op(B) (+ C when accumulate). op(A) is [m,k]: A is stored row-major [m,k] with
// leading dimension lda, or [k,m] when trans_a; likewise op(B) is [k,n], stored [n,k] when
// trans_b. C is row-major with leading dimension ldc. Requires m, n, k > 0.
template <typename A>
void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
           const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc);

// Packed-panel GEMM, for products that reuse one B many times (an RNN's recurrent weights, once
// per step): op(B) [k, n] is packed once into panels of kPanelWidth columns, zero-padded, each
// stored row-major [k, kPanelWidth] (panel q holds columns [q·kPanelWidth, (q+1)·kPanelWidth)),
// PackedSize(k, n) values in all. The layout is the same on every ISA.
constexpr int kPanelWidth = 16;
inline int64_t PaddedCols(int64_t n) { return (n + kPanelWidth - 1) / kPanelWidth * kPanelWidth; }
inline int64_t PackedSize(int64_t k, int64_t n) { return k * PaddedCols(n); }

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

// The instruction set the blocks run with on this CPU ("avx512", "avx2", "avx" or "generic").
const char* IsaName();

}  // namespace gemm
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_GEMM_H_
