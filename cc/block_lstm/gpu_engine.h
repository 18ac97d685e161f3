// The LSTM block ops' GPU engine (BlockLSTM(V2), LSTMBlockCell, their gradients and
// BlockLSTMFullGrad), framework-free and templated on a Backend (common.h): CudaBackend runs it
// on a stream (block_lstm_launchers.cu.cc, the gpu_launchers.h launchers), HostBackend runs the
// very same calls on the CPU (the self-test's "host" backend, part of the test suite).
//
// Semantics are those of the CPU engine (cpu_engine.cc), which this mirrors step for step; the cell
// math is the shared cc/core/lstm_cell.h. The structure is the project's performance design
// (docs/performance.md §2):
//   forward   one GEMM x·Wx for all seq_len_max steps; per step only the recurrent GEMM h·Wh and
//             ONE fused element-wise pass (bias, activations, clip, peepholes, state update, the
//             seven saved outputs); outputs at steps >= seq_len_max are zeroed by one pass;
//   backward  per step ONE fused element-wise pass (dgates of all four gates, the carried dcs)
//             and ONE GEMM dgates_t·Whᵀ → dh; after the sweep dx = dgates·Wxᵀ, dWx = xᵀ·dgates,
//             dWh = [h_prev; h_0..h_{L-2}]ᵀ·dgates and db = 1ᵀ·dgates as whole-sequence GEMMs, the
//             peephole gradients as a deterministic two-stage column reduction;
//   cell grad element-wise only (+ the peephole reduction).
// Nothing allocates: every temporary comes from one caller-provided scratch block, carved by the
// same Carve* function that reports its size. Nothing uses atomics: results are deterministic.
//
// Precision: A = Acc<T> is float for __half/__nv_bfloat16/float and double for double. Every GEMM
// takes storage-type operands and accumulates in A (16-bit: tensor cores): x, W and the h sequence
// as stored and, in backward, dgates rounded to T once (as cuDNN; the CPU rounds them only for
// bfloat16's dx and dW, on CPUs with AVX512-BF16). The element-wise math, the carried dh/dcs, db
// and the peephole gradients stay in A. The state the next step multiplies is the stored h (rounded
// to T), as on the CPU. Each output is rounded to T once. BackwardGrad (BlockLSTMFullGradGrad) is
// the exception: it computes in A throughout, operands included, as the CPU engine does.
#ifndef TF_LSTM_OPS_CC_BLOCK_LSTM_GPU_ENGINE_H_
#define TF_LSTM_OPS_CC_BLOCK_LSTM_GPU_ENGINE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cc/gpu/common.h"
#include "cc/gpu/reductions.h"
#include "cc/core/gate_layout.h"
#include "cc/core/lstm_cell.h"
#include "cc/core/block_lstm_types.h"

namespace tf_lstm_ops {
namespace gpu {
namespace lstm {

// ---- element-wise functors (namespace scope and trivially copyable: CUDA kernels are
// instantiated on them; see common.h) ----

// Zeroes `count` elements in each of the seven outputs, starting at the given pointers (the
// steps >= seq_len_max), in one pass.
template <typename T>
struct ZeroOutputsFn {
  LstmActivations<T*> out;
  int64_t count;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t which = i / count, k = i - which * count;
    T* p = which == 0   ? out.i
           : which == 1 ? out.cs
           : which == 2 ? out.f
           : which == 3 ? out.o
           : which == 4 ? out.ci
           : which == 5 ? out.co
                        : out.h;
    p[k] = Cast<T>(0.0f);
  }
};

// The fused forward pass of one step, one thread per (batch row b, unit j), k = b·H + j:
// pre-activations (x·Wx)_t + h·Wh + b, CellForward, the seven outputs rounded once.
// kPeephole / kClip are compile-time, as in the CPU kernel.
template <typename T, typename A, typename Math, bool kPeephole, bool kClip>
struct ForwardStepFn {
  int64_t H;
  GateBlocks blk;
  A forget_bias, cell_clip;
  const A* xw;       // [B, 4H] this step's input projection
  const A* rec;      // [B, 4H] h_{t-1}·Wh
  const T* bias;     // [4H]
  const T* cs_prev;  // [B, H]
  const T *wci, *wcf, *wco;  // [H], read only with kPeephole
  LstmActivations<T*> out;   // this step's [B, H] slices

  TF_LSTM_HOST_DEVICE A Gate(int64_t row, int block, int64_t j) const {
    const int64_t c = block * H + j;
    return (xw[row + c] + rec[row + c]) + Cast<A>(bias[c]);
  }

  TF_LSTM_HOST_DEVICE void operator()(int64_t k) const {
    const int64_t b = k / H, j = k - b * H, row = b * 4 * H;
    const CellParams<A> params{forget_bias, cell_clip, kClip, kPeephole};
    const CellActivations<A> a = CellForward<A, Math>(
        params, Gate(row, blk.i, j), Gate(row, blk.c, j), Gate(row, blk.f, j),
        Gate(row, blk.o, j), Cast<A>(cs_prev[k]), kPeephole ? Cast<A>(wci[j]) : A(0),
        kPeephole ? Cast<A>(wcf[j]) : A(0), kPeephole ? Cast<A>(wco[j]) : A(0));
    out.i[k] = Cast<T>(a.i);
    out.cs[k] = Cast<T>(a.cs);
    out.f[k] = Cast<T>(a.f);
    out.o[k] = Cast<T>(a.o);
    out.ci[k] = Cast<T>(a.ci);
    out.co[k] = Cast<T>(a.co);
    out.h[k] = Cast<T>(a.h);
  }
};

// The fused backward pass of one step, one thread per (b, j): dgates of the four gates and the
// cell-state gradient carried to the previous step. Every pointer of `og` except cs and h may
// be nullptr (zero); kDirect says whether any of i/f/o/ci/co is present (BlockLSTMFullGrad).
// Carries (dc_carry, dh_carry) nullptr = zero. Outputs, each optional (nullptr = not written):
// dgates / dc_out in A (dc_out may alias dc_carry: element-wise), dgates_t / dc_t rounded to T.
template <typename T, typename A, bool kPeephole, bool kDirect>
struct BackwardStepFn {
  int64_t H;
  GateBlocks blk;
  const T *wci, *wcf, *wco;       // [H], read only with kPeephole
  LstmActivations<const T*> act;  // this step's [B, H] slices (h unused)
  const T* cs_prev;               // [B, H]
  LstmActivations<const T*> og;   // gradients w.r.t. this step's outputs
  const A *dc_carry, *dh_carry;   // [B, H] from step t+1
  A* dgates;                      // [B, 4H]
  A* dc_out;                      // [B, H]
  T* dgates_t;                    // [B, 4H]
  T* dc_t;                        // [B, H]

