// Keras' element-wise activations for the CudnnRNN engines' cells with activations other than
// cuDNN's (docs/cudnn_rnn.md §4.7): each function and its slope (the derivative at the
// pre-activation), evaluated in the compute type. Framework-free; the CPU and GPU engines and the
// binding share these definitions.
#ifndef TF_LSTM_OPS_CC_CORE_RNN_ACTIVATION_H_
#define TF_LSTM_OPS_CC_CORE_RNN_ACTIVATION_H_

#include <cmath>
#include <string_view>

#include "cc/core/host_device.h"

namespace tf_lstm_ops {

// Each is the function Keras 3 or tf_keras computes for that name, with TensorFlow's gradient
// (its conventions at the kinks: relu' (0) = 0, elu' (0) = 1, hard sigmoids as their clips).
enum class RnnActivation : int {
  kTanh,
  kSigmoid,
  kRelu,
  kHardSigmoid,        // Keras 3: relu6(x + 3) / 6
  kHardSigmoidKeras2,  // tf_keras: clip(0.2 x + 0.5, 0, 1)
  kLinear,
  kElu,       // alpha = 1
  kSoftsign,  // x / (1 + |x|)
  kSilu,      // x · sigmoid(x) (Keras' swish)
  kGelu,      // x · Φ(x), the exact (erf) form, Keras' default
};
constexpr int kNumRnnActivations = 10;

// A model's choice (RnnModel::activations()), as the GPU engine's element-wise functors carry it.
struct ActivationChoice {
  bool custom = false;  // false: cuDNN's cells (tanh and sigmoid; relu for rnn_relu)
  RnnActivation act = RnnActivation::kTanh, rec = RnnActivation::kSigmoid;
};

// The attribute value of each (the ops' `activation` / `recurrent_activation`).
inline constexpr const char* kRnnActivationNames[kNumRnnActivations] = {
    "tanh", "sigmoid", "relu", "hard_sigmoid", "hard_sigmoid_keras2",
    "linear", "elu", "softsign", "silu", "gelu"};

// false for a name that is none of them.
inline bool RnnActivationNamed(std::string_view name, RnnActivation* out) {
  for (int k = 0; k < kNumRnnActivations; ++k) {
    if (name == kRnnActivationNames[k]) {
      *out = static_cast<RnnActivation>(k);
      return true;
    }
  }
  return false;
}

// f(x). Math supplies tanh and sigmoid (cc/core/precision.h), so "tanh" and "sigmoid" here are
// bit for bit the cuDNN cells' functions.
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A Activate(RnnActivation k, A x) {
  switch (k) {
    case RnnActivation::kTanh:
      return Math::Tanh(x);
    case RnnActivation::kSigmoid:
      return Math::Sigmoid(x);
    case RnnActivation::kRelu:
      return x > A(0) ? x : A(0);
    case RnnActivation::kHardSigmoid: {
      const A v = x + A(3);
      return (v < A(0) ? A(0) : (v > A(6) ? A(6) : v)) / A(6);
    }
    case RnnActivation::kHardSigmoidKeras2: {
      const A v = x * A(0.2) + A(0.5);
      return v < A(0) ? A(0) : (v > A(1) ? A(1) : v);
    }
    case RnnActivation::kLinear:
      return x;
    case RnnActivation::kElu:
      return x < A(0) ? A(std::expm1(x)) : x;
    case RnnActivation::kSoftsign:
      return x / (A(1) + (x < A(0) ? -x : x));
    case RnnActivation::kSilu:
      return x * Math::Sigmoid(x);
    case RnnActivation::kGelu:
      return A(0.5) * x * (A(1) + A(std::erf(x * A(0.70710678118654752440))));
  }
  return x;
}

// f'(x), at the pre-activation x.
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A ActivationSlope(RnnActivation k, A x) {
  switch (k) {
    case RnnActivation::kTanh: {
      const A y = Math::Tanh(x);
      return A(1) - y * y;
    }
    case RnnActivation::kSigmoid: {
      const A y = Math::Sigmoid(x);
      return y * (A(1) - y);
    }
    case RnnActivation::kRelu:
      return x > A(0) ? A(1) : A(0);
    case RnnActivation::kHardSigmoid: {  // relu6's gradient: 0 < x + 3 < 6
      const A v = x + A(3);
      return v > A(0) && v < A(6) ? A(1) / A(6) : A(0);
    }
    case RnnActivation::kHardSigmoidKeras2: {  // clip_by_value's gradient: inside or at a bound
      const A v = x * A(0.2) + A(0.5);
      return v >= A(0) && v <= A(1) ? A(0.2) : A(0);
    }
    case RnnActivation::kLinear:
      return A(1);
    case RnnActivation::kElu:
      return x < A(0) ? A(std::expm1(x)) + A(1) : A(1);
    case RnnActivation::kSoftsign: {
      const A d = A(1) + (x < A(0) ? -x : x);
      return A(1) / (d * d);
    }
    case RnnActivation::kSilu: {
      const A s = Math::Sigmoid(x);
      return s * (A(1) + x * (A(1) - s));
    }
    case RnnActivation::kGelu: {  // Φ(x) + x φ(x)
      const A cdf = A(0.5) * (A(1) + A(std::erf(x * A(0.70710678118654752440))));
      return cdf + x * A(0.39894228040143267794) * A(std::exp(A(-0.5) * x * x));
    }
  }
  return A(1);
}

// f'(x) given y = Activate(k, x): the same value as ActivationSlope, without evaluating f again
// where the slope is a function of y (tanh, sigmoid, elu), so a backward that needs both pays
// one transcendental per element.
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A ActivationSlopeGiven(RnnActivation k, A x, A y) {
  switch (k) {
    case RnnActivation::kTanh:
      return A(1) - y * y;
    case RnnActivation::kSigmoid:
      return y * (A(1) - y);
    case RnnActivation::kElu:
      return x < A(0) ? y + A(1) : A(1);
    default:
      return ActivationSlope<A, Math>(k, x);
  }
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_RNN_ACTIVATION_H_
