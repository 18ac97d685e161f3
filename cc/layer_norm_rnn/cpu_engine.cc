// The CPU engine of the LayerNorm GRU and SimpleRNN (cpu_engine.h; docs/layer_norm_rnn.md).
//
// As the LayerNorm LSTM's engine (cc/layer_norm_lstm/cpu_engine.cc): the norms reduce over whole
// rows, so the time loop splits the batch, each thread running its block of rows through every
// step with no synchronisation (a packed-panel product of its rows by the recurrent kernel, then
// each row's norm and cell in one pass). The input side x·W (and the GRU's norm of it) runs once
// over all T·B rows before the loop; the backward keeps each step's gradients of the two sides
// and forms the weight gradients, the input norm's backward and dx as whole-sequence products
// after it.
#include "cc/layer_norm_rnn/cpu_engine.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cc/core/layer_norm.h"
#include "cc/core/precision.h"
#include "cc/cpu/elementwise.h"
#include "cc/cpu/linalg.h"
#include "cc/cpu/rnn_inputs.h"
#include "cc/cpu/rows.h"

namespace tf_lstm_ops {
namespace cpu {
namespace {

// The weights in the compute type (a SimpleRNN's gamma_h stays null).
template <typename T, typename A>
LayerNormRnnWeights<A> ConvertWeights(const CPUDevice& d, Scratch& scratch,
                                      const LayerNormRnnModel& m,
                                      const LayerNormRnnWeights<T>& w) {
  const int64_t I = m.input_size, H = m.num_units, G = m.gate_width();
  const int64_t bias_rows = m.gru() ? 2 : 1;
  return {AsAcc<A>(d, scratch, w.kernel, I * G), AsAcc<A>(d, scratch, w.recurrent_kernel, H * G),
          AsAcc<A>(d, scratch, w.bias, bias_rows * G), AsAcc<A>(d, scratch, w.gamma_x, G),
          m.gru() ? AsAcc<A>(d, scratch, w.gamma_h, G) : nullptr};
}

// What a time loop reads and writes, resolved once.
template <typename A>
struct Loop {
  const LayerNormRnnModel& m;
  const LayerNormRnnRun& run;
  const std::vector<int64_t>& len;
  const LayerNormRnnLayout& lay;
  LayerNormRnnWeights<A> w;
  const A* h0;
  const A* mask;  // [B, H] recurrent dropout mask, or null
  ZoneoutWeights<A> zoneout;
  A* ws;            // the workspace after its header
  const A* packed;  // the recurrent kernel packed for this loop's product
  // The state h before step t of row b.
  const A* h_before(int64_t t, int64_t b) const {
    const int64_t H = m.num_units;
    return t == 0 ? h0 + b * H : ws + lay.h() + ((t - 1) * run.batch + b) * H;
  }
  // h_{t-1} of rows [b0, b1) as the recurrent product's operand (times the dropout mask):
  // [rows, H] with leading dimension H.
  const A* operand(int64_t t, int64_t b0, int64_t b1, A* buffer) const {
    const int64_t H = m.num_units;
    if (mask == nullptr) return h_before(t, b0);  // (a step's rows are contiguous, h0's too)
    for (int64_t b = b0; b < b1; ++b) {
      const A* h = h_before(t, b);
      A* out = buffer + (b - b0) * H;
      for (int64_t j = 0; j < H; ++j) out[j] = MaskedOperand(h[j], mask[b * H + j]);
    }
    return buffer;
  }
};

// The GRU's cell on one row, forward (LayerNormGruForwardAt's values, one activation loop at a
// time so that each vectorises): from X and U ([3H] each, Keras' gate order z, r, h), h̃ into
// h_new and [a_r, a_z, a_g, U_h] into saved.
template <typename A, typename Math>
void GruCellRow(const LayerNormRnnModel& m, const A* X, const A* U, const A* h_prev, A* h_new,
                A* saved, A* val) {
  const int64_t H = m.num_units;
  A *a_r = saved, *a_z = saved + H, *a_g = saved + 2 * H, *u_h = saved + 3 * H;
  for (int64_t j = 0; j < H; ++j) {
    a_r[j] = X[H + j] + U[H + j];
    a_z[j] = X[j] + U[j];
    u_h[j] = U[2 * H + j];
  }
  ActivateRow<A, Math>(m.recurrent_activation, a_r, val, H);  // r
  for (int64_t j = 0; j < H; ++j) a_g[j] = X[2 * H + j] + val[j] * u_h[j];
  ActivateRow<A, Math>(m.recurrent_activation, a_z, val, H);  // z
  ActivateRow<A, Math>(m.activation, a_g, val + H, H);        // g
  for (int64_t j = 0; j < H; ++j) h_new[j] = GruAnyOutput(val[j], val[H + j], h_prev[j]);
}

// Its backward (LayerNormGruBackwardAt's values): from dh = dL/dh̃, the gradients of X (dx) and
// U (du) in Keras' gate order, and h_prev's direct term added to `direct`.
template <typename A, typename Math>
void GruCellRowBackward(const LayerNormRnnModel& m, const A* saved, const A* h_prev,
                        const A* dh, A* dx, A* du, A* direct, A* buffer) {
  const int64_t H = m.num_units;
  A *v = buffer, *s = buffer + 3 * H;  // r, z, g and their slopes
  for (int g = 0; g < 3; ++g) {
    ValueAndSlopeRow<A, Math>(g == 2 ? m.activation : m.recurrent_activation, saved + g * H,
                              v + g * H, s + g * H, H);
  }
  for (int64_t j = 0; j < H; ++j) {
    const GruGradients<A> g = GruAnyBackward(v[j], v[H + j], v[2 * H + j], s[j], s[H + j],
                                             s[2 * H + j], saved[3 * H + j], h_prev[j], dh[j]);
    dx[j] = du[j] = g.d_u;
    dx[H + j] = du[H + j] = g.d_r;
    dx[2 * H + j] = g.d_xc;
    du[2 * H + j] = g.d_hc;
    direct[j] += g.h_prev_direct;
  }
}

// One row of one step, forward: from the input side zx_row ([G·H]: the GRU's X = LN(x·W)·γx + b_x,
// the SimpleRNN's x·W) and the recurrent product ah ([G·H], overwritten), h̃ into h_new. `saved`
// (the GRU's cell values), `xhat` (the step's norm: the GRU's of h·R, the SimpleRNN's of the sum)
// and `rstd` are where the row's saved values go (the workspace when training, else row buffers).
template <typename A, typename Math>
void ForwardRow(const Loop<A>& L, const A* zx_row, A* ah, const A* h_prev, A* h_new, A* saved,
                A* xhat, A* rstd, A* val) {
  const LayerNormRnnModel& m = L.m;
  const int64_t H = m.num_units, G = m.gate_width();
  const double eps = m.epsilon;
  const LayerNormRnnWeights<A>& w = L.w;
  if (m.gru()) {
    rstd[1] = NormalizeRow(ah, G, eps, xhat);
    const A* b_h = w.bias + G;
    for (int64_t k = 0; k < G; ++k) ah[k] = xhat[k] * w.gamma_h[k] + b_h[k];  // U
    GruCellRow<A, Math>(m, zx_row, ah, h_prev, h_new, saved, val);
    return;
  }
  for (int64_t j = 0; j < H; ++j) ah[j] += zx_row[j];  // v = x·W + h·R
  rstd[0] = NormalizeRow(ah, H, eps, xhat);
  rstd[1] = A(0);  // (no second norm)
  for (int64_t j = 0; j < H; ++j) {
    h_new[j] = LayerNormSimplePreActivation(xhat[j], w.gamma_x[j], w.bias[j]);
  }
  ActivateRow<A, Math>(m.activation, h_new, h_new, H);
}

// The forward of rows [b0, b1) through every step; zx: the input side of every row, time-major
// [T·B, G·H]; y: the outputs, time-major [T·B, H].
template <typename A, typename Math>
void ForwardRows(const Loop<A>& L, int64_t b0, int64_t b1, const A* zx, A* y) {
  const LayerNormRnnModel& m = L.m;
  const int64_t T = L.run.time, B = L.run.batch, H = m.num_units, G = m.gate_width();
  const int64_t rows = b1 - b0;
  const bool training = L.run.training;
  A* operand_buf = RowScratch<A, 0>(rows * H);
  A* ah = RowScratch<A, 1>(rows * G);
  A* row = RowScratch<A, 2>(4 * H + G + 3 * H + 2);  // unsaved: cell values, x̂, h̃, r; gates
  for (int64_t t = 0; t < T; ++t) {
    gemm::PackedBlock(rows, G, H, L.operand(t, b0, b1, operand_buf), H, L.packed, false, ah, G);
    Elementwise([&] {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t tb = t * B + b;
        const A* h_prev = L.h_before(t, b);
        A* h_out = L.ws + L.lay.h() + tb * H;
        if (t >= L.len[b]) {  // past this sequence's end: hold the state, output zero
          std::memcpy(h_out, h_prev, H * sizeof(A));
          std::fill(y + tb * H, y + (tb + 1) * H, A(0));
          if (training) {  // (the backward's sums read these rows times zero gradients)
            if (m.gru()) {
              std::fill(L.ws + L.lay.saved() + tb * 4 * H, L.ws + L.lay.saved() + (tb + 1) * 4 * H,
                        A(0));
              std::fill(L.ws + L.lay.xhat_h() + tb * G, L.ws + L.lay.xhat_h() + (tb + 1) * G, A(0));
            } else {
              std::fill(L.ws + L.lay.xhat_x() + tb * G, L.ws + L.lay.xhat_x() + (tb + 1) * G, A(0));
            }
            // (the GRU's x·W norm ran before the loop, for every row: its r stays)
            A* rstd = L.ws + L.lay.rstd() + tb * 2;
            std::fill(rstd + (m.gru() ? 1 : 0), rstd + 2, A(0));
          }
          continue;
        }
        A* saved = training && m.gru() ? L.ws + L.lay.saved() + tb * 4 * H : row;
        A* xhat = training ? L.ws + (m.gru() ? L.lay.xhat_h() : L.lay.xhat_x()) + tb * G
                           : row + 4 * H;
        A* h_new = row + 4 * H + G;
        A* rstd = training ? L.ws + L.lay.rstd() + tb * 2 : h_new + H;
        ForwardRow<A, Math>(L, zx + tb * G, ah + (b - b0) * G, h_prev, h_new, saved, xhat, rstd,
                            h_new + H + 2);
        const ZoneoutView<A> zh = L.zoneout.At(tb * H);
        for (int64_t j = 0; j < H; ++j) h_out[j] = zh.Blend(j, h_new[j], h_prev[j]);
        std::memcpy(y + tb * H, h_out, H * sizeof(A));
      }
    });
  }
}

// Scratch of a walk; one walk per engine call (counting, then carving), as cc/cudnn_rnn.
template <typename T, typename A>
bool ForwardWalk(const CPUDevice& d, Scratch& scratch, const LayerNormRnnModel& m,
                 const LayerNormRnnRun& run, const T* x, const T* h0,
                 const LayerNormRnnWeights<T>& weights, T* y, T* h_last, uint8_t* workspace) {
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, I = m.input_size;
  const int64_t G = m.gate_width(), rows = T_ * B;
  if (!scratch.counting()) {
    const RnnReserveHeader header = LayerNormRnnHeader(m, run, sizeof(T), sizeof(A));
    std::memcpy(workspace, &header, sizeof(header));
    if (T_ == 0 || B == 0 || H == 0) Convert(d, h0, h_last, B * H);  // the initial state
  }
  if (T_ == 0 || B == 0 || H == 0) return true;
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const LayerNormRnnLayout lay(m, run);
  A* ws = reinterpret_cast<A*>(workspace + sizeof(RnnReserveHeader));
  const LayerNormRnnWeights<A> w = ConvertWeights<T, A>(d, scratch, m, weights);
  const A* xs = ToTimeMajor<A>(d, scratch, run, I, x);
  const A* h0a = AsAcc<A>(d, scratch, h0, B * H);
  const A* mask = run.recurrent_mask
                      ? AsAcc<A>(d, scratch, static_cast<const T*>(run.recurrent_mask), B * H)
                      : nullptr;
  const Zoneout<A> zoneout = ConvertZoneout<T, A>(d, scratch, run, H);
  A* zx = scratch.Take<A>(rows * G);
  A* packed = scratch.Take<A>(H * gemm::PaddedCols(G));
  A* ys = scratch.Take<A>(rows * H);
  if (scratch.counting() || !scratch.ok()) return scratch.ok();

  Gemm(d, false, false, rows, G, I, xs, I, w.kernel, G, false, zx, G);
  if (m.gru()) {  // the GRU's input side: X = LN(x·W)·γx + b_x
    ParallelFor(d, rows, G * 3.0 * sizeof(A), G * 8.0, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        A* row = zx + r * G;
        A* xhat = run.training ? ws + lay.xhat_x() + r * G : row;
        const A r_x = NormalizeRow(row, G, static_cast<double>(m.epsilon), xhat);
        for (int64_t k = 0; k < G; ++k) row[k] = xhat[k] * w.gamma_x[k] + w.bias[k];
        if (run.training) ws[lay.rstd() + r * 2] = r_x;
      }
    });
  }
  gemm::PackPanels(false, H, G, w.recurrent_kernel, G, packed);
  const Loop<A> loop{m, run, len, lay, w, h0a, mask, zoneout.h, ws, packed};
  RunShards(d, B, 2.0 * T_ * B * H * G, 1e6, [&](int64_t b0, int64_t b1) {
    ForwardRows<A, MathFor<T>>(loop, b0, b1, zx, ys);
  });
  FromTimeMajor(d, run, H, ys, y);
  Convert(d, ws + lay.h() + (T_ - 1) * B * H, h_last, B * H);  // (rows past their end held it)
  return true;
}

