// The CPU engine of the CudnnRNN family (cpu_engine.h): the forward and backprop of a
// multi-layer, optionally bidirectional RNN in cuDNN's canonical form; no framework.
//
// Same structure as the LSTM block kernels: per layer and direction, the input projection of
// all steps is one GEMM; each step does the recurrent GEMM (plus the projection GEMM for LSTMP)
// and one fused element-wise pass; backward does one element-wise pass and one recurrent GEMM per
// step, then dW, dR, dPmat, biases and dx as whole-sequence GEMMs/reductions. Rows past their
// sequence length hold their state, output zero and pass gradients through unchanged.
//
// The time loops of a layer (both directions at once) run on one RunPhases team, one or two
// phases per step: each unit owns a slice of the cells (its rows of R, regrouped once per call)
// or of the outputs, so a step needs no fork/join through the pool (see TeamPlan).
#include "cc/cudnn_rnn/cpu_engine.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cc/core/cudnn_rnn_cells.h"
#include "cc/core/precision.h"
#include "cc/cpu/elementwise.h"
#include "cc/cpu/linalg.h"
#include "cc/cpu/rnn_inputs.h"
#include "cc/cpu/rows.h"

namespace tf_lstm_ops {
namespace cpu {
namespace {

// ---- Keras' recurrent dropout: per-gate operand masks (docs/keras_layers.md §5) ---------------

// out[k] (+)= v[k] ⊙ mask[k mod period] for k in [begin, end): a gate's masked operand, or a
// masked gradient summed over the gates (a [B, n] mask repeats over the steps of [T·B, n]). A
// null mask is none (v itself).
template <typename A>
void MaskOperand(int64_t begin, int64_t end, int64_t period, const A* v, const A* mask,
                 bool accumulate, A* out) {
  if (begin >= end) return;  // (also keeps an empty operand's period 0 out of the modulo)
  // runs of up to `period` elements against the mask from offset p: each loop vectorises
  for (int64_t k = begin, p = begin % period; k < end; k += period - p, p = 0) {
    const int64_t run = std::min(end - k, period - p);
    const A* __restrict src = v + k;
    const A* __restrict m = mask ? mask + p : nullptr;
    A* __restrict dst = out + k;  // (never v or mask)
    if (m == nullptr) {
      for (int64_t j = 0; j < run; ++j) dst[j] = accumulate ? dst[j] + src[j] : src[j];
    } else if (accumulate) {
      for (int64_t j = 0; j < run; ++j) dst[j] += MaskedOperand(src[j], m[j]);
    } else {
      for (int64_t j = 0; j < run; ++j) dst[j] = MaskedOperand(src[j], m[j]);
    }
  }
}
template <typename A>
void MaskOperand(const CPUDevice& d, int64_t n, int64_t period, const A* v, const A* mask,
                 bool accumulate, A* out) {
  ParallelFor(d, n, 3.0 * sizeof(A), 2.0, [&](int64_t begin, int64_t end) {
    MaskOperand(begin, end, period, v, mask, accumulate, out);
  });
}

// The operand masks of a run in the compute type ([gates, B, width] each, or null), and a
// scratch for the masked operand of a whole-sequence product: x's in the forward ([T·B, I]),
// x's or h_prev's in the backward.
template <typename A>
struct OperandMasks {
  const A *input = nullptr, *recurrent = nullptr;
  A* operand = nullptr;
};
template <typename T, typename A>
OperandMasks<A> ConvertMasks(const CPUDevice& d, Scratch& scratch, const RnnModel& m,
                             const RnnRun& run, bool backward) {
  OperandMasks<A> masks;
  const int64_t gates_b = m.gates() * run.batch;
  if (run.input_masks != nullptr) {
    masks.input = AsAcc<A>(d, scratch, static_cast<const T*>(run.input_masks),
                           gates_b * m.input_size);
  }
  if (run.recurrent_masks != nullptr) {
    masks.recurrent = AsAcc<A>(d, scratch, static_cast<const T*>(run.recurrent_masks),
                               gates_b * m.output_width());
  }
  if (backward && run.masked()) {
    masks.operand =
        scratch.Take<A>(run.time * run.batch * std::max(m.input_size, m.output_width()));
  } else if (run.input_masks != nullptr) {
    masks.operand = scratch.Take<A>(run.time * run.batch * m.input_size);
  }
  return masks;
}

// Input projection of every step: xw[t*B + b] = W·x (or x itself per gate for skip input;
// gate by gate, (x ⊙ mask_g)·W_gᵀ, with input masks). W is params' [G*H, I], or Keras' kernel
// [I, G*H] (its transpose) read as it is.
template <typename A>
void InputProjection(const CPUDevice& d, const PseudoLayer<A>& pl, int64_t T, int64_t B,
                     const A* x, const OperandMasks<A>& masks, A* xw) {
  const int64_t G = pl.m.gate_width(), H = pl.m.num_units, I = pl.in_width, rows = T * B;
  const bool keras = pl.keras_layout;
  if (masks.input != nullptr) {
    for (int g = 0; g < pl.m.gates(); ++g) {  // block g, from its gate's mask
      MaskOperand(d, rows * I, B * I, x, masks.input + pl.gate_block(g) * B * I, false,
                  masks.operand);
      Gemm(d, false, !keras, rows, H, I, masks.operand, I, pl.w + g * pl.w_gate_offset(),
           pl.ldw(), false, xw + g * H, G);
    }
    return;
  }
  if (!pl.m.skips(pl.layer)) {
    Gemm(d, false, !keras, rows, G, I, x, I, pl.w, pl.ldw(), false, xw, G);
    return;
  }
  ParallelFor(d, rows, G * 8.0, G * 1.0, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int g = 0; g < pl.m.gates(); ++g) {
        std::memcpy(xw + row * G + g * H, x + row * H, H * sizeof(A));
      }
    }
  });
}

// How a layer's time loops share one RunPhases team: both directions run concurrently, each
// split into `slices` units (at most its share of the intra-op threads): slices of the H cells
// (`cell`: the recurrent GEMM and the element-wise pass) and of the Hr outputs (`out`: what needs
// whole rows of the other side, the projection forward and dL/dh backward). Without a
// projection Hr == H, the two coincide and a step is one phase; with one it is two phases, since
// h = Pmat·m needs all of m, and m needs all of the previous h.
struct TeamPlan {
  // R (stored [G·H, Hr]) packed per slice for gemm::PackedBlock: per cell slice for the forward
  // product h·Rᵀ (its G·n rows of R, as Rᵀ columns), per output slice for the backward product
  // dgh·R (its n columns of R).
  // With recurrent masks (Keras' recurrent dropout, docs/keras_layers.md §5) every gate's
  // product has its own left operand, and a GRU resetting before has two products a step (the
  // candidate's reads r ⊙ h): the forward multiplies gate by gate, and the backward packs each
  // gate's H rows of R apart (per_gate), each slice's gates one after the other. Such a GRU
  // takes two phases a step, as a projection does.
  // Split by batch rows, or into one slice where the loop is too small to share (SplitLoop),
  // where a step is one phase of whole rows: not with a projection, recurrent masks or a GRU
  // resetting before (their operands span all rows).
  LoopSplit split;
  SlicePacking fwd, bwd;  // their bounds(): the slices over H and over Hr
  bool per_gate;
  int slices;             // team units per direction
  int phases_per_step;    // 1, or 2 with a projection or a GRU resetting before

  // (value_bytes: the compute type's size)
  TeamPlan(const CPUDevice& d, const RnnModel& m, const RnnRun& run, int64_t value_bytes)
      : split(Split(d, m, run, value_bytes)),
        fwd(UnitSlices(m.num_units, split.slices_of(Share(d, m))), m.output_width(),
            m.gates(),
            PackFor(run.batch, run.time, /*transposed_source=*/!run.keras.given(),
                    kPackForwardMinSteps)),
        bwd(m.has_proj() ? UnitSlices(m.num_proj, Share(d, m)) : fwd.bounds(),
            PerGate(m, run) ? m.num_units : m.gate_width(), 1,
            PackFor(run.batch, run.time, /*transposed_source=*/run.keras.given(),
                    kPackBackwardMinSteps)),
        per_gate(PerGate(m, run)),
        slices(std::max(fwd.slices(), bwd.slices())),
        phases_per_step(m.has_proj() || m.gru_reset_before ? 2 : 1) {}
  int units(const RnnModel& m) const { return static_cast<int>(m.num_dirs) * slices; }
  // Pack* pack R for a direction's time loop; the products (of the state's B rows) read it
  // from there, or from R itself where the plan packs nothing (PackFor: a few rows, few steps). The
  // forward's R is params' or Keras' recurrent_kernel (pl's strides).
  template <typename A>
  void PackForward(const CPUDevice& d, const PseudoLayer<A>& pl, A* packed) const {
    fwd.Pack(d, pl.m.num_units, pl.r, pl.r_state_stride(), pl.r_gate_unit_stride(), packed);
  }
  template <typename A>
  void ForwardProduct(const PseudoLayer<A>& pl, int u, int64_t B, const A* h, const A* packed,
                      A* c, int64_t ldc) const {
    fwd.Product(u, B, h, pl.m.output_width(), packed, pl.m.num_units, pl.r,
                pl.r_state_stride(), pl.r_gate_unit_stride(), c, ldc);
  }
  // Gate g's block of ForwardProduct, from its own operand h (per_gate).
  template <typename A>
  void ForwardGateProduct(const PseudoLayer<A>& pl, int u, int g, int64_t B, const A* h,
                          const A* packed, A* c, int64_t ldc) const {
    fwd.GateProduct(u, g, B, h, pl.m.output_width(), packed, pl.m.num_units, pl.r,
                    pl.r_state_stride(), pl.r_gate_unit_stride(), c, ldc);
  }
  int64_t backward_size(const RnnModel& m) const {  // values PackBackward writes
    return bwd.size() * (per_gate ? m.gates() : 1);
  }
  template <typename A>
  void PackBackward(const CPUDevice& d, const PseudoLayer<A>& pl, A* packed) const {
    const RnnModel& m = pl.m;
    const int64_t Hr = m.output_width(), gates = per_gate ? m.gates() : 1;
    for (int64_t g = 0; g < gates; ++g) {
      bwd.Pack(d, Hr, pl.r + g * GateRows(m) * pl.r_gate_unit_stride(), pl.r_gate_unit_stride(),
               pl.r_state_stride(), packed + g * bwd.size());
    }
  }
  // dgh·R (per_gate: gate g's term dgh_g·R_g alone).
  template <typename A>
  void BackwardProduct(const PseudoLayer<A>& pl, int u, int64_t B, const A* dgh,
                       const A* packed, A* c, int64_t ldc, int g = 0) const {
    const RnnModel& m = pl.m;
    const int64_t Hr = m.output_width(), rows = GateRows(m);
    bwd.Product(u, B, dgh + g * rows, m.gate_width(), packed + g * bwd.size(), Hr,
                pl.r + g * rows * pl.r_gate_unit_stride(), pl.r_gate_unit_stride(),
                pl.r_state_stride(), c, ldc);
  }

