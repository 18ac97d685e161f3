// CPU implementation of the CudnnRNN forward and backprop functors.
//
// Same structure as the LSTM block kernels: per layer and direction, the input projection of
// all steps is one GEMM; each step does the recurrent GEMM (plus the projection GEMM for LSTMP)
// and one fused element-wise pass; backward does one element-wise pass and one recurrent GEMM per
// step, then dW, dR, dPmat, biases and dx as whole-sequence GEMMs/reductions. Rows past their
// sequence length hold their state, output zero and pass gradients through unchanged.
#define EIGEN_USE_THREADS

#include <cstring>
#include <vector>

#include "cc/kernels/cpu_linalg.h"
#include "cc/kernels/cudnn_rnn_functor.h"
#include "cc/kernels/rnn_cell.h"

namespace tf_lstm_ops {
namespace {

using namespace cpu;  // NOLINT: the shared CPU building blocks (CPUDevice, Gemm, ...)

// [T,B,n] (time-major) view of a [T,B,n] or [B,T,n] tensor, in the compute type.
template <typename T, typename A>
absl::Status ToTimeMajor(OpKernelContext* ctx, const RnnRun& run, int64_t n, const T* src,
                         Tensor* holder, const A** out) {
  if (run.time_major) return AsAcc(ctx, src, run.time * run.batch * n, holder, out);
  A* dst;
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, run.time * run.batch * n, holder, &dst));
  const int64_t time = run.time, B = run.batch;
  ParallelFor(ctx->eigen_device<CPUDevice>(), time * B, n * 8.0, n * 2.0, [&](int64_t begin, int64_t end) {
    for (int64_t tb = begin; tb < end; ++tb) {
      const int64_t t = tb / B, b = tb % B;
      for (int64_t k = 0; k < n; ++k) dst[tb * n + k] = A(src[(b * time + t) * n + k]);
    }
  });
  *out = dst;
  return absl::OkStatus();
}

// Writes a time-major [T,B,n] compute-type buffer to dst in the run's layout and dtype.
template <typename T, typename A>
void FromTimeMajor(const CPUDevice& d, const RnnRun& run, int64_t n, const A* src, T* dst) {
  const int64_t T_ = run.time, B = run.batch;
  ParallelFor(d, T_ * B, n * 8.0, n * 2.0, [&](int64_t begin, int64_t end) {
    for (int64_t tb = begin; tb < end; ++tb) {
      const int64_t t = tb / B, b = tb % B;
      T* row = dst + (run.time_major ? tb : b * T_ + t) * n;
      for (int64_t k = 0; k < n; ++k) row[k] = static_cast<T>(src[tb * n + k]);
    }
  });
}

// Everything one pseudo-layer's passes need, resolved once.
template <typename A>
struct PseudoLayer {
  const RnnModel& m;
  int64_t layer, dir, in_width;
  const A *w, *r, *proj, *bias_w, *bias_r;  // params regions (compute type)
  A *h, *c, *gates;                         // per-step states and activations (workspace)
  const A *h0, *c0;                         // initial state of this pseudo-layer

  PseudoLayer(const RnnModel& model, int64_t p, const A* params, A* ws, const WorkspaceLayout& lay,
              const A* h0_all, const A* c0_all, int64_t batch)
      : m(model), layer(p / model.num_dirs), dir(p % model.num_dirs) {
    in_width = m.layer_input(layer);
    const PseudoLayerRegions reg = RegionsOf(m, p);
    w = params + reg.w;
    r = params + reg.r;
    proj = params + reg.proj;
    bias_w = params + reg.bias_w;
    bias_r = params + reg.bias_r;
    h = ws + lay.h(p);
    c = m.mode == RnnMode::kLstm ? ws + lay.c(p) : nullptr;
    gates = ws + lay.gates(p);
    h0 = h0_all + p * batch * m.output_width();
    c0 = c0_all == nullptr ? nullptr : c0_all + p * batch * m.num_units;
  }
  // State before step `step` (the initial state, or the state after the previous step).
  const A* h_before(int64_t step, int64_t time, int64_t batch) const {
    if (step == 0) return h0;
    return h + TimeOf(dir, step - 1, time) * batch * m.output_width();
  }
  const A* c_before(int64_t step, int64_t time, int64_t batch) const {
    if (step == 0) return c0;
    return c + TimeOf(dir, step - 1, time) * batch * m.num_units;
  }
};

