// Picks the fastest GEMM build this CPU supports, once.
#include "cc/cpu/gemm.h"

namespace tf_lstm_ops {
namespace gemm {

#define TF_LSTM_DECLARE_ISA(ISA)                                                                 \
  namespace ISA {                                                                                \
  template <typename A>                                                                          \
  void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a,            \
             int64_t lda, const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc);          \
  }
#if defined(__x86_64__)
TF_LSTM_DECLARE_ISA(avx512)
TF_LSTM_DECLARE_ISA(avx2)
TF_LSTM_DECLARE_ISA(avx)
#else
TF_LSTM_DECLARE_ISA(generic)
#endif
#undef TF_LSTM_DECLARE_ISA

namespace {

enum class Isa { kAvx512, kAvx2, kAvx, kGeneric };

Isa Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kAvx;
#else
  return Isa::kGeneric;
#endif
}

Isa Selected() {
  static const Isa isa = Detect();
  return isa;
}

}  // namespace

template <typename A>
void Block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const A* a, int64_t lda,
           const A* b, int64_t ldb, bool accumulate, A* c, int64_t ldc) {
#if defined(__x86_64__)
  switch (Selected()) {
    case Isa::kAvx512:
      return avx512::Block(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
    case Isa::kAvx2:
      return avx2::Block(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
    default:
      return avx::Block(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }
#else
  generic::Block(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
#endif
}

template void Block<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                           const float*, int64_t, bool, float*, int64_t);
template void Block<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                            const double*, int64_t, bool, double*, int64_t);

const char* IsaName() {
  switch (Selected()) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx:
      return "avx";
    default:
      return "generic";
  }
}

}  // namespace gemm
}  // namespace tf_lstm_ops
