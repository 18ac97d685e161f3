// The precision policy of every engine, CPU and GPU: which type a storage type computes in, and how
// the activations are evaluated in it. Read with docs/performance.md §6 and docs/block_lstm.md §8.
#ifndef TF_LSTM_OPS_CC_CORE_PRECISION_H_
#define TF_LSTM_OPS_CC_CORE_PRECISION_H_

#include <cmath>
#include <type_traits>

#include "cc/core/host_device.h"

namespace tf_lstm_ops {

// How σ and tanh are evaluated. ExactMath calls libm: the reference precision, for double.
// FastMath is for float compute (float, half and bfloat16 storage): the rational tanh
// approximation TensorFlow's own CPU kernels use through Eigen (|error| <= 3.3e-7) and
// σ(x) = (1 + tanh(x/2)) / 2 (|error| <= 2.3e-7); both are branch-free, so the element-wise loops
// vectorise (libm's scalar calls made bfloat16 twice as slow as float). For half and bfloat16
// the error is far below a rounding step (>= 4.9e-4 relative), so each output is still the
// correctly rounded value except within 3.3e-7 of a rounding midpoint. NaN propagates.
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
    x = x < -9.f ? -9.f : (x > 9.f ? 9.f : x);  // tanh is +-1 in float beyond
    const float x2 = x * x;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 - 8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    return (p * x) / q;
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
