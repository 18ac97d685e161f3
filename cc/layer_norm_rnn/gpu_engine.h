// The LayerNorm GRU and SimpleRNN's GPU engine (docs/layer_norm_rnn.md), framework-free and
// templated on a Backend (cc/gpu/common.h): CudaBackend runs it on a stream
// (layer_norm_rnn_launchers.cu.cc, the gpu_launchers.h launchers), HostBackend runs the very same
// calls on the CPU (the self-test's "host" backend, part of the test suite). Its semantics and
// reserve space are the CPU engine's (cpu_engine.h): the cells around the norms are
// cc/core/layer_norm_rnn_types.h's, the norms' per-element steps cc/core/layer_norm.h's, and the
// workspace has the same header and layout (LayerNormRnnHeader, LayerNormRnnLayout), so a reserve
// space means the same on every device.
//
// The norms reduce over whole rows (the GRU's 3H gates of x·W and of h·R, the SimpleRNN's H units
// of x·W + h·R), so each row gets a thread block (Backend::Blocks) that sums across its threads
// (cc/gpu/layer_norm_common.h, shared with the LayerNorm LSTM's engine):
//   forward   x·W for all T·B rows is one GEMM (the GRU then normalises every row, a block per
//             row); per step one GEMM h_{t-1}(⊙ mask)·R for all B rows (the SimpleRNN's added onto
//             its x·W) and one kernel, a block per row, for the norm, the cell, the output and
//             zoneout;
//   backward  per step (in reverse) one kernel, a block per row, for the cell's backward and the
//             norm's, then one GEMM d(h·R)·Rᵀ for dL/dh_{t-1}; after the loop dR, dW and dx are
//             GEMMs over the whole sequence, the GRU's x·W norm backward one kernel (block per
//             row), and the biases' and γs' gradients column sums in a fixed order (ColumnSums:
//             no atomics, deterministic).
// Everything is computed in A = Acc<T> (float, double for double), the GEMMs included (their
// operands are what a norm reads right after); inputs and weights are converted once, every
// output is rounded once.
// Scratch: one caller-provided block carved by Carve*(), the same function for the size query
// (base == nullptr) and the run, so size and use never disagree.
#ifndef TF_LSTM_OPS_CC_LAYER_NORM_RNN_GPU_ENGINE_H_
#define TF_LSTM_OPS_CC_LAYER_NORM_RNN_GPU_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cc/core/layer_norm.h"
#include "cc/core/layer_norm_rnn_types.h"
#include "cc/core/precision.h"
#include "cc/gpu/common.h"
#include "cc/gpu/layer_norm_common.h"
#include "cc/gpu/reductions.h"
#include "cc/gpu/rnn_inputs.h"
#include "cc/layer_norm_rnn/gpu_launchers.h"

namespace tf_lstm_ops {
namespace gpu {
namespace lnr_detail {

using ln_common::Carry;
using ln_common::RowGradSums;
using ln_common::RowStats;

// ---- forward -----------------------------------------------------------------------------------

// What a step writes of row b whichever the cell: the state after zoneout's blend, the output and
// the next step's GEMM operand; a row past its length holds its state and outputs zero.
template <typename A, typename T>
struct StepState {
  const A* h_prev;  // [B, H]
  A* h_out;         // step t's states in the workspace [B, H]
  T* y;             // the output, in the run's layout
  A* operand;       // the next step's GEMM operand h ⊙ mask [B, H], or null (no mask)
  const A* mask;    // [B, H] or null
  const int32_t* len;
  int64_t t, time, batch, H;
  bool time_major;
  ZoneoutView<A> zone_h;  // step t's [B, H]