// One row of one step, backward: from dh_new = dL/dh̃, the gradients of the input side (dzx,
// [G·H]: the GRU's dX; the SimpleRNN's d(x·W + h·R), which is also the recurrent product's) and
// of the recurrent product (dah, [G·H], the GRU's after its norm), the GRU's dU (for γh and b_h)
// and the direct term of dL/dh_prev into `direct` (which holds zoneout's term already).
template <typename A, typename Math>
void BackwardRow(const Loop<A>& L, int64_t tb, const A* h_prev, const A* dh_new, A* direct,
                 A* dzx, A* dah, A* du, A* buffer) {
  const LayerNormRnnModel& m = L.m;
  const int64_t H = m.num_units, G = m.gate_width();
  const LayerNormRnnWeights<A>& w = L.w;
  const A* rstd = L.ws + L.lay.rstd() + tb * 2;
  if (m.gru()) {
    GruCellRowBackward<A, Math>(m, L.ws + L.lay.saved() + tb * 4 * H, h_prev, dh_new, dzx, du,
                                direct, buffer);
    for (int64_t k = 0; k < G; ++k) buffer[k] = du[k] * w.gamma_h[k];
    NormalizeRowBackward(buffer, L.ws + L.lay.xhat_h() + tb * G, rstd[1], G, false, dah);
    return;
  }
  const A* xhat = L.ws + L.lay.xhat_x() + tb * G;
  for (int64_t j = 0; j < H; ++j) {  // da = dh̃ ⊙ act'(a), kept in du for γ and b
    buffer[j] = LayerNormSimplePreActivation(xhat[j], w.gamma_x[j], w.bias[j]);
  }
  SlopeRow<A, Math>(m.activation, buffer, buffer, H);
  for (int64_t j = 0; j < H; ++j) {
    du[j] = dh_new[j] * buffer[j];
    buffer[j] = du[j] * w.gamma_x[j];
  }
  NormalizeRowBackward(buffer, xhat, rstd[0], H, false, dzx);
  std::memcpy(dah, dzx, H * sizeof(A));
}