  TF_LSTM_HOST_DEVICE static A Direct(const T* p, int64_t k) {
    return (kDirect && p != nullptr) ? Cast<A>(p[k]) : A(0);
  }

  TF_LSTM_HOST_DEVICE void operator()(int64_t k) const {
    const int64_t b = k / H, j = k - b * H, row = b * 4 * H;
    const CellActivations<A> a{Cast<A>(act.i[k]), Cast<A>(act.cs[k]), Cast<A>(act.f[k]),
                               Cast<A>(act.o[k]), Cast<A>(act.ci[k]), Cast<A>(act.co[k]), A(0)};
    const A dcs = Cast<A>(og.cs[k]) + (dc_carry != nullptr ? dc_carry[k] : A(0));
    const A dh = Cast<A>(og.h[k]) + (dh_carry != nullptr ? dh_carry[k] : A(0));
    const CellGradients<A> g = CellBackward<A>(
        kPeephole, a, Cast<A>(cs_prev[k]), kPeephole ? Cast<A>(wci[j]) : A(0),
        kPeephole ? Cast<A>(wcf[j]) : A(0), kPeephole ? Cast<A>(wco[j]) : A(0), dcs, dh,
        ActivationGradients<A>{Direct(og.i, k), Direct(og.f, k), Direct(og.o, k),
                               Direct(og.ci, k), Direct(og.co, k)});
    const int64_t ci = row + blk.i * H + j, cc = row + blk.c * H + j;
    const int64_t cf = row + blk.f * H + j, co = row + blk.o * H + j;
    if (dgates != nullptr) {
      dgates[ci] = g.d_i;
      dgates[cc] = g.d_c;
      dgates[cf] = g.d_f;
      dgates[co] = g.d_o;
    }
    if (dgates_t != nullptr) {
      dgates_t[ci] = Cast<T>(g.d_i);
      dgates_t[cc] = Cast<T>(g.d_c);
      dgates_t[cf] = Cast<T>(g.d_f);
      dgates_t[co] = Cast<T>(g.d_o);
    }
    if (dc_out != nullptr) dc_out[k] = g.cs_prev_grad;
    if (dc_t != nullptr) dc_t[k] = Cast<T>(g.cs_prev_grad);
  }
};

// Peephole gradients, stage 1: thread (chunk c, column q) with q = g·H + j, g = 0, 1, 2 for
// wci, wcf, wco, sums rows [c·rows_per_chunk, ...) of
//   g = 0: dgates[r, i-block j] · cs_prev_of(r)[j]
//   g = 1: dgates[r, f-block j] · cs_prev_of(r)[j]
//   g = 2: dgates[r, o-block j] · cs[r, j]
// in increasing r, where dgates row r = t·B + b pairs with cs_prev row (r < B ? cs_prev[r] :
// cs_seq[r - B]) and cs row r. partial is [chunks, 3H].
template <typename T, typename A>
struct PeepholePartialFn {
  int64_t rows, B, H, rows_per_chunk;
  GateBlocks blk;
  const A* dgates;     // [rows, 4H]
  const T* cs_prev;    // [B, H]
  const T* cs_seq;     // [rows, H]: cs_prev of row r >= B is cs_seq[r - B]; the o term uses cs_seq[r]
  A* partial;          // [chunks, 3H]

  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t width = 3 * H, c = i / width, q = i - c * width;
    const int g = static_cast<int>(q / H);
    const int64_t j = q - g * H;
    const int64_t col = (g == 0 ? blk.i : (g == 1 ? blk.f : blk.o)) * H + j;
    const int64_t r0 = c * rows_per_chunk, r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk
                                                                           : rows;
    A sum = A(0);
    for (int64_t r = r0; r < r1; ++r) {
      const T* s = g == 2 ? cs_seq + r * H : (r < B ? cs_prev + r * H : cs_seq + (r - B) * H);
      sum += dgates[r * 4 * H + col] * Cast<A>(s[j]);
    }
    partial[i] = sum;
  }
};

// Stage 2: out_g[j] = Σ_c partial[c, g·H + j], summed in increasing c (fixed order).
template <typename T, typename A>
struct PeepholeFinishFn {
  int64_t chunks, H;
  const A* partial;
  T *wci, *wcf, *wco;

  TF_LSTM_HOST_DEVICE void operator()(int64_t q) const {
    const int64_t width = 3 * H;
    A sum = A(0);
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * width + q];
    const int g = static_cast<int>(q / H);
    T* out = g == 0 ? wci : (g == 1 ? wcf : wco);
    out[q - g * H] = Cast<T>(sum);
  }
};

// BackwardGrad (BlockLSTMFullGradGrad, docs/block_lstm.md §7.2) computes in A throughout: its
// inputs are seen in A (16-bit: converted copies), its results are written in A and rounded
// once, as the CPU engine's LstmBackwardGrad, which this mirrors step for step.

