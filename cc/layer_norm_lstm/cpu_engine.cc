// The CPU engine of the LayerNorm LSTM (cpu_engine.h; docs/layer_norm_lstm.md).
//
// The norms reduce over whole rows (all 4H gates of x·W and of h·R, all H units of c), so the
// time loop splits the batch, not the units: each thread owns a block of rows and runs them
// through every step on its own (rows of an RNN never interact), a packed-panel product of its
// rows by the whole recurrent kernel per step and the row's norms and cell in one pass, with no
// synchronisation inside the loop. The input side x·W and its norm run once over all T·B rows
// before the loop; the backward keeps each step's gate and h·R gradients and forms the weight
// gradients, the x·W norm's backward and dx as whole-sequence products after it.
#include "cc/layer_norm_lstm/cpu_engine.h"

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

// The weights in the compute type.
template <typename T, typename A>
LayerNormLstmWeights<A> ConvertWeights(const CPUDevice& d, Scratch& scratch,
                                       const LayerNormLstmModel& m,
                                       const LayerNormLstmWeights<T>& w) {
  const int64_t I = m.input_size, H = m.num_units, G = m.gate_width();
  return {AsAcc<A>(d, scratch, w.kernel, I * G),  AsAcc<A>(d, scratch, w.recurrent_kernel, H * G),
          AsAcc<A>(d, scratch, w.bias, G),        AsAcc<A>(d, scratch, w.gamma_x, G),
          AsAcc<A>(d, scratch, w.beta_x, G),      AsAcc<A>(d, scratch, w.gamma_h, G),
          AsAcc<A>(d, scratch, w.beta_h, G),      AsAcc<A>(d, scratch, w.gamma_c, H),
          AsAcc<A>(d, scratch, w.beta_c, H)};
}

// What a time loop reads and writes, resolved once.
template <typename A>
struct Loop {
  const LayerNormLstmModel& m;
  const LayerNormLstmRun& run;
  const std::vector<int64_t>& len;
  const LayerNormLstmLayout& lay;
  LayerNormLstmWeights<A> w;
  const A *h0, *c0;
  const A* mask;  // [B, H] recurrent dropout mask, or null
  Zoneout<A> zoneout;
  A* ws;  // the workspace after its header
  const A* packed;  // the recurrent kernel packed for this loop's product
  // The state h (c) before step t of row b.
  const A* h_before(int64_t t, int64_t b) const {
    const int64_t H = m.num_units;
    return t == 0 ? h0 + b * H : ws + lay.h() + ((t - 1) * run.batch + b) * H;
  }
  const A* c_before(int64_t t, int64_t b) const {
    const int64_t H = m.num_units;
    return t == 0 ? c0 + b * H : ws + lay.c() + ((t - 1) * run.batch + b) * H;
  }
  // h_{t-1} of rows [b0, b1) as the recurrent product's operand (times the dropout mask):
  // [rows, H] with leading dimension H.
  const A* operand(int64_t t, int64_t b0, int64_t b1, A* buffer) const {
    const int64_t H = m.num_units;
    if (mask == nullptr) return h_before(t, b0);  // (a step's rows are contiguous, h0's too)
    for (int64_t b = b0; b < b1; ++b) {
      const A* h = h_before(t, b);
      A* out = buffer + (b - b0) * H;
      for (int64_t j = 0; j < H; ++j) out[j] = mask ? MaskedOperand(h[j], mask[b * H + j]) : h[j];
    }
    return buffer;
  }
};