  TF_LSTM_HOST_DEVICE bool Ran(int64_t b) const { return t < len[b]; }
  TF_LSTM_HOST_DEVICE int64_t OutputIndex(int64_t b, int64_t j) const {
    return (time_major ? t * batch + b : b * time + t) * H + j;
  }
  TF_LSTM_HOST_DEVICE void Write(int64_t b, int64_t j, A h, A out) const {
    const int64_t i = b * H + j;
    h_out[i] = h;
    y[OutputIndex(b, j)] = Cast<T>(out);
    if (operand != nullptr) operand[i] = MaskedOperand(h, mask[i]);
  }
  // Unit j from the cell's new state h̃.
  TF_LSTM_HOST_DEVICE void Store(int64_t b, int64_t j, A h_new) const {
    const A h = zone_h.Blend(b * H + j, h_new, h_prev[b * H + j]);
    Write(b, j, h, h);
  }
  TF_LSTM_HOST_DEVICE void Hold(int64_t b, int64_t j) const {
    Write(b, j, h_prev[b * H + j], A(0));
  }
};

// One GRU step t, row b per block: the h·R norm's statistics (parts 0-3), then per unit U =
// LN(h·R)·γh + b_h (in place: the thread's unit j of each gate is its own from here), the cell
// and the state (part 4). Rows past their length save zeros (the backward's sums read them).
template <typename A, typename T, typename Math>
struct GruStepFn {
  static constexpr int kParts = RowStats<A>::kParts + 1;
  LayerNormRnnModel m;
  RowStats<A> stats;  // n = 3H
  StepState<A, T> state;
  const A* X;  // step t's input side LN(x·W)·γx + b_x [B, 3H]
  A* U;        // h_{t-1}(⊙ mask)·R [B, 3H], becoming the recurrent side
  const A *gamma_h, *bias_h;
  A* saved;          // [B, 4H]: the workspace's (training) or scratch
  A *xhat_h, *rstd;  // the workspace's step-t rows ([B, 3H], [B][2]), or null (inference)

  TF_LSTM_HOST_DEVICE void operator()(int64_t b, int thread, int part, void* shared) const {
    const int64_t H = state.H, G = stats.n, threads = stats.sums.threads;
    if (!state.Ran(b)) {
      if (part != 0) return;
      for (int64_t j = thread; j < H; j += threads) state.Hold(b, j);
      if (xhat_h == nullptr) return;
      for (int64_t k = thread; k < G; k += threads) xhat_h[b * G + k] = A(0);
      for (int64_t k = thread; k < 4 * H; k += threads) saved[b * 4 * H + k] = A(0);
      if (thread == 0) rstd[b * 2 + 1] = A(0);
      return;
    }
    A* U_b = U + b * G;
    if (part < RowStats<A>::kParts) {
      stats.Part(part, U_b, thread, shared);
      return;
    }
    const A mu = stats.Mu(shared), r = stats.Rstd(shared);
    for (int64_t j = thread; j < H; j += threads) {
      for (int64_t k = j; k < G; k += H) {
        const A x = LayerNormXhat(U_b[k], mu, r);
        if (xhat_h != nullptr) xhat_h[b * G + k] = x;
        U_b[k] = x * gamma_h[k] + bias_h[k];
      }
      state.Store(b, j,
                  LayerNormGruForwardAt<A, Math>(m, X + b * G, U_b, j, state.h_prev[b * H + j],
                                                 saved + b * 4 * H));
    }
    if (thread == 0 && rstd != nullptr) rstd[b * 2 + 1] = r;
  }
};

// One SimpleRNN step t, row b per block: the statistics of v = x·W + h_{t-1}(⊙ mask)·R (parts
// 0-3), then h̃ = act(x̂·γ + b) and the state (part 4). The second r of a row (there is no h·R
// norm) is kept 0, as rows past their length keep all theirs.
template <typename A, typename T, typename Math>
struct SimpleStepFn {
  static constexpr int kParts = RowStats<A>::kParts + 1;
  RowStats<A> stats;  // n = H
  StepState<A, T> state;
  RnnActivation activation;
  const A* v;  // step t's [B, H]
  const A *gamma, *bias;
  A *xhat, *rstd;  // the workspace's step-t rows ([B, H], [B][2]), or null (inference)

