// The CudnnRNN engine of the GPU launchers: forward and backprop of a multi-layer, optionally
// bidirectional RNN in cuDNN's canonical form, templated on the backend (CudaBackend for the real
// thing, HostBackend for the tests without a GPU) and on the storage type T (__half,
// __nv_bfloat16, float, double). It mirrors the CPU engine (cc/cudnn_rnn/cpu_engine.cc) in
// semantics, in the reserve-space format (cudnn_rnn_types.h's WorkspaceLayout and header) and in
// the dropout masks (the same counter-based RNG), so a reserve space means the same on every
// device.
//
// Structure (as on the CPU): per pseudo-layer, the input projection of all steps is one GEMM (or
// the skip-input broadcast); each step runs the recurrent GEMM (plus the projection GEMM for
// LSTMP) and one fused element-wise kernel; backward runs one fused element-wise kernel and one
// GEMM for dL/dh_prev per step (LSTMP: a second small kernel and the projection GEMM), then dW,
// dR, dPmat, dx and the biases as whole-sequence GEMMs (the biases as GEMMs with a ones vector:
// deterministic, no atomics anywhere). Everything is computed in Acc<T> (float, or double for
// double): params, inputs and states are converted once, and the outputs rounded once; with
// 16-bit storage the GEMMs multiply 16-bit operands instead (LoOperands).
// Small batches without a projection run the forward recurrence instead as one persistent
// launch per pseudo-layer (PersistentForwardFn, PlanPersistent: R on chip for every step), when
// it fits on the device; backward is always per step.
// Operand masks (Keras' recurrent dropout, RnnRun's input_masks / recurrent_masks; one-layer,
// one-direction models): gate g multiplies x ⊙ input_masks[g] and h_prev ⊙ recurrent_masks[g],
// so the products touching a masked operand run one GEMM per gate on masked copies (forward,
// dW, dR) or sum the gates' products through their masks (dL/dh_prev, dx); the persistent
// forward masks h_prev as it multiplies.
// A GRU resetting before (Keras' reset_after=False, docs/cudnn_rnn.md §4.8): a step's candidate
// product reads r ⊙ h, so each step runs two products and two kernels, forward and backward (see
// RnnEngine's HPrevGates), and the persistent forward two phases.
// Zoneout (docs/cudnn_rnn.md §4.9; the models that take operand masks, with Keras' cells): the
// step functors blend the new h (and LSTM's c) with the previous one, w ⊙ new + (1 - w) ⊙ prev,
// on both forward paths; backward, their cell gets w ⊙ dh (w ⊙ dc), and (1 - w) ⊙ dh joins
// dL/dh_prev as a direct term (GRU's, or one of its own), (1 - w) ⊙ dc dL/dc_prev.
// The two directions of a layer run one after the other on the one stream; they are independent
// and could run on two streams (not done: it would need events and a second cuBLAS workspace).
//
// Scratch: one caller-provided block carved by Carve*(), the same function for the size pass
// (base == nullptr) and for the real block, so size and use never disagree.
#ifndef TF_LSTM_OPS_CC_CUDNN_RNN_GPU_ENGINE_H_
#define TF_LSTM_OPS_CC_CUDNN_RNN_GPU_ENGINE_H_

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cc/gpu/common.h"
#include "cc/gpu/rnn_inputs.h"
#include "cc/cudnn_rnn/gpu_launchers.h"
#include "cc/core/cudnn_rnn_layout.h"
#include "cc/core/cudnn_rnn_types.h"
#include "cc/core/cudnn_rnn_cells.h"

namespace tf_lstm_ops {
namespace gpu {
namespace rnn_detail {

// ---- Keras' weights <-> params ------------------------------------------------------------------

// One KerasBlock's elements, to params or back (kToParams false); i indexes the block row-major.
template <typename T, bool kToParams>
struct KerasBlockFn {
  std::conditional_t<kToParams, const T*, T*> keras;    // the operand at the block's offset
  std::conditional_t<kToParams, T*, const T*> params;   // params at the block's offset
  int64_t cols, keras_row_stride, keras_col_stride;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t r = i / cols, c = i % cols;
    if constexpr (kToParams) {
      params[i] = keras[r * keras_row_stride + c * keras_col_stride];
    } else {
      keras[r * keras_row_stride + c * keras_col_stride] = params[i];
    }
  }
};

// ---- forward -----------------------------------------------------------------------------------

// Skip input: xw[row, g*H + j] = x[row, j] for every gate g.
template <typename A>
struct SkipProjectionFn {
  const A* x;
  A* xw;
  int64_t H, G;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t row = i / G, j = (i % G) % H;
    xw[i] = x[row * H + j];
  }
};

// Pre-activation of gate g at unit j: input side (W·x + b_W) plus recurrent side (R·h + b_R),
// summed in the CPU's order.
template <typename A>
TF_LSTM_HOST_DEVICE inline A XSide(const A* gx, const A* bias_w, int64_t g, int64_t H, int64_t j) {
  return gx[g * H + j] + bias_w[g * H + j];
}

// One LSTM step for one (row b, unit j): i = b*H + j. Rows past their length hold their state
// and zero their saved gates. Without a projection m_out == h_out (Hr == H).
// Zoneout (docs/cudnn_rnn.md §4.9; Keras' cells, no projection): the carried c and h blend the
// new ones with c_prev and h_prev, m read the un-zoned c.
template <typename A, typename Math>
struct LstmStepFn {
  const A* xw;   // this step's W·x [B, 4H]
  const A* rec;  // R·h_prev [B, 4H]
  const A *bias_w, *bias_r;
  const A *h_prev, *c_prev;  // [B, Hr], [B, H]
  A *h_out, *c_out, *m_out;  // [B, Hr], [B, H], [B, H]
  A* saved;                  // [B, 4H]: i, f, c~, o (Keras' activations: pre-activations)
  const int32_t* len;
  int64_t t, H, Hr;
  ActivationChoice acts{};
  ZoneoutView<A> zone_h{}, zone_c{};  // step t's [B, H]
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H, G = 4 * H;
    A* s = saved + b * kSavedGates * H;
    if (t >= len[b]) {  // past this sequence's end: hold the state
      if (j < Hr) h_out[b * Hr + j] = h_prev[b * Hr + j];
      c_out[i] = c_prev[i];
      for (int g = 0; g < kSavedGates; ++g) s[g * H + j] = A(0);
      return;
    }
    const A* gx = xw + b * G;
    const A* gh = rec + b * G;
    if (acts.custom) {
      A pre[4];
      for (int g = 0; g < 4; ++g) {
        pre[g] = XSide(gx, bias_w, g, H, j) + XSide(gh, bias_r, g, H, j);
        s[g * H + j] = pre[g];
      }
      LstmAnyForwardAt<A, Math>(acts.act, acts.rec, pre[0], pre[1], pre[2], pre[3], c_prev[i],
                                c_out + i, m_out + i);
      c_out[i] = zone_c.Blend(i, c_out[i], c_prev[i]);
      m_out[i] = zone_h.Blend(i, m_out[i], h_prev[i]);
      return;
    }
    const CellActivations<A> a = CudnnLstmForward<A, Math>(
        XSide(gx, bias_w, 0, H, j) + XSide(gh, bias_r, 0, H, j),
        XSide(gx, bias_w, 1, H, j) + XSide(gh, bias_r, 1, H, j),
        XSide(gx, bias_w, 2, H, j) + XSide(gh, bias_r, 2, H, j),
        XSide(gx, bias_w, 3, H, j) + XSide(gh, bias_r, 3, H, j), c_prev[i]);
    CudnnLstmSave(a, s, H, j);
    c_out[i] = a.cs;
    m_out[i] = a.h;
  }
};

// One GRU ("linear before reset") step; Hr == H. Zoneout (Keras' cells) blends the new h with
// h_prev.
template <typename A, typename Math>
struct GruStepFn {
  const A *xw, *rec, *bias_w, *bias_r, *h_prev;
  A *h_out, *saved;  // saved: r, u, h~, R_h h + b_Rh (Keras' activations: a_r, a_u, a_n, h_c)
  const int32_t* len;
  int64_t t, H;
  ActivationChoice acts{};
  ZoneoutView<A> zone_h{};
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H, G = 3 * H;
    A* s = saved + b * kSavedGates * H;
    if (t >= len[b]) {
      h_out[i] = h_prev[i];
      for (int g = 0; g < kSavedGates; ++g) s[g * H + j] = A(0);
      return;
    }
    const A* gx = xw + b * G;
    const A* gh = rec + b * G;
    if (acts.custom) {
      h_out[i] = zone_h.Blend(
          i,
          GruAnyForwardAt<A, Math>(acts.act, acts.rec, XSide(gx, bias_w, 0, H, j),
                                   XSide(gx, bias_w, 1, H, j), XSide(gx, bias_w, 2, H, j),
                                   XSide(gh, bias_r, 0, H, j), XSide(gh, bias_r, 1, H, j),
                                   XSide(gh, bias_r, 2, H, j), h_prev[i], s, H, j),
          h_prev[i]);
      return;
    }
    const GruActivations<A> a = GruForward<A, Math>(
        XSide(gx, bias_w, 0, H, j), XSide(gx, bias_w, 1, H, j), XSide(gx, bias_w, 2, H, j),
        XSide(gh, bias_r, 0, H, j), XSide(gh, bias_r, 1, H, j), XSide(gh, bias_r, 2, H, j),
        h_prev[i]);
    s[j] = a.r;
    s[H + j] = a.u;
    s[2 * H + j] = a.candidate;
    s[3 * H + j] = a.recurrent_candidate;
    h_out[i] = a.h;
  }
};

// A GRU resetting before (docs/cudnn_rnn.md §4.8): a step is two kernels around the candidate's
// product, which reads r ⊙ h_operand of every unit. Its saved gates (slots a_r, a_u, a_n, r ⊙
// h_operand) are pre-activations even with cuDNN's activations (acts.act / acts.rec are tanh and
// sigmoid then). h_operand is h_prev, times recurrent_masks[2] (the candidate's) when masked.
inline constexpr int kCandidateGate = 2;     // n, in cuDNN's gate order r, u, n
inline constexpr int kResetOperandSlot = 3;  // the saved gates' slot of r ⊙ h_operand
template <typename A, typename T>
TF_LSTM_HOST_DEVICE inline A CandidateMask(const T* masks, int64_t batch, int64_t H, int64_t i) {
  return masks == nullptr ? A(1) : Cast<A>(masks[kCandidateGate * batch * H + i]);  // i = b*H + j
}

// First kernel, from the gates' products (rec's r and u columns): a_r, a_u and the candidate
// product's operand r ⊙ h_operand into the saved gates. Rows past their length save zeros (the
// operand included: the product of such a row is computed, never used).
template <typename A, typename T, typename Math>
struct GruResetGatesFn {
  const A *xw, *rec, *bias_w, *bias_r, *h_prev;
  A* saved;
  const T* masks;  // recurrent_masks [3, B, H], or nullptr
  const int32_t* len;
  int64_t t, H, batch;
  ActivationChoice acts;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H, G = 3 * H;
    A* s = saved + b * kSavedGates * H;
    if (t >= len[b]) {
      for (int g = 0; g < kSavedGates; ++g) s[g * H + j] = A(0);
      return;
    }
    const A* gx = xw + b * G;
    const A* gh = rec + b * G;
    const A a_r = XSide(gx, bias_w, 0, H, j) + XSide(gh, bias_r, 0, H, j);
    s[j] = a_r;
    s[H + j] = XSide(gx, bias_w, 1, H, j) + XSide(gh, bias_r, 1, H, j);
    s[kResetOperandSlot * H + j] = GruResetOperand(
        Activate<A, Math>(acts.rec, a_r),
        MaskedOperand(h_prev[i], CandidateMask<A>(masks, batch, H, i)));
  }
};