// The forward of rows [b0, b1) through every step. zx: the input side of every row,
// LN(x·W)·γx + βx + b, time-major [T·B, 4H]; y: the outputs, time-major [T·B, H].
template <typename A, typename Math>
void ForwardRows(const Loop<A>& L, int64_t b0, int64_t b1, const A* zx, A* y) {
  const LayerNormLstmModel& m = L.m;
  const int64_t T = L.run.time, B = L.run.batch, H = m.num_units, G = m.gate_width();
  const int64_t rows = b1 - b0;
  const bool training = L.run.training;
  const double eps = m.epsilon;
  const LayerNormLstmWeights<A>& w = L.w;
  A* operand_buf = RowScratch<A, 0>(rows * H);
  A* ah = RowScratch<A, 1>(rows * G);
  A* row = RowScratch<A, 2>(2 * G + 3 * H);  // per row: x̂_h, gates, c', x̂_c, h̃
  for (int64_t t = 0; t < T; ++t) {
    gemm::PackedBlock(rows, G, H, L.operand(t, b0, b1, operand_buf), H, L.packed, false, ah, G);
    Elementwise([&] {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t tb = t * B + b;
        const A* h_prev = L.h_before(t, b);
        const A* c_prev = L.c_before(t, b);
        A* h_out = L.ws + L.lay.h() + tb * H;
        A* c_out = L.ws + L.lay.c() + tb * H;
        if (t >= L.len[b]) {  // past this sequence's end: hold the state, output zero
          std::memcpy(h_out, h_prev, H * sizeof(A));
          std::memcpy(c_out, c_prev, H * sizeof(A));
          std::fill(y + tb * H, y + (tb + 1) * H, A(0));
          if (training) {  // (the backward's sums read these rows times zero gradients)
            for (int64_t offset : {L.lay.gates() + tb * G, L.lay.xhat_h() + tb * G}) {
              std::fill(L.ws + offset, L.ws + offset + G, A(0));
            }
            std::fill(L.ws + L.lay.xhat_c() + tb * H, L.ws + L.lay.xhat_c() + (tb + 1) * H, A(0));
            std::fill(L.ws + L.lay.rstd() + tb * 3 + 1, L.ws + L.lay.rstd() + tb * 3 + 3, A(0));
          }
          continue;
        }
        A* xhat_h = training ? L.ws + L.lay.xhat_h() + tb * G : row;
        A* gates = training ? L.ws + L.lay.gates() + tb * G : row + G;
        A* c_new = row + 2 * G;
        A* xhat_c = training ? L.ws + L.lay.xhat_c() + tb * H : c_new + H;
        A* h_new = c_new + 2 * H;
        const A r_h = NormalizeRow(ah + (b - b0) * G, G, eps, xhat_h);
        const A* zx_row = zx + tb * G;
        for (int64_t k = 0; k < G; ++k) {
          gates[k] = zx_row[k] + (xhat_h[k] * w.gamma_h[k] + w.beta_h[k]);
        }
        // one loop per activation (i and f, g, o), so that each vectorises
        for (int64_t k = 0; k < 2 * H; ++k) {
          gates[k] = LayerNormLstmGateOf<false, A, Math>(gates[k]);
        }
        for (int64_t k = 2 * H; k < 3 * H; ++k) {
          gates[k] = LayerNormLstmGateOf<true, A, Math>(gates[k]);
        }
        for (int64_t k = 3 * H; k < G; ++k) {
          gates[k] = LayerNormLstmGateOf<false, A, Math>(gates[k]);
        }
        for (int64_t j = 0; j < H; ++j) c_new[j] = LayerNormLstmCell(gates, H, j, c_prev[j]);
        const A r_c = NormalizeRow(c_new, H, eps, xhat_c);
        for (int64_t j = 0; j < H; ++j) {
          const LayerNormLstmOutput<A> out = LayerNormLstmOutputAt<A, Math>(
              m.preset, gates, H, j, xhat_c[j], w.gamma_c[j], w.beta_c[j], c_new[j]);
          h_new[j] = out.h;
          c_new[j] = out.c;
        }
        const ZoneoutView<A> zh = L.zoneout.h.At(tb * H), zc = L.zoneout.c.At(tb * H);
        for (int64_t j = 0; j < H; ++j) {
          h_out[j] = zh.Blend(j, h_new[j], h_prev[j]);
          c_out[j] = zc.Blend(j, c_new[j], c_prev[j]);
        }
        std::memcpy(y + tb * H, h_out, H * sizeof(A));
        if (training) {
          A* rstd = L.ws + L.lay.rstd() + tb * 3;
          rstd[1] = r_h;
          rstd[2] = r_c;
        }
      }
    });
  }
}