  TF_LSTM_HOST_DEVICE void operator()(int64_t b, int thread, int part, void* shared) const {
    const int64_t H = state.H, threads = stats.sums.threads;
    const A* v_b = v + b * H;
    if (!state.Ran(b)) {
      if (part != 0) return;
      for (int64_t j = thread; j < H; j += threads) {
        state.Hold(b, j);
        if (xhat != nullptr) xhat[b * H + j] = A(0);
      }
      if (thread == 0 && rstd != nullptr) rstd[b * 2] = rstd[b * 2 + 1] = A(0);
      return;
    }
    if (part < RowStats<A>::kParts) {
      stats.Part(part, v_b, thread, shared);
      return;
    }
    const A mu = stats.Mu(shared), r = stats.Rstd(shared);
    for (int64_t j = thread; j < H; j += threads) {
      const A x = LayerNormXhat(v_b[j], mu, r);
      if (xhat != nullptr) xhat[b * H + j] = x;
      const A a = LayerNormSimplePreActivation(x, gamma[j], bias[j]);
      state.Store(b, j, Activate<A, Math>(activation, a));
    }
    if (thread == 0 && rstd != nullptr) {
      rstd[b * 2] = r;
      rstd[b * 2 + 1] = A(0);
    }
  }
};

// ---- backward ----------------------------------------------------------------------------------

// What a step's backward reads and writes of dL/dh whichever the cell.
template <typename A>
struct BackState {
  Carry<A> carry;
  bool has_next;  // step t + 1 ran (carry holds its GEMM)
  const A* dy;    // step t's output gradient [B, H]
  A* dh;          // the carried state gradient [B, H]
  A* direct;      // [B, H]: step t's terms of dL/dh_{t-1} besides R's (Carry), or null: none
  const int32_t* len;
  int64_t t;
  ZoneoutView<A> zone_h;  // step t's [B, H]
  TF_LSTM_HOST_DEVICE bool Ran(int64_t b) const { return t < len[b]; }
  // dL/dh_t at element i of row b (which ran step t), the carried gradient first brought up to
  // date from step t + 1's GEMM.
  TF_LSTM_HOST_DEVICE A Total(int64_t b, int64_t i) const {
    if (has_next && t + 1 < len[b]) dh[i] = carry.At(i);
    return dh[i] + dy[i];
  }
};

// One GRU step t in reverse, row b per block: the cell's backward (part 0: the gradients dX of the
// input side and dU of the recurrent side, and h_{t-1}'s direct terms), then the h·R norm's
// (parts 1-3: dU to d(h·R)). Rows past their length write zeros.
template <typename A, typename Math>
struct GruBackStepFn {
  static constexpr int kParts = 1 + RowGradSums<A>::kParts + 1;
  LayerNormRnnModel m;
  RowGradSums<A> sums;  // n = 3H
  BackState<A> state;
  const A *saved, *xhat_h, *rstd;  // the workspace's step-t rows
  const A* h_prev;                 // [B, H]
  const A* gamma_h;
  A *dX, *dU, *dah;  // step t's rows [B, 3H]
  int64_t H;

  TF_LSTM_HOST_DEVICE void operator()(int64_t b, int thread, int part, void* shared) const {
    const int64_t G = sums.n, threads = sums.sums.threads;
    A* dX_b = dX + b * G;
    A* dU_b = dU + b * G;
    const A* xhat_b = xhat_h + b * G;
    if (!state.Ran(b)) {  // the row did not run this step: its gradients pass through
      if (part == 0) {
        for (int64_t k = thread; k < G; k += threads) dX_b[k] = dU_b[k] = dah[b * G + k] = A(0);
      }
      return;
    }
    if (part == 0) {
      for (int64_t j = thread; j < H; j += threads) {
        const int64_t i = b * H + j;
        const A total = state.Total(b, i);
        const A blend = LayerNormGruBackwardAt<A, Math>(
            m, saved + b * 4 * H, j, h_prev[i], state.zone_h.ToNew(i, total), dX_b, dU_b);
        state.direct[i] = blend + state.zone_h.ToPrevious(i, total);
      }
    } else if (part < 1 + RowGradSums<A>::kParts) {
      sums.Part(part - 1, dU_b, gamma_h, xhat_b, thread, shared);
    } else {
      A* dah_b = dah + b * G;
      sums.ForEachGrad(dU_b, gamma_h, xhat_b, rstd[b * 2 + 1], thread, shared,
                       [&](int64_t k, A g) { dah_b[k] = g; });
    }
  }
};

// One SimpleRNN step t in reverse, row b per block: da = dL/da of a = x̂·γ + b (part 0, whose
// elements are the thread's own for the norm's sums), then the norm's backward (parts 1-2: da to
// dv = dL/d(x·W + h·R)). Rows past their length write zeros.
template <typename A, typename Math>
struct SimpleBackStepFn {
  static constexpr int kParts = RowGradSums<A>::kParts + 1;
  RowGradSums<A> sums;  // n = H
  BackState<A> state;
  RnnActivation activation;
  const A *xhat, *rstd;  // the workspace's step-t rows
  const A *gamma, *bias;
  A *da, *dv;  // step t's rows [B, H]