// Sweep 1, one thread per (b, j): the backward step again, keeping the step's total dh and dcs
// besides dgates; dc_carry is read (not at the last step, `first`) and overwritten in place.
template <typename A, bool kPeephole>
struct BackwardGradSweepFn {
  int64_t H;
  GateBlocks blk;
  const A *wci, *wcf, *wco;            // [H], read only with kPeephole
  LstmActivations<const A*> act, og;   // this step's [B, H] slices
  const A* cs_prev;                    // [B, H] the state the step started from
  const A* dh_carry;                   // [B, H] h's gradient from step t+1 (read unless first)
  A* dc_carry;                         // [B, H]
  bool first;                          // the last step: nothing is carried in
  A *dgates, *dh_total, *dcs_total;    // [B, 4H], [B, H], [B, H]

  TF_LSTM_HOST_DEVICE void operator()(int64_t k) const {
    const int64_t b = k / H, j = k - b * H, row = b * 4 * H;
    const A dh = og.h[k] + (first ? A(0) : dh_carry[k]);
    const A dcs = og.cs[k] + (first ? A(0) : dc_carry[k]);
    dh_total[k] = dh;
    dcs_total[k] = dcs;
    const CellGradients<A> g = CellBackward<A>(
        kPeephole, ActivationsAt(act, k), cs_prev[k], kPeephole ? wci[j] : A(0),
        kPeephole ? wcf[j] : A(0), kPeephole ? wco[j] : A(0), dcs, dh, DirectGradientsAt(og, k));
    dgates[row + blk.i * H + j] = g.d_i;
    dgates[row + blk.c * H + j] = g.d_c;
    dgates[row + blk.f * H + j] = g.d_f;
    dgates[row + blk.o * H + j] = g.d_o;
    dc_carry[k] = g.cs_prev_grad;
  }
};

// Sweep 2, forward in time, one thread per (b, j): the adjoint of step t's element-wise
// backward (CellBackwardAdjoint). dgates_cot already holds every product's share of dgates'
// cotangent; cot_b's is added here. The peephole weights' shares go to this step's rows of
// peep_terms ([B, 3H]: wci, wcf, wco), summed over all rows after the sweep.
template <typename A, bool kPeephole>
struct BackwardGradAdjointFn {
  int64_t H;
  GateBlocks blk;
  const A *wci, *wcf, *wco;              // [H], read only with kPeephole
  const A *cot_wci, *cot_wcf, *cot_wco;  // [H], read only with kPeephole
  const A* cot_b;                        // [4H]
  LstmActivations<const A*> act, og;     // this step's [B, H] slices
  const A *cs_prev, *dh_total, *dcs_total;  // [B, H]
  const A* dgates_cot;                   // [B, 4H]
  A* cs_prev_grad_cot;   // [B, H] the carried cs gradient's cotangent: read, then overwritten
  A* cs_before_cot;      // [B, H] cs_prev's cotangent: written at t = 0, else accumulated
  bool first;            // t == 0
  LstmActivations<A*> r_act, r_og;       // this step's [B, H] result slices
  A* peep_terms;                         // [B, 3H] (kPeephole)

  TF_LSTM_HOST_DEVICE void operator()(int64_t k) const {
    const int64_t b = k / H, j = k - b * H, row = b * 4 * H;
    const int64_t ci = blk.i * H + j, cc = blk.c * H + j, cf = blk.f * H + j, co = blk.o * H + j;
    const CellBackwardCotangents<A> r = CellBackwardAdjoint<A>(
        kPeephole, ActivationsAt(act, k), cs_prev[k], kPeephole ? wci[j] : A(0),
        kPeephole ? wcf[j] : A(0), kPeephole ? wco[j] : A(0), dcs_total[k], dh_total[k],
        DirectGradientsAt(og, k),
        CellGradients<A>{dgates_cot[row + ci] + cot_b[ci], dgates_cot[row + cc] + cot_b[cc],
                         dgates_cot[row + cf] + cot_b[cf], dgates_cot[row + co] + cot_b[co],
                         cs_prev_grad_cot[k]},
        kPeephole ? cot_wci[j] : A(0), kPeephole ? cot_wcf[j] : A(0),
        kPeephole ? cot_wco[j] : A(0));
    StoreCotangentsAt(r, r_act, r_og, k);
    cs_before_cot[k] = first ? r.cs_prev : cs_before_cot[k] + r.cs_prev;
    cs_prev_grad_cot[k] = r.dcs;
    if (kPeephole) {
      peep_terms[b * 3 * H + j] = r.wci;
      peep_terms[b * 3 * H + H + j] = r.wcf;
      peep_terms[b * 3 * H + 2 * H + j] = r.wco;
    }
  }
};

}  // namespace lstm

template <typename Backend, typename T>
struct LstmEngine {
  using A = Acc<T>;
  static constexpr bool kConvert = !std::is_same_v<T, A>;  // 16-bit storage

  // ---------------------------------------------------------------------------------------
  // Scratch layouts. Each Carve* runs once with a null carver base for the size and again on
  // the real block: one code path, so the sizes cannot disagree.
  // ---------------------------------------------------------------------------------------

  struct ForwardScratch {
    void* blas = nullptr;
    A* xw = nullptr;   // [L·B, 4H] x·Wx for every step
    A* rec = nullptr;  // [B, 4H] h_{t-1}·Wh of the current step
  };
  // Whether Forward and Backward have anything to run (else they only write zeros).
  static bool Runs(const LstmDims& d, int64_t L) { return L > 0 && d.batch > 0 && d.cell > 0; }
  static ForwardScratch CarveForward(ScratchCarver& c, const LstmDims& d, const LstmAttrs&,
                                     int64_t L) {
    ForwardScratch s;
    if (!Runs(d, L)) return s;
    const int64_t B = d.batch, G = 4 * d.cell;
    s.blas = c.TakeBytes(Backend::kBlasWorkspaceBytes);
    s.xw = c.Take<A>(L * B * G);
    s.rec = c.Take<A>(B * G);
    return s;
  }