// Input projection of every step: xw[t*B + b] = W·x (or x itself per gate for skip input).
template <typename A>
void InputProjection(const CPUDevice& d, const PseudoLayer<A>& pl, int64_t rows, const A* x,
                     A* xw) {
  const int64_t G = pl.m.gate_width(), H = pl.m.num_units;
  if (!pl.m.skips(pl.layer)) {
    Gemm(d, false, true, rows, G, pl.in_width, x, pl.w, false, xw);
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

template <typename A, typename Math>
void ForwardPseudoLayer(const CPUDevice& d, const PseudoLayer<A>& pl, const RnnRun& run,
                        const std::vector<int64_t>& len, const A* x, A* xw, A* rec, A* m_buf,
                        A* proj_buf, A* y) {
  const RnnModel& m = pl.m;
  const int64_t T = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t G = m.gate_width(), D = m.num_dirs;
  InputProjection(d, pl, T * B, x, xw);
  const bool relu = m.mode == RnnMode::kRnnRelu;
  for (int64_t step = 0; step < T; ++step) {
    const int64_t t = TimeOf(pl.dir, step, T);
    const A* h_prev = pl.h_before(step, T, B);
    const A* c_prev = pl.c_before(step, T, B);
    A* h_out = pl.h + t * B * Hr;
    Gemm(d, false, true, B, G, Hr, h_prev, pl.r, false, rec);
    ParallelFor(d, B, H * 16.0 * sizeof(A), H * 60.0, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        A* saved = pl.gates + (t * B + b) * kSavedGates * H;
        if (t >= len[b]) {  // past this sequence's end: hold the state
          std::memcpy(h_out + b * Hr, h_prev + b * Hr, Hr * sizeof(A));
          if (pl.c) std::memcpy(pl.c + (t * B + b) * H, c_prev + b * H, H * sizeof(A));
          if (m.mode == RnnMode::kLstm || m.mode == RnnMode::kGru) {
            std::fill(saved, saved + kSavedGates * H, A(0));
          }
          continue;
        }
        // Pre-activation halves of gate g at unit j: input side (W·x + b_W), recurrent side
        // (R·h + b_R). One loop per mode, without branches, so that each vectorises.
        // (__restrict: these buffers never overlap; GCC then needs no alias checks.)
        const A* __restrict gx = xw + (t * B + b) * G;
        const A* __restrict gh = rec + b * G;
        const A* __restrict bw = pl.bias_w;
        const A* __restrict br = pl.bias_r;
        auto x_side = [=](int g, int64_t j) { return gx[g * H + j] + bw[g * H + j]; };
        auto h_side = [=](int g, int64_t j) { return gh[g * H + j] + br[g * H + j]; };
        if (m.mode == RnnMode::kLstm) {  // gates i, f, c, o: lstm_cell.h's IFCO layout
          const A* __restrict c_in = c_prev + b * H;
          A* __restrict c_out = pl.c + (t * B + b) * H;
          A* __restrict m_out = m.has_proj() ? m_buf + b * H : h_out + b * Hr;
          A* __restrict saved_out = saved;
          // cuDNN's LSTM: no forget bias, clipping or peepholes; constant here, so the selects
          // for them fold away and the loop vectorises.
          const CellParams<A> cell{A(0), A(0), false, false};
#pragma GCC ivdep  // distinct buffers: no alias checks needed
          for (int64_t j = 0; j < H; ++j) {
            const CellActivations<A> a = CellForward<A, Math>(
                cell, x_side(0, j) + h_side(0, j), x_side(2, j) + h_side(2, j),
                x_side(1, j) + h_side(1, j), x_side(3, j) + h_side(3, j), c_in[j], A(0), A(0),
                A(0));
            saved_out[j] = a.i;
            saved_out[H + j] = a.f;
            saved_out[2 * H + j] = a.ci;
            saved_out[3 * H + j] = a.o;
            c_out[j] = a.cs;
            m_out[j] = a.h;
          }
        } else if (m.mode == RnnMode::kGru) {
          const A* __restrict h_in = h_prev + b * Hr;
          A* __restrict saved_out = saved;
          A* __restrict h_row = h_out + b * Hr;
#pragma GCC ivdep
          for (int64_t j = 0; j < H; ++j) {
            const GruActivations<A> a =
                GruForward<A, Math>(x_side(0, j), x_side(1, j), x_side(2, j), h_side(0, j),
                                    h_side(1, j), h_side(2, j), h_in[j]);
            saved_out[j] = a.r;
            saved_out[H + j] = a.u;
            saved_out[2 * H + j] = a.candidate;
            saved_out[3 * H + j] = a.recurrent_candidate;
            h_row[j] = a.h;
          }
        } else {
#pragma GCC ivdep
          for (int64_t j = 0; j < H; ++j) {
            h_out[b * Hr + j] = SimpleRnnForward<A, Math>(relu, x_side(0, j) + h_side(0, j));
          }
        }
      }
    });
    if (m.has_proj()) {  // h = Pmat·m for the rows that ran
      Gemm(d, false, true, B, Hr, H, m_buf, pl.proj, false, proj_buf);
      for (int64_t b = 0; b < B; ++b) {
        if (t < len[b]) std::memcpy(h_out + b * Hr, proj_buf + b * Hr, Hr * sizeof(A));
      }
    }
  }
  // This direction's half of the layer output: the state where the sequence ran, else zero.
  ParallelFor(d, T * B, Hr * 8.0, Hr * 1.0, [&](int64_t begin, int64_t end) {
    for (int64_t tb = begin; tb < end; ++tb) {
      A* dst = y + tb * D * Hr + pl.dir * Hr;
      if (tb / B < len[tb % B]) {
        std::memcpy(dst, pl.h + tb * Hr, Hr * sizeof(A));
      } else {
        std::fill(dst, dst + Hr, A(0));
      }
    }
  });
}