// Scratch of a walk; one walk per engine call (counting, then carving), as cc/cudnn_rnn.
template <typename T, typename A>
bool ForwardWalk(const CPUDevice& d, Scratch& scratch, const LayerNormLstmModel& m,
                 const LayerNormLstmRun& run, const T* x, const T* h0, const T* c0,
                 const LayerNormLstmWeights<T>& weights, T* y, T* h_last, T* c_last,
                 uint8_t* workspace) {
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, I = m.input_size;
  const int64_t G = m.gate_width(), rows = T_ * B;
  if (!scratch.counting()) {
    const RnnReserveHeader header = LayerNormLstmHeader(m, run, sizeof(T), sizeof(A));
    std::memcpy(workspace, &header, sizeof(header));
    if (T_ == 0 || B == 0 || H == 0) {  // the final state is the initial state
      Convert(d, h0, h_last, B * H);
      Convert(d, c0, c_last, B * H);
    }
  }
  if (T_ == 0 || B == 0 || H == 0) return true;
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const LayerNormLstmLayout lay(m, run);
  A* ws = reinterpret_cast<A*>(workspace + sizeof(RnnReserveHeader));
  const LayerNormLstmWeights<A> w = ConvertWeights<T, A>(d, scratch, m, weights);
  const A* xs = ToTimeMajor<A>(d, scratch, run, I, x);
  const A* h0a = AsAcc<A>(d, scratch, h0, B * H);
  const A* c0a = AsAcc<A>(d, scratch, c0, B * H);
  const A* mask = run.recurrent_mask
                      ? AsAcc<A>(d, scratch, static_cast<const T*>(run.recurrent_mask), B * H)
                      : nullptr;
  const Zoneout<A> zoneout = ConvertZoneout<T, A>(d, scratch, run, H);
  A* zx = scratch.Take<A>(rows * G);
  A* packed = scratch.Take<A>(H * gemm::PaddedCols(G));
  A* ys = scratch.Take<A>(rows * H);
  if (scratch.counting() || !scratch.ok()) return scratch.ok();

  // The input side of every step: LN(x·W)·γx + βx + b.
  Gemm(d, false, false, rows, G, I, xs, I, w.kernel, G, false, zx, G);
  ParallelFor(d, rows, G * 3.0 * sizeof(A), G * 8.0, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      A* row = zx + r * G;
      A* xhat = run.training ? ws + lay.xhat_x() + r * G : row;
      const A r_x = NormalizeRow(row, G, static_cast<double>(m.epsilon), xhat);
      for (int64_t k = 0; k < G; ++k) row[k] = (xhat[k] * w.gamma_x[k] + w.beta_x[k]) + w.bias[k];
      if (run.training) ws[lay.rstd() + r * 3] = r_x;
    }
  });
  gemm::PackPanels(false, H, G, w.recurrent_kernel, G, packed);
  const Loop<A> loop{m, run, len, lay, w, h0a, c0a, mask, zoneout, ws, packed};
  RunShards(d, B, 2.0 * T_ * B * H * G, 1e6, [&](int64_t b0, int64_t b1) {
    ForwardRows<A, MathFor<T>>(loop, b0, b1, zx, ys);
  });
  FromTimeMajor(d, run, H, ys, y);
  Convert(d, ws + lay.h() + (T_ - 1) * B * H, h_last, B * H);  // (rows past their end held it)
  Convert(d, ws + lay.c() + (T_ - 1) * B * H, c_last, B * H);
  return true;
}