  struct BackwardScratch {
    void* blas = nullptr;
    A* dgates = nullptr;     // [L·B, 4H]
    T* dgates_lo = nullptr;  // [L·B, 4H] dgates rounded to T, the GEMMs' operand (16-bit only)
    A* dc = nullptr;         // [B, H] carried dcs
    A* dh = nullptr;         // [B, H] carried dh
    A* dx = nullptr;         // [L·B, I] dx before rounding (16-bit only)
    A* dw = nullptr;         // [I+H, 4H] (16-bit only)
    A* db = nullptr;         // [4H] (16-bit only)
    A* ones = nullptr;       // [L·B]
    A* partial = nullptr;    // [chunks, 3H] (use_peephole only)
  };
  static BackwardScratch CarveBackward(ScratchCarver& c, const LstmDims& d, const LstmAttrs& at,
                                       int64_t L) {
    BackwardScratch s;
    if (!Runs(d, L)) return s;
    const int64_t B = d.batch, I = d.input, H = d.cell, G = 4 * H, rows = L * B;
    s.blas = c.TakeBytes(Backend::kBlasWorkspaceBytes);
    s.dgates = c.Take<A>(rows * G);
    s.dc = c.Take<A>(B * H);
    s.dh = c.Take<A>(B * H);
    s.ones = c.Take<A>(rows);
    if (kConvert) {
      s.dgates_lo = c.Take<T>(rows * G);
      s.dx = c.Take<A>(rows * I);
      s.dw = c.Take<A>((I + H) * G);
      s.db = c.Take<A>(G);
    }
    if (at.use_peephole) s.partial = c.Take<A>(ColumnChunking(rows).chunks * 3 * H);
    return s;
  }

  struct CellBackwardScratch {
    A* dgates = nullptr;   // [B, 4H] in A for the peephole reduction (16-bit with peepholes)
    A* partial = nullptr;  // [chunks, 3H] (use_peephole only)
  };
  static CellBackwardScratch CarveCellBackward(ScratchCarver& c, const LstmDims& d,
                                               const LstmAttrs& at) {
    CellBackwardScratch s;
    const int64_t B = d.batch, H = d.cell;
    if (B <= 0 || H <= 0 || !at.use_peephole) return s;
    if (kConvert) s.dgates = c.Take<A>(B * 4 * H);
    s.partial = c.Take<A>(ColumnChunking(B).chunks * 3 * H);
    return s;
  }

  // BackwardGrad: its inputs and results in A (16-bit: converted copies; nullptr for float and
  // double, which use the buffers themselves), the backward's per-step values and the sweeps'
  // carries.
  struct BackwardGradScratch {
    void* blas = nullptr;
    A *x = nullptr, *cs_prev = nullptr, *h_prev = nullptr, *w = nullptr, *b = nullptr;
    A* peep = nullptr;  // [3H] wci, wcf, wco (use_peephole only)
    A *act[7] = {}, *og[7] = {};
    A *cot_x = nullptr, *cot_cs_prev = nullptr, *cot_h_prev = nullptr, *cot_w = nullptr;
    A *cot_b = nullptr, *cot_peep = nullptr;
    A *r_x = nullptr, *r_cs_prev = nullptr, *r_h_prev = nullptr, *r_w = nullptr;
    A *r_act[7] = {}, *r_og[7] = {};
    A* dgates = nullptr;            // [L·B, 4H] the backward's dgates
    A* dgates_cot = nullptr;        // [L·B, 4H] their cotangents
    A *dh_seq = nullptr, *dcs_seq = nullptr;  // [L·B, H] each step's total dh, dcs
    A *carry_c = nullptr, *carry_h = nullptr, *cs_prev_grad_cot = nullptr;  // [B, H]
    A* peep_terms = nullptr;        // [L·B, 3H] (use_peephole only)
    A* ones = nullptr;              // [L·B]
    A* peep_sums = nullptr;         // [3H] (use_peephole only)
  };
  static BackwardGradScratch CarveBackwardGrad(ScratchCarver& c, const LstmDims& d,
                                               const LstmAttrs& at, int64_t L) {
    BackwardGradScratch s;
    if (!Runs(d, L)) return s;
    const int64_t B = d.batch, I = d.input, H = d.cell, G = 4 * H, rows = L * B;
    const int64_t step = B * H, seq = L * step;
    auto staged = [&](int64_t n) { return kConvert ? c.Take<A>(n) : nullptr; };
    s.blas = c.TakeBytes(Backend::kBlasWorkspaceBytes);
    s.x = staged(rows * I);
    s.cs_prev = staged(step);
    s.h_prev = staged(step);
    s.w = staged((I + H) * G);
    s.b = staged(G);
    for (int k = 0; k < 7; ++k) {
      s.act[k] = staged(seq);
      s.og[k] = staged(seq);
      s.r_act[k] = staged(seq);
      s.r_og[k] = staged(seq);
    }
    s.cot_x = staged(rows * I);
    s.cot_cs_prev = staged(step);
    s.cot_h_prev = staged(step);
    s.cot_w = staged((I + H) * G);
    s.cot_b = staged(G);
    s.r_x = staged(rows * I);
    s.r_cs_prev = staged(step);
    s.r_h_prev = staged(step);
    s.r_w = staged((I + H) * G);
    if (at.use_peephole) {
      s.peep = c.Take<A>(3 * H);
      s.cot_peep = c.Take<A>(3 * H);
      s.peep_terms = c.Take<A>(rows * 3 * H);
      s.peep_sums = c.Take<A>(3 * H);
    }
    s.dgates = c.Take<A>(rows * G);
    s.dgates_cot = c.Take<A>(rows * G);
    s.dh_seq = c.Take<A>(seq);
    s.dcs_seq = c.Take<A>(seq);
    s.carry_c = c.Take<A>(step);
    s.carry_h = c.Take<A>(step);
    s.cs_prev_grad_cot = c.Take<A>(step);
    s.ones = c.Take<A>(rows);
    return s;
  }
  static size_t BackwardGradScratchBytes(const LstmDims& d, const LstmAttrs& at, int64_t L) {
    ScratchCarver c(nullptr);
    CarveBackwardGrad(c, d, at, L);
    return c.Bytes();
  }