template <typename T, typename A>
absl::Status Forward(OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                     const RnnDropout& dropout, const T* input, const T* input_h,
                     const T* input_c, const T* params, T* output, T* output_h, T* output_c,
                     uint8_t* workspace) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t LD = m.num_pseudo_layers(), D = m.num_dirs, G = m.gate_width();
  const bool lstm = m.mode == RnnMode::kLstm;
  if (T_ == 0 || B == 0) {  // nothing runs: the final state is the initial state
    Convert(d, input_h, output_h, LD * B * Hr);
    if (lstm) Convert(d, input_c, output_c, LD * B * H);
    return absl::OkStatus();
  }
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const WorkspaceLayout lay(m, run, dropout.active(m));
  A* ws = reinterpret_cast<A*>(workspace + sizeof(RnnReserveHeader));

  Tensor params_h, x_h, h0_h, c0_h, xw_h, rec_h, mbuf_h, pbuf_h, y_h;
  const A *P, *x0, *h0, *c0 = nullptr;
  TF_RETURN_IF_ERROR(AsAcc(ctx, params, CheckedParamsSize(m), &params_h, &P));
  TF_RETURN_IF_ERROR(ToTimeMajor(ctx, run, m.input_size, input, &x_h, &x0));
  TF_RETURN_IF_ERROR(AsAcc(ctx, input_h, LD * B * Hr, &h0_h, &h0));
  if (lstm) TF_RETURN_IF_ERROR(AsAcc(ctx, input_c, LD * B * H, &c0_h, &c0));
  A *xw, *rec, *m_buf = nullptr, *proj_buf = nullptr, *y;
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, T_ * B * G, &xw_h, &xw));
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, B * G, &rec_h, &rec));
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, T_ * B * D * Hr, &y_h, &y));
  if (m.has_proj()) {
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, B * H, &mbuf_h, &m_buf));
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, B * Hr, &pbuf_h, &proj_buf));
  }

  Tensor state_h;
  A* final_state;  // output_h then output_c, in the compute type
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, LD * B * (Hr + (lstm ? H : 0)), &state_h, &final_state));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const A* x = l == 0 ? x0 : ws + lay.input(l);
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t p = l * D + dir;
      const PseudoLayer<A> pl(m, p, P, ws, lay, h0, c0, B);
      ForwardPseudoLayer<A, MathFor<T>>(d, pl, run, len, x, xw, rec, m_buf, proj_buf, y);
      // Final state: after the last processed step (rows past their end held it there).
      const int64_t t_last = TimeOf(dir, T_ - 1, T_);
      std::memcpy(final_state + p * B * Hr, pl.h + t_last * B * Hr, B * Hr * sizeof(A));
      if (lstm) {
        std::memcpy(final_state + LD * B * Hr + p * B * H, pl.c + t_last * B * H,
                    B * H * sizeof(A));
      }
    }
    if (l + 1 < m.num_layers) {  // the next layer's input, dropped out when training
      A* next = ws + lay.input(l + 1);
      const int64_t n = T_ * B * D * Hr;
      if (dropout.active(m)) {
        A* mask = ws + lay.mask(l + 1);
        const A scale = A(1) / (A(1) - A(dropout.rate));
        const uint64_t stream = DropoutStream(dropout, l);
        ParallelFor(d, n, 16, 20, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            mask[k] = DropoutDrops(stream, k, dropout.rate) ? A(0) : scale;
            next[k] = y[k] * mask[k];
          }
        });
      } else {
        std::memcpy(next, y, n * sizeof(A));
      }
    }
  }
  FromTimeMajor(d, run, D * Hr, y, output);
  Convert(d, final_state, output_h, LD * B * Hr);
  if (lstm) Convert(d, final_state + LD * B * Hr, output_c, LD * B * H);
  return absl::OkStatus();
}

