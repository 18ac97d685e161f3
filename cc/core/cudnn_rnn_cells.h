// The math of one GRU cell and one plain RNN cell for one (batch row, unit) element, forward and
// backward, in cuDNN's form (docs/cudnn_rnn.md §4, §7.2), and the CudnnRNN family's LSTM as
// lstm_cell.h's cell (IFCO layout, no peepholes, forget bias or clipping). Framework-free.
#ifndef TF_LSTM_OPS_CC_CORE_CUDNN_RNN_CELLS_H_
#define TF_LSTM_OPS_CC_CORE_CUDNN_RNN_CELLS_H_

#include <cmath>

#include "cc/core/lstm_cell.h"

namespace tf_lstm_ops {

// cuDNN's LSTM: lstm_cell.h's cell without forget bias, clipping or peepholes (constant, so the
// selects for them fold away and loops vectorise); pre-activations in cuDNN's gate order i, f,
// c, o. Its saved gates (one element's column of the [4][H] block) hold i, f, c~, o.
template <typename Acc, typename Math>
TF_LSTM_HOST_DEVICE inline CellActivations<Acc> CudnnLstmForward(Acc i, Acc f, Acc c, Acc o,
                                                                 Acc c_prev) {
  const CellParams<Acc> cell{Acc(0), Acc(0), false, false};
  return CellForward<Acc, Math>(cell, i, c, f, o, c_prev, Acc(0), Acc(0), Acc(0));
}
template <typename Acc>
TF_LSTM_HOST_DEVICE inline void CudnnLstmSave(const CellActivations<Acc>& a, Acc* saved,
                                              int64_t H, int64_t j) {
  saved[j] = a.i;
  saved[H + j] = a.f;
  saved[2 * H + j] = a.ci;
  saved[3 * H + j] = a.o;
}
// Backward from the saved gates, the cell state c and its tanh co; dh is dL/dm (m = o·co).
template <typename Acc>
TF_LSTM_HOST_DEVICE inline CellGradients<Acc> CudnnLstmBackward(const Acc* saved, int64_t H,
                                                                int64_t j, Acc c, Acc co,
                                                                Acc c_prev, Acc dc, Acc dh) {
  const CellActivations<Acc> a{saved[j], c, saved[H + j], saved[3 * H + j], saved[2 * H + j],
                               co, Acc(0)};
  const ActivationGradients<Acc> no_direct{Acc(0), Acc(0), Acc(0), Acc(0), Acc(0)};
  return CellBackward<Acc>(false, a, c_prev, Acc(0), Acc(0), Acc(0), dc, dh, no_direct);
}

// GRU, "linear before reset": h~ = tanh(W_h x + b_Wh + r * (R_h h + b_Rh)).
template <typename Acc>
struct GruActivations {
  Acc r, u, candidate, recurrent_candidate;  // r, u, h~ and (R_h h + b_Rh), saved for backward
  Acc h;
};

// x_* = W_* x + b_W*, h_* = R_* h_prev + b_R* for the gates r, u and the candidate.
template <typename Acc, typename Math = ExactMath>
TF_LSTM_HOST_DEVICE inline GruActivations<Acc> GruForward(Acc x_r, Acc x_u, Acc x_c, Acc h_r,
                                                          Acc h_u, Acc h_c, Acc h_prev) {
  GruActivations<Acc> a;
  a.r = Math::Sigmoid(x_r + h_r);
  a.u = Math::Sigmoid(x_u + h_u);
  a.recurrent_candidate = h_c;
  a.candidate = Math::Tanh(x_c + a.r * h_c);
  a.h = (Acc(1) - a.u) * a.candidate + a.u * h_prev;
  return a;
}

// Gradients w.r.t. the input-side pre-activations (x_r, x_u, x_c), the recurrent-side ones
// (equal for r and u; h_c differs: it is multiplied by r), and h_prev's direct term (dh * u).
template <typename Acc>
struct GruGradients {
  Acc d_r, d_u, d_xc, d_hc, h_prev_direct;
};

template <typename Acc>
TF_LSTM_HOST_DEVICE inline GruGradients<Acc> GruBackward(const GruActivations<Acc>& a, Acc h_prev,
                                                         Acc dh) {
  GruGradients<Acc> g;
  const Acc d_candidate = dh * (Acc(1) - a.u);
  const Acc d_update = dh * (h_prev - a.candidate);
  g.d_xc = d_candidate * (Acc(1) - a.candidate * a.candidate);
  g.d_hc = g.d_xc * a.r;
  g.d_r = (g.d_xc * a.recurrent_candidate) * a.r * (Acc(1) - a.r);
  g.d_u = d_update * a.u * (Acc(1) - a.u);
  g.h_prev_direct = dh * a.u;
  return g;
}

// Plain RNN: h = tanh(a) or relu(a), a = W x + b_W + R h_prev + b_R.
template <typename Acc, typename Math = ExactMath>
TF_LSTM_HOST_DEVICE inline Acc SimpleRnnForward(bool relu, Acc a) {
  return relu ? (a > Acc(0) ? a : Acc(0)) : Math::Tanh(a);
}

// Gradient w.r.t. a, from the output h.
template <typename Acc>
TF_LSTM_HOST_DEVICE inline Acc SimpleRnnBackward(bool relu, Acc h, Acc dh) {
  return relu ? (h > Acc(0) ? dh : Acc(0)) : dh * (Acc(1) - h * h);
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_CUDNN_RNN_CELLS_H_
