// One ISA's GEMM blocks (compiled once per ISA with its -m flags and -DTF_LSTM_GEMM_ISA=<name>).
// Each build renames Eigen's namespace (-DEigen=Eigen_<isa>) so that its template instances can
// never be merged by the linker with another ISA's, or with TensorFlow's, copies: an AVX-512
// instance must not end up serving an AVX-only CPU. Include nothing that mentions Eigen but this.
#ifndef TF_LSTM_GEMM_ISA
#error "build with -DTF_LSTM_GEMM_ISA=<isa> -DEigen=Eigen_<isa>"
#endif

#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>
#include <cstdint>

namespace tf_lstm_ops {
namespace gemm {
namespace TF_LSTM_GEMM_ISA {

template <typename A>
void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
           const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc) {
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

template void Block<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                           const float*, int64_t, bool, float*, int64_t);
template void Block<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                            const double*, int64_t, bool, double*, int64_t);

}  // namespace TF_LSTM_GEMM_ISA
}  // namespace gemm
}  // namespace tf_lstm_ops