// The backward of rows [b0, b1) through every step, in reverse: per step and row dzx, dah and
// du (BackwardRow; [T·B, G·H] each), then dL/dh_{t-1} = dah·Rᵀ (times the mask) plus the direct
// terms. dh: the carried state gradient of the block ([rows, H]), dL/dh_0 at the end.
template <typename A, typename Math>
void BackwardRows(const Loop<A>& L, int64_t b0, int64_t b1, const A* dy, A* dzx_all,
                  A* dah_all, A* du_all, A* dh) {
  const LayerNormRnnModel& m = L.m;
  const int64_t T = L.run.time, B = L.run.batch, H = m.num_units, G = m.gate_width();
  const int64_t rows = b1 - b0;
  A* carried = RowScratch<A, 0>(rows * H);  // dah·Rᵀ of the block
  A* direct = RowScratch<A, 1>(rows * H);   // the direct terms of dL/dh_{t-1}
  A* row = RowScratch<A, 2>(6 * H + H);     // per row: a norm's d(x̂) or the gates and
                                            // their slopes; dL/dh̃
  for (int64_t t = T - 1; t >= 0; --t) {
    Elementwise([&] {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t tb = t * B + b;
        A* dzx = dzx_all + tb * G;
        A* dah = dah_all + tb * G;
        A* du = du_all + tb * G;
        if (t >= L.len[b]) {  // the row did not run this step: its gradient passes through
          std::fill(dzx, dzx + G, A(0));
          std::fill(dah, dah + G, A(0));
          std::fill(du, du + G, A(0));
          continue;
        }
        A* dh_b = dh + (b - b0) * H;
        A* direct_b = direct + (b - b0) * H;
        A* dh_new = row + 6 * H;
        const ZoneoutView<A> zh = L.zoneout.At(tb * H);
        for (int64_t j = 0; j < H; ++j) {
          const A dh_total = dh_b[j] + dy[tb * H + j];
          direct_b[j] = zh.ToPrevious(j, dh_total);
          dh_new[j] = zh.ToNew(j, dh_total);
        }
        BackwardRow<A, Math>(L, tb, L.h_before(t, b), dh_new, direct_b, dzx, dah, du, row);
      }
    });
    gemm::PackedBlock(rows, H, G, dah_all + (t * B + b0) * G, G, L.packed, false, carried, H);
    for (int64_t b = b0; b < b1; ++b) {
      if (t >= L.len[b]) continue;
      for (int64_t j = 0; j < H; ++j) {
        const int64_t k = (b - b0) * H + j;
        const A through_r = L.mask ? MaskedOperand(carried[k], L.mask[b * H + j]) : carried[k];
        dh[k] = through_r + direct[k];
      }
    }
  }
}

