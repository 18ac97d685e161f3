// Layer normalisation of one row (docs/layer_norm_lstm.md §2), framework-free: y = x̂·γ + β with
// x̂ = (v − μ)·r, r = 1/sqrt(σ² + ε), μ and σ² the row's mean and population variance, as Keras'
// LayerNormalization and TF Addons' cells define it. The sums run in double (two passes), so a
// float row's statistics are exact to float's rounding whatever its length.
//
// The per-element steps are TF_LSTM_HOST_DEVICE so that the GPU engine, which sums a row across
// a thread block (cc/gpu/reductions.h), rounds exactly as NormalizeRow does once it has the sums.
#ifndef TF_LSTM_OPS_CC_CORE_LAYER_NORM_H_
#define TF_LSTM_OPS_CC_CORE_LAYER_NORM_H_

#include <cmath>
#include <cstdint>

#include "cc/core/host_device.h"

namespace tf_lstm_ops {

// r = 1/sqrt(σ² + ε) of a row of n values whose squared deviations from the mean sum to
// `squares` (in double), rounded to A once.
template <typename A>
TF_LSTM_HOST_DEVICE inline A LayerNormRstd(double squares, int64_t n, double epsilon) {
  return static_cast<A>(1.0 / std::sqrt(squares / static_cast<double>(n) + epsilon));
}

// x̂ = (v − μ)·r, with μ the row's mean rounded to A.
template <typename A>
TF_LSTM_HOST_DEVICE inline A LayerNormXhat(A v, A mu, A r) {
  return (v - mu) * r;
}

// The normalisation's backward at one element: r·((dx̂ − m1) − x̂·m2), m1 and m2 the row's means
// of dx̂ and of dx̂ ⊙ x̂ (rounded to A).
template <typename A>
TF_LSTM_HOST_DEVICE inline A LayerNormGrad(A dxhat, A xhat, A r, A m1, A m2) {
  return r * ((dxhat - m1) - xhat * m2);
}

// Σ term(j) for j < n in double, as 8 interleaved sums (lane l adds the terms j ≡ l mod 8, in
// order) then added: each lane is a double sum, and the independent lanes vectorise.
template <typename Term>
inline double RowSum(int64_t n, Term term) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
  }
  double sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l];
  for (; j < n; ++j) sum += term(j);
  return sum;
}

// xhat[j] = (v[j] − μ)·r for j < n (xhat may be v); returns r. n > 0.
template <typename A>
inline A NormalizeRow(const A* v, int64_t n, double epsilon, A* xhat) {
  const double mean = RowSum(n, [v](int64_t j) { return static_cast<double>(v[j]); }) /
                      static_cast<double>(n);
  const double squares = RowSum(n, [v, mean](int64_t j) {
    const double dev = v[j] - mean;
    return dev * dev;
  });
  const A r = LayerNormRstd<A>(squares, n, epsilon);
  const A mu = static_cast<A>(mean);
  for (int64_t j = 0; j < n; ++j) xhat[j] = LayerNormXhat(v[j], mu, r);
  return r;
}

// The gradient through the normalisation: given dxhat = dL/dx̂ (dL/dy ⊙ γ) of a row normalised
// to xhat with r, dv[j] = r·(dxhat[j] − mean(dxhat) − x̂[j]·mean(dxhat ⊙ x̂)), added to dv when
// `accumulate`. dv may be dxhat. n > 0.
template <typename A>
inline void NormalizeRowBackward(const A* dxhat, const A* xhat, A r, int64_t n, bool accumulate,
                                 A* dv) {
  const double s1 = RowSum(n, [dxhat](int64_t j) { return static_cast<double>(dxhat[j]); });
  const double s2 = RowSum(n, [dxhat, xhat](int64_t j) {
    return static_cast<double>(dxhat[j]) * xhat[j];
  });
  const A m1 = static_cast<A>(s1 / static_cast<double>(n));
  const A m2 = static_cast<A>(s2 / static_cast<double>(n));
  for (int64_t j = 0; j < n; ++j) {
    const A g = LayerNormGrad(dxhat[j], xhat[j], r, m1, m2);
    dv[j] = accumulate ? dv[j] + g : g;
  }
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_LAYER_NORM_H_