 private:
  static bool PerGate(const RnnModel& m, const RnnRun& run) {
    return run.recurrent_masks != nullptr || m.gru_reset_before;
  }
  static LoopSplit Split(const CPUDevice& d, const RnnModel& m, const RnnRun& run,
                         int64_t value_bytes) {
    if (m.has_proj() || PerGate(m, run)) return LoopSplit{1, run.batch};
    // every direction's R, as the forward packs it (the backward's is the same size)
    const int64_t weight_bytes =
        m.num_dirs * m.output_width() * m.gates() * gemm::PaddedCols(m.num_units) * value_bytes;
    const int64_t unit_team =
        std::min<int64_t>(d.numThreads(), m.num_dirs * UnitSliceCount(m.num_units, Share(d, m)));
    return SplitLoop(d, run.batch, unit_team, weight_bytes,
                     2.0 * m.num_dirs * run.time * run.batch * m.output_width() * m.gate_width());
  }
  int64_t GateRows(const RnnModel& m) const { return per_gate ? m.num_units : 0; }
  static int64_t Share(const CPUDevice& d, const RnnModel& m) {
    return std::max<int64_t>(1, (d.numThreads() + m.num_dirs - 1) / m.num_dirs);
  }
};

// Where r and u start in pl's rows of gate values (PseudoLayer::gate_block).
template <typename A>
GruGateStarts GruStarts(const PseudoLayer<A>& pl) {
  return {pl.gate_block(0) * pl.m.num_units, pl.gate_block(1) * pl.m.num_units};
}

// ---- cells with Keras' activations (docs/cudnn_rnn.md §4.7) ----------------------------------
// (Row loops and buffers: cc/cpu/rows.h; RowScratch number 0 holds the element-wise pass's rows,
// 1 a masked operand, 2 a gate's product.)