// Second kernel, from the candidate's product (rec's n columns): a_n and h (zoned: blended with
// h_prev). Rows past their length hold their state (their saved gates are the first kernel's
// zeros).
template <typename A, typename Math>
struct GruResetCandidateFn {
  const A *xw, *rec, *bias_w, *bias_r, *h_prev;
  A *h_out, *saved;
  const int32_t* len;
  int64_t t, H;
  ActivationChoice acts;
  ZoneoutView<A> zone_h{};
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H, G = 3 * H;
    if (t >= len[b]) {
      h_out[i] = h_prev[i];
      return;
    }
    A* s = saved + b * kSavedGates * H;
    const A a_n = XSide(xw + b * G, bias_w, 2, H, j) + XSide(rec + b * G, bias_r, 2, H, j);
    s[2 * H + j] = a_n;
    h_out[i] = zone_h.Blend(i,
                            GruAnyOutput(Activate<A, Math>(acts.rec, s[H + j]),
                                         Activate<A, Math>(acts.act, a_n), h_prev[i]),
                            h_prev[i]);
  }
};

// One plain RNN step (tanh or relu; Keras' activations: any, saving the pre-activation, and
// zoneout blends the new h with h_prev); Hr == H.
template <typename A, typename Math>
struct SimpleStepFn {
  const A *xw, *rec, *bias_w, *bias_r, *h_prev;
  A* h_out;
  const int32_t* len;
  int64_t t, H;
  bool relu;
  A* saved = nullptr;  // [B, H] with Keras' activations (SavedGatesOf)
  ActivationChoice acts{};
  ZoneoutView<A> zone_h{};
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H;
    A* s = acts.custom ? saved + i : nullptr;
    if (t >= len[b]) {
      h_out[i] = h_prev[i];
      if (s != nullptr) s[0] = A(0);
      return;
    }
    const A a = XSide(xw + b * H, bias_w, 0, H, j) + XSide(rec + b * H, bias_r, 0, H, j);
    if (s != nullptr) {
      s[0] = a;
      h_out[i] = zone_h.Blend(i, Activate<A, Math>(acts.act, a), h_prev[i]);
      return;
    }
    h_out[i] = SimpleRnnForward<A, Math>(relu, a);
  }
};

// LSTMP with per-example lengths: the projection's result replaces h for the rows that ran.
template <typename A>
struct ProjSelectFn {
  const A* proj;
  A* h_out;
  const int32_t* len;
  int64_t t, Hr;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    if (t < len[i / Hr]) h_out[i] = proj[i];
  }
};

// ---- forward, persistent (small batches) ------------------------------------------------------

// The recurrence of one pseudo-layer without a projection (Hr == H) as one persistent launch:
// phase `step` is one step (a GRU resetting before: two, below); block k owns units
// [k*U, k*U + U) of every gate and keeps their rows of R in shared memory for the whole sequence.
// Per step:
//   part 0  stage h_prev [B, H] in shared memory (at step 0 also load the block's rows of R);
//   part 1  the dot products R_row·h_prev[b] for every (row b, gate, unit), each split over S
//           threads (k = s, s + S, ...; S fills the block when B·rows is small) into partial
//           sums in shared memory;
//   part 2  each dot product as its partial sums added in the order s = 0..S-1 (fixed:
//           deterministic, no atomics), into the block's columns of `rec` [B, G];
//   part 3  the per-step path's step functor on the block's units (it reads only their columns).
// h passes from step to step through the workspace (global memory), behind the grid barrier.
// Shared memory, in A: the R rows [gates*U][H+1], h_prev [B][H+1] (the odd row stride keeps
// threads that read different rows at the same k on different banks), the partial sums
// [B*gates*U][S]. With round_h (RnnEngine::LoOperands) h_prev is staged rounded to the storage
// type T, the operand the per-step path's 16-bit GEMM multiplies. With recurrent masks, part 1
// multiplies h_prev ⊙ masks[g] instead (staged unrounded, rounded per product under round_h).
// A GRU resetting before takes two phases a step: the gates r and u as above, then, behind the
// grid barrier (its operand needs every unit's r), the candidate's dot products on r ⊙ h_operand
// staged from the saved gates. Zoneout is the step functors' (the h staged is the zoned one).
template <typename T, typename A, typename Math>
struct PersistentForwardFn {
  static constexpr int kParts = 4;
  static constexpr int64_t kMaxSplits = 32;
  const A *r, *xw, *bias_w, *bias_r, *h0, *c0;  // r [G, H]; xw [T, B, G]; c0 LSTM only
  A *h, *c, *gates, *rec;                       // workspace sequences; rec [B, G] scratch
  const int32_t* len;
  int64_t time, batch, H, dir;
  int64_t gates_per_unit, units, threads;  // gates of the mode (4, 3, 1), U, block size
  RnnMode mode;
  int64_t splits;  // S = Splits(batch * gates_per_unit * units, threads)
  bool round_h;
  ActivationChoice acts;
  const T* masks;  // RnnRun's recurrent_masks [gates, B, H], or nullptr
  bool reset_before;  // a GRU resetting before (RnnModel::gru_reset_before)
  Zoneout<A> zoneout;

  // Launch phases per step.
  TF_LSTM_HOST_DEVICE int64_t PhasesPerStep() const { return reset_before ? 2 : 1; }
  // Whether gate g's dot products run in the phase (`candidate`: a reset-before step's second).
  TF_LSTM_HOST_DEVICE bool RunsGate(int64_t g, bool candidate) const {
    return !reset_before || (g == kCandidateGate) == candidate;
  }

  // The largest power of two up to kMaxSplits that gives every (output, split) its own thread.
  static int64_t Splits(int64_t outputs, int64_t threads) {
    int64_t splits = 1;
    while (splits < kMaxSplits && outputs * splits * 2 <= threads) splits *= 2;
    return splits;
  }
  static int64_t SharedElements(int64_t gates_per_unit, int64_t units, int64_t H, int64_t batch,
                                int64_t threads) {
    const int64_t outputs = batch * gates_per_unit * units;
    return (gates_per_unit * units + batch) * (H + 1) + outputs * Splits(outputs, threads);
  }

  // A GEMM operand as LoOperands' 16-bit GEMM sees it.
  TF_LSTM_HOST_DEVICE static A Rounded(A v) { return Cast<A>(Cast<T>(v)); }

  TF_LSTM_HOST_DEVICE void operator()(int block, int thread, int64_t phase, int part,
                                      void* shared) const {
    const int64_t ld = H + 1, G = gates_per_unit * H, rows = gates_per_unit * units;
    const int64_t j0 = block * units;
    const int64_t units_here = H - j0 < units ? H - j0 : units;  // the last block may have fewer
    const int64_t step = phase / PhasesPerStep(), t = TimeOf(dir, step, time);
    const bool candidate = reset_before && phase % 2 == 1;
    const T* gate_masks = candidate ? nullptr : masks;  // (r ⊙ h_operand is masked already)
    A* r_rows = static_cast<A*>(shared);
    A* h_shared = r_rows + rows * ld;
    A* partial = h_shared + batch * ld;
    const A* h_prev = step == 0 ? h0 : h + TimeOf(dir, step - 1, time) * batch * H;
    A* saved = gates + t * batch * SavedGatesOf(mode) * H;
    if (part == 0) {
      if (phase == 0) {  // row g*U + u of the block is row g*H + j0 + u of R
        for (int64_t row = 0; row < rows; ++row) {
          const int64_t g = row / units, u = row % units;
          if (u >= units_here) continue;
          const A* src = r + (g * H + j0 + u) * H;
          for (int64_t k = thread; k < H; k += threads) r_rows[row * ld + k] = src[k];
        }
      }
      for (int64_t b = 0; b < batch; ++b) {
        const A* operand = candidate ? saved + (b * kSavedGates + kResetOperandSlot) * H
                                     : h_prev + b * H;
        for (int64_t k = thread; k < H; k += threads) {
          const A v = operand[k];
          h_shared[b * ld + k] = round_h && gate_masks == nullptr ? Rounded(v) : v;
        }
      }
    } else if (part == 1) {
      for (int64_t i = thread; i < batch * rows * splits; i += threads) {
        const int64_t o = i / splits, s = i % splits, row = o % rows, b = o / rows;
        if (row % units >= units_here || !RunsGate(row / units, candidate)) continue;
        const A* hb = h_shared + b * ld;
        const A* rr = r_rows + row * ld;
        A sum = A(0);
        if (gate_masks == nullptr) {
          for (int64_t k = s; k < H; k += splits) sum += hb[k] * rr[k];
        } else {
          const T* mb = gate_masks + ((row / units) * batch + b) * H;
          for (int64_t k = s; k < H; k += splits) {
            const A v = MaskedOperand(hb[k], Cast<A>(mb[k]));
            sum += (round_h ? Rounded(v) : v) * rr[k];
          }
        }
        partial[i] = sum;
      }
    } else if (part == 2) {
      for (int64_t o = thread; o < batch * rows; o += threads) {
        const int64_t b = o / rows, row = o % rows, g = row / units, u = row % units;
        if (u >= units_here || !RunsGate(g, candidate)) continue;
        A sum = partial[o * splits];
        for (int64_t s = 1; s < splits; ++s) sum += partial[o * splits + s];
        rec[b * G + g * H + j0 + u] = sum;
      }
    } else {
      const A* xw_t = xw + t * batch * G;
      A* h_out = h + t * batch * H;
      const ZoneoutView<A> zone_h = zoneout.h.At(t * batch * H);
      for (int64_t i = thread; i < batch * units_here; i += threads) {
        const int64_t at = (i / units_here) * H + j0 + i % units_here;  // b*H + j
        switch (mode) {
          case RnnMode::kLstm: {
            const A* c_prev = step == 0 ? c0 : c + TimeOf(dir, step - 1, time) * batch * H;
            LstmStepFn<A, Math>{xw_t,  rec,   bias_w, bias_r, h_prev, c_prev,
                                h_out, c + t * batch * H, h_out, saved, len, t, H, H, acts,
                                zone_h, zoneout.c.At(t * batch * H)}(at);
            break;
          }
          case RnnMode::kGru:
            if (candidate) {
              GruResetCandidateFn<A, Math>{xw_t, rec, bias_w, bias_r, h_prev, h_out, saved,
                                           len, t, H, acts, zone_h}(at);
            } else if (reset_before) {
              GruResetGatesFn<A, T, Math>{xw_t, rec,   bias_w, bias_r, h_prev, saved,
                                          masks, len,  t,      H,      batch,  acts}(at);
            } else {
              GruStepFn<A, Math>{xw_t, rec, bias_w, bias_r, h_prev, h_out, saved, len, t, H,
                                 acts, zone_h}(at);
            }
            break;
          default:
            SimpleStepFn<A, Math>{xw_t, rec, bias_w, bias_r, h_prev, h_out, len, t, H,
                                  mode == RnnMode::kRnnRelu, saved, acts, zone_h}(at);
        }
      }
    }
  }
};

