// The precision policy of every engine, CPU and GPU: which type a storage type computes in, and how
// the activations are evaluated in it. Read with docs/performance.md §6 and docs/block_lstm.md §8.
#ifndef TF_LSTM_OPS_CC_CORE_PRECISION_H_
#define TF_LSTM_OPS_CC_CORE_PRECISION_H_

#include <cmath>
#include <type_traits>

#include "cc/core/host_device.h"

namespace tf_lstm_ops {

// How σ and tanh are evaluated. ExactMath calls libm: the reference precision, for double.
// FastMath is for float compute (float, half and bfloat16 storage): tanh is the [9/8] minimax
// rational function the Eigen of TensorFlow 2.21's CPU kernels evaluates (a fit over [-8.67,
// 8.67] by rminimax; |error| <= 3.4e-7, a couple of ulps), clamped where it reaches ±1, so a
// float tanh here equals TensorFlow's bit for bit where neither contracts to FMAs; σ(x) =
// (1 + tanh(x/2)) / 2 (|error| <= 2.3e-7). Both are branch-free, so the element-wise loops
// vectorise (libm's scalar calls made bfloat16 twice as slow as float). For half and bfloat16
// the error is far below a rounding step (>= 4.9e-4 relative), so each output is still the
// correctly rounded value except within 3.4e-7 of a rounding midpoint. NaN propagates.
struct ExactMath {
  template <typename Acc>
  TF_LSTM_HOST_DEVICE static Acc Tanh(Acc x) {
    return std::tanh(x);
  }
  template <typename Acc>
  TF_LSTM_HOST_DEVICE static Acc Sigmoid(Acc x) {
    return Acc(1) / (Acc(1) + std::exp(-x));
  }
};

struct FastMath {
  TF_LSTM_HOST_DEVICE static float Tanh(float x) {
    // (the smallest |x| at which the fraction is exactly ±1 when evaluated without FMAs)
    constexpr float kClamp = 7.90738964080810547f;
    x = x < -kClamp ? -kClamp : (x > kClamp ? kClamp : x);
    const float x2 = x * x;
    float p = 1.394553628e-8f;  // odd numerator: x + x³·p(x²)
    p = p * x2 + 2.102733560e-5f;
    p = p * x2 + 3.520756727e-3f;
    p = p * x2 + 1.340216100e-1f;
    float q = 8.015776984e-7f;  // even denominator
    q = q * x2 + 3.326951409e-4f;
    q = q * x2 + 2.597254514e-2f;
    q = q * x2 + 4.673548340e-1f;
    q = q * x2 + 1.0f;
    return (x2 * x * p + x) / q;
  }
  TF_LSTM_HOST_DEVICE static float Sigmoid(float x) { return 0.5f + 0.5f * Tanh(0.5f * x); }
};

// The compute type of a storage type: float for half, bfloat16 and float (16-bit values are
// widened once, computed in float, rounded once), double for double. One definition for the CPU
// kernels, the OpKernels (reserve-space sizes) and the GPU engines.
template <typename Storage>
using AccFor = std::conditional_t<std::is_same_v<Storage, double>, double, float>;

// ExactMath for double, FastMath for every storage type computed in float.
template <typename Storage>
using MathFor = std::conditional_t<std::is_same_v<Storage, double>, ExactMath, FastMath>;

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_PRECISION_H_
