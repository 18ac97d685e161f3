// The LayerNorm LSTM's GPU engine (docs/layer_norm_lstm.md), framework-free and templated on a
// Backend (cc/gpu/common.h): CudaBackend runs it on a stream (layer_norm_lstm_launchers.cu.cc,
// the gpu_launchers.h launchers), HostBackend runs the very same calls on the CPU (the self-test's
// "host" backend, part of the test suite). Its semantics and reserve space are the CPU engine's
// (cpu_engine.cc): the cell around the norms is cc/core/layer_norm_lstm_types.h's, the norms'
// per-element steps cc/core/layer_norm.h's, and the workspace has the same header and layout
// (LayerNormLstmHeader, LayerNormLstmLayout), so a reserve space means the same on every device.
//
// The norms reduce over whole rows (all 4H gates of x·W and of h·R, all H units of c'), so where
// the CPU engine gives each thread whole rows, this engine gives each row a thread block
// (Backend::Blocks) and sums across its threads (cc/gpu/layer_norm_common.h, shared with the
// LayerNorm GRU / SimpleRNN's engine: BlockSums, two passes, in double, in a fixed order, as
// NormalizeRow's contract asks):
//   forward   x·W for all T·B rows is one GEMM, then one kernel normalises every row (block per
//             row); per step one GEMM h_{t-1}(⊙ mask)·R for all B rows and one kernel, a block per
//             row, for the h·R norm, the gates, c', the c' norm, the output and zoneout;
//   backward  per step (in reverse) one kernel, a block per row, for the element-wise part and
//             the two norms' backwards, then one GEMM d(h·R)·Rᵀ for dL/dh_{t-1}; after the loop
//             dR, dW and dx are GEMMs over the whole sequence, the x·W norm's backward one kernel
//             (block per row), and the biases' and norms' gradients column sums in a fixed order
//             (ColumnSums: no atomics, deterministic).
// Everything is computed in A = Acc<T> (float, double for double), the GEMMs included (their
// operands are what a norm reads right after); inputs and weights are converted once, every
// output is rounded once.
// Scratch: one caller-provided block carved by Carve*(), the same function for the size query
// (base == nullptr) and the run, so size and use never disagree.
#ifndef TF_LSTM_OPS_CC_LAYER_NORM_LSTM_GPU_ENGINE_H_
#define TF_LSTM_OPS_CC_LAYER_NORM_LSTM_GPU_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cc/core/layer_norm.h"
#include "cc/core/layer_norm_lstm_types.h"
#include "cc/core/precision.h"
#include "cc/gpu/common.h"
#include "cc/gpu/layer_norm_common.h"
#include "cc/gpu/reductions.h"
#include "cc/gpu/rnn_inputs.h"
#include "cc/layer_norm_lstm/gpu_launchers.h"

namespace tf_lstm_ops {
namespace gpu {
namespace ln_detail {

using ln_common::Carry;
using ln_common::RowGradSums;
using ln_common::RowStats;

// ---- forward -----------------------------------------------------------------------------------

// One step t of the recurrence, row b per block: the h·R norm (parts 0-3 for its statistics, 4
// for the gates), c' and its norm (5-8), then h and c with zoneout (9). Rows past their length
// hold their state, output zero and save zeros (part 0), as on the CPU.
template <typename A, typename T, typename Math>
struct StepFn {
  static constexpr int kParts = 10;
  RowStats<A> h_stats, c_stats;  // n = G in slots 0, 1; n = H in slots 2, 3
  const A* zx;                   // step t's input side [B, G]
  const A* ah;                   // h_{t-1}(⊙ mask)·R [B, G]
  const A *gamma_h, *beta_h, *gamma_c, *beta_c;
  const A *h_prev, *c_prev;  // [B, H]
  A *h_out, *c_out;          // step t's states in the workspace [B, H]
  A* gates;                  // [B, G]: the workspace's (training) or scratch
  A *xhat_h, *xhat_c, *rstd;  // the workspace's step-t rows ([B, G], [B, H], [B][3]), or null
  A* cell;                   // c' [B, H] (scratch)
  T* y;                      // the output, in the run's layout
  A* operand;                // the next step's GEMM operand h ⊙ mask [B, H], or null
  const A* mask;             // [B, H] or null
  const int32_t* len;
  int64_t t, time, batch;
  bool time_major;
  LayerNormPreset preset;
  ZoneoutView<A> zone_h, zone_c;  // step t's [B, H]