// One row's backward of one step (BackwardRows), zoneout of h and c as constants (ZoneoutRow) so
// that each loop vectorises: from dh_total = dL/dh_t (total) and dc_b = dL/dc_t (carried,
// replaced by dL/dc_{t-1}), dz, dq, dah and zoneout's direct term of dL/dh_{t-1}.
template <typename A, typename Math, bool kZh, bool kZc>
void BackwardRow(const Loop<A>& L, int64_t tb, const A* c_prev, const A* dh_total, A* dc_b,
                 A* direct, A* dz, A* dq, A* dah, A* row) {
  const LayerNormLstmModel& m = L.m;
  const int64_t H = m.num_units, G = m.gate_width();
  const LayerNormLstmWeights<A>& w = L.w;
  const bool addons = m.preset == LayerNormPreset::kAddons;
  const A* gates = L.ws + L.lay.gates() + tb * G;
  const A* xhat_c = L.ws + L.lay.xhat_c() + tb * H;
  const A* rstd = L.ws + L.lay.rstd() + tb * 3;
  A* dxhat = row;
  A* dc_cell = row + G;
  const auto zh = ZoneoutRow<A, kZh>::Of(L.zoneout.h.At(tb * H), H, dc_cell + H);
  const auto zc = ZoneoutRow<A, kZc>::Of(L.zoneout.c.At(tb * H), H, dc_cell + 2 * H);
  for (int64_t j = 0; j < H; ++j) direct[j] = zh.ToPrevious(j, dh_total[j]);
  for (int64_t j = 0; j < H; ++j) {  // through h̃ = o ⊙ tanh(q), q = LN(c')
    // (Addons carries q itself: the carried c's gradient joins q's)
    const LayerNormLstmOutputGrads<A> g = LayerNormLstmOutputBackward<A, Math>(
        gates, H, j, xhat_c[j], w.gamma_c[j], w.beta_c[j], zh.ToNew(j, dh_total[j]),
        addons ? zc.ToNew(j, dc_b[j]) : A(0));
    dz[3 * H + j] = g.dz_o;
    dq[j] = g.dq;
    dxhat[j] = dq[j] * w.gamma_c[j];
  }
  NormalizeRowBackward(dxhat, xhat_c, rstd[2], H, false, dc_cell);
  for (int64_t j = 0; j < H; ++j) {  // through c' = f ⊙ c_{t-1} + i ⊙ g
    const A dc_new = dc_cell[j] + (addons ? A(0) : zc.ToNew(j, dc_b[j]));  // (paper: c' carried)
    const LayerNormLstmCellGrads<A> g = LayerNormLstmCellBackward(gates, H, j, c_prev[j], dc_new);
    dz[j] = g.dz_i;
    dz[H + j] = g.dz_f;
    dz[2 * H + j] = g.dz_g;
    dc_b[j] = g.dc_prev + zc.ToPrevious(j, dc_b[j]);
  }
  for (int64_t k = 0; k < G; ++k) dxhat[k] = dz[k] * w.gamma_h[k];
  NormalizeRowBackward(dxhat, L.ws + L.lay.xhat_h() + tb * G, rstd[1], G, false, dah);
}