// Backward of one pseudo-layer: consumes dy (its direction's half) and the final-state
// gradients, writes its params gradients, the initial-state gradients, and adds dL/dx to dx.
template <typename A, typename Math>
void BackwardPseudoLayer(const CPUDevice& d, const PseudoLayer<A>& pl, const RnnRun& run,
                         const std::vector<int64_t>& len, const A* x, const A* dy, A* dh, A* dc,
                         A* dgx, A* dgh, A* dh_total, A* m_seq, A* dm, A* carry, A* direct,
                         A* h_prev_seq, A* dparams, const PseudoLayerRegions& reg, A* dx) {
  const RnnModel& m = pl.m;
  const int64_t T = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t G = m.gate_width(), D = m.num_dirs;
  const bool relu = m.mode == RnnMode::kRnnRelu, gru = m.mode == RnnMode::kGru;
  const ActivationGradients<A> no_direct{A(0), A(0), A(0), A(0), A(0)};
  for (int64_t step = T - 1; step >= 0; --step) {
    const int64_t t = TimeOf(pl.dir, step, T);
    const A* h_prev = pl.h_before(step, T, B);
    const A* c_prev = pl.c_before(step, T, B);
    std::memcpy(h_prev_seq + t * B * Hr, h_prev, B * Hr * sizeof(A));
    A* dht = dh_total + t * B * Hr;  // total dL/dh_t (zero where the row did not run)
    for (int64_t b = 0; b < B; ++b) {
      const bool active = t < len[b];
      for (int64_t k = 0; k < Hr; ++k) {
        dht[b * Hr + k] = active ? dh[b * Hr + k] + dy[(t * B + b) * D * Hr + pl.dir * Hr + k] : A(0);
      }
    }
    if (m.has_proj()) Gemm(d, false, false, B, H, Hr, dht, pl.proj, false, dm);  // dL/dm
    ParallelFor(d, B, H * 16.0 * sizeof(A), H * 60.0, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        A* gx = dgx + (t * B + b) * G;
        A* gh = dgh + (t * B + b) * G;
        if (t >= len[b]) {
          std::fill(gx, gx + G, A(0));
          if (gru) std::fill(gh, gh + G, A(0));
          if (m_seq) std::fill(m_seq + (t * B + b) * H, m_seq + (t * B + b + 1) * H, A(0));
          continue;
        }
        // (__restrict: distinct buffers, so GCC vectorises without alias checks; dc_row is read
        // and written at the same index only.)
        const A* __restrict saved = pl.gates + (t * B + b) * kSavedGates * H;
        const A* __restrict dh_row = dht + b * Hr;
        A* __restrict gx_row = gx;
        A* __restrict gh_row = gh;
        if (m.mode == RnnMode::kLstm) {
          const A* __restrict c_row = pl.c + (t * B + b) * H;
          const A* __restrict c_in = c_prev + b * H;
          // dL/dm is dL/dh without a projection.
          const A* __restrict dm_row = m.has_proj() ? dm + b * H : dh_row;
          A* m_row = m_seq ? m_seq + (t * B + b) * H : nullptr;
          A* __restrict dc_row = dc + b * H;
#pragma GCC ivdep
          for (int64_t j = 0; j < H; ++j) {
            const A co = Math::Tanh(c_row[j]);
            const CellActivations<A> a{saved[j], c_row[j], saved[H + j], saved[3 * H + j],
                                       saved[2 * H + j], co, A(0)};
            const CellGradients<A> g = CellBackward<A>(false, a, c_in[j], A(0), A(0), A(0),
                                                       dc_row[j], dm_row[j], no_direct);
            gx_row[j] = g.d_i;
            gx_row[H + j] = g.d_f;
            gx_row[2 * H + j] = g.d_c;
            gx_row[3 * H + j] = g.d_o;
            dc_row[j] = g.cs_prev_grad;
          }
          if (m_row) {  // m = o * tanh(c), for dPmat
            for (int64_t j = 0; j < H; ++j) m_row[j] = saved[3 * H + j] * Math::Tanh(c_row[j]);
          }
        } else if (gru) {
          const A* __restrict h_in = h_prev + b * Hr;
          A* __restrict direct_row = direct + b * Hr;
#pragma GCC ivdep
          for (int64_t j = 0; j < H; ++j) {
            const GruActivations<A> a{saved[j], saved[H + j], saved[2 * H + j], saved[3 * H + j],
                                      A(0)};
            const GruGradients<A> g = GruBackward<A>(a, h_in[j], dh_row[j]);
            gx_row[j] = gh_row[j] = g.d_r;
            gx_row[H + j] = gh_row[H + j] = g.d_u;
            gx_row[2 * H + j] = g.d_xc;
            gh_row[2 * H + j] = g.d_hc;
            direct_row[j] = g.h_prev_direct;
          }
        } else {
          const A* h_row = pl.h + (t * B + b) * Hr;
#pragma GCC ivdep
          for (int64_t j = 0; j < H; ++j) gx[j] = SimpleRnnBackward<A>(relu, h_row[j], dh_row[j]);
        }
      }
    });
    // dL/dh_{prev}: R^T through the recurrent-side gate gradients (+ GRU's direct term); rows
    // that did not run pass their carried gradient through.
    Gemm(d, false, false, B, Hr, G, dgh + t * B * G, pl.r, false, carry);
    for (int64_t b = 0; b < B; ++b) {
      if (t >= len[b]) continue;
      for (int64_t k = 0; k < Hr; ++k) {
        dh[b * Hr + k] = carry[b * Hr + k] + (gru ? direct[b * Hr + k] : A(0));
      }
    }
  }
  // Whole-sequence products.
  const int64_t rows = T * B;
  if (!m.skips(pl.layer)) {
    Gemm(d, true, false, G, pl.in_width, rows, dgx, x, false, dparams + reg.w);
    Gemm(d, false, false, rows, pl.in_width, G, dgx, pl.w, pl.dir > 0, dx);
  } else {  // skip input: x was added to every gate
    ParallelFor(d, rows, G * 8.0, G * 1.0, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        for (int64_t j = 0; j < H; ++j) {
          A sum = pl.dir > 0 ? dx[row * H + j] : A(0);
          for (int g = 0; g < m.gates(); ++g) sum += dgx[row * G + g * H + j];
          dx[row * H + j] = sum;
        }
      }
    });
  }
  Gemm(d, true, false, G, Hr, rows, dgh, h_prev_seq, false, dparams + reg.r);
  if (m.has_proj()) Gemm(d, true, false, Hr, H, rows, dh_total, m_seq, false, dparams + reg.proj);
  ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t j) { return dgx[r * G + j]; }, dparams + reg.bias_w);
  ReduceRows<A>(d, rows, G, [&](int64_t r, int64_t j) { return dgh[r * G + j]; }, dparams + reg.bias_r);
}