  TF_LSTM_HOST_DEVICE void Hold(int64_t b, int thread) const {
    const int64_t H = c_stats.n, G = h_stats.n, threads = h_stats.sums.threads;
    for (int64_t j = thread; j < H; j += threads) {
      const int64_t i = b * H + j;
      h_out[i] = h_prev[i];
      c_out[i] = c_prev[i];
      y[OutputIndex(b) + j] = Cast<T>(A(0));
      if (operand != nullptr) operand[i] = MaskedOperand(h_prev[i], mask[i]);
      if (xhat_c != nullptr) xhat_c[i] = A(0);
    }
    if (xhat_h == nullptr) return;  // (training saves zeros: the backward's sums read them)
    for (int64_t k = thread; k < G; k += threads) {
      gates[b * G + k] = A(0);
      xhat_h[b * G + k] = A(0);
    }
    if (thread == 0) rstd[b * 3 + 1] = rstd[b * 3 + 2] = A(0);
  }
  TF_LSTM_HOST_DEVICE int64_t OutputIndex(int64_t b) const {
    const int64_t H = c_stats.n;
    return (time_major ? t * batch + b : b * time + t) * H;
  }

  TF_LSTM_HOST_DEVICE void operator()(int64_t b, int thread, int part, void* shared) const {
    const int64_t H = c_stats.n, G = h_stats.n, threads = h_stats.sums.threads;
    if (t >= len[b]) {
      if (part == 0) Hold(b, thread);
      return;
    }
    const A* ah_b = ah + b * G;
    A* gates_b = gates + b * G;
    A* cell_b = cell + b * H;
    if (part < RowStats<A>::kParts) {
      h_stats.Part(part, ah_b, thread, shared);
    } else if (part == 4) {  // the gates
      const A mu = h_stats.Mu(shared), r = h_stats.Rstd(shared);
      for (int64_t k = thread; k < G; k += threads) {
        const A x = LayerNormXhat(ah_b[k], mu, r);
        if (xhat_h != nullptr) xhat_h[b * G + k] = x;
        const A z = zx[b * G + k] + (x * gamma_h[k] + beta_h[k]);
        gates_b[k] = LayerNormLstmGate<A, Math>(k, H, z);
      }
      if (thread == 0 && rstd != nullptr) rstd[b * 3 + 1] = r;
    } else if (part < 9) {  // c' and its statistics
      if (part == 5) {
        for (int64_t j = thread; j < H; j += threads) {
          cell_b[j] = LayerNormLstmCell(gates_b, H, j, c_prev[b * H + j]);
        }
      }
      c_stats.Part(part - 5, cell_b, thread, shared);
    } else {  // the states and the output
      const A mu = c_stats.Mu(shared), r = c_stats.Rstd(shared);
      for (int64_t j = thread; j < H; j += threads) {
        const int64_t i = b * H + j;
        const A x = LayerNormXhat(cell_b[j], mu, r);
        if (xhat_c != nullptr) xhat_c[i] = x;
        const LayerNormLstmOutput<A> out = LayerNormLstmOutputAt<A, Math>(
            preset, gates_b, H, j, x, gamma_c[j], beta_c[j], cell_b[j]);
        const A h = zone_h.Blend(i, out.h, h_prev[i]);
        h_out[i] = h;
        c_out[i] = zone_c.Blend(i, out.c, c_prev[i]);
        y[OutputIndex(b) + j] = Cast<T>(h);
        if (operand != nullptr) operand[i] = MaskedOperand(h, mask[i]);
      }
      if (thread == 0 && rstd != nullptr) rstd[b * 3 + 2] = r;
    }
  }
};

// ---- backward ----------------------------------------------------------------------------------

// One step t in reverse, row b per block: first dh brought up to date from step t + 1's GEMM;
// then through h̃ and the c' norm (parts 0-2; dc carried in place), then the h·R norm (3-5).
// Writes the step's gate gradients dz (also those of z's x side), d(h·R) and dq = dL/dLN(c'),
// zeros for rows past their length.
template <typename A, typename Math>
struct BackStepFn {
  static constexpr int kParts = 6;
  RowGradSums<A> c_sums, h_sums;  // n = H in slots 0, 1; n = G in slots 2, 3
  Carry<A> carry;
  bool has_next;  // step t + 1 ran (carry holds its GEMM)
  const A* dy;    // step t's output gradient [B, H]
  A *dh, *dc;     // the carried state gradients [B, H]
  A* direct;      // zoneout's (1 − w)·dL/dh_t [B, H], or null
  const A *gates, *xhat_h, *xhat_c, *rstd;  // the workspace's step-t rows
  const A* c_prev;                          // [B, H]
  const A *gamma_h, *gamma_c, *beta_c;
  A *dz, *dah, *dq;  // step t's rows: [B, G], [B, G], [B, H]
  const int32_t* len;
  int64_t t;
  LayerNormPreset preset;
  ZoneoutView<A> zone_h, zone_c;  // step t's [B, H]