// The backward of rows [b0, b1) through every step, in reverse: per step and row the gate
// gradients dz ([4H], the gradient of the summed pre-activations), d(h·R) and the gradient of
// LN(c') (dq, for γc and βc), then dL/dh_{t-1} = d(h·R)·Rᵀ (times the mask) plus zoneout's
// direct term. dh, dc: the carried state gradients of the block ([rows, H]), dL/dh_0 and
// dL/dc_0 at the end.
template <typename A, typename Math>
void BackwardRows(const Loop<A>& L, int64_t b0, int64_t b1, const A* dy, A* dz_all, A* dah_all,
                  A* dq_all, A* dh, A* dc) {
  const LayerNormLstmModel& m = L.m;
  const int64_t T = L.run.time, B = L.run.batch, H = m.num_units, G = m.gate_width();
  const int64_t rows = b1 - b0;
  A* carried = RowScratch<A, 0>(rows * H);  // dah·Rᵀ of the block
  A* direct = RowScratch<A, 1>(rows * H);   // zoneout's (1 - w)·dL/dh_t
  A* row = RowScratch<A, 2>(G + 4 * H);     // per row: d(x̂) of a norm, dc', zoneout's
                                            // weights of h and c, dL/dh_t
  for (int64_t t = T - 1; t >= 0; --t) {
    Elementwise([&] {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t tb = t * B + b;
        A* dz = dz_all + tb * G;
        A* dah = dah_all + tb * G;
        A* dq = dq_all + tb * H;
        if (t >= L.len[b]) {  // the row did not run this step: its gradients pass through
          std::fill(dz, dz + G, A(0));
          std::fill(dah, dah + G, A(0));
          std::fill(dq, dq + H, A(0));
          continue;
        }
        A* dh_b = dh + (b - b0) * H;
        A* dh_total = row + G + 3 * H;
        for (int64_t j = 0; j < H; ++j) dh_total[j] = dh_b[j] + dy[tb * H + j];
        WithFlags(L.zoneout.h.keep != nullptr, L.zoneout.c.keep != nullptr, [&](auto kh, auto kc) {
          BackwardRow<A, Math, decltype(kh)::value, decltype(kc)::value>(
              L, tb, L.c_before(t, b), dh_total, dc + (b - b0) * H, direct + (b - b0) * H, dz, dq,
              dah, row);
        });
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
bool BackwardWalk(const CPUDevice& d, Scratch& scratch, const LayerNormLstmModel& m,
                  const LayerNormLstmRun& run, const T* x, const T* h0, const T* c0,
                  const LayerNormLstmWeights<T>& weights, const T* dy, const T* dh_last,
                  const T* dc_last, const uint8_t* reserve, T* dx, T* dh0, T* dc0,
                  const LayerNormLstmWeightGrads<T>& grads) {
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, I = m.input_size;
  const int64_t G = m.gate_width(), rows = T_ * B;
  if (T_ == 0 || B == 0 || H == 0) {  // state gradients pass through, the rest is zero
    if (!scratch.counting()) {
      Convert(d, dh_last, dh0, B * H);
      Convert(d, dc_last, dc0, B * H);
      Fill(d, dx, rows * I, T(0));
      for (auto [out, n] : {std::pair{grads.kernel, I * G}, {grads.recurrent_kernel, H * G},
                            {grads.bias, G}, {grads.gamma_x, G}, {grads.beta_x, G},
                            {grads.gamma_h, G}, {grads.beta_h, G}, {grads.gamma_c, H},
                            {grads.beta_c, H}}) {
        Fill(d, out, n, T(0));
      }
    }
    return true;
  }
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const LayerNormLstmLayout lay(m, run);
  // The forward's saved activations are read only (Loop's pointer is shared with the forward).
  A* ws = reinterpret_cast<A*>(const_cast<uint8_t*>(reserve) + sizeof(RnnReserveHeader));
  const LayerNormLstmWeights<A> w = ConvertWeights<T, A>(d, scratch, m, weights);
  const A* xs = ToTimeMajor<A>(d, scratch, run, I, x);
  const A* h0a = AsAcc<A>(d, scratch, h0, B * H);
  const A* c0a = AsAcc<A>(d, scratch, c0, B * H);
  const A* dys = ToTimeMajor<A>(d, scratch, run, H, dy);
  const A* mask = run.recurrent_mask
                      ? AsAcc<A>(d, scratch, static_cast<const T*>(run.recurrent_mask), B * H)
                      : nullptr;
  const Zoneout<A> zoneout = ConvertZoneout<T, A>(d, scratch, run, H);
  A* dz = scratch.Take<A>(rows * G);
  A* dah = scratch.Take<A>(rows * G);
  A* dq = scratch.Take<A>(rows * H);
  A* packed = scratch.Take<A>(G * gemm::PaddedCols(H));
  A* states = scratch.Take<A>(2 * B * H);  // the carried dL/dh and dL/dc
  A* h_prev_seq = scratch.Take<A>(rows * H);
  A* dxs = scratch.Take<A>(rows * I);
  ResultsInAcc<T, A> results(scratch);
  A* d_kernel = results(grads.kernel, I * G);
  A* d_recurrent = results(grads.recurrent_kernel, H * G);
  if (scratch.counting() || !scratch.ok()) return scratch.ok();

  A* dh = states;
  A* dc = states + B * H;
  Convert(d, dh_last, dh, B * H);
  Convert(d, dc_last, dc, B * H);
  // dL/dh_{t-1} = d(h·R)·Rᵀ: Rᵀ [4H, H] is R [H, 4H] read transposed
  gemm::PackPanels(true, G, H, w.recurrent_kernel, G, packed);
  const Loop<A> loop{m, run, len, lay, w, h0a, c0a, mask, zoneout, ws, packed};
  RunShards(d, B, 2.0 * T_ * B * H * G, 1e6, [&](int64_t b0, int64_t b1) {
    BackwardRows<A, MathFor<T>>(loop, b0, b1, dys, dz, dah, dq, dh + b0 * H, dc + b0 * H);
  });
  Convert(d, dh, dh0, B * H);
  Convert(d, dc, dc0, B * H);

  // The weights' gradients, summed over every (t, b) row; rows that did not run add zeros.
  const A* xhat_x = ws + lay.xhat_x();
  const A* xhat_h = ws + lay.xhat_h();
  const A* xhat_c = ws + lay.xhat_c();
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
  // b, βh and βx are each added to the summed pre-activations: one gradient, Σ dz, read once
  ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t k) { return dz[r * G + k]; }, grads.bias);
  std::copy_n(grads.bias, G, grads.beta_h);
  std::copy_n(grads.bias, G, grads.beta_x);
  ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t k) { return dz[r * G + k] * xhat_h[r * G + k]; },
                grads.gamma_h);
  ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t k) { return dz[r * G + k] * xhat_x[r * G + k]; },
                grads.gamma_x);
  ReduceRows<A>(d, rows, H, [&](int64_t r, int64_t j) { return dq[r * H + j]; }, grads.beta_c);
  ReduceRows<A>(d, rows, H, [&](int64_t r, int64_t j) { return dq[r * H + j] * xhat_c[r * H + j]; },
                grads.gamma_c);
  // Through the input side's norm (in place: dz becomes d(x·W)), then dW and dx.
  ParallelFor(d, rows, G * 3.0 * sizeof(A), G * 6.0, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (r / B >= len[r % B]) continue;  // (zero: it did not run)
      A* row = dz + r * G;
      for (int64_t k = 0; k < G; ++k) row[k] *= w.gamma_x[k];
      NormalizeRowBackward(row, xhat_x + r * G, ws[lay.rstd() + r * 3], G, false, row);
    }
  });
  Gemm(d, true, false, I, G, rows, xs, dz, false, d_kernel, gemm::Sum::kLong);
  Gemm(d, false, true, rows, I, G, dz, G, w.kernel, G, false, dxs, I);
  FromTimeMajor(d, run, I, dxs, dx);
  results.Finish(d);
  return true;
}

}  // namespace