  TF_LSTM_HOST_DEVICE void operator()(int64_t b, int thread, int part, void* shared) const {
    const int64_t H = sums.n, threads = sums.sums.threads;
    A* da_b = da + b * H;
    const A* xhat_b = xhat + b * H;
    if (!state.Ran(b)) {
      if (part == 0) {
        for (int64_t j = thread; j < H; j += threads) da_b[j] = dv[b * H + j] = A(0);
      }
      return;
    }
    if (part == 0) {
      for (int64_t j = thread; j < H; j += threads) {
        const int64_t i = b * H + j;
        const A total = state.Total(b, i);
        if (state.direct != nullptr) state.direct[i] = state.zone_h.ToPrevious(i, total);
        const A a = LayerNormSimplePreActivation(xhat_b[j], gamma[j], bias[j]);
        da_b[j] = state.zone_h.ToNew(i, total) * ActivationSlope<A, Math>(activation, a);
      }
      sums.Part(0, da_b, gamma, xhat_b, thread, shared);
    } else if (part == 1) {
      sums.Part(1, da_b, gamma, xhat_b, thread, shared);
    } else {
      A* dv_b = dv + b * H;
      sums.ForEachGrad(da_b, gamma, xhat_b, rstd[b * 2], thread, shared,
                       [&](int64_t j, A g) { dv_b[j] = g; });
    }
  }
};

}  // namespace lnr_detail

// The engine: its scratch (carved alike for the size query and the run), Forward, Backward.
template <typename Backend, typename T>
struct LayerNormRnnEngine {
  using A = Acc<T>;
  using Math = MathFor<T>;  // σ and tanh as on the CPU: ExactMath for double, FastMath otherwise
  static constexpr int kWeights = 5;
  static constexpr bool kSame = std::is_same_v<T, A>;

  // ---- scratch -------------------------------------------------------------------------------

  // The weights' sizes, in LayerNormRnnWeights' order (a SimpleRNN has no gamma_h).
  static void WeightSizes(const LayerNormRnnModel& m, int64_t (&n)[kWeights]) {
    const int64_t I = m.input_size, H = m.num_units, G = m.gate_width();
    const int64_t sizes[kWeights] = {I * G, H * G, m.gru() ? 2 * G : H, G, m.gru() ? G : 0};
    for (int k = 0; k < kWeights; ++k) n[k] = sizes[k];
  }
  // What every pass converts alike (ln_common::InputStaging): the weights, x, h0, the mask and
  // zoneout.
  using InputStaging = ln_common::InputStaging<T, kWeights, 1>;
  static InputStaging TakeInputs(ScratchCarver* s, const LayerNormRnnModel& m,
                                 const LayerNormRnnRun& run) {
    int64_t n[kWeights];
    WeightSizes(m, n);
    return InputStaging::Take(s, run, n, m.input_size, m.num_units);
  }
  struct Inputs {
    LayerNormRnnWeights<A> w;
    const A *x, *h0, *mask;  // mask: null without one
    Zoneout<A> zoneout;
  };
  static cudaError_t ConvertInputs(const Backend& be, const LayerNormRnnRun& run,
                                   const InputStaging& staging, const T* x, const T* h0,
                                   const LayerNormRnnWeights<T>& w, Inputs* in) {
    typename InputStaging::Inputs st;
    TF_LSTM_GPU_RETURN_IF_ERROR(staging.Convert(
        be, run, {w.kernel, w.recurrent_kernel, w.bias, w.gamma_x, w.gamma_h}, x, {h0}, &st));
    const A* const* v = st.weights;
    *in = {{v[0], v[1], v[2], v[3], v[4]}, st.x, st.states[0], st.mask, st.zoneout};
    return cudaSuccess;
  }