  TF_LSTM_HOST_DEVICE void operator()(int64_t b, int thread, int part, void* shared) const {
    const int64_t H = c_sums.n, G = h_sums.n, threads = c_sums.sums.threads;
    const bool addons = preset == LayerNormPreset::kAddons;
    A* dz_b = dz + b * G;
    A* dq_b = dq + b * H;
    if (t >= len[b]) {  // the row did not run this step: its gradients pass through
      if (part == 0) {
        for (int64_t k = thread; k < G; k += threads) dz_b[k] = dah[b * G + k] = A(0);
        for (int64_t j = thread; j < H; j += threads) dq_b[j] = A(0);
      }
      return;
    }
    const A* gates_b = gates + b * G;
    const A* xhat_c_b = xhat_c + b * H;
    if (part == 0) {  // through h̃ = o ⊙ tanh(q)
      for (int64_t j = thread; j < H; j += threads) {
        const int64_t i = b * H + j;
        if (has_next && t + 1 < len[b]) dh[i] = carry.At(i);
        const A dh_total = dh[i] + dy[i];
        if (direct != nullptr) direct[i] = zone_h.ToPrevious(i, dh_total);
        // (Addons carries q itself: the carried c's gradient joins q's)
        const LayerNormLstmOutputGrads<A> g = LayerNormLstmOutputBackward<A, Math>(
            gates_b, H, j, xhat_c_b[j], gamma_c[j], beta_c[j], zone_h.ToNew(i, dh_total),
            addons ? zone_c.ToNew(i, dc[i]) : A(0));
        dz_b[3 * H + j] = g.dz_o;
        dq_b[j] = g.dq;
      }
      c_sums.Part(0, dq_b, gamma_c, xhat_c_b, thread, shared);
    } else if (part == 1) {
      c_sums.Part(1, dq_b, gamma_c, xhat_c_b, thread, shared);
    } else if (part == 2) {  // through the c' norm and c' = f ⊙ c_{t-1} + i ⊙ g
      c_sums.ForEachGrad(dq_b, gamma_c, xhat_c_b, rstd[b * 3 + 2], thread, shared,
                         [&](int64_t j, A dc_cell) {
                           const int64_t i = b * H + j;
                           if (!addons) dc_cell += zone_c.ToNew(i, dc[i]);  // (the paper: c')
                           const LayerNormLstmCellGrads<A> g =
                               LayerNormLstmCellBackward(gates_b, H, j, c_prev[i], dc_cell);
                           dz_b[j] = g.dz_i;
                           dz_b[H + j] = g.dz_f;
                           dz_b[2 * H + j] = g.dz_g;
                           dc[i] = g.dc_prev + zone_c.ToPrevious(i, dc[i]);
                         });
    } else if (part < 5) {  // the h·R norm
      h_sums.Part(part - 3, dz_b, gamma_h, xhat_h + b * G, thread, shared);
    } else {
      A* dah_b = dah + b * G;
      h_sums.ForEachGrad(dz_b, gamma_h, xhat_h + b * G, rstd[b * 3 + 1], thread, shared,
                         [&](int64_t k, A g) { dah_b[k] = g; });
    }
  }
};

}  // namespace ln_detail

// The engine: its scratch (carved alike for the size query and the run), Forward, Backward.
template <typename Backend, typename T>
struct LayerNormLstmEngine {
  using A = Acc<T>;
  using Math = MathFor<T>;  // σ and tanh as on the CPU: ExactMath for double, FastMath otherwise
  static constexpr int kWeights = 9;
  static constexpr bool kSame = std::is_same_v<T, A>;

