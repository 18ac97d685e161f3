// The math of one GRU cell and one plain RNN cell for one (batch row, unit) element, forward and
// backward, in cuDNN's form (docs/cudnn_rnn.md §4, §7.2), and the CudnnRNN family's LSTM as
// lstm_cell.h's cell (IFCO layout, no peepholes, forget bias or clipping). Framework-free.
#ifndef TF_LSTM_OPS_CC_CORE_CUDNN_RNN_CELLS_H_
#define TF_LSTM_OPS_CC_CORE_CUDNN_RNN_CELLS_H_

#include <cmath>

#include "cc/core/lstm_cell.h"
#include "cc/core/rnn_activation.h"

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

// Element j's gate gradients into the dgates rows ([G][H] blocks) the products read: LSTM's one
// row; GRU's input-side gx and recurrent-side gh, equal but for the candidate (times r there).
template <typename A>
TF_LSTM_HOST_DEVICE inline void StoreLstmGateGradients(const CellGradients<A>& g, int64_t H,
                                                       int64_t j, A* gx) {
  gx[j] = g.d_i;
  gx[H + j] = g.d_f;
  gx[2 * H + j] = g.d_c;
  gx[3 * H + j] = g.d_o;
}
// Where the GRU's gates r and u start in such a row: cuDNN's order r, u, h puts them at 0 and H;
// Keras' z (= u), r, h at H and 0, where the CPU engine reads Keras' weights in place
// (PseudoLayer::gate_block). The candidate's block is the third in both.
struct GruGateStarts {
  int64_t r, u;
};
template <typename A>
TF_LSTM_HOST_DEVICE inline void StoreGruGateGradients(const GruGradients<A>& g, int64_t H,
                                                      GruGateStarts at, int64_t j, A* gx,
                                                      A* gh) {
  gx[at.r + j] = gh[at.r + j] = g.d_r;
  gx[at.u + j] = gh[at.u + j] = g.d_u;
  gx[2 * H + j] = g.d_xc;
  gh[2 * H + j] = g.d_hc;
}
template <typename A>
TF_LSTM_HOST_DEVICE inline void StoreGruGateGradients(const GruGradients<A>& g, int64_t H,
                                                      int64_t j, A* gx, A* gh) {
  StoreGruGateGradients(g, H, GruGateStarts{0, H}, j, gx, gh);
}

// ---- Cells with Keras' activations (docs/cudnn_rnn.md §4.7) ------------------------------------
// `act` is the candidate's (and LSTM's output's) activation, `rec` the gates'. The saved gates
// hold the pre-activations (LSTM a_i, a_f, a_c, a_o; GRU a_r, a_u, a_n = x_c + r·h_c and h_c;
// plain RNN a), since some slopes need them (silu, gelu). The terms are summed in Keras' order.
// The CPU engine evaluates the activations row by row (each loop vectorises) and combines them
// with the functions below; the GPU engine calls the per-element forms (*At).

// LSTM: c = f·c_prev + i·g with g = act(a_c); h = o·act(c).
template <typename A>
TF_LSTM_HOST_DEVICE inline A LstmAnyCellState(A i, A f, A g, A c_prev) {
  return f * c_prev + i * g;
}
// From the gates' values (i, f, g, o) and slopes (si, sf, sg, so), co = act(c) and its slope
// sco; dc is the carried dL/dc, dh = dL/dm (m = o·co).
template <typename A>
TF_LSTM_HOST_DEVICE inline CellGradients<A> LstmAnyBackward(A i, A f, A g, A o, A si, A sf, A sg,
                                                             A so, A co, A sco, A c_prev, A dc,
                                                             A dh) {
  CellGradients<A> r;
  const A dcs = dc + dh * o * sco;
  r.d_i = dcs * g * si;
  r.d_f = dcs * c_prev * sf;
  r.d_c = dcs * i * sg;
  r.d_o = dh * co * so;
  r.cs_prev_grad = dcs * f;
  return r;
}
// GRU (reset after): h = u·h_prev + (1 - u)·n with n = act(a_n), a_n = x_c + r·h_c.
template <typename A>
TF_LSTM_HOST_DEVICE inline A GruAnyOutput(A u, A n, A h_prev) {
  return u * h_prev + (A(1) - u) * n;
}
template <typename A>
TF_LSTM_HOST_DEVICE inline GruGradients<A> GruAnyBackward(A r, A u, A n, A sr, A su, A sn, A h_c,
                                                          A h_prev, A dh) {
  GruGradients<A> g;
  g.d_xc = dh * (A(1) - u) * sn;
  g.d_hc = g.d_xc * r;
  g.d_r = g.d_xc * h_c * sr;
  g.d_u = dh * (h_prev - n) * su;
  g.h_prev_direct = dh * u;
  return g;
}