// One row's n units of a step with Keras' activations: x_side(g, j) / h_side(g, j) are the two
// sides' pre-activations (cuDNN's gate order); writes c (LSTM), `out` (LSTM's m, else h) and,
// when `saved` is given, the pre-activations (cudnn_rnn_cells.h; gate g at saved[g·H + j]).
// Zoneout blends the new h (and LSTM's c) with h_in (c_in) after the cell, which reads the
// un-zoned new c.
template <typename A, typename Math, typename XSide, typename HSide>
void ForwardRowAny(const RnnModel& m, int64_t n, XSide x_side, HSide h_side, const A* h_in,
                   const A* c_in, A* c_out, A* out, A* saved, const ZoneoutView<A>& zh,
                   const ZoneoutView<A>& zc) {
  const int64_t H = m.num_units;
  const RnnActivation act = m.activation, rec = m.recurrent_activation;
  A* pre = RowScratch<A>(6 * n);
  A* val = pre + 4 * n;
  if (m.mode == RnnMode::kLstm) {
    for (int g = 0; g < 4; ++g) {
      for (int64_t j = 0; j < n; ++j) pre[g * n + j] = x_side(g, j) + h_side(g, j);
      if (saved) std::memcpy(saved + g * H, pre + g * n, n * sizeof(A));
      ActivateRow<A, Math>(g == 2 ? act : rec, pre + g * n, pre + g * n, n);
    }
    for (int64_t j = 0; j < n; ++j) {
      c_out[j] = LstmAnyCellState(pre[j], pre[n + j], pre[2 * n + j], c_in[j]);
    }
    ActivateRow<A, Math>(act, c_out, val, n);
    for (int64_t j = 0; j < n; ++j) out[j] = pre[3 * n + j] * val[j];
    ZoneRowForward(zc, n, c_in, c_out);
  } else if (m.mode == RnnMode::kGru) {  // pre: a_r, a_u, a_n, h_c
    for (int64_t j = 0; j < n; ++j) {
      pre[j] = x_side(0, j) + h_side(0, j);
      pre[n + j] = x_side(1, j) + h_side(1, j);
      pre[3 * n + j] = h_side(2, j);
    }
    ActivateRow<A, Math>(rec, pre, val, n);  // r
    for (int64_t j = 0; j < n; ++j) pre[2 * n + j] = x_side(2, j) + val[j] * pre[3 * n + j];
    if (saved) {
      for (int g = 0; g < 4; ++g) std::memcpy(saved + g * H, pre + g * n, n * sizeof(A));
    }
    ActivateRow<A, Math>(rec, pre + n, val, n);          // u
    ActivateRow<A, Math>(act, pre + 2 * n, val + n, n);  // n
    for (int64_t j = 0; j < n; ++j) out[j] = GruAnyOutput(val[j], val[n + j], h_in[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) pre[j] = x_side(0, j) + h_side(0, j);
    if (saved) std::memcpy(saved, pre, n * sizeof(A));
    ActivateRow<A, Math>(act, pre, out, n);
  }
  ZoneRowForward(zh, n, h_in, out);
}

// The backward of one row's n units with Keras' activations, from the saved pre-activations:
// the gate gradients gx (and GRU's recurrent-side gh), the direct term of dL/dh_prev (GRU's, and
// zoneout's (1 - w)·dh), LSTM's carried dc (in place) and, when m_row is given, m = o·act(c).
// dh is dL/dm for LSTM, else dL/dh; with zoneout dL/dh and dL/dc of the zoned states. c_row is
// the carried c; zoned, the cell's un-zoned one is recomputed from the saved gates.
template <typename A, typename Math>
void BackwardRowAny(const RnnModel& m, GruGateStarts gru_at, int64_t n, const A* saved,
                    const A* c_row, const A* c_in, const A* h_in, const A* dh, A* dc, A* gx,
                    A* gh, A* direct, A* m_row, const ZoneoutView<A>& zh,
                    const ZoneoutView<A>& zc) {
  const int64_t H = m.num_units;
  const RnnActivation act = m.activation, rec = m.recurrent_activation;
  // gate values [G][n], slopes [G][n], act(c), its slope, the un-zoned c
  A* v = RowScratch<A>(11 * n);
  A* s = v + 4 * n;
  if (m.mode == RnnMode::kLstm) {
    A* co = s + 4 * n;
    A* sco = co + n;
    for (int g = 0; g < 4; ++g) {
      ValueAndSlopeRow<A, Math>(g == 2 ? act : rec, saved + g * H, v + g * n, s + g * n, n);
    }
    const A* c_new = c_row;
    if (zc.zoned()) {
      A* c_cell = sco + n;
      for (int64_t j = 0; j < n; ++j) {
        c_cell[j] = LstmAnyCellState(v[j], v[n + j], v[2 * n + j], c_in[j]);
      }
      c_new = c_cell;
    }
    ValueAndSlopeRow<A, Math>(act, c_new, co, sco, n);
    for (int64_t j = 0; j < n; ++j) {
      const CellGradients<A> g = LstmAnyBackward(
          v[j], v[n + j], v[2 * n + j], v[3 * n + j], s[j], s[n + j], s[2 * n + j],
          s[3 * n + j], co[j], sco[j], c_in[j], zc.ToNew(j, dc[j]), zh.ToNew(j, dh[j]));
      StoreLstmGateGradients(g, H, j, gx);
      dc[j] = g.cs_prev_grad + zc.ToPrevious(j, dc[j]);
      if (m_row) m_row[j] = v[3 * n + j] * co[j];
      if (direct) direct[j] = zh.ToPrevious(j, dh[j]);
    }
  } else if (m.mode == RnnMode::kGru) {
    for (int g = 0; g < 3; ++g) {
      ValueAndSlopeRow<A, Math>(g == 2 ? act : rec, saved + g * H, v + g * n, s + g * n, n);
    }
    for (int64_t j = 0; j < n; ++j) {
      const GruGradients<A> g =
          GruAnyBackward(v[j], v[n + j], v[2 * n + j], s[j], s[n + j], s[2 * n + j],
                         saved[3 * H + j], h_in[j], zh.ToNew(j, dh[j]));
      StoreGruGateGradients(g, H, gru_at, j, gx, gh);
      direct[j] = g.h_prev_direct + zh.ToPrevious(j, dh[j]);
    }
  } else {
    SlopeRow<A, Math>(act, saved, s, n);
    for (int64_t j = 0; j < n; ++j) gx[j] = zh.ToNew(j, dh[j]) * s[j];
    if (direct) {
      for (int64_t j = 0; j < n; ++j) direct[j] = zh.ToPrevious(j, dh[j]);
    }
  }
}

// The backward of a GRU resetting before, for one row's n units from the saved pre-activations
// (first phase: all but r's gate gradient, which needs every unit's candidate gradient).
template <typename A, typename Math>
void BackwardRowResetCandidate(const RnnModel& m, GruGateStarts gru_at, int64_t n,
                               const A* saved, const A* h_in, const A* dh, A* gx, A* gh,
                               A* direct, const ZoneoutView<A>& zh) {
  const int64_t H = m.num_units;
  A* v = RowScratch<A>(4 * n);  // u, the candidate, their slopes
  ValueAndSlopeRow<A, Math>(m.recurrent_activation, saved + H, v, v + 2 * n, n);
  ValueAndSlopeRow<A, Math>(m.activation, saved + 2 * H, v + n, v + 3 * n, n);
  for (int64_t j = 0; j < n; ++j) {
    const GruGradients<A> g = GruResetCandidateBackward(v[j], v[n + j], v[2 * n + j],
                                                        v[3 * n + j], h_in[j], zh.ToNew(j, dh[j]));
    StoreGruGateGradients(g, H, gru_at, j, gx, gh);
    direct[j] = g.h_prev_direct + zh.ToPrevious(j, dh[j]);
  }
}

// Cell slice u's part of forward step `step`: its units [j0, j0 + n), its gates' padded width
// gn in the recurrent product's row of `row` values (its block rec_u of the step's product),
// the time index t and the state h_prev before the step.
template <typename A>
struct StepSlice {
  int64_t j0, n, gn, row, t;
  const A* h_prev;
  A* rec_u;
  StepSlice(const PseudoLayer<A>& pl, const RnnRun& run, int64_t step, const SlicePacking& fwd,
            int u, A* rec)
      : j0(fwd.bounds()[u]),
        n(fwd.bounds()[u + 1] - j0),
        gn(fwd.gate_cols(u)),
        row(pl.m.gates() * gn),
        t(TimeOf(pl.dir, step, run.time)),
        h_prev(pl.h_before(step, run.time, run.batch)),
        rec_u(rec + run.batch * fwd.col0(u)) {}
};

// Forward work of cell slice u (units [j0, j1)) for batch rows [b0, b1) (all rows where the plan
// has recurrent masks: their operands span them) at step `step`: its block of the recurrent GEMM,
// rec_u = h_prev·R_uᵀ ([B, G·gn], gates in order, each padded to gn columns; gate g from
// h_prev ⊙ h_masks[g] where given), then the element-wise pass of its units, which writes c,
// the saved gates (where the run keeps them) and m (into m_buf with a projection, else h itself).
template <typename A, typename Math>
void ForwardCells(const PseudoLayer<A>& pl, const RnnRun& run, const std::vector<int64_t>& len,
                  int64_t step, const TeamPlan& plan, int u, int64_t b0, int64_t b1,
                  const A* r_packed, const A* h_masks, const Zoneout<A>& zoneout, const A* xw,
                  A* rec, A* m_buf) {
  const RnnModel& m = pl.m;
  const int64_t T = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const StepSlice<A> s(pl, run, step, plan.fwd, u, rec);
  const int64_t G = m.gate_width(), j0 = s.j0, n = s.n, gn = s.gn, row = s.row, t = s.t;
  if (n == 0) return;
  const A* h_prev = s.h_prev;
  const A* c_prev = pl.c_before(step, T, B);
  A* h_out = pl.h + t * B * Hr;
  A* rec_u = s.rec_u;
  if (h_masks == nullptr) {
    plan.ForwardProduct(pl, u, b1 - b0, h_prev + b0 * Hr, r_packed, rec_u + b0 * row, row);
  } else {  // (every unit masks all of h: B·Hr products per gate, against the GEMM's B·Hr·2n)
    A* h_masked = RowScratch<A, 1>(B * Hr);
    for (int g = 0; g < m.gates(); ++g) {  // block g, from its gate's mask
      MaskOperand<A>(0, B * Hr, B * Hr, h_prev, h_masks + pl.gate_block(g) * B * Hr, false,
                     h_masked);
      plan.ForwardGateProduct(pl, u, g, B, h_masked, r_packed, rec_u, row);
    }
  }
  const bool relu = m.mode == RnnMode::kRnnRelu;
  // Gate g's block (PseudoLayer::gate_block), from a loop-invariant flag.
  const bool keras_gru_order = pl.keras_gru_order();
  auto block = [=](int g) { return PseudoLayer<A>::GateBlock(keras_gru_order, g); };
  Elementwise([&] {
    for (int64_t b = b0; b < b1; ++b) {
      if (t >= len[b]) {  // past this sequence's end: hold the state
        // (with a projection, the output slices hold h)
        if (!m.has_proj()) std::memcpy(h_out + b * Hr + j0, h_prev + b * Hr + j0, n * sizeof(A));
        if (pl.c) std::memcpy(pl.c + (t * B + b) * H + j0, c_prev + b * H + j0, n * sizeof(A));
        if (pl.gates) {
          const int saved_gates = SavedGatesOf(m.mode);
          A* saved = pl.gates + (t * B + b) * saved_gates * H + j0;
          for (int g = 0; g < saved_gates; ++g) std::fill(saved + g * H, saved + g * H + n, A(0));
        }
        continue;
      }
      // Pre-activation halves of gate g (cuDNN's order) at unit j0 + j: input side (W·x + b_W),
      // recurrent side (R·h + b_R). One loop per mode, without branches, so that each vectorises.
      // (__restrict: these buffers never overlap; GCC then needs no alias checks.)
      const A* __restrict gx = xw + (t * B + b) * G + j0;
      const A* __restrict gh = rec_u + b * row;
      const A* __restrict bw = pl.bias_w + j0;
      const A* __restrict br = pl.bias_r + j0;
      auto x_side = [=](int g, int64_t j) {
        return gx[block(g) * H + j] + bw[block(g) * H + j];
      };
      auto h_side = [=](int g, int64_t j) {
        return gh[block(g) * gn + j] + br[block(g) * H + j];
      };
      // Saved gates (kSave) only where a backward will read them: each loop twice, without a
      // branch inside.
      A* const saved_row =
          pl.gates ? pl.gates + (t * B + b) * SavedGatesOf(m.mode) * H + j0 : nullptr;
      if (m.keras_cells()) {
        const bool lstm = m.mode == RnnMode::kLstm;
        A* out = lstm && m.has_proj() ? m_buf + b * H + j0 : h_out + b * Hr + j0;
        ForwardRowAny<A, Math>(m, n, x_side, h_side, h_prev + b * Hr + j0,
                               lstm ? c_prev + b * H + j0 : nullptr,
                               lstm ? pl.c + (t * B + b) * H + j0 : nullptr, out, saved_row,
                               zoneout.h.At((t * B + b) * H + j0),
                               zoneout.c.At((t * B + b) * H + j0));
      } else if (m.mode == RnnMode::kLstm) {  // gates i, f, c, o: lstm_cell.h's IFCO layout
        const A* __restrict c_in = c_prev + b * H + j0;
        A* __restrict c_out = pl.c + (t * B + b) * H + j0;
        A* __restrict m_out = (m.has_proj() ? m_buf + b * H : h_out + b * Hr) + j0;
        auto cells = [&](auto save) {
          A* __restrict saved_out = saved_row;
  #pragma GCC ivdep  // distinct buffers: no alias checks needed
          for (int64_t j = 0; j < n; ++j) {
            const CellActivations<A> a = CudnnLstmForward<A, Math>(
                x_side(0, j) + h_side(0, j), x_side(1, j) + h_side(1, j),
                x_side(2, j) + h_side(2, j), x_side(3, j) + h_side(3, j), c_in[j]);
            if constexpr (decltype(save)::value) CudnnLstmSave(a, saved_out, H, j);
            c_out[j] = a.cs;
            m_out[j] = a.h;
          }
        };
        saved_row ? cells(std::true_type{}) : cells(std::false_type{});
      } else if (m.mode == RnnMode::kGru) {
        const A* __restrict h_in = h_prev + b * Hr + j0;
        A* __restrict h_row = h_out + b * Hr + j0;
        auto cells = [&](auto save) {
          A* __restrict saved_out = saved_row;
  #pragma GCC ivdep
          for (int64_t j = 0; j < n; ++j) {
            const GruActivations<A> a =
                GruForward<A, Math>(x_side(0, j), x_side(1, j), x_side(2, j), h_side(0, j),
                                    h_side(1, j), h_side(2, j), h_in[j]);
            if constexpr (decltype(save)::value) {
              saved_out[j] = a.r;
              saved_out[H + j] = a.u;
              saved_out[2 * H + j] = a.candidate;
              saved_out[3 * H + j] = a.recurrent_candidate;
            }
            h_row[j] = a.h;
          }
        };
        saved_row ? cells(std::true_type{}) : cells(std::false_type{});
      } else {
        A* __restrict h_row = h_out + b * Hr + j0;
  #pragma GCC ivdep
        for (int64_t j = 0; j < n; ++j) {
          h_row[j] = SimpleRnnForward<A, Math>(relu, x_side(0, j) + h_side(0, j));
        }
      }
    }
  });
}

// ---- GRU resetting before (Keras' reset_after=False; docs/cudnn_rnn.md §4.8) -------------------
// Two phases a step: the gates (ForwardResetGates) write r ⊙ h for their units into the
// direction's reset buffer; once every unit's is there, the candidates (ForwardResetCandidates)
// multiply it by their columns of R_h. The reset buffer [B, 2H] holds r ⊙ h, then a_u (the
// update gate's pre-activation, kept across the phases for inference, which saves nothing).

// h_prev times the candidate's recurrent mask (gate 2), or h_prev: r ⊙ that is the operand.
template <typename A>
A CandidateOperand(const A* h_prev, const A* h_masks, int64_t B, int64_t H, int64_t b,
                   int64_t k) {
  return h_masks ? MaskedOperand(h_prev[b * H + k], h_masks[(2 * B + b) * H + k])
                 : h_prev[b * H + k];
}

template <typename A, typename Math>
void ForwardResetGates(const PseudoLayer<A>& pl, const RnnRun& run,
                       const std::vector<int64_t>& len, int64_t step, const TeamPlan& plan,
                       int u, const A* r_packed, const A* h_masks, const A* xw, A* rec,
                       A* reset_buf) {
  const RnnModel& m = pl.m;
  const int64_t B = run.batch, H = m.num_units, G = m.gate_width();
  const StepSlice<A> s(pl, run, step, plan.fwd, u, rec);
  const int64_t j0 = s.j0, n = s.n, gn = s.gn, t = s.t;
  const A* h_prev = s.h_prev;
  if (n == 0) return;
  for (int g = 0; g < 2; ++g) {  // r's and u's blocks (the candidate's waits for r ⊙ h)
    const A* operand = h_prev;
    if (h_masks != nullptr) {
      A* masked = RowScratch<A, 1>(B * H);
      MaskOperand<A>(0, B * H, B * H, h_prev, h_masks + pl.gate_block(g) * B * H, false,
                     masked);
      operand = masked;
    }
    plan.ForwardGateProduct(pl, u, g, B, operand, r_packed, s.rec_u, s.row);
  }
  A* rh = reset_buf;
  A* a_u = reset_buf + B * H;
  A* r = RowScratch<A>(n);
  const GruGateStarts at = GruStarts(pl);  // (the product's blocks are gn wide, not H)
  const int64_t r_rec = pl.gate_block(0) * gn, u_rec = pl.gate_block(1) * gn;
  for (int64_t b = 0; b < B; ++b) {
    if (t >= len[b]) {  // (the candidates hold this row's state; its operand is never read)
      std::fill(rh + b * H + j0, rh + b * H + j0 + n, A(0));
      continue;
    }
    const A* gx = xw + (t * B + b) * G + j0;
    const A* gh = s.rec_u + b * s.row;
    const A* bw = pl.bias_w + j0;
    const A* br = pl.bias_r + j0;
    for (int64_t j = 0; j < n; ++j) {
      r[j] = (gx[at.r + j] + bw[at.r + j]) + (gh[r_rec + j] + br[at.r + j]);
      a_u[b * H + j0 + j] = (gx[at.u + j] + bw[at.u + j]) + (gh[u_rec + j] + br[at.u + j]);
    }
    if (pl.gates != nullptr) {
      A* saved = pl.gates + (t * B + b) * kSavedGates * H + j0;
      std::memcpy(saved, r, n * sizeof(A));
      std::memcpy(saved + H, a_u + b * H + j0, n * sizeof(A));
    }
    ActivateRow<A, Math>(m.recurrent_activation, r, r, n);
    for (int64_t j = 0; j < n; ++j) {
      rh[b * H + j0 + j] =
          GruResetOperand(r[j], CandidateOperand(h_prev, h_masks, B, H, b, j0 + j));
    }
  }
}

template <typename A, typename Math>
void ForwardResetCandidates(const PseudoLayer<A>& pl, const RnnRun& run,
                            const std::vector<int64_t>& len, int64_t step, const TeamPlan& plan,
                            int u, const A* r_packed, const Zoneout<A>& zoneout,
                            const A* xw, A* rec, const A* reset_buf) {
  const RnnModel& m = pl.m;
  const int64_t B = run.batch, H = m.num_units, G = m.gate_width();
  const StepSlice<A> s(pl, run, step, plan.fwd, u, rec);
  const int64_t j0 = s.j0, n = s.n, t = s.t;
  const A* h_prev = s.h_prev;
  if (n == 0) return;
  const A* rh = reset_buf;
  const A* a_u = reset_buf + B * H;
  A* h_out = pl.h + t * B * H;
  plan.ForwardGateProduct(pl, u, 2, B, rh, r_packed, s.rec_u, s.row);
  A* a_n = RowScratch<A>(3 * n);
  A* cand = a_n + n;
  A* upd = cand + n;
  for (int64_t b = 0; b < B; ++b) {
    A* saved = pl.gates ? pl.gates + (t * B + b) * kSavedGates * H + j0 : nullptr;
    if (t >= len[b]) {  // past this sequence's end: hold the state
      std::memcpy(h_out + b * H + j0, h_prev + b * H + j0, n * sizeof(A));
      for (int g = 0; saved && g < kSavedGates; ++g) {
        std::fill(saved + g * H, saved + g * H + n, A(0));
      }
      continue;
    }
    const A* gx = xw + (t * B + b) * G + j0;
    const A* gh = s.rec_u + b * s.row + 2 * s.gn;
    const A* bw = pl.bias_w + j0;
    const A* br = pl.bias_r + j0;
    for (int64_t j = 0; j < n; ++j) {
      a_n[j] = (gx[2 * H + j] + bw[2 * H + j]) + (gh[j] + br[2 * H + j]);
    }
    if (saved != nullptr) {
      std::memcpy(saved + 2 * H, a_n, n * sizeof(A));
      std::memcpy(saved + 3 * H, rh + b * H + j0, n * sizeof(A));
    }
    ActivateRow<A, Math>(m.activation, a_n, cand, n);
    ActivateRow<A, Math>(m.recurrent_activation, a_u + b * H + j0, upd, n);
    for (int64_t j = 0; j < n; ++j) {
      h_out[b * H + j0 + j] = GruAnyOutput(upd[j], cand[j], h_prev[b * H + j0 + j]);
    }
    ZoneRowForward(zoneout.h.At((t * B + b) * H + j0), n, h_prev + b * H + j0,
                   h_out + b * H + j0);
  }
}

// Forward work of output slice [k0, k1) with a projection, once all of m is done: h = Pmat·m
// for its outputs where the row ran, the held state elsewhere.
template <typename A>
void ProjectOutputs(const PseudoLayer<A>& pl, const RnnRun& run, const std::vector<int64_t>& len,
                    int64_t step, int64_t k0, int64_t k1, const A* m_buf) {
  const int64_t T = run.time, B = run.batch, H = pl.m.num_units, Hr = pl.m.output_width();
  const int64_t n = k1 - k0;
  if (n == 0) return;
  const int64_t t = TimeOf(pl.dir, step, T);
  const A* h_prev = pl.h_before(step, T, B);
  A* h_out = pl.h + t * B * Hr;
  gemm::Block(false, true, B, n, H, m_buf, H, pl.proj + k0 * H, H, false, h_out + k0, Hr);
  for (int64_t b = 0; b < B; ++b) {
    if (t >= len[b]) std::memcpy(h_out + b * Hr + k0, h_prev + b * Hr + k0, n * sizeof(A));
  }
}

// Forward of layer `pls[0].layer`, all its directions (pls) at once: the input projections,
// then one RunPhases team for the time loops (unit dir·slices + u is slice u of direction dir;
// phases step·phases_per_step (+ 1) run step `step` of every direction). xw, rec, m_buf and
// r_packed hold one part per direction.
template <typename A, typename Math>
void ForwardLayer(const CPUDevice& d, const std::vector<PseudoLayer<A>>& pls,
                  const TeamPlan& plan, const RnnRun& run, const std::vector<int64_t>& len,
                  const A* x, const OperandMasks<A>& masks, const Zoneout<A>& zoneout, A* xw,
                  A* rec, A* m_buf, A* reset_buf, A* r_packed) {
  const RnnModel& m = pls[0].m;
  const int64_t T = run.time, B = run.batch, H = m.num_units;
  const int64_t G = m.gate_width(), D = m.num_dirs;
  for (int64_t dir = 0; dir < D; ++dir) {
    InputProjection(d, pls[dir], T, B, x, masks, xw + dir * T * B * G);
    plan.PackForward(d, pls[dir], r_packed + dir * plan.fwd.size());
  }
  const int K = plan.phases_per_step;
  RunLoop(d, plan.split, T * K, plan.units(m), [&](int64_t phase, int unit, int64_t b0,
                                                    int64_t b1) {
    const int64_t dir = unit / plan.slices, u = unit % plan.slices, step = phase / K;
    const PseudoLayer<A>& pl = pls[dir];
    const A* packed = r_packed + dir * plan.fwd.size();
    A* rec_dir = rec + dir * B * plan.fwd.total_cols();
    A* reset_dir = reset_buf ? reset_buf + dir * 2 * B * H : nullptr;
    if (m.gru_reset_before) {
      if (u >= plan.fwd.slices()) return;
      if (phase % K == 0) {
        ForwardResetGates<A, Math>(pl, run, len, step, plan, static_cast<int>(u), packed,
                                   masks.recurrent, xw + dir * T * B * G, rec_dir, reset_dir);
      } else {
        ForwardResetCandidates<A, Math>(pl, run, len, step, plan, static_cast<int>(u), packed,
                                        zoneout, xw + dir * T * B * G, rec_dir, reset_dir);
      }
    } else if (phase % K == 0) {
      if (u >= plan.fwd.slices()) return;
      ForwardCells<A, Math>(pl, run, len, step, plan, static_cast<int>(u), b0, b1, packed,
                            masks.recurrent, zoneout, xw + dir * T * B * G, rec_dir,
                            m_buf ? m_buf + dir * B * H : nullptr);
    } else {
      if (u >= plan.bwd.slices()) return;
      const std::vector<int64_t>& out = plan.bwd.bounds();
      ProjectOutputs(pl, run, len, step, out[u], out[u + 1], m_buf + dir * B * H);
    }
  });
}

// A layer's output [T, B, D·Hr] (pls: its directions): each direction's state where the row ran
// the step, else zero, written to dst time-major or batch-major ([B, T, D·Hr]) and converted to
// Out on the way: the next layer's input, or the op's output itself (one pass over it).
template <typename A, typename Out>
void WriteLayerOutput(const CPUDevice& d, const std::vector<PseudoLayer<A>>& pls, int64_t T,
                      int64_t B, const std::vector<int64_t>& len, bool time_major, Out* dst) {
  const int64_t D = static_cast<int64_t>(pls.size()), Hr = pls[0].m.output_width();
  ParallelFor(d, T * B, D * Hr * 8.0, D * Hr * 1.0, [&](int64_t begin, int64_t end) {
    for (int64_t tb = begin; tb < end; ++tb) {
      const int64_t t = tb / B, b = tb % B;
      Out* row = dst + (time_major ? tb : b * T + t) * D * Hr;
      for (int64_t dir = 0; dir < D; ++dir) {
        Out* out = row + dir * Hr;
        const A* h = pls[dir].h + tb * Hr;
        if (t >= len[b]) {
          std::fill(out, out + Hr, Out(0));
        } else if constexpr (std::is_same_v<Out, A>) {
          std::memcpy(out, h, Hr * sizeof(A));
        } else {
          for (int64_t k = 0; k < Hr; ++k) out[k] = static_cast<Out>(h[k]);
        }
      }
    }
  });
}

// Keras' weights (RnnRun::keras) in the compute type: the tensors themselves for float and
// double; nulls when the run has params instead.
template <typename A>
struct KerasWeightsIn {
  const A *kernel = nullptr, *recurrent_kernel = nullptr, *bias = nullptr;
};
template <typename T, typename A>
KerasWeightsIn<A> KerasWeightsAsAcc(const CPUDevice& d, Scratch& scratch, const RnnModel& m,
                                    const RnnRun& run) {
  KerasWeightsIn<A> weights;
  if (!run.keras.given()) return weights;
  const int64_t G = m.gate_width();
  weights.kernel =
      AsAcc<A>(d, scratch, static_cast<const T*>(run.keras.kernel), m.input_size * G);
  weights.recurrent_kernel = AsAcc<A>(
      d, scratch, static_cast<const T*>(run.keras.recurrent_kernel), m.num_units * G);
  weights.bias =
      AsAcc<A>(d, scratch, static_cast<const T*>(run.keras.bias), run.keras.bias_rows * G);
  return weights;
}

// Each engine call below is one walk over its code with a Scratch: counting for the size query
// (then it returns before computing anything), carving for the run. False: out of scratch.

template <typename T, typename A>
bool ForwardWalk(const CPUDevice& d, Scratch& scratch, const RnnModel& m, const RnnRun& run,
                 const RnnDropout& dropout, const T* input, const T* input_h, const T* input_c,
                 const T* params, T* output, T* output_h, T* output_c, uint8_t* workspace) {
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t LD = m.num_pseudo_layers(), D = m.num_dirs, G = m.gate_width();
  const bool lstm = m.mode == RnnMode::kLstm;
  if (!scratch.counting()) {
    const RnnReserveHeader header = MakeReserveHeader(m, run, dropout, sizeof(T), sizeof(A));
    std::memcpy(workspace, &header, sizeof(header));
    if (RnnRunsNothing(m, run)) {  // the final state is the initial state
      Convert(d, input_h, output_h, LD * B * Hr);
      if (lstm) Convert(d, input_c, output_c, LD * B * H);
    }
  }
  if (RnnRunsNothing(m, run)) return true;
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const WorkspaceLayout lay(m, run, dropout.active(m));
  A* ws = reinterpret_cast<A*>(workspace + sizeof(RnnReserveHeader));

  // The weights: params, or Keras' tensors read in place (KerasWeightsInPlace), b_W = 0 where
  // Keras' bias has one row.
  const bool keras = run.keras.given();
  const A* P = keras ? nullptr : AsAcc<A>(d, scratch, params, CheckedParamsSize(m));
  const KerasWeightsIn<A> weights = KerasWeightsAsAcc<T, A>(d, scratch, m, run);
  A* zero_bias = keras && run.keras.bias_rows == 1 ? scratch.Take<A>(G) : nullptr;
  const A* x0 = ToTimeMajor<A>(d, scratch, run, m.input_size, input);
  const A* h0 = AsAcc<A>(d, scratch, input_h, LD * B * Hr);
  const A* c0 = lstm ? AsAcc<A>(d, scratch, input_c, LD * B * H) : nullptr;
  const OperandMasks<A> masks = ConvertMasks<T, A>(d, scratch, m, run, false);
  const Zoneout<A> zoneout = ConvertZoneout<T, A>(d, scratch, run, m.num_units);
  // Per direction: the input projections, the recurrent GEMM's output, m (with a projection)
  // and the packed R.
  const TeamPlan plan(d, m, run, int64_t{sizeof(A)});
  A* xw = scratch.Take<A>(D * T_ * B * G);
  A* rec = scratch.Take<A>(D * B * plan.fwd.total_cols());
  A* r_packed = scratch.Take<A>(D * plan.fwd.size());
  A* m_buf = m.has_proj() ? scratch.Take<A>(D * B * H) : nullptr;
  A* reset_buf = m.gru_reset_before ? scratch.Take<A>(D * 2 * B * H) : nullptr;
  // output_h then output_c, in the compute type
  A* final_state = scratch.Take<A>(LD * B * (Hr + (lstm ? H : 0)));
  if (scratch.counting() || !scratch.ok()) return scratch.ok();
  if (zero_bias != nullptr) std::fill(zero_bias, zero_bias + G, A(0));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const A* x = l == 0 ? x0 : ws + lay.input(l);
    std::vector<PseudoLayer<A>> pls;
    pls.reserve(D);
    for (int64_t dir = 0; dir < D; ++dir) pls.emplace_back(m, l * D + dir, P, ws, lay, h0, c0, B);
    if (keras) {  // (one pseudo-layer)
      pls[0].ReadKerasWeights(weights.kernel, weights.recurrent_kernel,
                              zero_bias ? zero_bias : weights.bias,
                              weights.bias + (run.keras.bias_rows - 1) * G);
    }
    ForwardLayer<A, MathFor<T>>(d, pls, plan, run, len, x, masks, zoneout, xw, rec, m_buf,
                                reset_buf, r_packed);
    for (int64_t dir = 0; dir < D; ++dir) {
      // Final state: after the last processed step (rows past their end held it there).
      const int64_t p = l * D + dir, t_last = TimeOf(dir, T_ - 1, T_);
      std::memcpy(final_state + p * B * Hr, pls[dir].h + t_last * B * Hr, B * Hr * sizeof(A));
      if (lstm) {
        std::memcpy(final_state + LD * B * Hr + p * B * H, pls[dir].c + t_last * B * H,
                    B * H * sizeof(A));
      }
    }
    if (l + 1 == m.num_layers) {
      WriteLayerOutput(d, pls, T_, B, len, run.time_major, output);
    } else {  // the next layer's input, dropped out (in place) when training
      A* next = ws + lay.input(l + 1);
      WriteLayerOutput(d, pls, T_, B, len, /*time_major=*/true, next);
      if (dropout.active(m)) {
        A* mask = ws + lay.mask(l + 1);
        const A scale = DropoutKeepScale<A>(dropout.rate);
        const uint64_t stream = DropoutStream(dropout, l);
        ParallelFor(d, T_ * B * D * Hr, 16, 20, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            mask[k] = DropoutDrops(stream, k, dropout.rate) ? A(0) : scale;
            next[k] *= mask[k];
          }
        });
      }
    }
  }
  Convert(d, final_state, output_h, LD * B * Hr);
  if (lstm) Convert(d, final_state + LD * B * Hr, output_c, LD * B * H);
  return true;
}