template <typename T, typename A>
bool BackwardWalk(const CPUDevice& d, Scratch& scratch, const LayerNormRnnModel& m,
                  const LayerNormRnnRun& run, const T* x, const T* h0,
                  const LayerNormRnnWeights<T>& weights, const T* dy, const T* dh_last,
                  const uint8_t* reserve, T* dx, T* dh0, const LayerNormRnnWeightGrads<T>& grads) {
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, I = m.input_size;
  const int64_t G = m.gate_width(), rows = T_ * B, bias_rows = m.gru() ? 2 : 1;
  if (T_ == 0 || B == 0 || H == 0) {  // the state gradient passes through, the rest is zero
    if (!scratch.counting()) {
      Convert(d, dh_last, dh0, B * H);
      Fill(d, dx, rows * I, T(0));
      for (auto [out, n] : {std::pair{grads.kernel, I * G}, {grads.recurrent_kernel, H * G},
                            {grads.bias, bias_rows * G}, {grads.gamma_x, G},
                            {grads.gamma_h, m.gru() ? G : 0}}) {
        Fill(d, out, n, T(0));
      }
    }
    return true;
  }
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const LayerNormRnnLayout lay(m, run);
  // The forward's saved activations are read only (Loop's pointer is shared with the forward).
  A* ws = reinterpret_cast<A*>(const_cast<uint8_t*>(reserve) + sizeof(RnnReserveHeader));
  const LayerNormRnnWeights<A> w = ConvertWeights<T, A>(d, scratch, m, weights);
  const A* xs = ToTimeMajor<A>(d, scratch, run, I, x);
  const A* h0a = AsAcc<A>(d, scratch, h0, B * H);
  const A* dys = ToTimeMajor<A>(d, scratch, run, H, dy);
  const A* mask = run.recurrent_mask
                      ? AsAcc<A>(d, scratch, static_cast<const T*>(run.recurrent_mask), B * H)
                      : nullptr;
  const Zoneout<A> zoneout = ConvertZoneout<T, A>(d, scratch, run, H);
  A* dzx = scratch.Take<A>(rows * G);
  A* dah = scratch.Take<A>(rows * G);
  A* du = scratch.Take<A>(rows * G);
  A* packed = scratch.Take<A>(G * gemm::PaddedCols(H));
  A* dh = scratch.Take<A>(B * H);  // the carried dL/dh
  A* h_prev_seq = scratch.Take<A>(rows * H);
  A* dxs = scratch.Take<A>(rows * I);
  ResultsInAcc<T, A> results(scratch);
  A* d_kernel = results(grads.kernel, I * G);
  A* d_recurrent = results(grads.recurrent_kernel, H * G);
  if (scratch.counting() || !scratch.ok()) return scratch.ok();

  Convert(d, dh_last, dh, B * H);
  // dL/dh_{t-1} = d(h·R)·Rᵀ: Rᵀ [G·H, H] is R [H, G·H] read transposed
  gemm::PackPanels(true, G, H, w.recurrent_kernel, G, packed);
  const Loop<A> loop{m, run, len, lay, w, h0a, mask, zoneout.h, ws, packed};
  RunShards(d, B, 2.0 * T_ * B * H * G, 1e6, [&](int64_t b0, int64_t b1) {
    BackwardRows<A, MathFor<T>>(loop, b0, b1, dys, dzx, dah, du, dh + b0 * H);
  });
  Convert(d, dh, dh0, B * H);

  // The weights' gradients, summed over every (t, b) row; rows that did not run add zeros.
  ParallelFor(d, rows, H * 2.0 * sizeof(A), H, [&](int64_t begin, int64_t end) {
    for (int64_t tb = begin; tb < end; ++tb) {  // h_{t-1} (times the mask): dR's operand
      const int64_t t = tb / B, b = tb % B;
      const A* h = loop.h_before(t, b);
      for (int64_t j = 0; j < H; ++j) {
        h_prev_seq[tb * H + j] = mask ? MaskedOperand(h[j], mask[b * H + j]) : h[j];
      }
    }
  });
  Gemm(d, true, false, H, G, rows, h_prev_seq, dah, false, d_recurrent, gemm::Sum::kLong);
  const A* xhat_x = ws + lay.xhat_x();
  if (m.gru()) {
    const A* xhat_h = ws + lay.xhat_h();
    ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t k) { return dzx[r * G + k]; }, grads.bias);
    ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t k) { return du[r * G + k]; },
                  grads.bias + G);
    ReduceRows<A>(d, rows, G,
                  [&](int64_t r, int64_t k) { return du[r * G + k] * xhat_h[r * G + k]; },
                  grads.gamma_h);
    ReduceRows<A>(d, rows, G,
                  [&](int64_t r, int64_t k) { return dzx[r * G + k] * xhat_x[r * G + k]; },
                  grads.gamma_x);
    // Through the input side's norm (in place: dzx becomes d(x·W)).
    ParallelFor(d, rows, G * 3.0 * sizeof(A), G * 6.0, [&](int64_t begin, int64_t end) {
      A* buffer = RowScratch<A, 3>(G);
      for (int64_t r = begin; r < end; ++r) {
        if (r / B >= len[r % B]) continue;  // (zero: it did not run)
        A* row = dzx + r * G;
        for (int64_t k = 0; k < G; ++k) buffer[k] = row[k] * w.gamma_x[k];
        NormalizeRowBackward(buffer, xhat_x + r * G, ws[lay.rstd() + r * 2], G, false, row);
      }
    });
  } else {  // du holds da: b's and, times x̂, γ's gradient
    ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t k) { return du[r * G + k]; }, grads.bias);
    ReduceRows<A>(d, rows, G,
                  [&](int64_t r, int64_t k) { return du[r * G + k] * xhat_x[r * G + k]; },
                  grads.gamma_x);
  }
  Gemm(d, true, false, I, G, rows, xs, dzx, false, d_kernel, gemm::Sum::kLong);
  Gemm(d, false, true, rows, I, G, dzx, G, w.kernel, G, false, dxs, I);
  FromTimeMajor(d, run, I, dxs, dx);
  results.Finish(d);
  return true;
}

}  // namespace