template <typename T, typename A>
absl::Status Backward(OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                      const T* input, const T* input_h, const T* input_c, const T* params,
                      const T* output_backprop, const T* output_h_backprop,
                      const T* output_c_backprop, const uint8_t* reserve, T* input_backprop,
                      T* input_h_backprop, T* input_c_backprop, T* params_backprop) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  const int64_t T_ = run.time, B = run.batch, H = m.num_units, Hr = m.output_width();
  const int64_t LD = m.num_pseudo_layers(), D = m.num_dirs, G = m.gate_width();
  const bool lstm = m.mode == RnnMode::kLstm, gru = m.mode == RnnMode::kGru;
  const int64_t n_params = CheckedParamsSize(m);
  if (T_ == 0 || B == 0) {  // nothing ran: state gradients pass through, the rest is zero
    Convert(d, output_h_backprop, input_h_backprop, LD * B * Hr);
    if (lstm) Convert(d, output_c_backprop, input_c_backprop, LD * B * H);
    Fill(d, params_backprop, n_params, T(0));
    return absl::OkStatus();
  }
  std::vector<int64_t> len(B, T_);
  if (run.seq_lengths != nullptr) {
    for (int64_t b = 0; b < B; ++b) len[b] = run.seq_lengths[b];
  }
  const auto* header = reinterpret_cast<const RnnReserveHeader*>(reserve);
  const bool dropout = header->dropout != 0;
  const WorkspaceLayout lay(m, run, dropout);
  // The forward's saved states are read only; PseudoLayer's pointers are non-const for reuse.
  A* ws = reinterpret_cast<A*>(const_cast<uint8_t*>(reserve) + sizeof(RnnReserveHeader));

  Tensor holders[16];
  const A *P, *x0, *h0, *c0 = nullptr, *dy_top, *dhT, *dcT = nullptr;
  TF_RETURN_IF_ERROR(AsAcc(ctx, params, n_params, &holders[0], &P));
  TF_RETURN_IF_ERROR(ToTimeMajor(ctx, run, m.input_size, input, &holders[1], &x0));
  TF_RETURN_IF_ERROR(AsAcc(ctx, input_h, LD * B * Hr, &holders[2], &h0));
  if (lstm) TF_RETURN_IF_ERROR(AsAcc(ctx, input_c, LD * B * H, &holders[3], &c0));
  TF_RETURN_IF_ERROR(ToTimeMajor(ctx, run, D * Hr, output_backprop, &holders[4], &dy_top));
  TF_RETURN_IF_ERROR(AsAcc(ctx, output_h_backprop, LD * B * Hr, &holders[5], &dhT));
  if (lstm) TF_RETURN_IF_ERROR(AsAcc(ctx, output_c_backprop, LD * B * H, &holders[6], &dcT));

  const int64_t rows = T_ * B, max_in = std::max(m.input_size, D * Hr);
  A *dparams, *dgx, *dgh, *dh_total, *m_seq = nullptr, *dm = nullptr, *carry, *direct = nullptr;
  A *h_prev_seq, *dx, *dy_below, *d_state;
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, n_params, &holders[7], &dparams));
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, rows * G, &holders[8], &dgx));
  dgh = dgx;  // recurrent-side gate gradients equal the input-side ones except for GRU
  if (gru) TF_RETURN_IF_ERROR(AllocateScratch(ctx, rows * G, &holders[9], &dgh));
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, rows * Hr, &holders[10], &dh_total));
  if (m.has_proj()) {
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, rows * H, &holders[11], &m_seq));
    TF_RETURN_IF_ERROR(AllocateScratch(ctx, B * H, &holders[12], &dm));
  }
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, B * Hr * 2, &holders[13], &carry));
  if (gru) direct = carry + B * Hr;
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, rows * Hr, &holders[14], &h_prev_seq));
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, rows * max_in * 2, &holders[15], &dx));
  dy_below = dx + rows * max_in;
  Tensor state_holder;
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, LD * B * (Hr + H), &state_holder, &d_state));
  Fill(d, dparams, n_params, A(0));

  const A* dy = dy_top;
  for (int64_t l = m.num_layers - 1; l >= 0; --l) {
    const A* x = l == 0 ? x0 : ws + lay.input(l);
    for (int64_t dir = 0; dir < D; ++dir) {
      const int64_t p = l * D + dir;
      const PseudoLayer<A> pl(m, p, P, ws, lay, h0, c0, B);
      A* dh = d_state + p * B * (Hr + H);
      A* dc = dh + B * Hr;
      std::memcpy(dh, dhT + p * B * Hr, B * Hr * sizeof(A));
      if (lstm) std::memcpy(dc, dcT + p * B * H, B * H * sizeof(A));
      BackwardPseudoLayer<A, MathFor<T>>(d, pl, run, len, x, dy, dh, dc, dgx, dgh, dh_total, m_seq, dm, carry,
                          direct, h_prev_seq, dparams, RegionsOf(m, p), dx);
      Convert(d, dh, input_h_backprop + p * B * Hr, B * Hr);
      if (lstm) Convert(d, dc, input_c_backprop + p * B * H, B * H);
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
  FromTimeMajor(d, run, m.input_size, dx, input_backprop);
  Convert(d, dparams, params_backprop, n_params);
  return absl::OkStatus();
}

}  // namespace