// Where a pseudo-layer's weight gradients go, in the compute type: params' regions, or (Keras'
// weights, PseudoLayer::keras_layout) the transposes of W and R, Keras' kernel [I, G*H] and
// recurrent_kernel [Hr, G*H]. bias_w is null where no gradient of b_W is wanted (Keras' one-row
// bias, whose b_W is the constant 0).
template <typename A>
struct WeightGradients {
  A *w = nullptr, *r = nullptr, *proj = nullptr, *bias_w = nullptr, *bias_r = nullptr;
  bool keras = false;
  // Params' layout: scratch for a block computed in Keras' orientation first, or null.
  A* transposed = nullptr;
  // The block of gates·units rows (from `offset`, leading dimension ld) of dM for a weight matrix
  // M [G*H, width] = dgᵀ·operand, dg [rows, gate_units] (ld_dg), operand [rows, width]: in params,
  // that block; in Keras' layout, its transpose (operandᵀ·dg), whose gates·units are columns.
  // Params' block, too, is computed as operandᵀ·dg into `transposed` and transposed into place
  // where the sums are at least kMinRowsToTranspose rows (T·B) deep (shallower: the copy costs
  // about what it saves) and the product runs on the register tiles (OnRegisterTiles). The
  // tiles' strided operand is then `operand` (x or h_prev, rows I or Hr values apart), not dg,
  // whose rows G values apart (4 KiB at G = 1024) fall into a few L1 sets: 16-28 % slower
  // (docs/performance.md §3.3). The same sums. (Eigen, for larger products or without the
  // tiles, ran 7 % slower this way round at (100, 64, 512, 512).)
  static constexpr int64_t kMinRowsToTranspose = 64;
  static bool ViaTransposed(const CPUDevice& d, int64_t rows, int64_t gate_units,
                            int64_t width) {
    return rows >= kMinRowsToTranspose && OnRegisterTiles(d, width, gate_units, rows);
  }
  void Matrix(const CPUDevice& d, A* out, int64_t offset, int64_t ld, int64_t gate_units,
              int64_t width, int64_t rows, const A* dg, int64_t ld_dg, const A* operand,
              int64_t ld_operand) const {
    const bool via_transposed =
        !keras && transposed != nullptr && ViaTransposed(d, rows, gate_units, width);
    if (keras || via_transposed) {
      A* dst = keras ? out + offset : transposed;
      Gemm(d, true, false, width, gate_units, rows, operand, ld_operand, dg, ld_dg, false, dst,
           keras ? ld : gate_units, gemm::Sum::kLong);
      if (via_transposed) {
        TransposeInto(d, width, gate_units, transposed, gate_units, out + offset, ld);
      }
    } else {
      Gemm(d, true, false, gate_units, width, rows, dg, ld_dg, operand, ld_operand, false,
           out + offset, ld, gemm::Sum::kLong);
    }
  }
};

