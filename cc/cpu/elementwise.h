// The engines' element-wise passes (the cell math of each step) at the CPU's vector width.
//
// The engines are compiled for AVX, TensorFlow's floor, so a pass over float cells runs 8 lanes
// wide; on an AVX-512 CPU that was about 30 % of a time step at B = 32 (docs/performance.md §3.1).
// Elementwise(fn) runs fn compiled a second time for AVX-512 there: the same source, everything
// fn calls inlined into one function built for the wider target, 16 lanes. The engines build with
// -ffp-contract=off (cc/build_defs.bzl), so neither variant fuses a multiply and an add: both
// evaluate the same operations in the same order, and results are bit for bit the same on every
// CPU (and equal to TensorFlow's activations where TF's are, see cc/core/precision.h).
#ifndef TF_LSTM_OPS_CC_CPU_ELEMENTWISE_H_
#define TF_LSTM_OPS_CC_CPU_ELEMENTWISE_H_

#include "cc/cpu/gemm.h"

namespace tf_lstm_ops {
namespace cpu {

#if defined(__x86_64__) && defined(__GNUC__)
namespace elementwise_internal {
// The target is the AVX-512 GEMM build's (cc/cpu/BUILD), which gemm::IsAvx512() vouches for;
// flatten inlines the whole pass (fn and everything it calls) so that it is compiled for it.
template <typename Fn>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma"), flatten)) void RunAvx512(
    const Fn& fn) {
  fn();
}
}  // namespace elementwise_internal
#endif

// Runs fn() (an element-wise pass: no products, nothing that needs another thread) in the variant
// for this CPU's vector width.
template <typename Fn>
void Elementwise(const Fn& fn) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (gemm::IsAvx512()) {
    elementwise_internal::RunAvx512(fn);
    return;
  }
#endif
  fn();
}

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_ELEMENTWISE_H_