  static size_t ForwardScratchBytes(const LstmDims& d, const LstmAttrs& at, int64_t L) {
    ScratchCarver c(nullptr);
    CarveForward(c, d, at, L);
    return c.Bytes();
  }
  static size_t BackwardScratchBytes(const LstmDims& d, const LstmAttrs& at, int64_t L) {
    ScratchCarver c(nullptr);
    CarveBackward(c, d, at, L);
    return c.Bytes();
  }
  static size_t CellBackwardScratchBytes(const LstmDims& d, const LstmAttrs& at) {
    ScratchCarver c(nullptr);
    CarveCellBackward(c, d, at);
    return c.Bytes();
  }

  // ---------------------------------------------------------------------------------------
  // BlockLSTM / BlockLSTMV2 / LSTMBlockCell (dims.time = 1).
  // ---------------------------------------------------------------------------------------
  static cudaError_t Forward(Backend& be, const LstmDims& d, const LstmAttrs& at, int64_t L,
                             const LstmInputs<T>& in, const LstmActivations<T*>& out,
                             void* scratch) {
    const int64_t B = d.batch, I = d.input, H = d.cell, G = 4 * H, step = B * H;
    if (L < 0 || L > d.time) return cudaErrorInvalidValue;

    // Steps past seq_len_max are zero in every output.
    const int64_t tail = (d.time - L) * step;
    if (tail > 0) {
      TF_LSTM_GPU_RETURN_IF_ERROR(
          be.ForEach(7 * tail, lstm::ZeroOutputsFn<T>{AtStep(out, L, step), tail}));
    }
    if (!Runs(d, L)) return cudaSuccess;

    ScratchCarver carver(scratch);
    const ForwardScratch s = CarveForward(carver, d, at, L);
    be.SetBlasWorkspace(s.blas);
    const T* w_x = in.w;          // rows [0, I) multiply x
    const T* w_h = in.w + I * G;  // rows [I, I+H) multiply h

    // Input projection of every step at once (T operands, A result).
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, L * B, G, I, in.x, w_x, false, s.xw));

    // The clamp bound is the attr rounded to T first (as the CPU kernel); forget_bias is not.
    const A forget_bias = static_cast<A>(at.forget_bias);
    const A cell_clip = Cast<A>(Cast<T>(at.cell_clip));
    const bool clip = at.cell_clip > 0;
    const GateBlocks blk = BlocksOf(at.layout);
    for (int64_t t = 0; t < L; ++t) {
      // The state the step multiplies is the stored h (rounded to T), as on the CPU.
      const T* h_state = t == 0 ? in.h_prev : out.h + (t - 1) * step;
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, B, G, H, h_state, w_h, false, s.rec));
      const T* cs_prev = t == 0 ? in.cs_prev : out.cs + (t - 1) * step;
      const LstmActivations<T*> out_t = AtStep(out, t, step);
      const A* xw_t = s.xw + t * B * G;
      TF_LSTM_GPU_RETURN_IF_ERROR(
          WithFlags(at.use_peephole, clip, [&](auto peephole, auto clip_c) {
            return be.ForEach(
                step, lstm::ForwardStepFn<T, A, MathFor<T>, decltype(peephole)::value,
                                          decltype(clip_c)::value>{
                          H, blk, forget_bias, cell_clip, xw_t, s.rec, in.b, cs_prev, in.wci,
                          in.wcf, in.wco, out_t});
          }));
    }
    return cudaSuccess;
  }

  // ---------------------------------------------------------------------------------------
  // BlockLSTMGrad(V2) / BlockLSTMFullGrad. Writes every gradient (peephole ones zero without
  // use_peephole).
  // ---------------------------------------------------------------------------------------
  static cudaError_t Backward(Backend& be, const LstmDims& d, const LstmAttrs& at, int64_t L,
                              const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                              const LstmActivations<const T*>& og,
                              const LstmInputGrads<T>& grads, void* scratch) {
    const int64_t B = d.batch, I = d.input, H = d.cell, G = 4 * H, step = B * H;
    const int64_t rows = L * B;
    if (L < 0 || L > d.time) return cudaErrorInvalidValue;
    const T zero = Cast<T>(0.0f);

    // Steps at or past seq_len_max do not influence the outputs: their x_grad is zero.
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, grads.x + rows * I, (d.time - L) * B * I, zero));
    // The peephole gradients are zero without use_peephole, or when nothing runs.
    const bool runs = Runs(d, L);
    if (!at.use_peephole || !runs) {
      TF_LSTM_GPU_RETURN_IF_ERROR(FillPeepholes(be, grads.wci, grads.wcf, grads.wco, H));
    }
    if (!runs) {
      // Nothing ran (or nothing has size): every remaining gradient is zero.
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, grads.x, rows * I, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, grads.cs_prev, step, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, grads.h_prev, step, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, grads.w, (I + H) * G, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, grads.b, G, zero));
      return cudaSuccess;
    }

    ScratchCarver carver(scratch);
    const BackwardScratch s = CarveBackward(carver, d, at, L);
    be.SetBlasWorkspace(s.blas);
    // GEMM operands in T (see Precision above); db and the peepholes sum the A dgates.
    const T* w_x = in.w;          // rows [0, I) multiply x
    const T* w_h = in.w + I * G;  // rows [I, I+H) multiply h
    const T* dgates = GemmDgates(s);

    // Reverse sweep: only the element-wise step and dgates_t·Whᵀ are on the sequential path.
    // Nothing is carried into the last step (nullptr carries read as zero).
    const GateBlocks blk = BlocksOf(at.layout);
    const bool direct = og.i != nullptr || og.f != nullptr || og.o != nullptr ||
                        og.ci != nullptr || og.co != nullptr;
    for (int64_t t = L - 1; t >= 0; --t) {
      const T* cs_prev = t == 0 ? in.cs_prev : act.cs + (t - 1) * step;
      const bool first = t == L - 1;
      TF_LSTM_GPU_RETURN_IF_ERROR(
          WithFlags(at.use_peephole, direct, [&](auto peephole, auto direct_c) {
            return be.ForEach(
                step,
                lstm::BackwardStepFn<T, A, decltype(peephole)::value, decltype(direct_c)::value>{
                    H, blk, in.wci, in.wcf, in.wco, AtStep(act, t, step), cs_prev,
                    AtStep(og, t, step), first ? nullptr : s.dc, first ? nullptr : s.dh,
                    s.dgates + t * B * G, s.dc, s.dgates_lo ? s.dgates_lo + t * B * G : nullptr,
                    nullptr});
          }));
      TF_LSTM_GPU_RETURN_IF_ERROR(
          Gemm(be, false, true, B, H, G, dgates + t * B * G, w_h, false, s.dh));
    }
    TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(s.dc), grads.cs_prev, step));
    TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(s.dh), grads.h_prev, step));

    // Whole-sequence products: dWx = xᵀ·dgates, dWh = [h_prev; h_0..h_{L-2}]ᵀ·dgates,
    // dx = dgates·Wxᵀ, db = 1ᵀ·dgates (16-bit: into A scratch, rounded below).
    A* dw = OutOrScratch(grads.w, s.dw);
    A* dw_h = dw + I * G;
    A* dx = OutOrScratch(grads.x, s.dx);
    A* db = OutOrScratch(grads.b, s.db);
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, true, false, I, G, rows, in.x, dgates, false, dw));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, true, false, H, G, B, in.h_prev, dgates, false, dw_h));
    TF_LSTM_GPU_RETURN_IF_ERROR(
        Gemm(be, true, false, H, G, (L - 1) * B, act.h, dgates + B * G, true, dw_h));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, true, rows, I, G, dgates, w_x, false, dx));
    // db as a GEMM with a ones vector: deterministic, no atomics.
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, s.ones, rows, A(1)));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, 1, G, rows, static_cast<const A*>(s.ones),
                                     static_cast<const A*>(s.dgates), false, db));
    if constexpr (kConvert) {
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(s.dx), grads.x, rows * I));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(s.dw), grads.w, (I + H) * G));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(s.db), grads.b, G));
    }
    if (at.use_peephole) {
      TF_LSTM_GPU_RETURN_IF_ERROR(PeepholeGrads(be, rows, B, H, blk, s.dgates, in.cs_prev,
                                                act.cs, s.partial, grads.wci, grads.wcf,
                                                grads.wco));
    }
    return cudaSuccess;
  }

  // ---------------------------------------------------------------------------------------
  // BlockLSTMFullGradGrad (docs/block_lstm.md §7.2): the gradient of Backward (with every
  // output gradient) w.r.t. all its inputs for the cotangents `cot` of its results. Sweep 1
  // runs the backward again keeping each step's dgates and total dh, dcs; sweep 2 runs its
  // adjoint forward in time (the [B,H]x[H,4H] product per step); then whole-sequence products.
  // Results at steps >= seq_len_max and b's are zero.
  // ---------------------------------------------------------------------------------------
  static cudaError_t BackwardGrad(Backend& be, const LstmDims& d, const LstmAttrs& at, int64_t L,
                                  const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                                  const LstmActivations<const T*>& og,
                                  const LstmInputGrads<const T>& cot,
                                  const LstmBackwardGrads<T>& grads, void* scratch) {
    const int64_t B = d.batch, I = d.input, H = d.cell, G = 4 * H, step = B * H;
    const int64_t rows = L * B, seq = L * step;
    if (L < 0 || L > d.time) return cudaErrorInvalidValue;
    const T zero = Cast<T>(0.0f);
    T* const act_out[7] = {grads.act.i, grads.act.cs, grads.act.f, grads.act.o,
                           grads.act.ci, grads.act.co, grads.act.h};
    T* const og_out[7] = {grads.out_grads.i, grads.out_grads.cs, grads.out_grads.f,
                          grads.out_grads.o, grads.out_grads.ci, grads.out_grads.co,
                          grads.out_grads.h};
    const LstmInputGrads<T>& gi = grads.inputs;

    // Steps at or past seq_len_max take part in nothing: their results are zero; so is b's.
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, gi.x + rows * I, (d.time - L) * B * I, zero));
    for (int k = 0; k < 7; ++k) {
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, act_out[k] + seq, (d.time - L) * step, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, og_out[k] + seq, (d.time - L) * step, zero));
    }
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, gi.b, G, zero));
    if (!at.use_peephole || !Runs(d, L)) {
      TF_LSTM_GPU_RETURN_IF_ERROR(FillPeepholes(be, gi.wci, gi.wcf, gi.wco, H));
    }
    if (!Runs(d, L)) {
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, gi.x, rows * I, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, gi.cs_prev, step, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, gi.h_prev, step, zero));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, gi.w, (I + H) * G, zero));
      for (int k = 0; k < 7; ++k) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, act_out[k], seq, zero));
        TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, og_out[k], seq, zero));
      }
      return cudaSuccess;
    }

    ScratchCarver carver(scratch);
    const BackwardGradScratch s = CarveBackwardGrad(carver, d, at, L);
    be.SetBlasWorkspace(s.blas);

    // Every input in A.
    const A *x, *cs_prev, *h_prev, *w, *cot_x, *cot_cs_prev, *cot_h_prev, *cot_w, *cot_b;
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, in.x, rows * I, s.x, &x));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, in.cs_prev, step, s.cs_prev, &cs_prev));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, in.h_prev, step, s.h_prev, &h_prev));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, in.w, (I + H) * G, s.w, &w));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, cot.x, rows * I, s.cot_x, &cot_x));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, cot.cs_prev, step, s.cot_cs_prev, &cot_cs_prev));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, cot.h_prev, step, s.cot_h_prev, &cot_h_prev));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, cot.w, (I + H) * G, s.cot_w, &cot_w));
    TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, cot.b, G, s.cot_b, &cot_b));
    const A* peep[3] = {nullptr, nullptr, nullptr};
    const A* cot_peep[3] = {nullptr, nullptr, nullptr};
    if (at.use_peephole) {  // three [H] vectors side by side in scratch
      const T* const peep_in[3] = {in.wci, in.wcf, in.wco};
      const T* const cot_peep_in[3] = {cot.wci, cot.wcf, cot.wco};
      for (int k = 0; k < 3; ++k) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, peep_in[k], s.peep + k * H, H));
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, cot_peep_in[k], s.cot_peep + k * H, H));
        peep[k] = s.peep + k * H;
        cot_peep[k] = s.cot_peep + k * H;
      }
    }
    const T* const act_in[7] = {act.i, act.cs, act.f, act.o, act.ci, act.co, act.h};
    const T* const og_in[7] = {og.i, og.cs, og.f, og.o, og.ci, og.co, og.h};
    const A* a_seq[7];
    const A* og_seq[7];
    A* r_act_seq[7];
    A* r_og_seq[7];
    for (int k = 0; k < 7; ++k) {
      TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, act_in[k], seq, s.act[k], &a_seq[k]));
      TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, og_in[k], seq, s.og[k], &og_seq[k]));
      r_act_seq[k] = OutOrScratch(act_out[k], s.r_act[k]);
      r_og_seq[k] = OutOrScratch(og_out[k], s.r_og[k]);
    }
    const LstmActivations<const A*> a = SetOf(a_seq), o = SetOf(og_seq);
    const LstmActivations<A*> r_act = SetOf(r_act_seq), r_og = SetOf(r_og_seq);
    A* r_x = OutOrScratch(gi.x, s.r_x);
    A* r_cs_prev = OutOrScratch(gi.cs_prev, s.r_cs_prev);
    A* r_h_prev = OutOrScratch(gi.h_prev, s.r_h_prev);
    A* r_w = OutOrScratch(gi.w, s.r_w);
    const A* w_h = w + I * G;
    const GateBlocks blk = BlocksOf(at.layout);
    auto state_before = [&](int64_t t) { return t == 0 ? cs_prev : a.cs + (t - 1) * step; };

    // 1. The backward again, keeping every step's dgates and total dh, dcs.
    for (int64_t t = L - 1; t >= 0; --t) {
      A* dg = s.dgates + t * B * G;
      TF_LSTM_GPU_RETURN_IF_ERROR(WithFlags(at.use_peephole, [&](auto peephole) {
        return be.ForEach(step, lstm::BackwardGradSweepFn<A, decltype(peephole)::value>{
                                    H, blk, peep[0], peep[1], peep[2], AtStep(a, t, step),
                                    AtStep(o, t, step), state_before(t), s.carry_h, s.carry_c,
                                    t == L - 1, dg, s.dh_seq + t * step, s.dcs_seq + t * step});
      }));
      if (t > 0) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, true, B, H, G, static_cast<const A*>(dg),
                                         w_h, false, s.carry_h));
      }
    }

    // 2. The adjoint sweep, forward in time. dgates' cotangent has shares from x_grad =
    // dgates·Wxᵀ (cot_x·Wx), from w_grad = Σ [x_t; h_{t-1}]ᵀ·dgates_t ([x_t; h_{t-1}]·cot_w),
    // both whole-sequence products, and from the carried h (its cotangent·Wh, per step).
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, rows, G, I, cot_x, w, false, s.dgates_cot));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, rows, G, I, x, cot_w, true, s.dgates_cot));
    TF_LSTM_GPU_RETURN_IF_ERROR(
        Gemm(be, false, false, B, G, H, h_prev, cot_w + I * G, true, s.dgates_cot));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, rows - B, G, H, a.h, cot_w + I * G, true,
                                     s.dgates_cot + B * G));
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, r_act.cs, seq, A(0)));
    TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, cot_cs_prev, s.cs_prev_grad_cot, step));
    for (int64_t t = 0; t < L; ++t) {
      // The cotangent of the h gradient carried into step t: h_prev_grad's at t = 0, else step
      // t-1's total dh's (just written as r_og.h).
      const A* carry_h_cot = t == 0 ? cot_h_prev : r_og.h + (t - 1) * step;
      A* dg_cot = s.dgates_cot + t * B * G;
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, B, G, H, carry_h_cot, w_h, true, dg_cot));
      TF_LSTM_GPU_RETURN_IF_ERROR(WithFlags(at.use_peephole, [&](auto peephole) {
        return be.ForEach(
            step, lstm::BackwardGradAdjointFn<A, decltype(peephole)::value>{
                      H, blk, peep[0], peep[1], peep[2], cot_peep[0], cot_peep[1], cot_peep[2],
                      cot_b, AtStep(a, t, step), AtStep(o, t, step), state_before(t),
                      s.dh_seq + t * step, s.dcs_seq + t * step, dg_cot, s.cs_prev_grad_cot,
                      t == 0 ? r_cs_prev : r_act.cs + (t - 1) * step, t == 0,
                      AtStep(r_act, t, step), AtStep(r_og, t, step),
                      s.peep_terms == nullptr ? nullptr : s.peep_terms + t * B * 3 * H});
      }));
    }

    // 3. The products' other shares: w from x_grad and the carried h (w_grad's transposes), x
    // and h from w_grad.
    const A* dgates = s.dgates;
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, true, false, I, G, rows, cot_x, dgates, false, r_w));
    A* r_w_h = r_w + I * G;
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, true, false, H, G, B, cot_h_prev, dgates, false, r_w_h));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, true, false, H, G, rows - B,
                                     static_cast<const A*>(r_og.h), dgates + B * G, true, r_w_h));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, true, rows, I, G, dgates, cot_w, false, r_x));
    TF_LSTM_GPU_RETURN_IF_ERROR(
        Gemm(be, false, true, B, H, G, dgates, cot_w + I * G, false, r_h_prev));
    TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, true, rows - B, H, G, dgates + B * G,
                                     cot_w + I * G, false, r_act.h));
    // the last step's h feeds no product
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, r_act.h + seq - step, step, A(0)));
    if (at.use_peephole) {  // Σ over every row of the per-element shares, as a GEMM with ones
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, s.ones, rows, A(1)));
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, 1, 3 * H, rows,
                                       static_cast<const A*>(s.ones),
                                       static_cast<const A*>(s.peep_terms), false, s.peep_sums));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(s.peep_sums), gi.wci, H));
      TF_LSTM_GPU_RETURN_IF_ERROR(
          Convert(be, static_cast<const A*>(s.peep_sums + H), gi.wcf, H));
      TF_LSTM_GPU_RETURN_IF_ERROR(
          Convert(be, static_cast<const A*>(s.peep_sums + 2 * H), gi.wco, H));
    }
    if constexpr (kConvert) {  // each result rounded to T once
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(r_x), gi.x, rows * I));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(r_cs_prev), gi.cs_prev, step));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(r_h_prev), gi.h_prev, step));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(r_w), gi.w, (I + H) * G));
      for (int k = 0; k < 7; ++k) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(r_act_seq[k]), act_out[k], seq));
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, static_cast<const A*>(r_og_seq[k]), og_out[k], seq));
      }
    }
    return cudaSuccess;
  }

  // ---------------------------------------------------------------------------------------
  // LSTMBlockCellGrad: cs_prev_grad [B,H], dgates [B,4H] and, with use_peephole only,
  // wc*_grad [H]. Element-wise only; `og` as for Backward (h is the cell's h_grad).
  // Without use_peephole the peephole gradients are NOT written: the op does not validate the
  // peephole lengths then (as TF), so the buffers may be shorter than H; the caller zero-fills
  // them with their own shape (as it does for the CPU functor).
  // ---------------------------------------------------------------------------------------
  static cudaError_t CellBackward(Backend& be, const LstmDims& d, const LstmAttrs& at,
                                  const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                                  const LstmActivations<const T*>& og, T* cs_prev_grad,
                                  T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad,
                                  void* scratch) {
    const int64_t B = d.batch, H = d.cell, step = B * H;
    if (step <= 0) {
      if (!at.use_peephole) return cudaSuccess;
      return FillPeepholes(be, wci_grad, wcf_grad, wco_grad, H);
    }
    ScratchCarver carver(scratch);
    const CellBackwardScratch s = CarveCellBackward(carver, d, at);
    const GateBlocks blk = BlocksOf(at.layout);
    const bool direct = og.i != nullptr || og.f != nullptr || og.o != nullptr ||
                        og.ci != nullptr || og.co != nullptr;
    // The peephole reduction reads dgates in A: the output itself when T == A, else a copy.
    A* dgates_acc = nullptr;
    A* dc_acc = nullptr;
    T* dgates_t = dgates;
    T* dc_t = cs_prev_grad;
    if constexpr (kConvert) {
      dgates_acc = s.dgates;  // nullptr without use_peephole: not needed
    } else {
      dgates_acc = dgates;
      dc_acc = cs_prev_grad;
      dgates_t = nullptr;
      dc_t = nullptr;
    }
    TF_LSTM_GPU_RETURN_IF_ERROR(
        WithFlags(at.use_peephole, direct, [&](auto peephole, auto direct_c) {
          return be.ForEach(
              step,
              lstm::BackwardStepFn<T, A, decltype(peephole)::value, decltype(direct_c)::value>{
                  H, blk, in.wci, in.wcf, in.wco, act, in.cs_prev, og, nullptr, nullptr,
                  dgates_acc, dc_acc, dgates_t, dc_t});
        }));
    if (at.use_peephole) {
      TF_LSTM_GPU_RETURN_IF_ERROR(PeepholeGrads(be, B, B, H, blk, dgates_acc, in.cs_prev, act.cs,
                                                s.partial, wci_grad, wcf_grad, wco_grad));
    }
    return cudaSuccess;
  }

 private:
  // The seven per-step sequences of an array in LstmActivations' order (i, cs, f, o, ci, co, h).
  template <typename P>
  static LstmActivations<P> SetOf(P const (&p)[7]) {
    return {p[0], p[1], p[2], p[3], p[4], p[5], p[6]};
  }

  // Zeroes the three [H] peephole gradients.
  static cudaError_t FillPeepholes(Backend& be, T* wci, T* wcf, T* wco, int64_t H) {
    const T zero = Cast<T>(0.0f);
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, wci, H, zero));
    TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, wcf, H, zero));
    return Fill(be, wco, H, zero);
  }

  // The dgates the GEMMs read: the A array itself when T == A, else its copy rounded to T.
  static const T* GemmDgates(const BackwardScratch& s) {
    if constexpr (kConvert) {
      return s.dgates_lo;
    } else {
      return s.dgates;
    }
  }

  // The output itself when T == A (written in place), else the A scratch.
  static A* OutOrScratch(T* out, A* scratch) {
    if constexpr (kConvert) {
      return scratch;
    } else {
      (void)scratch;
      return out;
    }
  }

  // wci_grad = Σ δi ⊙ cs_prev, wcf_grad = Σ δf ⊙ cs_prev, wco_grad = Σ δo ⊙ cs over `rows`
  // dgates rows (row r pairs with cs_prev row r < B ? cs_prev[r] : cs[r - B]), two stages.
  static cudaError_t PeepholeGrads(Backend& be, int64_t rows, int64_t B, int64_t H,
                                   GateBlocks blk, const A* dgates, const T* cs_prev,
                                   const T* cs, A* partial, T* wci, T* wcf, T* wco) {
    const ColumnChunking chunking(rows);
    TF_LSTM_GPU_RETURN_IF_ERROR(
        be.ForEach(chunking.chunks * 3 * H,
                   lstm::PeepholePartialFn<T, A>{rows, B, H, chunking.rows_per_chunk, blk,
                                                 dgates, cs_prev, cs, partial}));
    return be.ForEach(3 * H, lstm::PeepholeFinishFn<T, A>{chunking.chunks, H, partial, wci, wcf,
                                                           wco});
  }
};

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_BLOCK_LSTM_GPU_ENGINE_H_