// One direction's buffers of the backward sweep (each [T·B, ·] unless noted).
template <typename A>
struct SweepBuffers {
  A *dgx, *dgh;   // input-side / recurrent-side gate gradients (the same buffer but for GRU)
  A* dh_total;    // total dL/dh_t (zero where the row did not run)
  A* m_seq;       // m = o ⊙ tanh(c) (projection only, for dPmat)
  A *dh, *dc;     // [B, Hr], [B, H]: the carried state gradients, dL/dh_0 and dL/dc_0 at the end
  A* dm;          // [B, H]: dL/dm of the current step (projection only)
  A* carry;       // [B, Hr]: dgh·R of the step just done
  A* direct;      // [B, Hr]: the direct term of dL/dh_prev of the step just done, or null: GRU's
                  // dL/dh_t ⊙ u (resetting before, plus h's term through r ⊙ h), plus
                  // zoneout's (1 - w) ⊙ dL/dh_t
  const A* r_packed;  // R's columns packed per output slice (TeamPlan::PackBackward), if packed
  const A* h_masks;   // [gates, B, Hr]: the recurrent masks, or null
  Zoneout<A> zoneout;
};

// Backward work of output slice [k0, k1) and batch rows [b0, b1) in phase s of the sweep (s < T:
// before sweep step s, which processes step T-1-s; s = T: after the last): for its columns,
// dL/dh_prev of the step just done (dgh·R, + GRU's direct term, for the rows that ran it; the
// others pass theirs through), then the total dL/dh_t = that + dy of the step about to run (zero
// where the row does not run it). (The plan splits no per-gate product by rows.)
template <typename A>
void BackwardOutputs(const PseudoLayer<A>& pl, const RnnRun& run, const std::vector<int64_t>& len,
                     int64_t s, const TeamPlan& plan, int u, int64_t b0, int64_t b1,
                     const A* dy, const SweepBuffers<A>& buf) {
  const RnnModel& m = pl.m;
  const SlicePacking& packing = plan.bwd;
  const int64_t T = run.time, B = run.batch, Hr = m.output_width(), G = m.gate_width();
  const int64_t D = m.num_dirs, k0 = packing.bounds()[u], k1 = packing.bounds()[u + 1];
  const int64_t n = k1 - k0;
  if (n == 0) return;
  if (s > 0) {
    const int64_t t = TimeOf(pl.dir, T - s, T);
    const A* dgh_t = buf.dgh + t * B * G;
    if (!plan.per_gate) {
      plan.BackwardProduct(pl, u, b1 - b0, dgh_t + b0 * G, buf.r_packed,
                           buf.carry + b0 * Hr + k0, Hr);
    } else {  // Σ_g (dgh_g·R_g) ⊙ h_masks[g]: gate g's term through its mask (if any); a GRU
              // resetting before has its candidate's in the direct term (BackwardResetGates)
      A* term = RowScratch<A, 2>(B * n);
      for (int g = 0; g < (m.gru_reset_before ? 2 : m.gates()); ++g) {  // blocks
        plan.BackwardProduct(pl, u, B, dgh_t, buf.r_packed, term, n, g);
        const A* mask = buf.h_masks ? buf.h_masks + pl.gate_block(g) * B * Hr : nullptr;
        for (int64_t b = 0; b < B; ++b) {
          MaskOperand<A>(0, n, n, term + b * n, mask ? mask + b * Hr + k0 : nullptr, g > 0,
                         buf.carry + b * Hr + k0);
        }
      }
    }
    for (int64_t b = b0; b < b1; ++b) {
      if (t >= len[b]) continue;
      for (int64_t k = b * Hr + k0; k < b * Hr + k1; ++k) {
        buf.dh[k] = buf.carry[k] + (buf.direct ? buf.direct[k] : A(0));
      }
    }
  }
  if (s < T) {
    const int64_t t = TimeOf(pl.dir, T - 1 - s, T);
    A* dht = buf.dh_total + t * B * Hr;
    for (int64_t b = b0; b < b1; ++b) {
      const bool active = t < len[b];
      const A* dy_row = dy + (t * B + b) * D * Hr + pl.dir * Hr;
      for (int64_t k = k0; k < k1; ++k) {
        dht[b * Hr + k] = active ? buf.dh[b * Hr + k] + dy_row[k] : A(0);
      }
    }
  }
}