  // ---- scratch -------------------------------------------------------------------------------

  // The weights' sizes, in LayerNormLstmWeights' order.
  static void WeightSizes(const LayerNormLstmModel& m, int64_t (&n)[kWeights]) {
    const int64_t I = m.input_size, H = m.num_units, G = m.gate_width();
    const int64_t sizes[kWeights] = {I * G, H * G, G, G, G, G, G, H, H};
    for (int k = 0; k < kWeights; ++k) n[k] = sizes[k];
  }
  // What every pass converts alike (ln_common::InputStaging): the weights, x, h0, c0, the mask
  // and zoneout.
  using InputStaging = ln_common::InputStaging<T, kWeights, 2>;
  static InputStaging TakeInputs(ScratchCarver* s, const LayerNormLstmModel& m,
                                 const LayerNormLstmRun& run) {
    int64_t n[kWeights];
    WeightSizes(m, n);
    return InputStaging::Take(s, run, n, m.input_size, m.num_units);
  }
  struct Inputs {
    LayerNormLstmWeights<A> w;
    const A *x, *h0, *c0, *mask;  // mask: null without one
    Zoneout<A> zoneout;
  };
  static cudaError_t ConvertInputs(const Backend& be, const LayerNormLstmRun& run,
                                   const InputStaging& staging, const T* x, const T* h0,
                                   const T* c0, const LayerNormLstmWeights<T>& w, Inputs* in) {
    typename InputStaging::Inputs st;
    TF_LSTM_GPU_RETURN_IF_ERROR(
        staging.Convert(be, run,
                        {w.kernel, w.recurrent_kernel, w.bias, w.gamma_x, w.beta_x, w.gamma_h,
                         w.beta_h, w.gamma_c, w.beta_c},
                        x, {h0, c0}, &st));
    const A* const* v = st.weights;
    *in = {{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]},
           st.x,
           st.states[0],
           st.states[1],
           st.mask,
           st.zoneout};
    return cudaSuccess;
  }

  struct ForwardBuffers {
    void* blas;
    int32_t* len;
    InputStaging in;
    A *zx, *rec, *operand, *gates, *cell;
  };
  static ForwardBuffers CarveForward(void* base, const LayerNormLstmModel& m,
                                     const LayerNormLstmRun& run, size_t* bytes) {
    ScratchCarver s(base);
    ForwardBuffers f{};
    const int64_t B = run.batch, H = m.num_units, G = m.gate_width();
    f.blas = s.TakeBytes(Backend::kBlasWorkspaceBytes);
    f.len = s.Take<int32_t>(B);
    f.in = TakeInputs(&s, m, run);
    f.zx = s.Take<A>(run.time * B * G);
    f.rec = s.Take<A>(B * G);
    f.operand = s.Take<A>(run.recurrent_mask != nullptr ? B * H : 0);
    f.gates = s.Take<A>(run.training ? 0 : B * G);  // (training: the workspace's)
    f.cell = s.Take<A>(B * H);
    *bytes = s.Bytes();
    return f;
  }

  struct BackwardBuffers {
    void* blas;
    int32_t *flag, *len;
    InputStaging in;
    A *dy, *dz, *dah, *dq, *dh, *dc, *carry, *direct, *h_prev_seq, *dx, *dkernel, *drecurrent;
    A* partial;  // ColumnSums'
  };
  static BackwardBuffers CarveBackward(void* base, const LayerNormLstmModel& m,
                                       const LayerNormLstmRun& run, size_t* bytes) {
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
    b.dz = s.Take<A>(rows * G);
    b.dah = s.Take<A>(rows * G);
    b.dq = s.Take<A>(rows * H);
    b.dh = s.Take<A>(B * H);
    b.dc = s.Take<A>(B * H);
    b.carry = s.Take<A>(B * H);
    b.direct = run.zoneout_h.active() ? s.Take<A>(B * H) : nullptr;
    b.h_prev_seq = s.Take<A>(rows * H);
    b.dx = s.Take<A>(direct_io ? 0 : rows * I);
    b.dkernel = s.Take<A>(kSame ? 0 : I * G);
    b.drecurrent = s.Take<A>(kSame ? 0 : H * G);
    b.partial = s.Take<A>(ColumnChunking(rows).PartialSize(G));
    *bytes = s.Bytes();
    return b;
  }