template <typename T>
struct CudnnRnnForward<CPUDevice, T> {
  absl::Status operator()(OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const RnnDropout& dropout, const T* input, const T* input_h,
                          const T* input_c, const T* params, T* output, T* output_h,
                          T* output_c, uint8_t* workspace) {
    return Forward<T, typename AccTypeOf<T>::type>(ctx, m, run, dropout, input, input_h, input_c,
                                                   params, output, output_h, output_c, workspace);
  }
};

template <typename T>
struct CudnnRnnBackward<CPUDevice, T> {
  absl::Status operator()(OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const T* input, const T* input_h, const T* input_c, const T* params,
                          const T* output_backprop, const T* output_h_backprop,
                          const T* output_c_backprop, const uint8_t* reserve, T* input_backprop,
                          T* input_h_backprop, T* input_c_backprop, T* params_backprop) {
    return Backward<T, typename AccTypeOf<T>::type>(
        ctx, m, run, input, input_h, input_c, params, output_backprop, output_h_backprop,
        output_c_backprop, reserve, input_backprop, input_h_backprop, input_c_backprop,
        params_backprop);
  }
};

#define TF_LSTM_INSTANTIATE_CPU(T)                 \
  template struct CudnnRnnForward<CPUDevice, T>;   \
  template struct CudnnRnnBackward<CPUDevice, T>;
TF_LSTM_INSTANTIATE_CPU(Eigen::half)
TF_LSTM_INSTANTIATE_CPU(Eigen::bfloat16)
TF_LSTM_INSTANTIATE_CPU(float)
TF_LSTM_INSTANTIATE_CPU(double)
#undef TF_LSTM_INSTANTIATE_CPU

}  // namespace tf_lstm_ops