// This direction's half of the layer output [T, B, D*Hr]: the state where the row ran, else 0.
template <typename A>
struct LayerOutputFn {
  const A* h;  // [T, B, Hr]
  A* y;
  const int32_t* len;
  int64_t batch, Hr, DHr, dir;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t tb = i / Hr, k = i % Hr;
    y[tb * DHr + dir * Hr + k] = tb / batch < len[tb % batch] ? h[i] : A(0);
  }
};

// Inverted dropout in place on the next layer's input, storing the scale (0 or 1/(1-rate)).
template <typename A>
struct DropoutFn {
  A* next;
  A* mask;
  uint64_t stream;
  float rate;
  A scale;
  TF_LSTM_HOST_DEVICE void operator()(int64_t k) const {
    mask[k] = DropoutDrops(stream, k, rate) ? A(0) : scale;
    next[k] = next[k] * mask[k];
  }
};

// ---- backward ----------------------------------------------------------------------------------

// h_prev of every step, [T, B, Hr]: the initial state, or the state of the preceding step;
// also rounded to T into out_lo when given (RnnEngine::LoOperands).
template <typename A, typename T>
struct PrevStateFn {
  const A *h0, *h;
  A* out;
  T* out_lo;
  int64_t time, bn, dir;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t t = i / bn, r = i % bn, src = dir == 0 ? t - 1 : t + 1;
    const A v = src < 0 || src >= time ? h0[r] : h[src * bn + r];
    out[i] = v;
    if (out_lo != nullptr) out_lo[i] = Cast<T>(v);
  }
};

// The gradient carried on h ([B, Hr]) into a step: after the previously processed step, rows
// that ran take R^T·dgates (+ the direct term); rows that did not pass theirs through.
template <typename A>
struct Carry {
  A* dh;            // carried gradient, updated in place
  const A* carry;   // R^T·dgates of the previous step (its GEMM)
  const A* direct;  // the direct term of the previous step's dL/dh_prev (GRU's dh·u, zoneout's
                    // (1 - w)·dh), or nullptr for none
  int64_t t_prev;   // time index of the previous step
  bool has_prev;    // false at the first processed step
  TF_LSTM_HOST_DEVICE A Update(int64_t i, int64_t len_b) const {
    if (!has_prev || t_prev >= len_b) return dh[i];
    const A v = carry[i] + (direct != nullptr ? direct[i] : A(0));
    dh[i] = v;
    return v;
  }
};

// Over [B, Hr]: brings the carried gradient up to date, and writes the total dL/dh_t (LSTMP,
// before the projection GEMM; dht row t) and/or the carried gradient rounded to T (the final
// pass: input_h_backprop).
template <typename A, typename T>
struct CarryFn {
  Carry<A> c;
  const A* dy_t;  // dy + (t*B)*DHr + dir*Hr, rows of stride DHr
  A* dht;         // [B, Hr] or nullptr
  T* out;         // [B, Hr] or nullptr
  const int32_t* len;
  int64_t t, Hr, DHr;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / Hr, k = i % Hr;
    const A v = c.Update(i, len[b]);
    if (dht != nullptr) dht[i] = t < len[b] ? v + dy_t[b * DHr + k] : A(0);
    if (out != nullptr) out[i] = Cast<T>(v);
  }
};

// LSTM backward step over [B, H]. Without a projection (dm == nullptr) it also does CarryFn's
// work (Hr == H): dL/dm is the total dL/dh.
// Zoneout (docs/cudnn_rnn.md §4.9; Keras' cells, no projection): the cell gets w_h·dh and
// w_c·dc, and its c~ recomputed from the saved pre-activations where the saved c is zoned;
// dL/dc_prev adds (1 - w_c)·dc, and direct gets dL/dh_prev's (1 - w_h)·dh.
template <typename A, typename Math>
struct LstmBackFn {
  Carry<A> carry;
  const A* dy_t;
  const A* dm;  // LSTMP: dL/dm [B, H] from the projection GEMM; else nullptr
  const A *saved, *c, *c_prev;  // row t: [B, 4H], [B, H]; c_prev [B, H]
  A *dc, *gx, *m_seq;           // dc [B, H] in place; gx row t [B, 4H]; m_seq row t or nullptr
  const int32_t* len;
  int64_t t, H, DHr;
  ActivationChoice acts{};
  ZoneoutView<A> zone_h{}, zone_c{};  // step t's [B, H]
  A* direct = nullptr;                // [B, H] with zoneout of h (carry.direct)
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H;
    const bool active = t < len[b];
    A dm_j;
    if (dm == nullptr) {
      const A v = carry.Update(i, len[b]);
      dm_j = active ? v + dy_t[b * DHr + j] : A(0);
    } else {
      dm_j = dm[i];
    }
    A* g = gx + b * 4 * H;
    if (!active) {
      for (int k = 0; k < 4; ++k) g[k * H + j] = A(0);
      if (m_seq != nullptr) m_seq[i] = A(0);
      return;
    }
    const A* s = saved + b * kSavedGates * H;
    const A dc_cell = zone_c.ToNew(i, dc[i]), dm_cell = zone_h.ToNew(i, dm_j);
    A m_j;  // m = o * act(c)
    CellGradients<A> gr;
    if (acts.custom) {
      const A c_cell = zone_c.zoned()
                           ? LstmAnyCellStateAt<A, Math>(acts.act, acts.rec, s, H, j, c_prev[i])
                           : c[i];
      gr = LstmAnyBackwardAt<A, Math>(acts.act, acts.rec, s, H, j, c_cell, c_prev[i], dc_cell,
                                      dm_cell, &m_j);
    } else {  // (never zoned)
      const A co = Math::Tanh(c[i]);
      gr = CudnnLstmBackward(s, H, j, c[i], co, c_prev[i], dc[i], dm_j);
      m_j = s[3 * H + j] * co;
    }
    StoreLstmGateGradients(gr, H, j, g);
    dc[i] = gr.cs_prev_grad + zone_c.ToPrevious(i, dc[i]);
    if (direct != nullptr) direct[i] = zone_h.ToPrevious(i, dm_j);
    if (m_seq != nullptr) m_seq[i] = m_j;
  }
};

// GRU backward step over [B, H] (Hr == H); carry.direct == direct (read, then rewritten). A GRU
// resetting before gets all but r's gate gradient (0 here; GruResetGateBackFn's, once the
// candidate's product gives d(r ⊙ h)), and only dh·u in direct so far. Zoneout
// (docs/cudnn_rnn.md §4.9): the cell gets w·dh, direct adds (1 - w)·dh.
template <typename A, typename Math>
struct GruBackFn {
  Carry<A> carry;
  const A* dy_t;
  const A *saved, *h_prev;  // row t
  A *gx, *gh, *direct;      // gx, gh row t [B, 3H]; direct [B, H]
  const int32_t* len;
  int64_t t, H, DHr;
  ActivationChoice acts{};
  bool reset_before = false;
  ZoneoutView<A> zone_h{};  // step t's [B, H]
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H;
    const bool active = t < len[b];
    const A v = carry.Update(i, len[b]);
    A* x_row = gx + b * 3 * H;
    A* h_row = gh + b * 3 * H;
    if (!active) {
      for (int k = 0; k < 3; ++k) x_row[k * H + j] = h_row[k * H + j] = A(0);
      return;
    }
    const A dh = v + dy_t[b * DHr + j], dh_cell = zone_h.ToNew(i, dh);
    const A* s = saved + b * kSavedGates * H;
    GruGradients<A> g;
    if (reset_before) {
      const A a_u = s[H + j], a_n = s[2 * H + j];
      g = GruResetCandidateBackward(
          Activate<A, Math>(acts.rec, a_u), Activate<A, Math>(acts.act, a_n),
          ActivationSlope<A, Math>(acts.rec, a_u), ActivationSlope<A, Math>(acts.act, a_n),
          h_prev[i], dh_cell);
    } else if (acts.custom) {
      g = GruAnyBackwardAt<A, Math>(acts.act, acts.rec, s, H, j, h_prev[i], dh_cell);
    } else {
      g = GruBackward<A>(GruActivations<A>{s[j], s[H + j], s[2 * H + j], s[3 * H + j], A(0)},
                         h_prev[i], dh_cell);
    }
    StoreGruGateGradients(g, H, j, x_row, h_row);
    direct[i] = g.h_prev_direct + zone_h.ToPrevious(i, dh);
  }
};

// A GRU resetting before, after d(r ⊙ h_operand) = d_n·R_n (d_rh): r's gate gradient (both
// sides) and h_prev's term through r ⊙ h_operand, added to direct.
template <typename A, typename T, typename Math>
struct GruResetGateBackFn {
  const A *d_rh, *saved, *h_prev;  // d_rh [B, H]; saved, h_prev row t
  const T* masks;                  // recurrent_masks [3, B, H], or nullptr
  A *gx, *gh, *direct;             // gx, gh row t [B, 3H]; direct [B, H]
  const int32_t* len;
  int64_t t, H, batch;
  ActivationChoice acts;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H;
    if (t >= len[b]) return;  // (GruBackFn zeroed its gradients; its direct is not read)
    const A a_r = saved[b * kSavedGates * H + j];
    const A mask = CandidateMask<A>(masks, batch, H, i);
    const GruResetGateGradients<A> g = GruResetGateBackward(
        d_rh[i], Activate<A, Math>(acts.rec, a_r), ActivationSlope<A, Math>(acts.rec, a_r),
        MaskedOperand(h_prev[i], mask), mask);
    gx[b * 3 * H + j] = gh[b * 3 * H + j] = g.d_r;
    direct[i] += g.h_prev_term;
  }
};

// Plain RNN backward step over [B, H]. Zoneout (docs/cudnn_rnn.md §4.9; Keras' cells): the
// cell gets w·dh, direct dL/dh_prev's (1 - w)·dh.
template <typename A, typename Math>
struct SimpleBackFn {
  Carry<A> carry;
  const A* dy_t;
  const A* h;  // row t [B, H]: the step's output
  A* gx;       // row t [B, H]
  const int32_t* len;
  int64_t t, H, DHr;
  bool relu;
  const A* saved = nullptr;  // row t [B, H] with Keras' activations: the pre-activations
  ActivationChoice acts{};
  ZoneoutView<A> zone_h{};  // step t's [B, H]
  A* direct = nullptr;      // [B, H] with zoneout (carry.direct)
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t b = i / H, j = i % H;
    const bool active = t < len[b];
    const A v = carry.Update(i, len[b]);
    if (!active) {
      gx[i] = A(0);
    } else if (acts.custom) {
      const A dh = v + dy_t[b * DHr + j];
      gx[i] = zone_h.ToNew(i, dh) * ActivationSlope<A, Math>(acts.act, saved[i]);
      if (direct != nullptr) direct[i] = zone_h.ToPrevious(i, dh);
    } else {
      gx[i] = SimpleRnnBackward<A>(relu, h[i], v + dy_t[b * DHr + j]);
    }
  }
};