// Backward work of cell slice [j0, j1) and batch rows [b0, b1) at sweep step `step` (dL/dh_t
// complete; all rows with a projection, whose product spans them): with a
// projection its columns of dL/dm = dL/dh_t·Pmat, then the element-wise pass of its units: the
// gate gradients, dc and (projection) m.
template <typename A, typename Math>
void BackwardCells(const PseudoLayer<A>& pl, const RnnRun& run, const std::vector<int64_t>& len,
                   int64_t step, int64_t j0, int64_t j1, int64_t b0, int64_t b1,
                   const SweepBuffers<A>& buf) {
  const RnnModel& m = pl.m;
  const int64_t T = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t G = m.gate_width(), n = j1 - j0;
  const bool relu = m.mode == RnnMode::kRnnRelu, gru = m.mode == RnnMode::kGru;
  if (n == 0) return;
  const int64_t t = TimeOf(pl.dir, step, T);
  const A* h_prev = pl.h_before(step, T, B);
  const A* c_prev = pl.c_before(step, T, B);
  const A* dht = buf.dh_total + t * B * Hr;
  const GruGateStarts gru_at = GruStarts(pl);
  if (m.has_proj()) {
    gemm::Block(false, false, B, n, Hr, dht, Hr, pl.proj + j0, H, false, buf.dm + j0, H);
  }
  Elementwise([&] {
    for (int64_t b = b0; b < b1; ++b) {
      A* gx = buf.dgx + (t * B + b) * G + j0;
      A* gh = buf.dgh + (t * B + b) * G + j0;
      A* m_row = buf.m_seq ? buf.m_seq + (t * B + b) * H + j0 : nullptr;
      if (t >= len[b]) {
        for (int g = 0; g < m.gates(); ++g) {
          std::fill(gx + g * H, gx + g * H + n, A(0));
          if (gru) std::fill(gh + g * H, gh + g * H + n, A(0));
        }
        if (m_row) std::fill(m_row, m_row + n, A(0));
        continue;
      }
      // (__restrict: distinct buffers, so GCC vectorises without alias checks; dc_row is read
      // and written at the same index only.)
      const A* __restrict dh_row = dht + b * Hr + j0;
      A* __restrict gx_row = gx;
      A* __restrict gh_row = gh;
      A* const direct_row = buf.direct ? buf.direct + b * Hr + j0 : nullptr;
      const ZoneoutView<A> zh = buf.zoneout.h.At((t * B + b) * H + j0);
      if (m.gru_reset_before) {
        BackwardRowResetCandidate<A, Math>(m, gru_at, n,
                                           pl.gates + (t * B + b) * kSavedGates * H + j0,
                                           h_prev + b * Hr + j0, dh_row, gx_row, gh_row,
                                           direct_row, zh);
      } else if (m.keras_cells()) {
        const bool lstm = m.mode == RnnMode::kLstm;
        BackwardRowAny<A, Math>(
            m, gru_at, n, pl.gates + (t * B + b) * SavedGatesOf(m.mode) * H + j0,
            lstm ? pl.c + (t * B + b) * H + j0 : nullptr, lstm ? c_prev + b * H + j0 : nullptr,
            lstm ? nullptr : h_prev + b * Hr + j0,
            lstm && m.has_proj() ? buf.dm + b * H + j0 : dh_row,
            lstm ? buf.dc + b * H + j0 : nullptr, gx_row, gh_row, direct_row, m_row, zh,
            buf.zoneout.c.At((t * B + b) * H + j0));
      } else if (m.mode == RnnMode::kLstm) {
        const A* __restrict saved = pl.gates + (t * B + b) * kSavedGates * H + j0;
        const A* __restrict c_row = pl.c + (t * B + b) * H + j0;
        const A* __restrict c_in = c_prev + b * H + j0;
        // dL/dm is dL/dh without a projection.
        const A* __restrict dm_row = m.has_proj() ? buf.dm + b * H + j0 : dh_row;
        A* __restrict dc_row = buf.dc + b * H + j0;
  #pragma GCC ivdep
        for (int64_t j = 0; j < n; ++j) {
          const A co = Math::Tanh(c_row[j]);
          const CellGradients<A> g =
              CudnnLstmBackward(saved, H, j, c_row[j], co, c_in[j], dc_row[j], dm_row[j]);
          StoreLstmGateGradients(g, H, j, gx_row);
          dc_row[j] = g.cs_prev_grad;
          if (m_row) m_row[j] = saved[3 * H + j] * co;  // m = o * tanh(c), for dPmat
        }
      } else if (gru) {
        const A* __restrict saved = pl.gates + (t * B + b) * kSavedGates * H + j0;
        const A* __restrict h_in = h_prev + b * Hr + j0;
        A* __restrict direct_row = buf.direct + b * Hr + j0;
  #pragma GCC ivdep
        for (int64_t j = 0; j < n; ++j) {
          const GruActivations<A> a{saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j],
                                    A(0)};
          const GruGradients<A> g = GruBackward<A>(a, h_in[j], dh_row[j]);
          StoreGruGateGradients(g, H, gru_at, j, gx_row, gh_row);
          direct_row[j] = g.h_prev_direct;
        }
      } else {
        const A* __restrict h_row = pl.h + (t * B + b) * Hr + j0;
  #pragma GCC ivdep
        for (int64_t j = 0; j < n; ++j) gx_row[j] = SimpleRnnBackward<A>(relu, h_row[j], dh_row[j]);
      }
    }
  });
}

// The second phase of a sweep step of a GRU resetting before, for output slice u (once every
// unit's candidate gradient is there): d(r ⊙ h) = d_n·R_h for its units, then r's gate
// gradients and h_prev's term through r ⊙ h, added to the direct term.
template <typename A, typename Math>
void BackwardResetGates(const PseudoLayer<A>& pl, const RnnRun& run,
                        const std::vector<int64_t>& len, int64_t step, const TeamPlan& plan,
                        int u, const SweepBuffers<A>& buf) {
  const RnnModel& m = pl.m;
  const int64_t T = run.time, B = run.batch, H = m.num_units, G = m.gate_width();
  const int64_t k0 = plan.bwd.bounds()[u], n = plan.bwd.bounds()[u + 1] - k0;
  if (n == 0) return;
  const int64_t t = TimeOf(pl.dir, step, T);
  const A* h_prev = pl.h_before(step, T, B);
  A* d_rh = RowScratch<A, 2>(B * n);
  plan.BackwardProduct(pl, u, B, buf.dgh + t * B * G, buf.r_packed, d_rh, n, 2);
  A* r = RowScratch<A>(2 * n);
  A* sr = r + n;
  const int64_t r_at = GruStarts(pl).r;  // r's block in the gate rows
  for (int64_t b = 0; b < B; ++b) {
    if (t >= len[b]) continue;
    const A* saved = pl.gates + (t * B + b) * kSavedGates * H + k0;
    ValueAndSlopeRow<A, Math>(m.recurrent_activation, saved, r, sr, n);
    A* gx = buf.dgx + (t * B + b) * G + r_at + k0;
    A* gh = buf.dgh + (t * B + b) * G + r_at + k0;
    for (int64_t j = 0; j < n; ++j) {
      const A mask = buf.h_masks ? buf.h_masks[(2 * B + b) * H + k0 + j] : A(1);
      const GruResetGateGradients<A> g = GruResetGateBackward(
          d_rh[b * n + j], r[j], sr[j], CandidateOperand(h_prev, buf.h_masks, B, H, b, k0 + j),
          mask);
      gx[j] = gh[j] = g.d_r;
      buf.direct[b * H + k0 + j] += g.h_prev_term;
    }
  }
}