template <typename T>
size_t LayerNormRnnForwardScratchBytes(const CPUDevice& device, const LayerNormRnnModel& m,
                                       const LayerNormRnnRun& run) {
  Scratch counter = Scratch::Counter();
  ForwardWalk<T, AccFor<T>>(device, counter, m, run, nullptr, nullptr, {}, nullptr, nullptr,
                            nullptr);
  return counter.bytes();
}

template <typename T>
bool LayerNormRnnForward(const CPUDevice& device, const LayerNormRnnModel& m,
                         const LayerNormRnnRun& run, const T* x, const T* h0,
                         const LayerNormRnnWeights<T>& w, T* y, T* h_last, uint8_t* workspace,
                         void* scratch, size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return ForwardWalk<T, AccFor<T>>(device, carver, m, run, x, h0, w, y, h_last, workspace);
}

template <typename T>
size_t LayerNormRnnBackwardScratchBytes(const CPUDevice& device, const LayerNormRnnModel& m,
                                        const LayerNormRnnRun& run) {
  Scratch counter = Scratch::Counter();
  BackwardWalk<T, AccFor<T>>(device, counter, m, run, nullptr, nullptr, {}, nullptr, nullptr,
                             nullptr, nullptr, nullptr, {});
  return counter.bytes();
}

