// Layer normalisation of one row (docs/layer_norm_lstm.md §2), framework-free: y = x̂·γ + β with
// x̂ = (v − μ)·r, r = 1/sqrt(σ² + ε), μ and σ² the row's mean and population variance, as Keras'
// LayerNormalization and TF Addons' cells define it. The sums run in double (two passes), so a
// float row's statistics are exact to float's rounding whatever its length.
#ifndef TF_LSTM_OPS_CC_CORE_LAYER_NORM_H_
#define TF_LSTM_OPS_CC_CORE_LAYER_NORM_H_

#include <cmath>
#include <cstdint>

namespace tf_lstm_ops {

// xhat[j] = (v[j] − μ)·r for j < n (xhat may be v); returns r. n > 0.
template <typename A>
inline A NormalizeRow(const A* v, int64_t n, double epsilon, A* xhat) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += v[j];
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double dev = v[j] - mean;
    squares += dev * dev;
  }
  const A r = static_cast<A>(1.0 / std::sqrt(squares / static_cast<double>(n) + epsilon));
  const A mu = static_cast<A>(mean);
  for (int64_t j = 0; j < n; ++j) xhat[j] = (v[j] - mu) * r;
  return r;
}

// The gradient through the normalisation: given dxhat = dL/dx̂ (dL/dy ⊙ γ) of a row normalised
// to xhat with r, dv[j] = r·(dxhat[j] − mean(dxhat) − x̂[j]·mean(dxhat ⊙ x̂)), added to dv when
// `accumulate`. dv may be dxhat. n > 0.
template <typename A>
inline void NormalizeRowBackward(const A* dxhat, const A* xhat, A r, int64_t n, bool accumulate,
                                 A* dv) {
  double s1 = 0, s2 = 0;
  for (int64_t j = 0; j < n; ++j) {
    s1 += dxhat[j];
    s2 += static_cast<double>(dxhat[j]) * xhat[j];
  }
  const A m1 = static_cast<A>(s1 / static_cast<double>(n));
  const A m2 = static_cast<A>(s2 / static_cast<double>(n));
  for (int64_t j = 0; j < n; ++j) {
    const A g = r * ((dxhat[j] - m1) - xhat[j] * m2);
    dv[j] = accumulate ? dv[j] + g : g;
  }
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_LAYER_NORM_H_