// Skip input: dx[row, j] (+)= sum over the gates of dgx[row, g*H + j].
template <typename A>
struct SkipDxFn {
  const A* dgx;
  A* dx;
  int64_t H, G;
  int gates;
  bool accumulate;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t row = i / H, j = i % H;
    A sum = accumulate ? dx[i] : A(0);
    for (int g = 0; g < gates; ++g) sum += dgx[row * G + g * H + j];
    dx[i] = sum;
  }
};

template <typename A>
struct ScaleByFn {  // x[k] *= mask[k] (dropout backward)
  A* x;
  const A* mask;
  TF_LSTM_HOST_DEVICE void operator()(int64_t k) const { x[k] = x[k] * mask[k]; }
};

// ---- operand masks (Keras' recurrent dropout, RnnRun's input_masks / recurrent_masks) ---------

// Mask element of gate g for element r of a [rows, width] operand whose rows are T'·B (t, b)
// pairs: masks are [G, B, width], the same at every step.
TF_LSTM_HOST_DEVICE inline int64_t MaskIndex(int64_t g, int64_t r, int64_t batch, int64_t width) {
  return (g * batch + (r / width) % batch) * width + r % width;
}

// dst [gates, rows, width] = src ⊙ masks[g] for the gates from masks on: the operand gate g's
// GEMM multiplies. Computed in the compute type, stored as Dst: the storage type under
// LoOperands (the masked value rounded once, as the unmasked operands are).
template <typename Src, typename Dst, typename T>
struct MaskedOperandFn {
  const Src* src;   // [rows, width]
  const T* masks;   // [gates, B, width]
  Dst* dst;
  int64_t n, batch, width;  // n = rows·width
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    using A = Acc<T>;
    const int64_t g = i / n, r = i % n;
    dst[i] = Cast<Dst>(
        MaskedOperand(Cast<A>(src[r]), Cast<A>(masks[MaskIndex(g, r, batch, width)])));
  }
};

// The gradient of a masked operand from its gates' products: out (+)= Σ_g prod[g] ⊙ masks[g],
// prod [gates, rows, width], summed in gate order (deterministic).
template <typename A, typename T>
struct MaskedGateSumFn {
  const A* prod;
  const T* masks;  // [gates, B, width]
  A* out;          // [rows, width]
  int64_t n, batch, width, gates;
  bool accumulate;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    A sum = accumulate ? out[i] : A(0);
    for (int64_t g = 0; g < gates; ++g) {
      sum += MaskedOperand(prod[g * n + i], Cast<A>(masks[MaskIndex(g, i, batch, width)]));
    }
    out[i] = sum;
  }
};

// p + k, or nullptr for a null p (the operand precision a GEMM does not read).
template <typename P>
inline P* Advance(P* p, int64_t k) {
  return p == nullptr ? nullptr : p + k;
}

// ---- 16-bit GEMM operands (RnnEngine::LoOperands) ---------------------------------------------

// dst [rows, width] = the rows of src (row stride ld) rounded to T: a 16-bit GEMM's operand.
template <typename A, typename T>
struct RoundRowsFn {
  const A* src;
  T* dst;
  int64_t width, ld;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    dst[i] = Cast<T>(src[(i / width) * ld + i % width]);
  }
};

// A forward step functor over [B, H] (Hr == H), then what it wrote at element i of `round`'s
// source rounded to T: a GEMM operand of this step or the next (h: every step functor writes
// h[i]; r ⊙ h_operand: GruResetGatesFn writes it).
template <typename Step, typename A, typename T>
struct MirrorStateFn {
  Step step;
  RoundRowsFn<A, T> round;  // [B, H]
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    step(i);
    round(i);
  }
};

// A backward step functor over [B, H], then the gate gradients it wrote (element b*H + j writes
// [b, g*H + j] for the gates g in [first, end)) rounded to T; cuDNN GRU's recurrent-side ones
// too (dgh != nullptr).
template <typename Back, typename A, typename T>
struct MirrorGatesFn {
  Back back;
  const A *dgx, *dgh;  // row t [B, G]
  T *dgx_lo, *dgh_lo;  // row t [B, G]
  int64_t H, gates, first, end;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    back(i);
    const int64_t b = i / H, j = i % H;
    for (int64_t g = first; g < end; ++g) {
      const int64_t k = (b * gates + g) * H + j;
      dgx_lo[k] = Cast<T>(dgx[k]);
      if (dgh != nullptr) dgh_lo[k] = Cast<T>(dgh[k]);
    }
  }
};

}  // namespace rnn_detail

template <typename Backend, typename T>
struct RnnEngine {
  using A = Acc<T>;
  // σ and tanh as on the CPU: ExactMath for double, FastMath otherwise.
  using Math = MathFor<T>;
  static constexpr bool kSame = std::is_same_v<T, A>;

  // With 16-bit storage the GEMMs take 16-bit operands and accumulate in float (tensor cores, as
  // cuDNN): params and layer 0's input as given; later layers' inputs, the recurrent h and the
  // gate gradients rounded to T once (h, a GRU resetting before's r ⊙ h and the gate gradients
  // by the step kernels that write them, MirrorStateFn / MirrorGatesFn; inputs, h_prev_seq and
  // the saved r ⊙ h for dR by a pass each). The
  // element-wise math, the saved states and the bias sums stay in float. Not with a projection
  // (fp32 GEMMs there), nor for rnn_relu: relu's derivative jumps at 0, so rounding operands
  // flips the gradient of elements whose pre-activation is near 0 by O(1) (seen on an H100 with
  // TF32-rounded operands: a 2-layer bfloat16 model's dx off by 0.96 against the float64
  // reference); it keeps fp32 GEMMs.
  static bool LoOperands(const RnnModel& m) {
    return !kSame && !m.has_proj() && m.mode != RnnMode::kRnnRelu;
  }
  // Whether layer 0's input is used in A: not under LoOperands, unless layer 0 skips its input.
  static bool Layer0InputInA(const RnnModel& m) { return !LoOperands(m) || m.skips(0); }