  struct ForwardBuffers {
    void* blas;
    int32_t* len;
    InputStaging in;
    A* zx;       // x·W of every row [T·B, G]: the GRU's input side, the SimpleRNN's v
    A* rec;      // the GRU's step GEMM h·R [B, G] (the SimpleRNN's adds onto zx)
    A* operand;  // h ⊙ mask [B, H]
    A* saved;    // the GRU's cell values when not training [B, 4H] (training: the workspace's)
  };
  static ForwardBuffers CarveForward(void* base, const LayerNormRnnModel& m,
                                     const LayerNormRnnRun& run, size_t* bytes) {
    ScratchCarver s(base);
    ForwardBuffers f{};
    const int64_t B = run.batch, H = m.num_units, G = m.gate_width();
    f.blas = s.TakeBytes(Backend::kBlasWorkspaceBytes);
    f.len = s.Take<int32_t>(B);
    f.in = TakeInputs(&s, m, run);
    f.zx = s.Take<A>(run.time * B * G);
    f.rec = s.Take<A>(m.gru() ? B * G : 0);
    f.operand = s.Take<A>(run.recurrent_mask != nullptr ? B * H : 0);
    f.saved = s.Take<A>(m.gru() && !run.training ? B * 4 * H : 0);
    *bytes = s.Bytes();
    return f;
  }

  // The backward's per-row gradients, [T·B, G] each: of the x side's norm output (GRU: dX;
  // SimpleRNN: da, a = x̂·γ + b), of the h side's (GRU only: dU) and of the GEMMs' products
  // (GRU: d(h·R); SimpleRNN: d(x·W + h·R)).
  struct BackwardBuffers {
    void* blas;
    int32_t *flag, *len;
    InputStaging in;
    A *dy, *d_xn, *d_hn, *d_gemm, *dh, *carry, *direct, *h_prev_seq, *dx, *dkernel, *drecurrent;
    A* partial;  // ColumnSums'
  };
  static BackwardBuffers CarveBackward(void* base, const LayerNormRnnModel& m,
                                       const LayerNormRnnRun& run, size_t* bytes) {
    ScratchCarver s(base);
    BackwardBuffers b{};
    const int64_t B = run.batch, H = m.num_units, G = m.gate_width(), I = m.input_size;
    const int64_t rows = run.time * B;
    const bool direct_io = kSame && run.time_major;
    b.blas = s.TakeBytes(Backend::kBlasWorkspaceBytes);
    b.flag = s.Take<int32_t>(1);
    b.len = s.Take<int32_t>(B);
    b.in = TakeInputs(&s, m, run);
    b.dy = s.Take<A>(direct_io ? 0 : rows * H);
    b.d_xn = s.Take<A>(rows * G);
    b.d_hn = s.Take<A>(m.gru() ? rows * G : 0);
    b.d_gemm = s.Take<A>(rows * G);
    b.dh = s.Take<A>(B * H);
    b.carry = s.Take<A>(B * H);
    // (the GRU's blend always reaches h_{t-1} directly; the SimpleRNN only through zoneout)
    b.direct = m.gru() || run.zoneout_h.active() ? s.Take<A>(B * H) : nullptr;
    b.h_prev_seq = s.Take<A>(rows * H);
    b.dx = s.Take<A>(direct_io ? 0 : rows * I);
    b.dkernel = s.Take<A>(kSame ? 0 : I * G);
    b.drecurrent = s.Take<A>(kSame ? 0 : H * G);
    b.partial = s.Take<A>(ColumnChunking(rows).PartialSize(G));
    *bytes = s.Bytes();
    return b;
  }

  static size_t ForwardScratchBytes(const LayerNormRnnModel& m, const LayerNormRnnRun& run) {
    return ln_common::CarvedBytes(&CarveForward, m, run);
  }
  static size_t BackwardScratchBytes(const LayerNormRnnModel& m, const LayerNormRnnRun& run) {
    return ln_common::CarvedBytes(&CarveBackward, m, run);
  }