template <typename T>
size_t LayerNormLstmForwardScratchBytes(const CPUDevice& device, const LayerNormLstmModel& m,
                                        const LayerNormLstmRun& run) {
  Scratch counter = Scratch::Counter();
  ForwardWalk<T, AccFor<T>>(device, counter, m, run, nullptr, nullptr, nullptr, {}, nullptr,
                            nullptr, nullptr, nullptr);
  return counter.bytes();
}

template <typename T>
bool LayerNormLstmForward(const CPUDevice& device, const LayerNormLstmModel& m,
                          const LayerNormLstmRun& run, const T* x, const T* h0, const T* c0,
                          const LayerNormLstmWeights<T>& w, T* y, T* h_last, T* c_last,
                          uint8_t* workspace, void* scratch, size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return ForwardWalk<T, AccFor<T>>(device, carver, m, run, x, h0, c0, w, y, h_last, c_last,
                                   workspace);
}

template <typename T>
size_t LayerNormLstmBackwardScratchBytes(const CPUDevice& device, const LayerNormLstmModel& m,
                                         const LayerNormLstmRun& run) {
  Scratch counter = Scratch::Counter();
  BackwardWalk<T, AccFor<T>>(device, counter, m, run, nullptr, nullptr, nullptr, {}, nullptr,
                             nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, {});
  return counter.bytes();
}

template <typename T>
bool LayerNormLstmBackward(const CPUDevice& device, const LayerNormLstmModel& m,
                           const LayerNormLstmRun& run, const T* x, const T* h0, const T* c0,
                           const LayerNormLstmWeights<T>& w, const T* dy, const T* dh_last,
                           const T* dc_last, const uint8_t* reserve, T* dx, T* dh0, T* dc0,
                           const LayerNormLstmWeightGrads<T>& grads, void* scratch,
                           size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return BackwardWalk<T, AccFor<T>>(device, carver, m, run, x, h0, c0, w, dy, dh_last, dc_last,
                                    reserve, dx, dh0, dc0, grads);
}

#define TF_LSTM_OPS_INSTANTIATE(T)                                                              \
  template size_t LayerNormLstmForwardScratchBytes<T>(const CPUDevice&,                         \
                                                      const LayerNormLstmModel&,                \
                                                      const LayerNormLstmRun&);                 \
  template bool LayerNormLstmForward<T>(                                                        \
      const CPUDevice&, const LayerNormLstmModel&, const LayerNormLstmRun&, const T*, const T*, \
      const T*, const LayerNormLstmWeights<T>&, T*, T*, T*, uint8_t*, void*, size_t);          \
  template size_t LayerNormLstmBackwardScratchBytes<T>(const CPUDevice&,                        \
                                                       const LayerNormLstmModel&,               \
                                                       const LayerNormLstmRun&);                \
  template bool LayerNormLstmBackward<T>(                                                       \
      const CPUDevice&, const LayerNormLstmModel&, const LayerNormLstmRun&, const T*, const T*, \
      const T*, const LayerNormLstmWeights<T>&, const T*, const T*, const T*, const uint8_t*,   \
      T*, T*, T*, const LayerNormLstmWeightGrads<T>&, void*, size_t);
TF_LSTM_OPS_INSTANTIATE(Eigen::half)
TF_LSTM_OPS_INSTANTIATE(Eigen::bfloat16)
TF_LSTM_OPS_INSTANTIATE(float)
TF_LSTM_OPS_INSTANTIATE(double)
#undef TF_LSTM_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_lstm_ops