// Backward of layer `pls[0].layer`, all its directions at once: one RunPhases team for the
// reverse sweeps, T·phases_per_step + 1 phases: phase s·phases_per_step runs the output slices
// of every direction (BackwardOutputs), then the cell slices of sweep step s (BackwardCells) run
// in the next phase with a projection, else right after in the same unit (its cells are its
// outputs); the last phase only finishes dL/dh_0. Then, per direction, the whole-sequence
// products: dW, dx (summed over the directions), dR, dPmat and the biases. kernel_t, where
// given, is Keras' kernel transposed (W [G, I]) for dx = dg·W (BackwardWalk).
template <typename A, typename Math>
void BackwardLayer(const CPUDevice& d, const std::vector<PseudoLayer<A>>& pls,
                   const TeamPlan& plan, const RnnRun& run, const std::vector<int64_t>& len,
                   const A* x, const A* dy, const std::vector<SweepBuffers<A>>& bufs,
                   const OperandMasks<A>& masks, A* masked_dx, A* h_prev_seq,
                   const std::vector<WeightGradients<A>>& grads, const A* kernel_t, A* dx) {
  const RnnModel& m = pls[0].m;
  const int64_t T = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t G = m.gate_width(), D = m.num_dirs;
  const int K = plan.phases_per_step;
  RunLoop(d, plan.split, T * K + 1, plan.units(m), [&](int64_t phase, int unit, int64_t b0,
                                                        int64_t b1) {
    const int64_t dir = unit / plan.slices, s = phase / K;
    const int u = unit % plan.slices;
    if (phase % K == 0 && u < plan.bwd.slices()) {
      BackwardOutputs(pls[dir], run, len, s, plan, u, b0, b1, dy, bufs[dir]);
    }
    // (a projection's cells need all of dL/dh; a GRU resetting before runs r's gate after)
    const bool cells_now = K == 1 || phase % K == (m.has_proj() ? 1 : 0);
    if (s < T && cells_now && u < plan.fwd.slices()) {
      const std::vector<int64_t>& cell = plan.fwd.bounds();
      BackwardCells<A, Math>(pls[dir], run, len, T - 1 - s, cell[u], cell[u + 1], b0, b1,
                             bufs[dir]);
    }
    if (s < T && m.gru_reset_before && phase % K == 1 && u < plan.bwd.slices()) {
      BackwardResetGates<A, Math>(pls[dir], run, len, T - 1 - s, plan, u, bufs[dir]);
    }
  });
  // Whole-sequence products.
  const int64_t rows = T * B;
  for (int64_t dir = 0; dir < D; ++dir) {
    const PseudoLayer<A>& pl = pls[dir];
    const WeightGradients<A>& grad = grads[dir];
    const A *dgx = bufs[dir].dgx, *dgh = bufs[dir].dgh;
    ParallelFor(d, T, B * Hr * 2.0 * sizeof(A), B * Hr, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {  // the state step t started from
        std::memcpy(h_prev_seq + t * B * Hr, pl.h_before(TimeOf(dir, t, T), T, B),
                    B * Hr * sizeof(A));
      }
    });
    const int64_t I = pl.in_width;
    const bool keras = pl.keras_layout;
    const int64_t w_gate = pl.w_gate_offset(), ldw = pl.ldw();
    // dx's operand W: params' [G, I], Keras' kernel [I, G] read transposed, or kernel_t.
    const bool dx_trans = keras && kernel_t == nullptr;
    const A* dx_w = dx_trans || !keras ? pl.w : kernel_t;
    const int64_t dx_ldw = dx_trans ? ldw : I, dx_gate = dx_trans ? w_gate : H * I;
    if (masks.input != nullptr) {  // per gate: dW_g from x ⊙ mask_g, dx = Σ_g (dgx_g·W_g) ⊙ mask_g
      for (int g = 0; g < m.gates(); ++g) {  // blocks, each from its gate's mask
        const A* mask = masks.input + pl.gate_block(g) * B * I;
        MaskOperand(d, rows * I, B * I, x, mask, false, masks.operand);
        grad.Matrix(d, grad.w, g * w_gate, ldw, H, I, rows, dgx + g * H, G, masks.operand, I);
        Gemm(d, false, dx_trans, rows, I, H, dgx + g * H, G, dx_w + g * dx_gate, dx_ldw, false,
             masked_dx, I);
        MaskOperand(d, rows * I, B * I, masked_dx, mask, g > 0, dx);
      }
    } else if (!m.skips(pl.layer)) {
      grad.Matrix(d, grad.w, 0, ldw, G, I, rows, dgx, G, x, I);
      Gemm(d, false, dx_trans, rows, I, G, dgx, G, dx_w, dx_ldw, dir > 0, dx, I);
    } else {  // skip input: x was added to every gate
      ParallelFor(d, rows, G * 8.0, G * 1.0, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          for (int64_t j = 0; j < H; ++j) {
            A sum = dir > 0 ? dx[row * H + j] : A(0);
            for (int g = 0; g < m.gates(); ++g) sum += dgx[row * G + g * H + j];
            dx[row * H + j] = sum;
          }
        }
      });
    }
    if (plan.per_gate) {  // per gate: dR_g from its operand
      for (int g = 0; g < m.gates(); ++g) {
        const A* operand = h_prev_seq;  // h_prev, times its mask where there is one
        int64_t ld = Hr;
        if (m.gru_reset_before && g == 2) {  // r ⊙ h_prev, saved
          operand = pl.gates + 3 * H;
          ld = kSavedGates * H;
        } else if (masks.recurrent != nullptr) {
          MaskOperand(d, rows * Hr, B * Hr, h_prev_seq,
                      masks.recurrent + pl.gate_block(g) * B * Hr, false, masks.operand);
          operand = masks.operand;
        }
        const int64_t r_gate = keras ? H : H * Hr;
        grad.Matrix(d, grad.r, g * r_gate, keras ? G : Hr, H, Hr, rows, dgh + g * H, G, operand,
                    ld);
      }
    } else {
      grad.Matrix(d, grad.r, 0, keras ? G : Hr, G, Hr, rows, dgh, G, h_prev_seq, Hr);
    }
    if (m.has_proj()) {
      Gemm(d, true, false, Hr, H, rows, bufs[dir].dh_total, bufs[dir].m_seq, false, grad.proj,
           gemm::Sum::kLong);
    }
    if (grad.bias_w != nullptr) {
      ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t j) { return dgx[r * G + j]; },
                    grad.bias_w);
    }
    if (grad.bias_w != nullptr && dgh == dgx) {  // (b_W's and b_R's are the same sums but for GRU)
      std::copy_n(grad.bias_w, G, grad.bias_r);
    } else {
      ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t j) { return dgh[r * G + j]; },
                    grad.bias_r);
    }
  }
}

template <typename T, typename A>
bool BackwardWalk(const CPUDevice& d, Scratch& scratch, const RnnModel& m, const RnnRun& run,
                  bool dropout, const T* input, const T* input_h, const T* input_c,
                  const T* params, const T* output_backprop, const T* output_h_backprop,
                  const T* output_c_backprop, const uint8_t* reserve, T* input_backprop,
                  T* input_h_backprop, T* input_c_backprop, T* params_backprop) {
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t LD = m.num_pseudo_layers(), D = m.num_dirs, G = m.gate_width();
  const bool lstm = m.mode == RnnMode::kLstm, gru = m.mode == RnnMode::kGru;
  // The weights and their gradients: params, or Keras' tensors (KerasWeightsInPlace: one
  // pseudo-layer), whose gradients are written where they go in float and double, otherwise
  // kept as [I + H + bias_rows, G*H] in the compute type and converted.
  const bool keras = run.keras.given();
  const int64_t I = m.input_size;
  const int64_t n_params = keras ? (I + H + run.keras.bias_rows) * G : CheckedParamsSize(m);
  T* const keras_grads[3] = {static_cast<T*>(run.keras.kernel_backprop),
                             static_cast<T*>(run.keras.recurrent_kernel_backprop),
                             static_cast<T*>(run.keras.bias_backprop)};
  const int64_t keras_sizes[3] = {I * G, H * G, run.keras.bias_rows * G};
  // The weight gradients, from params_backprop's layout (dparams) to the outputs.
  auto write_weight_grads = [&](const A* dparams) {
    if (!keras) return Convert(d, dparams, params_backprop, n_params);
    int64_t at = 0;
    for (int k = 0; k < 3; at += keras_sizes[k++]) {
      Convert(d, dparams + at, keras_grads[k], keras_sizes[k]);
    }
  };
  if (RnnRunsNothing(m, run)) {  // state gradients pass through, the rest is zero
    if (!scratch.counting()) {
      Convert(d, output_h_backprop, input_h_backprop, LD * B * Hr);
      if (lstm) Convert(d, output_c_backprop, input_c_backprop, LD * B * H);
      if (keras) {
        for (int k = 0; k < 3; ++k) Fill(d, keras_grads[k], keras_sizes[k], T(0));
      } else {
        Fill(d, params_backprop, n_params, T(0));
      }
      Fill(d, input_backprop, T_ * B * m.input_size, T(0));
    }
    return true;
  }
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const WorkspaceLayout lay(m, run, dropout);
  // The forward's saved states are read only; PseudoLayer's pointers are non-const for reuse.
  A* ws = reinterpret_cast<A*>(const_cast<uint8_t*>(reserve) + sizeof(RnnReserveHeader));

  const A* P = keras ? nullptr : AsAcc<A>(d, scratch, params, n_params);
  const KerasWeightsIn<A> weights = KerasWeightsAsAcc<T, A>(d, scratch, m, run);
  const A* x0 = ToTimeMajor<A>(d, scratch, run, m.input_size, input);
  const A* h0 = AsAcc<A>(d, scratch, input_h, LD * B * Hr);
  const A* c0 = lstm ? AsAcc<A>(d, scratch, input_c, LD * B * H) : nullptr;
  const A* dy_top = ToTimeMajor<A>(d, scratch, run, D * Hr, output_backprop);
  const A* dhT = AsAcc<A>(d, scratch, output_h_backprop, LD * B * Hr);
  const A* dcT = lstm ? AsAcc<A>(d, scratch, output_c_backprop, LD * B * H) : nullptr;
  const OperandMasks<A> masks = ConvertMasks<T, A>(d, scratch, m, run, true);
  const Zoneout<A> zoneout = ConvertZoneout<T, A>(d, scratch, run, m.num_units);

  // Per direction (D parts each): the sweep buffers (SweepBuffers) and R's packed columns.
  const int64_t rows = T_ * B, max_in = std::max(m.input_size, D * Hr);
  // Keras' weight gradients in float and double are written where they go (every value of them
  // is a product's or a reduction's output below); otherwise into dparams, then converted.
  const bool grads_in_place = keras && std::is_same_v<T, A>;
  A* dparams = grads_in_place ? nullptr : scratch.Take<A>(n_params);
  A* dgx = scratch.Take<A>(D * rows * G);
  // recurrent-side gate gradients equal the input-side ones except for GRU
  A* dgh = gru ? scratch.Take<A>(D * rows * G) : dgx;
  A* dh_total = scratch.Take<A>(D * rows * Hr);
  A* m_seq = m.has_proj() ? scratch.Take<A>(D * rows * H) : nullptr;
  A* dm = m.has_proj() ? scratch.Take<A>(D * B * H) : nullptr;
  A* carry = scratch.Take<A>(D * B * Hr * 2);
  const TeamPlan plan(d, m, run, int64_t{sizeof(A)});
  A* r_packed = scratch.Take<A>(D * plan.backward_size(m));
  A* h_prev_seq = scratch.Take<A>(rows * Hr);
  A* dx = scratch.Take<A>(rows * max_in * 2);
  // The first layer's dx goes straight to input_backprop where that has dx's type and order
  // (time-major, or one sequence or one step), else through dx and FromTimeMajor.
  const bool dx_in_place = std::is_same_v<T, A> && InTimeMajorOrder(run);
  A* masked_dx = run.input_masks ? scratch.Take<A>(rows * m.input_size) : nullptr;
  A* d_state = scratch.Take<A>(LD * B * (Hr + H));
  // Keras' kernel [I, G] transposed once for dx where that saves transposes (TransposeOnceFor;
  // per gate with input masks).
  A* kernel_t = keras && TransposeOnceFor(d, rows, I, masks.input != nullptr ? H : G)
                    ? scratch.Take<A>(G * I)
                    : nullptr;
  // Params' weight gradients computed in Keras' orientation first (WeightGradients::Matrix),
  // where at least the smallest of them is: one gate's where there are per-gate products (input
  // masks, per_gate), of the narrowest operand.
  const int64_t min_gate_units = plan.per_gate || masks.input != nullptr ? H : G;
  const bool grads_transposed =
      !keras && WeightGradients<A>::ViaTransposed(d, rows, min_gate_units,
                                                  std::min(m.input_size, Hr));
  A* transposed_grads = grads_transposed ? scratch.Take<A>(G * max_in) : nullptr;
  if (scratch.counting() || !scratch.ok()) return scratch.ok();
  if (kernel_t != nullptr) TransposeInto(d, I, G, weights.kernel, G, kernel_t, I);
  A* direct = gru || run.zoneout_h.active() ? carry + D * B * Hr : nullptr;
  A* dy_below = dx + rows * max_in;
  if (dparams != nullptr) Fill(d, dparams, n_params, A(0));

  const A* dy = dy_top;
  for (int64_t l = m.num_layers - 1; l >= 0; --l) {
    const A* x = l == 0 ? x0 : ws + lay.input(l);
    std::vector<PseudoLayer<A>> pls;
    std::vector<SweepBuffers<A>> bufs;
    std::vector<WeightGradients<A>> grads(D);
    pls.reserve(D);
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t p = l * D + dir;
      pls.emplace_back(m, p, P, ws, lay, h0, c0, B);
      WeightGradients<A>& grad = grads[dir];
      if (keras) {  // (one pseudo-layer; the backward reads no b_W)
        pls[dir].ReadKerasWeights(weights.kernel, weights.recurrent_kernel, nullptr,
                                  weights.bias + (run.keras.bias_rows - 1) * G);
        A* const bias = grads_in_place ? reinterpret_cast<A*>(keras_grads[2])
                                       : dparams + (I + H) * G;
        grad.keras = true;
        grad.w = grads_in_place ? reinterpret_cast<A*>(keras_grads[0]) : dparams;
        grad.r = grads_in_place ? reinterpret_cast<A*>(keras_grads[1]) : dparams + I * G;
        grad.bias_w = run.keras.bias_rows == 2 ? bias : nullptr;
        grad.bias_r = bias + (run.keras.bias_rows - 1) * G;
      } else {
        const PseudoLayerRegions& reg = pls[dir].reg;
        grad.transposed = transposed_grads;
        grad.w = dparams + reg.w;
        grad.r = dparams + reg.r;
        grad.proj = dparams + reg.proj;
        grad.bias_w = dparams + reg.bias_w;
        grad.bias_r = dparams + reg.bias_r;
      }
      SweepBuffers<A> buf;
      buf.dgx = dgx + dir * rows * G;
      buf.dgh = dgh + dir * rows * G;
      buf.dh_total = dh_total + dir * rows * Hr;
      buf.m_seq = m_seq ? m_seq + dir * rows * H : nullptr;
      buf.dh = d_state + p * B * (Hr + H);
      buf.dc = buf.dh + B * Hr;
      buf.dm = dm ? dm + dir * B * H : nullptr;
      buf.carry = carry + dir * B * Hr;
      buf.direct = direct ? direct + dir * B * Hr : nullptr;
      A* packed = r_packed + dir * plan.backward_size(m);
      plan.PackBackward(d, pls[dir], packed);
      buf.r_packed = packed;
      buf.h_masks = masks.recurrent;
      buf.zoneout = zoneout;
      std::memcpy(buf.dh, dhT + p * B * Hr, B * Hr * sizeof(A));
      if (lstm) std::memcpy(buf.dc, dcT + p * B * H, B * H * sizeof(A));
      bufs.push_back(buf);
    }
    BackwardLayer<A, MathFor<T>>(d, pls, plan, run, len, x, dy, bufs, masks, masked_dx,
                                 h_prev_seq, grads, kernel_t,
                                 l == 0 && dx_in_place ? reinterpret_cast<A*>(input_backprop)
                                                       : dx);
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t p = l * D + dir;
      Convert(d, bufs[dir].dh, input_h_backprop + p * B * Hr, B * Hr);
      if (lstm) Convert(d, bufs[dir].dc, input_c_backprop + p * B * H, B * H);
    }
    if (l > 0) {  // through the dropout between layers l-1 and l
      const int64_t n = rows * D * Hr;
      const A* mask = dropout ? ws + lay.mask(l) : nullptr;
      ParallelFor(d, n, 12, 1, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) dy_below[k] = mask ? dx[k] * mask[k] : dx[k];
      });
      dy = dy_below;  // layer l-1 reads it while writing its own dx
    }
  }
  if (!dx_in_place) FromTimeMajor(d, run, m.input_size, dx, input_backprop);
  if (!grads_in_place) write_weight_grads(dparams);
  return true;
}

}  // namespace