  static bool RunsNothing(const LayerNormRnnModel& m, const LayerNormRnnRun& run) {
    return run.time == 0 || run.batch == 0 || m.num_units == 0;
  }

  // The block sums of a row kernel over rows `width` wide, in two slots (one norm at a time).
  static BlockSums RowSums(int64_t width) { return BlockSums{RowThreads(width), 2}; }

  // ---- forward -------------------------------------------------------------------------------

  static cudaError_t Forward(Backend& be, const LayerNormRnnModel& m, const LayerNormRnnRun& run,
                             const T* x, const T* h0, const LayerNormRnnWeights<T>& weights, T* y,
                             T* h_last, uint8_t* workspace, void* scratch) {
    using namespace lnr_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, G = m.gate_width();
    const int64_t rows = T_ * B;
    TF_LSTM_GPU_RETURN_IF_ERROR(
        WriteReserveHeader(be, LayerNormRnnHeader(m, run, sizeof(T), sizeof(A)), workspace));
    if (RunsNothing(m, run)) return Convert(be, h0, h_last, B * H);  // the final state: h0
    size_t bytes;
    const ForwardBuffers f = CarveForward(scratch, m, run, &bytes);
    be.SetBlasWorkspace(f.blas);
    TF_LSTM_GPU_RETURN_IF_ERROR(UploadLengths(be, run, f.len));
    const LayerNormRnnLayout lay(m, run);
    A* ws = reinterpret_cast<A*>(workspace + sizeof(RnnReserveHeader));
    const bool kept = run.training;  // (else what only a backward reads is not kept: null)
    Inputs in;
    TF_LSTM_GPU_RETURN_IF_ERROR(ConvertInputs(be, run, f.in, x, h0, weights, &in));
    const LayerNormRnnWeights<A>& w = in.w;
    const double eps = m.epsilon;
    const BlockSums sums = RowSums(G);

    TF_LSTM_GPU_RETURN_IF_ERROR(
        Gemm(be, false, false, rows, G, m.input_size, in.x, w.kernel, false, f.zx));
    if (m.gru()) {  // the input side of every step: LN(x·W)·γx + b_x
      using InputNormFn = ln_common::InputNormFn<A>;
      TF_LSTM_GPU_RETURN_IF_ERROR(be.Blocks(
          rows, sums.threads, sums.SharedBytes(), InputNormFn::kParts,
          InputNormFn{{sums, 0, G, eps}, f.zx, kept ? ws + lay.xhat_x() : nullptr,
                      kept ? ws + lay.rstd() : nullptr, 2, w.gamma_x, w.bias, nullptr}));
    }
    if (in.mask != nullptr) {  // step 0's operand; each step writes the next one's
      TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
          B * H, ln_common::MaskedPrevStateFn<A>{in.h0, nullptr, in.mask, f.operand, B * H}));
    }
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t tb = t * B;
      const A* h_prev = t == 0 ? in.h0 : ws + lay.h() + (tb - B) * H;
      const A* operand = in.mask != nullptr ? f.operand : h_prev;
      const StepState<A, T> state{h_prev,
                                  ws + lay.h() + tb * H,
                                  y,
                                  in.mask != nullptr ? f.operand : nullptr,
                                  in.mask,
                                  f.len,
                                  t,
                                  T_,
                                  B,
                                  H,
                                  run.time_major,
                                  in.zoneout.h.At(tb * H)};
      A* const rstd = kept ? ws + lay.rstd() + tb * 2 : nullptr;
      if (m.gru()) {
        TF_LSTM_GPU_RETURN_IF_ERROR(
            Gemm(be, false, false, B, G, H, operand, w.recurrent_kernel, false, f.rec));
        using StepFn = GruStepFn<A, T, Math>;
        const StepFn step{m,
                          {sums, 0, G, eps},
                          state,
                          f.zx + tb * G,
                          f.rec,
                          w.gamma_h,
                          w.bias + G,
                          kept ? ws + lay.saved() + tb * 4 * H : f.saved,
                          kept ? ws + lay.xhat_h() + tb * G : nullptr,
                          rstd};
        TF_LSTM_GPU_RETURN_IF_ERROR(
            be.Blocks(B, sums.threads, sums.SharedBytes(), StepFn::kParts, step));
      } else {  // v = x·W + h·R, the recurrent product added onto the input's
        A* v = f.zx + tb * G;
        TF_LSTM_GPU_RETURN_IF_ERROR(
            Gemm(be, false, false, B, G, H, operand, w.recurrent_kernel, true, v));
        using StepFn = SimpleStepFn<A, T, Math>;
        const StepFn step{{sums, 0, H, eps},
                          state,
                          m.activation,
                          v,
                          w.gamma_x,
                          w.bias,
                          kept ? ws + lay.xhat_x() + tb * H : nullptr,
                          rstd};
        TF_LSTM_GPU_RETURN_IF_ERROR(
            be.Blocks(B, sums.threads, sums.SharedBytes(), StepFn::kParts, step));
      }
    }
    // The final state: after the last step (rows past their end held it there).
    return Convert(be, ws + lay.h() + (rows - B) * H, h_last, B * H);
  }

  // ---- backward ------------------------------------------------------------------------------

  static cudaError_t Backward(Backend& be, const LayerNormRnnModel& m, const LayerNormRnnRun& run,
                              const RnnReserveHeader& expected, const T* x, const T* h0,
                              const LayerNormRnnWeights<T>& weights, const T* dy,
                              const T* dh_last, const uint8_t* reserve, T* dx, T* dh0,
                              const LayerNormRnnWeightGrads<T>& grads, void* scratch) {
    using namespace lnr_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, G = m.gate_width();
    const int64_t I = m.input_size, rows = T_ * B;
    size_t bytes;
    const BackwardBuffers s = CarveBackward(scratch, m, run, &bytes);
    be.SetBlasWorkspace(s.blas);
    TF_LSTM_GPU_RETURN_IF_ERROR(CheckReserveHeader(be, expected, reserve, s.flag));
    T* const outputs[kWeights] = {grads.kernel, grads.recurrent_kernel, grads.bias, grads.gamma_x,
                                  grads.gamma_h};
    int64_t n[kWeights];
    WeightSizes(m, n);
    if (RunsNothing(m, run)) {  // the state gradient passes through, the rest is zero
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dh_last, dh0, B * H));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, dx, rows * I, Cast<T>(0.0f)));
      for (int k = 0; k < kWeights; ++k) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, outputs[k], n[k], Cast<T>(0.0f)));
      }
    } else {
      TF_LSTM_GPU_RETURN_IF_ERROR(UploadLengths(be, run, s.len));
      const LayerNormRnnLayout lay(m, run);
      const A* ws = reinterpret_cast<const A*>(reserve + sizeof(RnnReserveHeader));
      Inputs in;
      TF_LSTM_GPU_RETURN_IF_ERROR(ConvertInputs(be, run, s.in, x, h0, weights, &in));
      const LayerNormRnnWeights<A>& w = in.w;
      const A* dys;
      TF_LSTM_GPU_RETURN_IF_ERROR(ToTimeMajor(be, run, H, dy, s.dy, &dys));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dh_last, s.dh, B * H));
      const Carry<A> carry{s.carry, s.direct, in.mask};
      const BlockSums sums = RowSums(G);
      for (int64_t t = T_ - 1; t >= 0; --t) {
        const int64_t tb = t * B;
        const BackState<A> state{carry,  t + 1 < T_, dys + tb * H, s.dh, s.direct,
                                 s.len,  t,          in.zoneout.h.At(tb * H)};
        if (m.gru()) {
          using StepFn = GruBackStepFn<A, Math>;
          const StepFn step{m,
                            {sums, 0, G},
                            state,
                            ws + lay.saved() + tb * 4 * H,
                            ws + lay.xhat_h() + tb * G,
                            ws + lay.rstd() + tb * 2,
                            t == 0 ? in.h0 : ws + lay.h() + (tb - B) * H,
                            w.gamma_h,
                            s.d_xn + tb * G,
                            s.d_hn + tb * G,
                            s.d_gemm + tb * G,
                            H};
          TF_LSTM_GPU_RETURN_IF_ERROR(
              be.Blocks(B, sums.threads, sums.SharedBytes(), StepFn::kParts, step));
        } else {
          using StepFn = SimpleBackStepFn<A, Math>;
          const StepFn step{{sums, 0, H},     state,           m.activation,
                            ws + lay.xhat_x() + tb * H,        ws + lay.rstd() + tb * 2,
                            w.gamma_x,        w.bias,          s.d_xn + tb * H,
                            s.d_gemm + tb * H};
          TF_LSTM_GPU_RETURN_IF_ERROR(
              be.Blocks(B, sums.threads, sums.SharedBytes(), StepFn::kParts, step));
        }
        // dL/dh_{t-1} through R = d(h·R)·Rᵀ: R [H, G] read transposed
        TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, true, B, H, G, s.d_gemm + tb * G,
                                         w.recurrent_kernel, false, s.carry));
      }
      TF_LSTM_GPU_RETURN_IF_ERROR(
          be.ForEach(B * H, ln_common::FirstStateGradFn<A, T>{carry, s.dh, dh0, s.len, H}));

      // The weights' gradients, summed over every (t, b) row; rows that did not run add zeros.
      A* dkernel = ln_common::OutOrScratch(grads.kernel, s.dkernel);
      A* drecurrent = ln_common::OutOrScratch(grads.recurrent_kernel, s.drecurrent);
      TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
          rows * H,
          ln_common::MaskedPrevStateFn<A>{in.h0, ws + lay.h(), in.mask, s.h_prev_seq, B * H}));
      TF_LSTM_GPU_RETURN_IF_ERROR(
          Gemm(be, true, false, H, G, rows, s.h_prev_seq, s.d_gemm, false, drecurrent));
      const A* xhat_x = ws + lay.xhat_x();
      TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, G, ProductTerm<A>{s.d_xn, nullptr, G},
                                             s.partial, grads.bias));
      TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, G, ProductTerm<A>{s.d_xn, xhat_x, G},
                                             s.partial, grads.gamma_x));
      const A* d_xw = s.d_gemm;  // the SimpleRNN's: v = x·W + h·R
      if (m.gru()) {
        TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, G, ProductTerm<A>{s.d_hn, nullptr, G},
                                               s.partial, grads.bias + G));
        TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(
            be, rows, G, ProductTerm<A>{s.d_hn, ws + lay.xhat_h(), G}, s.partial, grads.gamma_h));
        // through the input side's norm (in place: dX becomes d(x·W))
        using InputNormBackFn = ln_common::InputNormBackFn<A>;
        TF_LSTM_GPU_RETURN_IF_ERROR(be.Blocks(
            rows, sums.threads, sums.SharedBytes(), InputNormBackFn::kParts,
            InputNormBackFn{{sums, 0, G}, s.d_xn, xhat_x, ws + lay.rstd(), 2, w.gamma_x, s.len,
                            B}));
        d_xw = s.d_xn;
      }
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, true, false, I, G, rows, in.x, d_xw, false, dkernel));
      A* dxs = ln_common::OutOrScratch(dx, s.dx, run.time_major);
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, true, rows, I, G, d_xw, w.kernel, false, dxs));
      if (static_cast<void*>(dxs) != static_cast<void*>(dx)) {
        TF_LSTM_GPU_RETURN_IF_ERROR(FromTimeMajor(be, run, I, dxs, dx));
      }
      if constexpr (!kSame) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dkernel, grads.kernel, n[0]));
        TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, drecurrent, grads.recurrent_kernel, n[1]));
      }
    }
    // A reserve space from another configuration: every output is NaN.
    TF_LSTM_GPU_RETURN_IF_ERROR(NanIfFlagged(be, s.flag, dx, rows * I));
    TF_LSTM_GPU_RETURN_IF_ERROR(NanIfFlagged(be, s.flag, dh0, B * H));
    for (int k = 0; k < kWeights; ++k) {
      TF_LSTM_GPU_RETURN_IF_ERROR(NanIfFlagged(be, s.flag, outputs[k], n[k]));
    }
    return cudaSuccess;
  }
};

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_LAYER_NORM_RNN_GPU_ENGINE_H_