  static size_t ForwardScratchBytes(const LayerNormLstmModel& m, const LayerNormLstmRun& run) {
    return ln_common::CarvedBytes(&CarveForward, m, run);
  }
  static size_t BackwardScratchBytes(const LayerNormLstmModel& m, const LayerNormLstmRun& run) {
    return ln_common::CarvedBytes(&CarveBackward, m, run);
  }

  static bool RunsNothing(const LayerNormLstmModel& m, const LayerNormLstmRun& run) {
    return run.time == 0 || run.batch == 0 || m.num_units == 0;
  }

  // The block sums of a row kernel over rows `width` wide, in four slots.
  static BlockSums RowSums(int64_t width) { return BlockSums{RowThreads(width), 4}; }

  // ---- forward -------------------------------------------------------------------------------

  static cudaError_t Forward(Backend& be, const LayerNormLstmModel& m,
                             const LayerNormLstmRun& run, const T* x, const T* h0, const T* c0,
                             const LayerNormLstmWeights<T>& weights, T* y, T* h_last, T* c_last,
                             uint8_t* workspace, void* scratch) {
    using namespace ln_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, G = m.gate_width();
    const int64_t rows = T_ * B;
    TF_LSTM_GPU_RETURN_IF_ERROR(
        WriteReserveHeader(be, LayerNormLstmHeader(m, run, sizeof(T), sizeof(A)), workspace));
    if (RunsNothing(m, run)) {  // the final state is the initial state
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, h0, h_last, B * H));
      return Convert(be, c0, c_last, B * H);
    }
    size_t bytes;
    const ForwardBuffers f = CarveForward(scratch, m, run, &bytes);
    be.SetBlasWorkspace(f.blas);
    TF_LSTM_GPU_RETURN_IF_ERROR(UploadLengths(be, run, f.len));
    const LayerNormLstmLayout lay(m, run);
    A* ws = reinterpret_cast<A*>(workspace + sizeof(RnnReserveHeader));
    Inputs in;
    TF_LSTM_GPU_RETURN_IF_ERROR(ConvertInputs(be, run, f.in, x, h0, c0, weights, &in));
    const LayerNormLstmWeights<A>& w = in.w;
    const double eps = m.epsilon;