  // Row-major C (A) = op(a)·op(b) (+ C) on the T operands a_lo, b_lo under `lo`, else on the
  // A operands a, b: one GEMM shape, two operand precisions (the leading dimensions are those of
  // the pair it reads: blocks of gates, strided in their rows, are operands too).
  static cudaError_t OperandGemm(Backend& be, bool lo, bool trans_a, bool trans_b, int64_t m,
                                 int64_t n, int64_t k, const A* a, const T* a_lo, int64_t lda,
                                 const A* b, const T* b_lo, int64_t ldb, bool accumulate, A* c,
                                 int64_t ldc) {
    if constexpr (!kSame) {
      if (lo) return Gemm(be, trans_a, trans_b, m, n, k, a_lo, lda, b_lo, ldb, accumulate, c, ldc);
    }
    return Gemm(be, trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  }

  // Whether the recurrent GEMMs multiply h in T: LoOperands without recurrent masks (with them
  // they multiply the masked copies, MaskedBuffer's T side).
  static bool LoRecurrentState(const RnnModel& m, const RnnRun& run) {
    return LoOperands(m) && run.recurrent_masks == nullptr;
  }

  // ---- GRU resetting before (docs/cudnn_rnn.md §4.8) ------------------------------------------
  // Its candidate's recurrent product reads r ⊙ h_operand (the saved gates' kResetOperandSlot),
  // not h_prev: a step runs the gates' product (r, u), GruResetGatesFn, the candidate's product,
  // GruResetCandidateFn; backward GruBackFn, d(r ⊙ h) = d_n·R_n, GruResetGateBackFn, then the
  // gates' dL/dh_prev; dR_n reads the saved r ⊙ h_operand.

  // The gates whose recurrent product reads h_prev: the first ones (r and u come before n).
  static int64_t HPrevGates(const RnnModel& m) {
    return m.gru_reset_before ? rnn_detail::kCandidateGate : m.gates();
  }
  // Whether the recurrent-side gate gradients differ from the input side's (a buffer of their
  // own): only cuDNN's GRU's (its candidate's times r).
  static bool SeparateRecurrentGrads(const RnnModel& m) {
    return m.mode == RnnMode::kGru && !m.gru_reset_before;
  }
  // The candidate product's operand r ⊙ h_operand: in the saved gates (A, rows of
  // kSavedGates·H), or under lo a T copy ([rows, H]); ResetOperandLd is the row stride of the one
  // OperandGemm reads.
  static const A* ResetOperand(const A* saved, const RnnModel& m) {
    return saved + rnn_detail::kResetOperandSlot * m.num_units;
  }
  static int64_t ResetOperandLd(const RnnModel& m, bool lo) {
    return lo ? m.num_units : kSavedGates * m.num_units;
  }
  // Where the candidate's block starts: its first column in a gate row, its offset in R.
  static int64_t CandidateColumn(const RnnModel& m) {
    return rnn_detail::kCandidateGate * m.num_units;
  }
  static int64_t CandidateOffsetInR(const RnnModel& m) {
    return CandidateColumn(m) * m.output_width();
  }

  // ---- scratch -------------------------------------------------------------------------------

  // Masked operands (RnnRun's masks): in T under LoOperands (what the 16-bit GEMMs multiply),
  // else in A; the other pointer is null.
  struct MaskedBuffer {
    A* a;
    T* lo;
  };
  static MaskedBuffer TakeMasked(ScratchCarver* s, bool lo, int64_t n) {
    MaskedBuffer buf{};
    if (lo) {
      buf.lo = s->template Take<T>(n);
    } else {
      buf.a = s->template Take<A>(n);
    }
    return buf;
  }

  // ---- zoneout (docs/cudnn_rnn.md §4.9) ------------------------------------------------------
  // Each zoned state's weights are converted to the compute type once a call, as the inputs are
  // (cc/gpu/rnn_inputs.h: ZoneoutStaging, ConvertZoneout). The step functors blend (forward) and
  // split the state gradients (backward) with them: Zoneout, ZoneoutView.

  struct ForwardBuffers {
    A *params, *x, *h0, *c0;  // compute-type copies (x: none when T == A and time-major, or
                              // when !Layer0InputInA)
    A *xw, *rec, *y, *m_buf, *proj_buf;
    T *x_lo, *h_lo;  // LoOperands: a layer's input [T·B, width]; h of the last two steps
    T* reset_operand_lo;  // LoOperands, GRU resetting before: a step's r ⊙ h_operand [B, H]
    MaskedBuffer masked;  // operand masks: x ⊙ input_masks[g] (a gate at a time), then
                          // h_prev ⊙ recurrent_masks (every gate)
    ZoneoutStaging<A> zoneout;
    int32_t* len;
    void* blas;
  };

  static ForwardBuffers CarveForward(void* base, const RnnModel& m, const RnnRun& run,
                                     size_t* bytes) {
    ScratchCarver s(base);
    ForwardBuffers f{};
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
    const int64_t LD = m.num_pseudo_layers(), rows = T_ * B;
    const bool lstm = m.mode == RnnMode::kLstm;
    f.blas = s.TakeBytes(Backend::kBlasWorkspaceBytes);
    f.len = s.Take<int32_t>(B);
    f.params = s.Take<A>(kSame ? 0 : CheckedParamsSize(m));
    f.x = s.Take<A>((kSame && run.time_major) || !Layer0InputInA(m) ? 0 : rows * m.input_size);
    f.h0 = s.Take<A>(kSame ? 0 : LD * B * Hr);
    f.c0 = s.Take<A>(kSame || !lstm ? 0 : LD * B * H);
    f.xw = s.Take<A>(rows * m.gate_width());
    f.rec = s.Take<A>(B * m.gate_width());
    // The last layer's output (earlier layers write straight into the workspace).
    f.y = s.Take<A>(kSame && run.time_major ? 0 : rows * m.num_dirs * Hr);
    f.m_buf = s.Take<A>(m.has_proj() ? B * H : 0);
    f.proj_buf = s.Take<A>(m.has_proj() && run.seq_lengths != nullptr ? B * Hr : 0);
    const bool lo = LoOperands(m);
    f.x_lo = s.Take<T>(lo ? rows * std::max(m.input_size, m.num_dirs * Hr) : 0);
    f.h_lo = s.Take<T>(LoRecurrentState(m, run) ? 2 * B * H : 0);
    f.reset_operand_lo = s.Take<T>(lo && m.gru_reset_before ? B * H : 0);
    f.masked = TakeMasked(&s, lo, std::max(run.input_masks ? rows * m.input_size : 0,
                                           run.recurrent_masks ? m.gates() * B * Hr : 0));
    f.zoneout = TakeZoneout<T, A>(&s, run, H);
    *bytes = s.Bytes();
    return f;
  }

  struct BackwardBuffers {
    int32_t *flag, *len;
    A *params, *x, *h0, *c0, *dy, *dhT, *dcT;
    A *dparams, *dgx, *dgh, *dh_total, *m_seq, *dm, *carry, *direct, *h_prev_seq;
    A *dx[2], *dh, *dc, *ones;
    A* reset_operand_grad;  // GRU resetting before: a step's d(r ⊙ h_operand) [B, H]
    // LoOperands: T copies of a layer's input, dgx, dgh (== dgx_lo unless
    // SeparateRecurrentGrads), h_prev_seq, and a GRU resetting before's saved r ⊙ h_operand
    T *x_lo, *dgx_lo, *dgh_lo, *h_prev_lo, *reset_operand_lo;
    // Operand masks: x or h_prev masked for one gate (dW, dR), and the per-gate products whose
    // masked sum is a masked operand's gradient (dL/dh_prev: every gate; dx: a gate at a time).
    MaskedBuffer masked;
    A* gate_products;
    ZoneoutStaging<A> zoneout;
    void* blas;
  };

  static BackwardBuffers CarveBackward(void* base, const RnnModel& m, const RnnRun& run,
                                       size_t* bytes) {
    ScratchCarver s(base);
    BackwardBuffers b{};
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
    const int64_t LD = m.num_pseudo_layers(), rows = T_ * B, G = m.gate_width();
    const bool lstm = m.mode == RnnMode::kLstm, gru = m.mode == RnnMode::kGru;
    const bool separate = SeparateRecurrentGrads(m);
    const bool direct_x = kSame && run.time_major;
    b.blas = s.TakeBytes(Backend::kBlasWorkspaceBytes);
    b.flag = s.Take<int32_t>(1);
    b.len = s.Take<int32_t>(B);
    b.params = s.Take<A>(kSame ? 0 : CheckedParamsSize(m));
    b.x = s.Take<A>(direct_x || !Layer0InputInA(m) ? 0 : rows * m.input_size);
    b.h0 = s.Take<A>(kSame ? 0 : LD * B * Hr);
    b.c0 = s.Take<A>(kSame || !lstm ? 0 : LD * B * H);
    b.dy = s.Take<A>(direct_x ? 0 : rows * m.num_dirs * Hr);
    b.dhT = s.Take<A>(kSame ? 0 : LD * B * Hr);
    b.dcT = s.Take<A>(kSame || !lstm ? 0 : LD * B * H);
    b.dparams = s.Take<A>(kSame ? 0 : CheckedParamsSize(m));
    b.dgx = s.Take<A>(rows * G);
    b.dgh = separate ? s.Take<A>(rows * G) : b.dgx;
    b.dh_total = s.Take<A>(m.has_proj() ? rows * Hr : 0);
    b.m_seq = s.Take<A>(m.has_proj() ? rows * H : 0);
    b.dm = s.Take<A>(m.has_proj() ? B * H : 0);
    b.carry = s.Take<A>(B * Hr);
    b.direct = gru || run.zoneout_h.active() ? s.Take<A>(B * Hr) : nullptr;
    b.h_prev_seq = s.Take<A>(rows * Hr);
    const int64_t max_in = std::max(m.input_size, m.num_dirs * Hr);
    b.dx[0] = s.Take<A>(rows * max_in);
    b.dx[1] = s.Take<A>(m.num_layers > 1 ? rows * max_in : 0);
    b.dh = s.Take<A>(B * Hr);
    b.dc = s.Take<A>(lstm ? B * H : 0);
    b.ones = s.Take<A>(rows);
    b.reset_operand_grad = s.Take<A>(m.gru_reset_before ? B * H : 0);
    const bool lo = LoOperands(m);
    b.x_lo = s.Take<T>(lo ? rows * max_in : 0);
    b.dgx_lo = s.Take<T>(lo ? rows * G : 0);
    b.dgh_lo = separate ? s.Take<T>(lo ? rows * G : 0) : b.dgx_lo;
    b.h_prev_lo = s.Take<T>(LoRecurrentState(m, run) ? rows * Hr : 0);
    b.reset_operand_lo = s.Take<T>(lo && m.gru_reset_before ? rows * H : 0);
    const int64_t x_masked = run.input_masks ? rows * m.input_size : 0;
    b.masked = TakeMasked(&s, lo, std::max(x_masked, run.recurrent_masks ? rows * Hr : 0));
    b.gate_products =
        s.Take<A>(std::max(x_masked, run.recurrent_masks ? m.gates() * B * Hr : 0));
    b.zoneout = TakeZoneout<T, A>(&s, run, H);
    *bytes = s.Bytes();
    return b;
  }

  static size_t ForwardScratchBytes(const RnnModel& m, const RnnRun& run, const RnnDropout&) {
    size_t bytes;
    CarveForward(nullptr, m, run, &bytes);
    return bytes;
  }

  static size_t BackwardScratchBytes(const RnnModel& m, const RnnRun& run) {
    size_t bytes;
    CarveBackward(nullptr, m, run, &bytes);
    return bytes;
  }

  // ---- helpers -------------------------------------------------------------------------------

  // Layer l's input [T·B, width] in T for LoOperands' GEMMs: layer 0's as given (time-major)
  // or transposed, a later layer's (the workspace copy, after dropout) rounded.
  static cudaError_t LayerInputLo(Backend& be, const RnnRun& run, int64_t l, int64_t width,
                                  const T* input, const A* ws_input, T* staging, const T** out) {
    const int64_t n = run.time * run.batch * width;
    if (l == 0 && run.time_major) {
      *out = input;
      return cudaSuccess;
    }
    *out = staging;
    if (l == 0) {
      return be.ForEach(
          n, SequenceLayoutFn<T, T, true>{input, staging, run.time, run.batch, width});
    }
    return Convert(be, ws_input, staging, n);
  }

  // ---- operand masks (Keras' recurrent dropout) ---------------------------------------------
  // A gate's columns of the gate products are a strided block (leading dimension G = gates·H),
  // so a masked product is one GEMM per gate, on a masked copy of its operand (forward, dW, dR)
  // or followed by a masked sum of the gates' results (dL/dh_prev, dx).

  // dst: src ⊙ masks[g] for `gates` gates from masks on, src [rows, width] (src in A, or src_lo
  // in T where src is null: LoOperands' layer-0 input).
  static cudaError_t MaskOperand(Backend& be, const A* src, const T* src_lo, const T* masks,
                                 int64_t gates, int64_t rows, int64_t width, int64_t batch,
                                 const MaskedBuffer& dst) {
    using rnn_detail::MaskedOperandFn;
    const int64_t n = rows * width;
    if constexpr (!kSame) {
      if (dst.lo != nullptr) {
        if (src == nullptr) {
          return be.ForEach(gates * n, MaskedOperandFn<T, T, T>{src_lo, masks, dst.lo, n, batch,
                                                                width});
        }
        return be.ForEach(gates * n,
                          MaskedOperandFn<A, T, T>{src, masks, dst.lo, n, batch, width});
      }
    }
    return be.ForEach(gates * n, MaskedOperandFn<A, A, T>{src, masks, dst.a, n, batch, width});
  }

  // The pre-activations of the first `gates` gates from an operand: their columns of out
  // [rows, G] = src·matᵀ (mat [G, width]), or with masks, gate g's columns =
  // (src ⊙ masks[g])·mat_gᵀ, masking `pass_gates` gates per pass into `masked`
  // ([pass_gates, rows, width]; pass_gates divides gates).
  static cudaError_t GateProducts(Backend& be, const RnnModel& m, bool lo, int64_t rows,
                                  int64_t width, int64_t batch, const A* src, const T* src_lo,
                                  const T* masks, int64_t gates, int64_t pass_gates,
                                  const MaskedBuffer& masked, const A* mat, const T* mat_lo,
                                  A* out) {
    const int64_t H = m.num_units, G = m.gate_width();
    if (masks == nullptr) {
      return OperandGemm(be, lo, false, true, rows, gates * H, width, src, src_lo, width, mat,
                         mat_lo, width, false, out, G);
    }
    for (int64_t g0 = 0; g0 < gates; g0 += pass_gates) {
      TF_LSTM_GPU_RETURN_IF_ERROR(MaskOperand(be, src, src_lo, masks + g0 * batch * width,
                                              pass_gates, rows, width, batch, masked));
      for (int64_t g = g0; g < g0 + pass_gates; ++g) {
        const int64_t at = (g - g0) * rows * width;
        TF_LSTM_GPU_RETURN_IF_ERROR(OperandGemm(
            be, lo, false, true, rows, H, width, rnn_detail::Advance(masked.a, at),
            rnn_detail::Advance(masked.lo, at), width, mat + g * H * width,
            mat_lo + g * H * width, width, false, out + g * H, G));
      }
    }
    return cudaSuccess;
  }

  // The gradient of an operand through the first `gates` gates from the gate gradients dg
  // [rows, G]: out (+)= Σ_g dg_g·mat_g, or with masks Σ_g (dg_g·mat_g) ⊙ masks[g], `pass_gates`
  // gates' products per pass in `products` (pass_gates divides gates).
  static cudaError_t OperandGrad(Backend& be, const RnnModel& m, bool lo, int64_t rows,
                                 int64_t width, int64_t batch, const A* dg, const T* dg_lo,
                                 const A* mat, const T* mat_lo, const T* masks, int64_t gates,
                                 int64_t pass_gates, A* products, bool accumulate, A* out) {
    const int64_t H = m.num_units, G = m.gate_width(), n = rows * width;
    if (masks == nullptr) {
      return OperandGemm(be, lo, false, false, rows, width, gates * H, dg, dg_lo, G, mat, mat_lo,
                         width, accumulate, out, width);
    }
    for (int64_t g0 = 0; g0 < gates; g0 += pass_gates) {
      for (int64_t g = g0; g < g0 + pass_gates; ++g) {
        TF_LSTM_GPU_RETURN_IF_ERROR(OperandGemm(
            be, lo, false, false, rows, width, H, dg + g * H, rnn_detail::Advance(dg_lo, g * H),
            G, mat + g * H * width, mat_lo + g * H * width, width, false,
            products + (g - g0) * n, width));
      }
      TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
          n, rnn_detail::MaskedGateSumFn<A, T>{products, masks + g0 * batch * width, out, n,
                                               batch, width, pass_gates,
                                               accumulate || g0 > 0}));
    }
    return cudaSuccess;
  }

  // The first `gates` gates' rows of a weight matrix's gradient [G, width]: dgᵀ·src over every
  // row, or with masks gate g's rows = dg_gᵀ·(src ⊙ masks[g]), one gate's masked copy at a time
  // in `masked`.
  static cudaError_t WeightGrad(Backend& be, const RnnModel& m, bool lo, int64_t rows,
                                int64_t width, int64_t batch, const A* dg, const T* dg_lo,
                                const A* src, const T* src_lo, const T* masks, int64_t gates,
                                const MaskedBuffer& masked, A* dweight) {
    const int64_t H = m.num_units, G = m.gate_width();
    if (masks == nullptr) {
      return OperandGemm(be, lo, true, false, gates * H, width, rows, dg, dg_lo, G, src, src_lo,
                         width, false, dweight, width);
    }
    for (int64_t g = 0; g < gates; ++g) {
      TF_LSTM_GPU_RETURN_IF_ERROR(MaskOperand(be, src, src_lo, masks + g * batch * width, 1,
                                              rows, width, batch, masked));
      TF_LSTM_GPU_RETURN_IF_ERROR(OperandGemm(be, lo, true, false, H, width, rows, dg + g * H,
                                              rnn_detail::Advance(dg_lo, g * H), G, masked.a,
                                              masked.lo, width, false, dweight + g * H * width,
                                              width));
    }
    return cudaSuccess;
  }

  static const T* InputMasks(const RnnRun& run) { return static_cast<const T*>(run.input_masks); }
  static const T* RecurrentMasks(const RnnRun& run) {
    return static_cast<const T*>(run.recurrent_masks);
  }

  // One pseudo-layer's params regions, saved states and initial state (cudnn_rnn_types.h).
  using Layer = PseudoLayer<A>;

  // ---- forward, persistent path ---------------------------------------------------------------

  // Batches up to this size run each pseudo-layer's recurrence as one persistent launch (R in
  // shared memory, a grid barrier per step) when the model qualifies and it fits on the device;
  // otherwise, and for larger batches, every step is a GEMM and a kernel. Small batches make
  // those launch-bound; larger ones use the GEMM's tensor-core throughput better. Backward
  // always runs per step.
  static constexpr int64_t kPersistentMaxBatch = 16;
  static constexpr int kPersistentThreads = 256;
  using PersistentFn = rnn_detail::PersistentForwardFn<T, A, Math>;

  // The persistent launch's grid: `blocks` blocks of `units_per_block` hidden units each
  // (blocks == 0: the per-step path); gpu_launchers.h's RnnForwardPath, which reports it.
  using PersistentPlan = RnnForwardPath;

  // Test-only switch (documented in tests/test_gpu_cudnn_rnn_engine.py):
  // TF_LSTM_OPS_RNN_PERSISTENT=0 takes the per-step path always, so the tests can compare the two
  // paths.
  static bool PersistentDisabled() {
    const char* value = std::getenv("TF_LSTM_OPS_RNN_PERSISTENT");
    return value != nullptr && std::strcmp(value, "0") == 0;
  }

  // Qualifies: no projection, 1 <= batch <= kPersistentMaxBatch, and a grid whose blocks are all
  // resident at once (a cooperative launch), each holding its rows of R and h_prev in shared
  // memory. Takes the fewest units per block that fit: the most blocks, the least shared memory.
  static PersistentPlan PlanPersistent(const Backend& be, const RnnModel& m, const RnnRun& run) {
    const int64_t B = run.batch, H = m.num_units, gates = m.gates();
    if (m.has_proj() || B < 1 || B > kPersistentMaxBatch || H < 1 || run.time < 1 ||
        PersistentDisabled()) {
      return {};
    }
    for (int64_t units = 1; units <= H;) {
      const size_t bytes = static_cast<size_t>(PersistentFn::SharedElements(
                               gates, units, H, B, kPersistentThreads)) * sizeof(A);
      if (bytes > static_cast<size_t>(INT_MAX)) return {};
      const int capacity =
          be.template PersistentCapacity<PersistentFn>(kPersistentThreads, bytes);
      if (capacity <= 0) return {};  // more units per block only need more shared memory
      const int64_t blocks = (H + units - 1) / units;
      if (blocks <= capacity) return {static_cast<int>(blocks), units, bytes};
      units = std::max<int64_t>(units + 1, (H + capacity - 1) / capacity);
    }
    return {};
  }

  // The recurrence of ForwardLayer as one persistent launch. cudaErrorCooperativeLaunchTooLarge
  // (nothing ran) when the grid did not fit after all.
  static cudaError_t ForwardRecurrencePersistent(Backend& be, const RnnModel& m,
                                                 const RnnRun& run, const PersistentPlan& plan,
                                                 const Layer& pl, const int32_t* len,
                                                 const ForwardBuffers& f,
                                                 const Zoneout<A>& zoneout) {
    const int64_t splits =
        PersistentFn::Splits(run.batch * m.gates() * plan.units_per_block, kPersistentThreads);
    const PersistentFn fn{pl.r,      f.xw,      pl.bias_w,   pl.bias_r, pl.h0,
                          pl.c0,     pl.h,      pl.c,        pl.gates,  f.rec,
                          len,       run.time,  run.batch,   m.num_units, pl.dir,
                          m.gates(), plan.units_per_block, kPersistentThreads, m.mode, splits,
                          LoOperands(m), m.activations(), RecurrentMasks(run),
                          m.gru_reset_before, zoneout};
    return be.Persistent(plan.blocks, kPersistentThreads, plan.shared_bytes,
                         run.time * fn.PhasesPerStep(), PersistentFn::kParts, fn);
  }

  // ---- forward -------------------------------------------------------------------------------

  // The recurrence of ForwardLayer, a GEMM (R·h) and a fused element-wise kernel per step.
  // LoOperands: the GEMM multiplies R and h in T (params, and input_h at step 0); each step's
  // kernel also writes its h in T (f.h_lo, two alternating rows) for the next step's GEMM.
  // Recurrent masks: one kernel masks h_prev for every gate, then a GEMM per gate. A GRU
  // resetting before: the gates' product and kernel, then the candidate's (its operand in T in
  // f.reset_operand_lo under lo).
  static cudaError_t ForwardRecurrencePerStep(Backend& be, const RnnModel& m, const RnnRun& run,
                                              const Layer& pl, const int32_t* len,
                                              const ForwardBuffers& f,
                                              const Zoneout<A>& zoneout,
                                              const T* params, const T* input_h) {
    using namespace rnn_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
    const int64_t G = m.gate_width();
    const bool has_len = run.seq_lengths != nullptr;
    const bool lo = LoOperands(m);  // then Hr == H
    const bool lo_h = LoRecurrentState(m, run);
    for (int64_t step = 0; step < T_; ++step) {
      const int64_t t = TimeOf(pl.dir, step, T_);
      const A* h_prev = pl.h_before(step, T_, B);
      A* h_out = pl.h + t * B * Hr;
      const A* xw_t = f.xw + t * B * G;
      A* saved = pl.gates + t * B * SavedGatesOf(m.mode) * H;
      const T* h_prev_lo = lo_h ? (step == 0 ? input_h + pl.p * B * H
                                             : f.h_lo + ((step - 1) & 1) * B * H)
                                : nullptr;
      T* h_lo = lo_h ? f.h_lo + (step & 1) * B * H : nullptr;
      const ZoneoutView<A> zone_h = zoneout.h.At(t * B * H);
      TF_LSTM_GPU_RETURN_IF_ERROR(GateProducts(be, m, lo, B, Hr, B, h_prev, h_prev_lo,
                                               RecurrentMasks(run), HPrevGates(m),
                                               HPrevGates(m), f.masked, pl.r,
                                               params + pl.reg.r, f.rec));
      // A kernel of the step, then (where dst is given) the [B, H] rows it wrote at src, of
      // row stride ld, rounded into dst.
      auto launch_mirroring = [&](const auto& fn, const A* src, int64_t ld, T* dst) {
        using Fn = std::decay_t<decltype(fn)>;
        if constexpr (!kSame) {
          if (dst != nullptr) {
            return be.ForEach(B * H, MirrorStateFn<Fn, A, T>{fn, {src, dst, H, ld}});
          }
        }
        return be.ForEach(B * H, fn);
      };
      // The step's kernel, mirroring its h into h_lo under lo_h.
      auto launch = [&](const auto& fn) { return launch_mirroring(fn, h_out, H, h_lo); };
      switch (m.mode) {
        case RnnMode::kLstm: {
          A* m_out = m.has_proj() ? f.m_buf : h_out;
          TF_LSTM_GPU_RETURN_IF_ERROR(
              launch(LstmStepFn<A, Math>{xw_t, f.rec, pl.bias_w, pl.bias_r, h_prev,
                                         pl.c_before(step, T_, B), h_out, pl.c + t * B * H,
                                         m_out, saved, len, t, H, Hr, m.activations(), zone_h,
                                         zoneout.c.At(t * B * H)}));
          if (m.has_proj()) {  // h = Pmat·m for the rows that ran
            A* dst = has_len ? f.proj_buf : h_out;
            TF_LSTM_GPU_RETURN_IF_ERROR(
                Gemm(be, false, true, B, Hr, H, f.m_buf, pl.proj, false, dst));
            if (has_len) {
              TF_LSTM_GPU_RETURN_IF_ERROR(
                  be.ForEach(B * Hr, ProjSelectFn<A>{f.proj_buf, h_out, len, t, Hr}));
            }
          }
          break;
        }
        case RnnMode::kGru:
          if (m.gru_reset_before) {
            const int64_t r_n = CandidateOffsetInR(m);
            TF_LSTM_GPU_RETURN_IF_ERROR(launch_mirroring(
                GruResetGatesFn<A, T, Math>{xw_t, f.rec, pl.bias_w, pl.bias_r, h_prev, saved,
                                            RecurrentMasks(run), len, t, H, B, m.activations()},
                ResetOperand(saved, m), kSavedGates * H, lo ? f.reset_operand_lo : nullptr));
            TF_LSTM_GPU_RETURN_IF_ERROR(OperandGemm(
                be, lo, false, true, B, H, H, ResetOperand(saved, m), f.reset_operand_lo,
                ResetOperandLd(m, lo), pl.r + r_n, params + pl.reg.r + r_n, H, false,
                f.rec + CandidateColumn(m), G));
            TF_LSTM_GPU_RETURN_IF_ERROR(
                launch(GruResetCandidateFn<A, Math>{xw_t, f.rec, pl.bias_w, pl.bias_r, h_prev,
                                                    h_out, saved, len, t, H, m.activations(),
                                                    zone_h}));
          } else {
            TF_LSTM_GPU_RETURN_IF_ERROR(launch(GruStepFn<A, Math>{
                xw_t, f.rec, pl.bias_w, pl.bias_r, h_prev, h_out, saved, len, t, H,
                m.activations(), zone_h}));
          }
          break;
        default:
          TF_LSTM_GPU_RETURN_IF_ERROR(launch(SimpleStepFn<A, Math>{
              xw_t, f.rec, pl.bias_w, pl.bias_r, h_prev, h_out, len, t, H,
              m.mode == RnnMode::kRnnRelu, saved, m.activations(), zone_h}));
      }
    }
    return cudaSuccess;
  }

  // x_lo, params, input_h: the layer input, params and initial states in T, read under
  // LoOperands (x_lo is nullptr otherwise).
  static cudaError_t ForwardLayer(Backend& be, const RnnModel& m, const RnnRun& run,
                                  const PersistentPlan& plan, const Layer& pl,
                                  const int32_t* len, const A* x, const ForwardBuffers& f,
                                  const Zoneout<A>& zoneout, A* y, const T* x_lo,
                                  const T* params, const T* input_h) {
    using namespace rnn_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
    const int64_t G = m.gate_width(), D = m.num_dirs, rows = T_ * B;
    const bool lo = LoOperands(m);
    // Input projection of every step: one GEMM (or the skip-input broadcast); with input
    // masks one per gate, masking x a gate at a time (a copy of x per gate, not of all gates).
    if (!m.skips(pl.layer)) {
      TF_LSTM_GPU_RETURN_IF_ERROR(GateProducts(be, m, lo, rows, pl.in_width, B, x, x_lo,
                                               InputMasks(run), m.gates(), 1, f.masked,
                                               pl.w, params + pl.reg.w, f.xw));
    } else {
      TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(rows * G, SkipProjectionFn<A>{x, f.xw, H, G}));
    }
    // The persistent launch where planned; per step when not, or when it did not fit after all.
    cudaError_t status = cudaErrorCooperativeLaunchTooLarge;
    if (plan.blocks > 0) {
      status = ForwardRecurrencePersistent(be, m, run, plan, pl, len, f, zoneout);
    }
    if (status == cudaErrorCooperativeLaunchTooLarge) {
      status = ForwardRecurrencePerStep(be, m, run, pl, len, f, zoneout, params, input_h);
    }
    TF_LSTM_GPU_RETURN_IF_ERROR(status);
    // This direction's half of the layer output.
    return be.ForEach(rows * Hr, LayerOutputFn<A>{pl.h, y, len, B, Hr, D * Hr, pl.dir});
  }

  static cudaError_t Forward(Backend& be, const RnnModel& m, const RnnRun& run,
                             const RnnDropout& dropout, const T* input, const T* input_h,
                             const T* input_c, const T* params, T* output, T* output_h,
                             T* output_c, uint8_t* workspace, void* scratch) {
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
    const int64_t LD = m.num_pseudo_layers(), D = m.num_dirs, rows = T_ * B;
    const bool lstm = m.mode == RnnMode::kLstm;
    // The header first.
    TF_LSTM_GPU_RETURN_IF_ERROR(WriteReserveHeader(
        be, MakeReserveHeader(m, run, dropout, sizeof(T), sizeof(A)), workspace));
    if (RnnRunsNothing(m, run)) {  // the final state is the initial state
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, input_h, output_h, LD * B * Hr));
      if (lstm) TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, input_c, output_c, LD * B * H));
      return cudaSuccess;
    }
    size_t bytes;
    const ForwardBuffers f = CarveForward(scratch, m, run, &bytes);
    be.SetBlasWorkspace(f.blas);
    TF_LSTM_GPU_RETURN_IF_ERROR(UploadLengths(be, run, f.len));
    const WorkspaceLayout lay(m, run, dropout.active(m));
    A* ws = reinterpret_cast<A*>(workspace + sizeof(RnnReserveHeader));

    const PersistentPlan plan = PlanPersistent(be, m, run);  // the same for every layer
    const A *P, *x0 = nullptr, *h0, *c0 = nullptr;
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, params, CheckedParamsSize(m), f.params, &P));
    if (Layer0InputInA(m)) {
      TF_LSTM_GPU_RETURN_IF_ERROR(ToTimeMajor(be, run, m.input_size, input, f.x, &x0));
    }
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, input_h, LD * B * Hr, f.h0, &h0));
    if (lstm) TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, input_c, LD * B * H, f.c0, &c0));
    Zoneout<A> zoneout;
    TF_LSTM_GPU_RETURN_IF_ERROR(ConvertZoneout<T>(be, run, H, f.zoneout, &zoneout));

    const bool lo = LoOperands(m);
    for (int64_t l = 0; l < m.num_layers; ++l) {
      const A* x = l == 0 ? x0 : ws + lay.input(l);
      const T* x_lo = nullptr;
      if (lo && !m.skips(l)) {
        TF_LSTM_GPU_RETURN_IF_ERROR(
            LayerInputLo(be, run, l, m.layer_input(l), input, x, f.x_lo, &x_lo));
      }
      // Earlier layers write their output straight into the next layer's input (then dropped
      // out in place); the last one into `output` itself when it is time-major and T == A.
      const bool last = l + 1 == m.num_layers;
      A* y;
      if (!last) {
        y = ws + lay.input(l + 1);
      } else if constexpr (kSame) {
        y = run.time_major ? output : f.y;
      } else {
        y = f.y;
      }
      for (int64_t dir = 0; dir < D; ++dir) {
        const int64_t p = l * D + dir;
        const Layer pl(m, p, P, ws, lay, h0, c0, B);
        TF_LSTM_GPU_RETURN_IF_ERROR(
            ForwardLayer(be, m, run, plan, pl, f.len, x, f, zoneout, y, x_lo, params, input_h));
        // Final state: after the last processed step (rows past their end held it there).
        const int64_t t_last = TimeOf(dir, T_ - 1, T_);
        TF_LSTM_GPU_RETURN_IF_ERROR(
            Convert(be, pl.h + t_last * B * Hr, output_h + p * B * Hr, B * Hr));
        if (lstm) {
          TF_LSTM_GPU_RETURN_IF_ERROR(
              Convert(be, pl.c + t_last * B * H, output_c + p * B * H, B * H));
        }
      }
      if (!last && dropout.active(m)) {  // the next layer's input, dropped out when training
        const A scale = DropoutKeepScale<A>(dropout.rate);
        TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
            rows * D * Hr,
            rnn_detail::DropoutFn<A>{y, ws + lay.mask(l + 1), DropoutStream(dropout, l),
                                     dropout.rate, scale}));
      }
      if (last && static_cast<void*>(y) != static_cast<void*>(output)) {
        TF_LSTM_GPU_RETURN_IF_ERROR(FromTimeMajor(be, run, D * Hr, y, output));
      }
    }
    return cudaSuccess;
  }

  // ---- backward ------------------------------------------------------------------------------

  // One pseudo-layer: consumes dy (its direction's half) and dh/dc (initialised with the final
  // state gradients), writes its params gradients, input_h/c_backprop, and adds dL/dx to dx.
  // x_lo, params: LoOperands' layer input and params in T (else unused).
  static cudaError_t BackwardLayer(Backend& be, const RnnModel& m, const RnnRun& run,
                                   const Layer& pl, const BackwardBuffers& s,
                                   const Zoneout<A>& zoneout, const A* x,
                                   const A* dy, A* dparams, A* dx, T* input_h_backprop,
                                   T* input_c_backprop, const T* x_lo, const T* params) {
    using namespace rnn_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
    const int64_t G = m.gate_width(), D = m.num_dirs, rows = T_ * B, DHr = D * Hr;
    const bool lstm = m.mode == RnnMode::kLstm, gru = m.mode == RnnMode::kGru;
    const bool relu = m.mode == RnnMode::kRnnRelu;
    const bool lo = LoOperands(m);
    const int32_t* len = s.len;
    TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
        rows * Hr, PrevStateFn<A, T>{pl.h0, pl.h, s.h_prev_seq,
                                     LoRecurrentState(m, run) ? s.h_prev_lo : nullptr, T_,
                                     B * Hr, pl.dir}));
    for (int64_t step = T_ - 1; step >= 0; --step) {
      const int64_t t = TimeOf(pl.dir, step, T_);
      const Carry<A> carry{s.dh, s.carry, s.direct, TimeOf(pl.dir, step + 1, T_), step < T_ - 1};
      const A* dy_t = dy + t * B * DHr + pl.dir * Hr;
      A* dgx_t = s.dgx + t * B * G;
      A* dgh_t = s.dgh + t * B * G;
      const ZoneoutView<A> zone_h = zoneout.h.At(t * B * H);
      // A kernel of the step, mirroring the gate gradients it wrote (gates [first, end)) into T
      // when lo.
      auto launch_gates = [&](const auto& fn, int64_t first, int64_t end) {
        using Fn = std::decay_t<decltype(fn)>;
        if constexpr (!kSame) {
          if (lo) {
            return be.ForEach(
                B * H, MirrorGatesFn<Fn, A, T>{fn, dgx_t,
                                               SeparateRecurrentGrads(m) ? dgh_t : nullptr,
                                               s.dgx_lo + t * B * G, s.dgh_lo + t * B * G, H,
                                               m.gates(), first, end});
          }
        }
        return be.ForEach(B * H, fn);
      };
      auto launch = [&](const auto& fn) { return launch_gates(fn, 0, m.gates()); };
      if (lstm) {
        const A* dm = nullptr;
        A* m_seq = nullptr;
        if (m.has_proj()) {  // dL/dh_t, then dL/dm = Pmat^T·dL/dh_t
          A* dht = s.dh_total + t * B * Hr;
          TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
              B * Hr, CarryFn<A, T>{carry, dy_t, dht, nullptr, len, t, Hr, DHr}));
          TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, B, H, Hr, dht, pl.proj, false, s.dm));
          dm = s.dm;
          m_seq = s.m_seq + t * B * H;
        }
        TF_LSTM_GPU_RETURN_IF_ERROR(
            launch(LstmBackFn<A, Math>{carry, dy_t, dm, pl.gates + t * B * kSavedGates * H,
                                       pl.c + t * B * H, pl.c_before(step, T_, B), s.dc,
                                       dgx_t, m_seq, len, t, H, DHr, m.activations(), zone_h,
                                       zoneout.c.At(t * B * H), s.direct}));
      } else if (gru) {
        const A* saved = pl.gates + t * B * kSavedGates * H;
        const A* h_prev = s.h_prev_seq + t * B * Hr;
        // (resetting before, r's gate gradient comes after the candidate's product, below)
        TF_LSTM_GPU_RETURN_IF_ERROR(launch_gates(
            GruBackFn<A, Math>{carry, dy_t, saved, h_prev, dgx_t, dgh_t, s.direct, len, t, H,
                               DHr, m.activations(), m.gru_reset_before, zone_h},
            m.gru_reset_before ? 1 : 0, m.gates()));
        if (m.gru_reset_before) {  // d(r ⊙ h_operand) = d_n·R_n, then r's gate gradient
          const int64_t n_col = CandidateColumn(m), r_n = CandidateOffsetInR(m);
          TF_LSTM_GPU_RETURN_IF_ERROR(OperandGemm(
              be, lo, false, false, B, H, H, dgh_t + n_col, Advance(s.dgh_lo, t * B * G + n_col),
              G, pl.r + r_n, params + pl.reg.r + r_n, H, false, s.reset_operand_grad, H));
          TF_LSTM_GPU_RETURN_IF_ERROR(launch_gates(
              GruResetGateBackFn<A, T, Math>{s.reset_operand_grad, saved, h_prev,
                                             RecurrentMasks(run), dgx_t, dgh_t, s.direct, len,
                                             t, H, B, m.activations()},
              0, 1));
        }
      } else {
        TF_LSTM_GPU_RETURN_IF_ERROR(launch(SimpleBackFn<A, Math>{
            carry, dy_t, pl.h + t * B * Hr, dgx_t, len, t, H, DHr, relu,
            m.keras_cells() ? pl.gates + t * B * H : nullptr, m.activations(), zone_h,
            s.direct}));
      }
      // R^T through the recurrent-side gate gradients of the gates reading h_prev (and the
      // recurrent masks): the next step's carried gradient.
      TF_LSTM_GPU_RETURN_IF_ERROR(OperandGrad(be, m, lo, B, Hr, B, dgh_t,
                                              Advance(s.dgh_lo, t * B * G), pl.r,
                                              params + pl.reg.r, RecurrentMasks(run),
                                              HPrevGates(m), HPrevGates(m), s.gate_products,
                                              false, s.carry));
    }
    // The gradient left after the first step is input_h_backprop; dc likewise.
    const Carry<A> last{s.dh, s.carry, s.direct, TimeOf(pl.dir, 0, T_), true};
    TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
        B * Hr, CarryFn<A, T>{last, dy, nullptr, input_h_backprop + pl.p * B * Hr, len, 0, Hr,
                              DHr}));
    if (lstm) {
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, s.dc, input_c_backprop + pl.p * B * H, B * H));
    }
    // Whole-sequence products (with masks, on the masked operands; dx a gate at a time).
    if (!m.skips(pl.layer)) {
      TF_LSTM_GPU_RETURN_IF_ERROR(WeightGrad(be, m, lo, rows, pl.in_width, B, s.dgx, s.dgx_lo, x,
                                             x_lo, InputMasks(run), m.gates(), s.masked,
                                             dparams + pl.reg.w));
      TF_LSTM_GPU_RETURN_IF_ERROR(OperandGrad(be, m, lo, rows, pl.in_width, B, s.dgx, s.dgx_lo,
                                              pl.w, params + pl.reg.w, InputMasks(run),
                                              m.gates(), 1, s.gate_products, pl.dir > 0, dx));
    } else {  // skip input: x was added to every gate
      TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
          rows * H, SkipDxFn<A>{s.dgx, dx, H, G, m.gates(), pl.dir > 0}));
    }
    TF_LSTM_GPU_RETURN_IF_ERROR(WeightGrad(be, m, lo, rows, Hr, B, s.dgh, s.dgh_lo, s.h_prev_seq,
                                           s.h_prev_lo, RecurrentMasks(run), HPrevGates(m),
                                           s.masked, dparams + pl.reg.r));
    if (m.gru_reset_before) {  // dR_n from the saved r ⊙ h_operand (rounded to T under lo)
      const A* operand = ResetOperand(pl.gates, m);
      if (lo) {
        TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
            rows * H, RoundRowsFn<A, T>{operand, s.reset_operand_lo, H, kSavedGates * H}));
      }
      const int64_t n_col = CandidateColumn(m);
      TF_LSTM_GPU_RETURN_IF_ERROR(OperandGemm(
          be, lo, true, false, H, H, rows, s.dgh + n_col, Advance(s.dgh_lo, n_col), G, operand,
          s.reset_operand_lo, ResetOperandLd(m, lo), false,
          dparams + pl.reg.r + CandidateOffsetInR(m), H));
    }
    if (m.has_proj()) {
      TF_LSTM_GPU_RETURN_IF_ERROR(
          Gemm(be, true, false, Hr, H, rows, s.dh_total, s.m_seq, false, dparams + pl.reg.proj));
    }
    // Biases: column sums as ones^T·dgates (deterministic, no atomics).
    TF_LSTM_GPU_RETURN_IF_ERROR(
        Gemm(be, false, false, 1, G, rows, s.ones, s.dgx, false, dparams + pl.reg.bias_w));
    return Gemm(be, false, false, 1, G, rows, s.ones, s.dgh, false, dparams + pl.reg.bias_r);
  }

  static cudaError_t Backward(Backend& be, const RnnModel& m, const RnnRun& run,
                              const RnnReserveHeader& expected, const T* input, const T* input_h,
                              const T* input_c, const T* params, const T* output_backprop,
                              const T* output_h_backprop, const T* output_c_backprop,
                              const uint8_t* reserve, T* input_backprop, T* input_h_backprop,
                              T* input_c_backprop, T* params_backprop, void* scratch) {
    using namespace rnn_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
    const int64_t LD = m.num_pseudo_layers(), D = m.num_dirs, rows = T_ * B;
    const bool lstm = m.mode == RnnMode::kLstm;
    const int64_t n_params = CheckedParamsSize(m);
    size_t bytes;
    const BackwardBuffers s = CarveBackward(scratch, m, run, &bytes);
    be.SetBlasWorkspace(s.blas);
    // The reserve header against the expected one, on the device.
    TF_LSTM_GPU_RETURN_IF_ERROR(CheckReserveHeader(be, expected, reserve, s.flag));

    if (RnnRunsNothing(m, run)) {  // state gradients pass through, the rest is zero
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, output_h_backprop, input_h_backprop, LD * B * Hr));
      if (lstm) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, output_c_backprop, input_c_backprop, LD * B * H));
      }
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, params_backprop, n_params, Cast<T>(0.0f)));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, input_backprop, T_ * B * m.input_size, Cast<T>(0.0f)));
    } else {
      TF_LSTM_GPU_RETURN_IF_ERROR(UploadLengths(be, run, s.len));
      const WorkspaceLayout lay(m, run, expected.dropout != 0);
      // The forward's saved states are read only; Layer's pointers are non-const for reuse.
      A* ws = reinterpret_cast<A*>(const_cast<uint8_t*>(reserve) + sizeof(RnnReserveHeader));

      const A *P, *x0 = nullptr, *h0, *c0 = nullptr, *dy_top, *dhT, *dcT = nullptr;
      TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, params, n_params, s.params, &P));
      if (Layer0InputInA(m)) {
        TF_LSTM_GPU_RETURN_IF_ERROR(ToTimeMajor(be, run, m.input_size, input, s.x, &x0));
      }
      TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, input_h, LD * B * Hr, s.h0, &h0));
      if (lstm) TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, input_c, LD * B * H, s.c0, &c0));
      TF_LSTM_GPU_RETURN_IF_ERROR(ToTimeMajor(be, run, D * Hr, output_backprop, s.dy, &dy_top));
      TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, output_h_backprop, LD * B * Hr, s.dhT, &dhT));
      if (lstm) TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, output_c_backprop, LD * B * H, s.dcT, &dcT));
      Zoneout<A> zoneout;
      TF_LSTM_GPU_RETURN_IF_ERROR(ConvertZoneout<T>(be, run, H, s.zoneout, &zoneout));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, s.ones, rows, A(1)));
      // Every params region is overwritten by a GEMM: no zeroing needed.
      A* dparams;
      if constexpr (kSame) {
        dparams = params_backprop;
      } else {
        dparams = s.dparams;
      }

      const A* dy = dy_top;
      int cur = 0;
      const bool lo = LoOperands(m);
      for (int64_t l = m.num_layers - 1; l >= 0; --l) {
        const A* x = l == 0 ? x0 : ws + lay.input(l);
        const T* x_lo = nullptr;
        if (lo && !m.skips(l)) {
          TF_LSTM_GPU_RETURN_IF_ERROR(
              LayerInputLo(be, run, l, m.layer_input(l), input, x, s.x_lo, &x_lo));
        }
        A* dx = s.dx[cur];
        if constexpr (kSame) {
          if (l == 0 && run.time_major) dx = input_backprop;  // straight into the output
        }
        for (int64_t dir = 0; dir < D; ++dir) {
          const int64_t p = l * D + dir;
          const Layer pl(m, p, P, ws, lay, h0, c0, B);
          TF_LSTM_GPU_RETURN_IF_ERROR(be.Copy(s.dh, dhT + p * B * Hr, B * Hr * sizeof(A)));
          if (lstm) TF_LSTM_GPU_RETURN_IF_ERROR(be.Copy(s.dc, dcT + p * B * H, B * H * sizeof(A)));
          TF_LSTM_GPU_RETURN_IF_ERROR(BackwardLayer(be, m, run, pl, s, zoneout, x, dy, dparams,
                                                    dx, input_h_backprop, input_c_backprop, x_lo,
                                                    params));
        }
        if (l > 0) {  // through the dropout between layers l-1 and l (in place)
          if (expected.dropout != 0) {
            TF_LSTM_GPU_RETURN_IF_ERROR(
                be.ForEach(rows * D * Hr, ScaleByFn<A>{dx, ws + lay.mask(l)}));
          }
          dy = dx;  // layer l-1 reads it while writing the other buffer
          cur ^= 1;
        } else if (static_cast<void*>(dx) != static_cast<void*>(input_backprop)) {
          TF_LSTM_GPU_RETURN_IF_ERROR(FromTimeMajor(be, run, m.input_size, dx, input_backprop));
        }
      }
      if constexpr (!kSame) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dparams, params_backprop, n_params));
      }
    }
    // A reserve space from another configuration: every output is NaN.
    TF_LSTM_GPU_RETURN_IF_ERROR(
        NanIfFlagged(be, s.flag, input_backprop, rows * m.input_size));
    TF_LSTM_GPU_RETURN_IF_ERROR(NanIfFlagged(be, s.flag, input_h_backprop, LD * B * Hr));
    if (lstm) {
      TF_LSTM_GPU_RETURN_IF_ERROR(NanIfFlagged(be, s.flag, input_c_backprop, LD * B * H));
    }
    return NanIfFlagged(be, s.flag, params_backprop, n_params);
  }
};

