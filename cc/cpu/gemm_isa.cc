// One ISA's GEMM blocks (compiled once per ISA with its -m flags and -DTF_LSTM_GEMM_ISA=<name>).
// Each build renames Eigen's namespace (-DEigen=Eigen_<isa>) so that its template instances can
// never be merged by the linker with another ISA's, or with TensorFlow's, copies: an AVX-512
// instance must not end up serving an AVX-only CPU. Include nothing that mentions Eigen but this.
#ifndef TF_LSTM_GEMM_ISA
#error "build with -DTF_LSTM_GEMM_ISA=<isa> -DEigen=Eigen_<isa>"
#endif

#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "cc/cpu/gemm.h"

namespace tf_lstm_ops {
namespace gemm {
namespace TF_LSTM_GEMM_ISA {

// packed_isa.cc's register tiles over slabs of B; false where this ISA's build has none (then
// Eigen runs).
template <typename A>
bool SlabbedBlock(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a,
                  int64_t lda, const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc,
                  bool long_sum);

// One Eigen product.
template <typename A>
void EigenBlock(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a,
                int64_t lda, const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc) {
  using Matrix = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  using ConstMap = Eigen::Map<const Matrix, Eigen::Unaligned, Stride>;
  Eigen::Map<Matrix, Eigen::Unaligned, Stride> out(c, m, n, Stride(ldc));
  const ConstMap lhs(a, trans_a ? k : m, trans_a ? m : k, Stride(lda));
  const ConstMap rhs(b, trans_b ? n : k, trans_b ? k : n, Stride(ldb));
  // Four spelled-out cases: Eigen picks its packed GEMM kernel for each storage order.
  if (!trans_a && !trans_b) {
    accumulate ? out.noalias() += lhs * rhs : out.noalias() = lhs * rhs;
  } else if (!trans_a) {
    accumulate ? out.noalias() += lhs * rhs.transpose() : out.noalias() = lhs * rhs.transpose();
  } else if (!trans_b) {
    accumulate ? out.noalias() += lhs.transpose() * rhs : out.noalias() = lhs.transpose() * rhs;
  } else {
    accumulate ? out.noalias() += lhs.transpose() * rhs.transpose()
               : out.noalias() = lhs.transpose() * rhs.transpose();
  }
}

template <typename A>
void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
           const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc, bool long_sum) {
  // Products up to 2^27 multiply-adds (on one thread, a time loop's whole-sequence products
  // at small and medium sizes) run on packed_isa.cc's register tiles where this ISA's build has
  // them (AVX2, AVX-512): they copy only slabs of B, while Eigen packs both operands of every
  // product, and are 3-14 % faster there. Larger ones keep Eigen's cache blocking, which copes
  // better with operands far beyond L2.
  // Eigen packs a [kc, <= n] block of one operand and a [kc, <= m] block of the other per
  // product, on the stack when each fits in EIGEN_STACK_ALLOCATION_LIMIT (128 KiB), otherwise on
  // the heap; its kc is 400-500 here, so a time loop's whole-sequence products would allocate
  // 1-2 MiB, a large share of a small op's memory. So k is always cut into slabs of kDepth (C
  // accumulates slab by slab in increasing k), and the C of a small product into tiles for which
  // both blocks fit on the stack: such products allocate nothing, at no measurable cost. Larger
  // ones keep Eigen's m and n blocking (tiling them costs 3-5 %, and their buffers are a small
  // share of their operands).
  if (k == 0) {  // (gemm.h asks for k > 0; an empty sum is still zero)
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, A(0));
    }
    return;
  }
  const bool small = static_cast<double>(m) * n * k <= kTiledMaxMacs;
  if (small &&
      SlabbedBlock(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc, long_sum)) {
    return;
  }
  constexpr int64_t kDepth = 256;
  const int64_t fits = EIGEN_STACK_ALLOCATION_LIMIT / (kDepth * static_cast<int64_t>(sizeof(A)));
  const int64_t tile_m = small ? fits : m, tile_n = small ? fits : n;
  for (int64_t i0 = 0; i0 < m; i0 += tile_m) {
    for (int64_t j0 = 0; j0 < n; j0 += tile_n) {
      for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
        const A* a_block = a + (trans_a ? p0 * lda + i0 : i0 * lda + p0);
        const A* b_block = b + (trans_b ? j0 * ldb + p0 : p0 * ldb + j0);
        EigenBlock(trans_a, trans_b, std::min(tile_m, m - i0), std::min(tile_n, n - j0),
                   std::min(kDepth, k - p0), a_block, lda, b_block, ldb, accumulate || p0 > 0,
                   c + i0 * ldc + j0, ldc);
      }
    }
  }
}

template void Block<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                           const float*, int64_t, bool, float*, int64_t, bool);
template void Block<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                            const double*, int64_t, bool, double*, int64_t, bool);

}  // namespace TF_LSTM_GEMM_ISA
}  // namespace gemm
}  // namespace tf_lstm_ops