// GRU resetting before (Keras' reset_after=False; docs/cudnn_rnn.md §4.8): the candidate's
// recurrent product reads r ⊙ h_prev, n = act(x_c + (r ⊙ h_prev)·R_hᵀ + b_Rh), so a step runs
// the gates' product, then the candidate's on r ⊙ h_prev. Saved: a_r, a_u, a_n and r ⊙ h_prev
// (the candidate product's operand, for dR_h). h_operand is h_prev (times the candidate's
// recurrent dropout mask where there is one), mask that mask or 1.
template <typename A>
TF_LSTM_HOST_DEVICE inline A GruResetOperand(A r, A h_operand) {
  return r * h_operand;
}
// From the candidate and update gate's values and slopes: the gate gradients but r's (which
// needs d(r ⊙ h) = d_n·R_h, the candidate product's backward: GruResetGateBackward) and the
// direct term. Recurrent-side gradients equal the input side's (nothing multiplies h_c).
template <typename A>
TF_LSTM_HOST_DEVICE inline GruGradients<A> GruResetCandidateBackward(A u, A n, A su, A sn,
                                                                     A h_prev, A dh) {
  GruGradients<A> g;
  g.d_xc = g.d_hc = dh * (A(1) - u) * sn;
  g.d_u = dh * (h_prev - n) * su;
  g.d_r = A(0);
  g.h_prev_direct = dh * u;
  return g;
}
// From d_rh = d(r ⊙ h_operand): r's gate gradient, and h_prev's term through the operand.
template <typename A>
struct GruResetGateGradients {
  A d_r, h_prev_term;
};
template <typename A>
TF_LSTM_HOST_DEVICE inline GruResetGateGradients<A> GruResetGateBackward(A d_rh, A r, A sr,
                                                                         A h_operand, A mask) {
  return {d_rh * h_operand * sr, d_rh * r * mask};
}

// Per element: LSTM forward from the pre-activations; writes c and m = o·act(c).
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline void LstmAnyForwardAt(RnnActivation act, RnnActivation rec, A a_i,
                                                 A a_f, A a_c, A a_o, A c_prev, A* c, A* m) {
  *c = LstmAnyCellState(Activate<A, Math>(rec, a_i), Activate<A, Math>(rec, a_f),
                        Activate<A, Math>(act, a_c), c_prev);
  *m = Activate<A, Math>(rec, a_o) * Activate<A, Math>(act, *c);
}
// LSTM's new c from the saved pre-activations (element j of a [4][H] block): LstmAnyForwardAt's,
// again, where the c carried is another (zoneout's blend, docs/cudnn_rnn.md §4.9).
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A LstmAnyCellStateAt(RnnActivation act, RnnActivation rec,
                                                const A* pre, int64_t H, int64_t j, A c_prev) {
  return LstmAnyCellState(Activate<A, Math>(rec, pre[j]), Activate<A, Math>(rec, pre[H + j]),
                          Activate<A, Math>(act, pre[2 * H + j]), c_prev);
}
// LSTM backward from the saved pre-activations (element j of a [4][H] block); *m = o·act(c).
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline CellGradients<A> LstmAnyBackwardAt(RnnActivation act,
                                                              RnnActivation rec, const A* pre,
                                                              int64_t H, int64_t j, A c,
                                                              A c_prev, A dc, A dh, A* m) {
  const A a_i = pre[j], a_f = pre[H + j], a_c = pre[2 * H + j], a_o = pre[3 * H + j];
  const A o = Activate<A, Math>(rec, a_o), co = Activate<A, Math>(act, c);
  *m = o * co;
  return LstmAnyBackward(Activate<A, Math>(rec, a_i), Activate<A, Math>(rec, a_f),
                         Activate<A, Math>(act, a_c), o, ActivationSlope<A, Math>(rec, a_i),
                         ActivationSlope<A, Math>(rec, a_f), ActivationSlope<A, Math>(act, a_c),
                         ActivationSlope<A, Math>(rec, a_o), co,
                         ActivationSlope<A, Math>(act, c), c_prev, dc, dh);
}
// GRU forward from the two sides' pre-activations; saves a_r, a_u, a_n, h_c into pre[g·H + j].
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A GruAnyForwardAt(RnnActivation act, RnnActivation rec, A x_r, A x_u,
                                             A x_c, A h_r, A h_u, A h_c, A h_prev, A* pre,
                                             int64_t H, int64_t j) {
  const A a_r = x_r + h_r, a_u = x_u + h_u;
  const A a_n = x_c + Activate<A, Math>(rec, a_r) * h_c;
  pre[j] = a_r;
  pre[H + j] = a_u;
  pre[2 * H + j] = a_n;
  pre[3 * H + j] = h_c;
  return GruAnyOutput(Activate<A, Math>(rec, a_u), Activate<A, Math>(act, a_n), h_prev);
}
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline GruGradients<A> GruAnyBackwardAt(RnnActivation act, RnnActivation rec,
                                                            const A* pre, int64_t H, int64_t j,
                                                            A h_prev, A dh) {
  const A a_r = pre[j], a_u = pre[H + j], a_n = pre[2 * H + j];
  return GruAnyBackward(Activate<A, Math>(rec, a_r), Activate<A, Math>(rec, a_u),
                        Activate<A, Math>(act, a_n), ActivationSlope<A, Math>(rec, a_r),
                        ActivationSlope<A, Math>(rec, a_u), ActivationSlope<A, Math>(act, a_n),
                        pre[3 * H + j], h_prev, dh);
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_CUDNN_RNN_CELLS_H_