template <typename T>
bool LayerNormRnnBackward(const CPUDevice& device, const LayerNormRnnModel& m,
                          const LayerNormRnnRun& run, const T* x, const T* h0,
                          const LayerNormRnnWeights<T>& w, const T* dy, const T* dh_last,
                          const uint8_t* reserve, T* dx, T* dh0,
                          const LayerNormRnnWeightGrads<T>& grads, void* scratch,
                          size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return BackwardWalk<T, AccFor<T>>(device, carver, m, run, x, h0, w, dy, dh_last, reserve, dx,
                                    dh0, grads);
}

#define TF_LSTM_OPS_INSTANTIATE(T)                                                              \
  template size_t LayerNormRnnForwardScratchBytes<T>(                                           \
      const CPUDevice&, const LayerNormRnnModel&, const LayerNormRnnRun&);                      \
  template bool LayerNormRnnForward<T>(const CPUDevice&, const LayerNormRnnModel&,              \
                                       const LayerNormRnnRun&, const T*, const T*,              \
                                       const LayerNormRnnWeights<T>&, T*, T*, uint8_t*, void*,  \
                                       size_t);                                                 \
  template size_t LayerNormRnnBackwardScratchBytes<T>(                                          \
      const CPUDevice&, const LayerNormRnnModel&, const LayerNormRnnRun&);                      \
  template bool LayerNormRnnBackward<T>(const CPUDevice&, const LayerNormRnnModel&,             \
                                        const LayerNormRnnRun&, const T*, const T*,             \
                                        const LayerNormRnnWeights<T>&, const T*, const T*,      \
                                        const uint8_t*, T*, T*,                                 \
                                        const LayerNormRnnWeightGrads<T>&, void*, size_t);
TF_LSTM_OPS_INSTANTIATE(Eigen::half)
TF_LSTM_OPS_INSTANTIATE(Eigen::bfloat16)
TF_LSTM_OPS_INSTANTIATE(float)
TF_LSTM_OPS_INSTANTIATE(double)
#undef TF_LSTM_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_lstm_ops