template <typename T>
size_t RnnForwardScratchBytes(const CPUDevice& device, const RnnModel& m, const RnnRun& run,
                              const RnnDropout& dropout) {
  Scratch counter = Scratch::Counter();
  ForwardWalk<T, AccFor<T>>(device, counter, m, run, dropout, nullptr, nullptr, nullptr, nullptr,
                            nullptr, nullptr, nullptr, nullptr);
  return counter.bytes();
}

template <typename T>
bool RnnForward(const CPUDevice& device, const RnnModel& m, const RnnRun& run,
                const RnnDropout& dropout, const T* input, const T* input_h, const T* input_c,
                const T* params, T* output, T* output_h, T* output_c, uint8_t* workspace,
                void* scratch, size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  return ForwardWalk<T, AccFor<T>>(device, carver, m, run, dropout, input, input_h, input_c,
                                   params, output, output_h, output_c, workspace);
}

template <typename T>
size_t RnnBackwardScratchBytes(const CPUDevice& device, const RnnModel& m, const RnnRun& run) {
  Scratch counter = Scratch::Counter();
  BackwardWalk<T, AccFor<T>>(device, counter, m, run, false, nullptr, nullptr, nullptr, nullptr,
                             nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                             nullptr);
  return counter.bytes();
}

template <typename T>
bool RnnBackward(const CPUDevice& device, const RnnModel& m, const RnnRun& run,
                 const T* input, const T* input_h, const T* input_c, const T* params,
                 const T* output_backprop, const T* output_h_backprop,
                 const T* output_c_backprop, const uint8_t* reserve, T* input_backprop,
                 T* input_h_backprop, T* input_c_backprop, T* params_backprop, void* scratch,
                 size_t scratch_bytes) {
  Scratch carver(scratch, scratch_bytes);
  const bool dropout = reinterpret_cast<const RnnReserveHeader*>(reserve)->dropout != 0;
  return BackwardWalk<T, AccFor<T>>(device, carver, m, run, dropout, input, input_h, input_c,
                                    params, output_backprop, output_h_backprop,
                                    output_c_backprop, reserve, input_backprop,
                                    input_h_backprop, input_c_backprop, params_backprop);
}

namespace {

// Copies every block between the Keras tensors and params (to params, or back when kToParams is
// false); the row bands of all blocks are one parallel loop. A weight block is a transpose
// (gemm::Transpose, register blocks: read along the source's contiguous axis, written along the
// destination's), a bias block a plain copy.
template <bool kToParams, typename T>
void CopyKerasBlocks(const CPUDevice& d, RnnMode mode, int64_t input_size, int64_t num_units,
                     int bias_rows, std::conditional_t<kToParams, const T*, T*> const keras[3],
                     std::conditional_t<kToParams, T*, const T*> params) {
  // half and bfloat16 move as their bits
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, T>;
  constexpr int64_t kBand = 32;  // params rows per task
  KerasBlock blocks[kMaxKerasBlocks];
  const int n = KerasBlocks(mode, input_size, num_units, bias_rows, blocks);
  int64_t first_band[kMaxKerasBlocks + 1] = {0};
  for (int b = 0; b < n; ++b) {
    first_band[b + 1] = first_band[b] + (blocks[b].rows + kBand - 1) / kBand;
  }
  const double band_bytes = 2.0 * sizeof(T) * kBand * std::max(input_size, num_units);
  ParallelFor(d, first_band[n], band_bytes, band_bytes / 8, [&](int64_t begin, int64_t end) {
    int b = 0;
    for (int64_t band = begin; band < end; ++band) {
      while (band >= first_band[b + 1]) ++b;
      const KerasBlock& k = blocks[b];
      const int64_t r0 = (band - first_band[b]) * kBand, rn = std::min(k.rows - r0, kBand);
      auto* keras_band = reinterpret_cast<std::conditional_t<kToParams, const Bits*, Bits*>>(
          keras[static_cast<int>(k.operand)] + k.keras_offset + r0 * k.keras_row_stride);
      auto* params_band = reinterpret_cast<std::conditional_t<kToParams, Bits*, const Bits*>>(
          params + k.params_offset + r0 * k.cols);
      if (k.keras_row_stride == 0) {  // a bias row: its cols values in order
        if constexpr (kToParams) {
          std::copy_n(keras_band, k.cols, params_band);
        } else {
          std::copy_n(params_band, k.cols, keras_band);
        }
      } else if constexpr (kToParams) {  // (weights: keras_row_stride 1) params = Kerasᵀ
        gemm::Transpose(k.cols, rn, keras_band, k.keras_col_stride, params_band, k.cols);
      } else {
        gemm::Transpose(rn, k.cols, params_band, k.cols, keras_band, k.keras_col_stride);
      }
    }
  });
}

}  // namespace

template <typename T>
void KerasToParams(const CPUDevice& device, RnnMode mode, int64_t input_size, int64_t num_units,
                   int bias_rows, const T* kernel, const T* recurrent_kernel, const T* bias,
                   T* params) {
  const T* const keras[3] = {kernel, recurrent_kernel, bias};
  CopyKerasBlocks<true, T>(device, mode, input_size, num_units, bias_rows, keras, params);
  if (bias_rows == 1) {
    const RnnModel m = KerasModel(mode, input_size, num_units);
    T* bias_w = params + RegionsOf(m, 0).bias_w;
    std::fill(bias_w, bias_w + m.gate_width(), T(0));
  }
}

template <typename T>
void ParamsToKeras(const CPUDevice& device, RnnMode mode, int64_t input_size, int64_t num_units,
                   int bias_rows, const T* params, T* kernel, T* recurrent_kernel, T* bias) {
  T* const keras[3] = {kernel, recurrent_kernel, bias};
  CopyKerasBlocks<false, T>(device, mode, input_size, num_units, bias_rows, keras, params);
}

#define TF_LSTM_OPS_INSTANTIATE(T)                                                              \
  template size_t RnnForwardScratchBytes<T>(const CPUDevice&, const RnnModel&, const RnnRun&,   \
                                            const RnnDropout&);                                 \
  template bool RnnForward<T>(const CPUDevice&, const RnnModel&, const RnnRun&,                 \
                              const RnnDropout&, const T*, const T*, const T*, const T*, T*, T*, \
                              T*, uint8_t*, void*, size_t);                                      \
  template size_t RnnBackwardScratchBytes<T>(const CPUDevice&, const RnnModel&, const RnnRun&); \
  template bool RnnBackward<T>(const CPUDevice&, const RnnModel&, const RnnRun&, const T*,      \
                               const T*, const T*, const T*, const T*, const T*, const T*,      \
                               const uint8_t*, T*, T*, T*, T*, void*, size_t);                  \
  template void KerasToParams<T>(const CPUDevice&, RnnMode, int64_t, int64_t, int, const T*,    \
                                 const T*, const T*, T*);                                       \
  template void ParamsToKeras<T>(const CPUDevice&, RnnMode, int64_t, int64_t, int, const T*, T*, \
                                 T*, T*);
TF_LSTM_OPS_INSTANTIATE(Eigen::half)
TF_LSTM_OPS_INSTANTIATE(Eigen::bfloat16)
TF_LSTM_OPS_INSTANTIATE(float)
TF_LSTM_OPS_INSTANTIATE(double)
#undef TF_LSTM_OPS_INSTANTIATE

}  // namespace cpu
}  // namespace tf_lstm_ops