// Keras' weights <-> the params buffer (KerasBlocks, cc/core/cudnn_rnn_layout.h): one ForEach per
// block; with bias_rows == 1, KerasToParams zeroes b_W and ParamsToKeras ignores it.
template <bool kToParams, typename Backend, typename T>
cudaError_t CopyKerasBlocks(const Backend& be, RnnMode mode, int64_t input_size,
                            int64_t num_units, int bias_rows,
                            std::conditional_t<kToParams, const T*, T*> const keras[3],
                            std::conditional_t<kToParams, T*, const T*> params) {
  KerasBlock blocks[kMaxKerasBlocks];
  const int n = KerasBlocks(mode, input_size, num_units, bias_rows, blocks);
  for (int b = 0; b < n; ++b) {
    const KerasBlock& k = blocks[b];
    TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
        k.rows * k.cols,
        rnn_detail::KerasBlockFn<T, kToParams>{
            keras[static_cast<int>(k.operand)] + k.keras_offset, params + k.params_offset, k.cols,
            k.keras_row_stride, k.keras_col_stride}));
  }
  if constexpr (kToParams) {
    if (bias_rows == 1) {
      const RnnModel m = KerasModel(mode, input_size, num_units);
      return Fill(be, params + RegionsOf(m, 0).bias_w, m.gate_width(), Cast<T>(0.0f));
    }
  }
  return cudaSuccess;
}

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CUDNN_RNN_GPU_ENGINE_H_
