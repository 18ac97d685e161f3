// What the RNN engines' element-wise passes share on the CPU: per-thread row buffers and loops of
// Keras' activations over a row (cc/core/rnn_activation.h), each one loop per activation.
#ifndef TF_LSTM_OPS_CC_CPU_ROWS_H_
#define TF_LSTM_OPS_CC_CPU_ROWS_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "cc/core/rnn_activation.h"

namespace tf_lstm_ops {
namespace cpu {

// This thread's buffer number kWhich of at least n elements (the pools' threads live across
// calls, so a buffer is allocated once per thread, not per step).
template <typename A, int kWhich = 0>
A* RowScratch(int64_t n) {
  thread_local std::vector<A> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

// f(kind): kind as a compile-time constant, so that a loop over elements inside f is one loop
// per activation, which vectorises where that function does.
template <typename F>
void WithActivation(RnnActivation k, F&& f) {
  using K = RnnActivation;
  switch (k) {
#define TF_LSTM_ACTIVATION_CASE(name) \
  case K::name:                        \
    return f(std::integral_constant<K, K::name>{});
    TF_LSTM_ACTIVATION_CASE(kTanh)
    TF_LSTM_ACTIVATION_CASE(kSigmoid)
    TF_LSTM_ACTIVATION_CASE(kRelu)
    TF_LSTM_ACTIVATION_CASE(kHardSigmoid)
    TF_LSTM_ACTIVATION_CASE(kHardSigmoidKeras2)
    TF_LSTM_ACTIVATION_CASE(kLinear)
    TF_LSTM_ACTIVATION_CASE(kElu)
    TF_LSTM_ACTIVATION_CASE(kSoftsign)
    TF_LSTM_ACTIVATION_CASE(kSilu)
    TF_LSTM_ACTIVATION_CASE(kGelu)
#undef TF_LSTM_ACTIVATION_CASE
  }
}

// y[j] = f(x[j]) (kSlope: f'(x[j])) for j < n; y may be x.
template <typename A, typename Math, bool kSlope = false>
void ActivateRow(RnnActivation k, const A* x, A* y, int64_t n) {
  WithActivation(k, [&](auto kind) {
    constexpr RnnActivation K = decltype(kind)::value;
    for (int64_t j = 0; j < n; ++j) {
      y[j] = kSlope ? ActivationSlope<A, Math>(K, x[j]) : Activate<A, Math>(K, x[j]);
    }
  });
}
template <typename A, typename Math>
void SlopeRow(RnnActivation k, const A* x, A* y, int64_t n) {
  ActivateRow<A, Math, true>(k, x, y, n);
}
// y[j] = f(x[j]) and s[j] = f'(x[j]) (ActivationSlopeGiven: f once where the slope follows
// from it); y, s and x distinct.
template <typename A, typename Math>
void ValueAndSlopeRow(RnnActivation k, const A* x, A* y, A* s, int64_t n) {
  WithActivation(k, [&](auto kind) {
    constexpr RnnActivation K = decltype(kind)::value;
    for (int64_t j = 0; j < n; ++j) y[j] = Activate<A, Math>(K, x[j]);
    for (int64_t j = 0; j < n; ++j) s[j] = ActivationSlopeGiven<A, Math>(K, x[j], y[j]);
  });
}

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_ROWS_H_