    // The input side of every step: LN(x·W)·γx + βx + b.
    using InputNormFn = ln_common::InputNormFn<A>;
    TF_LSTM_GPU_RETURN_IF_ERROR(
        Gemm(be, false, false, rows, G, m.input_size, in.x, w.kernel, false, f.zx));
    const BlockSums sums = RowSums(G);
    TF_LSTM_GPU_RETURN_IF_ERROR(be.Blocks(
        rows, sums.threads, sums.SharedBytes(), InputNormFn::kParts,
        InputNormFn{{sums, 0, G, eps}, f.zx, run.training ? ws + lay.xhat_x() : nullptr,
                    run.training ? ws + lay.rstd() : nullptr, 3, w.gamma_x, w.beta_x, w.bias}));
    if (in.mask != nullptr) {  // step 0's operand; each step writes the next one's
      TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
          B * H, ln_common::MaskedPrevStateFn<A>{in.h0, nullptr, in.mask, f.operand, B * H}));
    }
    for (int64_t t = 0; t < T_; ++t) {
      const A* h_prev = t == 0 ? in.h0 : ws + lay.h() + (t - 1) * B * H;
      const A* c_prev = t == 0 ? in.c0 : ws + lay.c() + (t - 1) * B * H;
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, false, B, G, H,
                                       in.mask != nullptr ? f.operand : h_prev,
                                       w.recurrent_kernel, false, f.rec));
      const int64_t tb = t * B;
      StepFn<A, T, Math> step{{sums, 0, G, eps},
                              {sums, 2, H, eps},
                              f.zx + tb * G,
                              f.rec,
                              w.gamma_h,
                              w.beta_h,
                              w.gamma_c,
                              w.beta_c,
                              h_prev,
                              c_prev,
                              ws + lay.h() + tb * H,
                              ws + lay.c() + tb * H,
                              run.training ? ws + lay.gates() + tb * G : f.gates,
                              run.training ? ws + lay.xhat_h() + tb * G : nullptr,
                              run.training ? ws + lay.xhat_c() + tb * H : nullptr,
                              run.training ? ws + lay.rstd() + tb * 3 : nullptr,
                              f.cell,
                              y,
                              in.mask != nullptr ? f.operand : nullptr,
                              in.mask,
                              f.len,
                              t,
                              T_,
                              B,
                              run.time_major,
                              m.preset,
                              in.zoneout.h.At(tb * H),
                              in.zoneout.c.At(tb * H)};
      TF_LSTM_GPU_RETURN_IF_ERROR(
          be.Blocks(B, sums.threads, sums.SharedBytes(), StepFn<A, T, Math>::kParts, step));
    }
    // The final state: after the last step (rows past their end held it there).
    TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, ws + lay.h() + (T_ - 1) * B * H, h_last, B * H));
    return Convert(be, ws + lay.c() + (T_ - 1) * B * H, c_last, B * H);
  }

  // ---- backward ------------------------------------------------------------------------------

  static cudaError_t Backward(Backend& be, const LayerNormLstmModel& m,
                              const LayerNormLstmRun& run, const RnnReserveHeader& expected,
                              const T* x, const T* h0, const T* c0,
                              const LayerNormLstmWeights<T>& weights, const T* dy,
                              const T* dh_last, const T* dc_last, const uint8_t* reserve, T* dx,
                              T* dh0, T* dc0, const LayerNormLstmWeightGrads<T>& grads,
                              void* scratch) {
    using namespace ln_detail;  // NOLINT
    const int64_t T_ = run.time, B = run.batch, H = m.num_units, G = m.gate_width();
    const int64_t I = m.input_size, rows = T_ * B;
    size_t bytes;
    const BackwardBuffers s = CarveBackward(scratch, m, run, &bytes);
    be.SetBlasWorkspace(s.blas);
    TF_LSTM_GPU_RETURN_IF_ERROR(CheckReserveHeader(be, expected, reserve, s.flag));
    T* const outputs[kWeights] = {grads.kernel,  grads.recurrent_kernel, grads.bias,
                                  grads.gamma_x, grads.beta_x,           grads.gamma_h,
                                  grads.beta_h,  grads.gamma_c,          grads.beta_c};
    int64_t n[kWeights];
    WeightSizes(m, n);
    if (RunsNothing(m, run)) {  // state gradients pass through, the rest is zero
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dh_last, dh0, B * H));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dc_last, dc0, B * H));
      TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, dx, rows * I, Cast<T>(0.0f)));
      for (int k = 0; k < kWeights; ++k) {
        TF_LSTM_GPU_RETURN_IF_ERROR(Fill(be, outputs[k], n[k], Cast<T>(0.0f)));
      }
    } else {
      TF_LSTM_GPU_RETURN_IF_ERROR(UploadLengths(be, run, s.len));
      const LayerNormLstmLayout lay(m, run);
      const A* ws = reinterpret_cast<const A*>(reserve + sizeof(RnnReserveHeader));
      Inputs in;
      TF_LSTM_GPU_RETURN_IF_ERROR(ConvertInputs(be, run, s.in, x, h0, c0, weights, &in));
      const LayerNormLstmWeights<A>& w = in.w;
      const A* dys;
      TF_LSTM_GPU_RETURN_IF_ERROR(ToTimeMajor(be, run, H, dy, s.dy, &dys));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dh_last, s.dh, B * H));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, dc_last, s.dc, B * H));
      const Carry<A> carry{s.carry, s.direct, in.mask};
      const BlockSums sums = RowSums(G);
      for (int64_t t = T_ - 1; t >= 0; --t) {
        const int64_t tb = t * B;
        const BackStepFn<A, Math> step{{sums, 0, H},
                                       {sums, 2, G},
                                       carry,
                                       t + 1 < T_,
                                       dys + tb * H,
                                       s.dh,
                                       s.dc,
                                       s.direct,
                                       ws + lay.gates() + tb * G,
                                       ws + lay.xhat_h() + tb * G,
                                       ws + lay.xhat_c() + tb * H,
                                       ws + lay.rstd() + tb * 3,
                                       t == 0 ? in.c0 : ws + lay.c() + (tb - B) * H,
                                       w.gamma_h,
                                       w.gamma_c,
                                       w.beta_c,
                                       s.dz + tb * G,
                                       s.dah + tb * G,
                                       s.dq + tb * H,
                                       s.len,
                                       t,
                                       m.preset,
                                       in.zoneout.h.At(tb * H),
                                       in.zoneout.c.At(tb * H)};
        TF_LSTM_GPU_RETURN_IF_ERROR(
            be.Blocks(B, sums.threads, sums.SharedBytes(), BackStepFn<A, Math>::kParts, step));
        // dL/dh_{t-1} = d(h·R)·Rᵀ: R [H, 4H] read transposed
        TF_LSTM_GPU_RETURN_IF_ERROR(
            Gemm(be, false, true, B, H, G, s.dah + tb * G, w.recurrent_kernel, false, s.carry));
      }
      TF_LSTM_GPU_RETURN_IF_ERROR(
          be.ForEach(B * H, ln_common::FirstStateGradFn<A, T>{carry, s.dh, dh0, s.len, H}));
      TF_LSTM_GPU_RETURN_IF_ERROR(Convert(be, s.dc, dc0, B * H));

      // The weights' gradients, summed over every (t, b) row; rows that did not run add zeros.
      A* dkernel = ln_common::OutOrScratch(grads.kernel, s.dkernel);
      A* drecurrent = ln_common::OutOrScratch(grads.recurrent_kernel, s.drecurrent);
      TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(
          rows * H,
          ln_common::MaskedPrevStateFn<A>{in.h0, ws + lay.h(), in.mask, s.h_prev_seq, B * H}));
      TF_LSTM_GPU_RETURN_IF_ERROR(
          Gemm(be, true, false, H, G, rows, s.h_prev_seq, s.dah, false, drecurrent));
      const A *xhat_x = ws + lay.xhat_x(), *xhat_h = ws + lay.xhat_h();
      const A* xhat_c = ws + lay.xhat_c();
      TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, G, ProductTerm<A>{s.dz, nullptr, G},
                                             s.partial, grads.bias, grads.beta_h, grads.beta_x));
      TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, G, ProductTerm<A>{s.dz, xhat_h, G},
                                             s.partial, grads.gamma_h));
      TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, G, ProductTerm<A>{s.dz, xhat_x, G},
                                             s.partial, grads.gamma_x));
      TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, H, ProductTerm<A>{s.dq, nullptr, H},
                                             s.partial, grads.beta_c));
      TF_LSTM_GPU_RETURN_IF_ERROR(ColumnSums(be, rows, H, ProductTerm<A>{s.dq, xhat_c, H},
                                             s.partial, grads.gamma_c));
      // Through the input side's norm (in place: dz becomes d(x·W)), then dW and dx.
      using InputNormBackFn = ln_common::InputNormBackFn<A>;
      TF_LSTM_GPU_RETURN_IF_ERROR(be.Blocks(
          rows, sums.threads, sums.SharedBytes(), InputNormBackFn::kParts,
          InputNormBackFn{{sums, 0, G}, s.dz, xhat_x, ws + lay.rstd(), 3, w.gamma_x, s.len, B}));
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, true, false, I, G, rows, in.x, s.dz, false, dkernel));
      A* dxs = ln_common::OutOrScratch(dx, s.dx, run.time_major);
      TF_LSTM_GPU_RETURN_IF_ERROR(Gemm(be, false, true, rows, I, G, s.dz, w.kernel, false, dxs));
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
    TF_LSTM_GPU_RETURN_IF_ERROR(NanIfFlagged(be, s.flag, dc0, B * H));
    for (int k = 0; k < kWeights; ++k) {
      TF_LSTM_GPU_RETURN_IF_ERROR(NanIfFlagged(be, s.flag, outputs[k], n[k]));
    }
    return cudaSuccess;
  }
};

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_LAYER_NORM_LSTM_GPU_ENGINE_H_
