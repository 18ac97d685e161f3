// What the LayerNorm families' GPU engines (cc/layer_norm_lstm, cc/layer_norm_rnn) share:
//  - a row's norm across the threads of a block (Backend::Blocks, one block per row), forward and
//    backward, with the per-element steps of cc/core/layer_norm.h and the sums of NormalizeRow /
//    NormalizeRowBackward (in double, two passes, in an order fixed by the sizes: BlockSums);
//  - the input side's norm over all T·B rows, and its backward;
//  - the recurrent state's GEMM operand and gradient;
//  - what every pass converts to the compute type alike (InputStaging), and the scratch-size
//    query of a carving.
//
// Thread `thread` of a block owns elements k = thread, thread + threads, ... of every row it
// touches, in every part, so a value it writes in one part it may read in the next without a
// barrier; what other threads wrote it reads only after a part boundary.
#ifndef TF_LSTM_OPS_CC_GPU_LAYER_NORM_COMMON_H_
#define TF_LSTM_OPS_CC_GPU_LAYER_NORM_COMMON_H_

#include <cstdint>
#include <type_traits>

#include "cc/core/cudnn_rnn_types.h"
#include "cc/core/layer_norm.h"
#include "cc/gpu/common.h"
#include "cc/gpu/reductions.h"
#include "cc/gpu/rnn_inputs.h"

namespace tf_lstm_ops {
namespace gpu {
namespace ln_common {

// ---- a row's norm across a block ----------------------------------------------------------------

// The statistics of a row v[0, n) as NormalizeRow computes them, over four parts in two slots of
// `sums` (slot, slot + 1): its sum (parts 0-1), then its squared deviations from the mean (parts
// 2-3). Mu and Rstd hold from the part after.
template <typename A>
struct RowStats {
  static constexpr int kParts = 4;
  BlockSums sums;
  int slot;
  int64_t n;
  double epsilon;
  TF_LSTM_HOST_DEVICE double Mean(void* shared) const {
    return sums.Total(shared, slot) / static_cast<double>(n);
  }
  TF_LSTM_HOST_DEVICE A Mu(void* shared) const { return static_cast<A>(Mean(shared)); }
  TF_LSTM_HOST_DEVICE A Rstd(void* shared) const {
    return LayerNormRstd<A>(sums.Total(shared, slot + 1), n, epsilon);
  }
  TF_LSTM_HOST_DEVICE void Part(int part, const A* v, int thread, void* shared) const {
    if (part % 2 == 1) {
      sums.Fold(shared, slot + part / 2, thread);
      return;
    }
    const double mean = part == 0 ? 0.0 : Mean(shared);
    double sum = 0;
    for (int64_t k = thread; k < n; k += sums.threads) {
      if (part == 0) {
        sum += v[k];
      } else {
        const double dev = v[k] - mean;
        sum += dev * dev;
      }
    }
    sums.Put(shared, slot + part / 2, thread, sum);
  }
};

// The two means of a row's norm backward (NormalizeRowBackward) with dx̂ = d ⊙ γ: m1 of dx̂ and
// m2 of dx̂ ⊙ x̂, over two parts in slots slot and slot + 1; ForEachGrad holds from the part
// after.
template <typename A>
struct RowGradSums {
  static constexpr int kParts = 2;
  BlockSums sums;
  int slot;
  int64_t n;
  TF_LSTM_HOST_DEVICE void Part(int part, const A* d, const A* gamma, const A* xhat, int thread,
                                void* shared) const {
    if (part == 1) {
      sums.Fold(shared, slot, thread);
      sums.Fold(shared, slot + 1, thread);
      return;
    }
    double s1 = 0, s2 = 0;
    for (int64_t k = thread; k < n; k += sums.threads) {
      const A dxhat = d[k] * gamma[k];
      s1 += dxhat;
      s2 += static_cast<double>(dxhat) * xhat[k];
    }
    sums.Put(shared, slot, thread, s1);
    sums.Put(shared, slot + 1, thread, s2);
  }
  // f(k, dv[k]) for k of this thread: dv = r·((dx̂ − m1) − x̂·m2).
  template <typename F>
  TF_LSTM_HOST_DEVICE void ForEachGrad(const A* d, const A* gamma, const A* xhat, A r, int thread,
                                       void* shared, const F& f) const {
    const A m1 = static_cast<A>(sums.Total(shared, slot) / static_cast<double>(n));
    const A m2 = static_cast<A>(sums.Total(shared, slot + 1) / static_cast<double>(n));
    for (int64_t k = thread; k < n; k += sums.threads) {
      f(k, LayerNormGrad(d[k] * gamma[k], xhat[k], r, m1, m2));
    }
  }
};

// ---- the input side's norm over every row r = t·B + b (block per row) ---------------------------

// In place: zx = LN(x·W)·γ + β (+ bias where given), keeping x̂ and r when training. The
// workspace keeps `rstd_stride` values of r per row, x·W's first.
template <typename A>
struct InputNormFn {
  static constexpr int kParts = RowStats<A>::kParts + 1;
  RowStats<A> stats;  // n = the row's width
  A* zx;              // [T·B, n]
  A *xhat, *rstd;     // the workspace's x̂ [T·B, n] and r [T·B][rstd_stride], or null (inference)
  int64_t rstd_stride;
  const A *gamma, *beta;
  const A* bias;  // added after the norm's β (the LSTM's b), or null
  TF_LSTM_HOST_DEVICE void operator()(int64_t r, int thread, int part, void* shared) const {
    const int64_t n = stats.n;
    A* row = zx + r * n;
    if (part < RowStats<A>::kParts) {
      stats.Part(part, row, thread, shared);
      return;
    }
    const A mu = stats.Mu(shared), rs = stats.Rstd(shared);
    for (int64_t k = thread; k < n; k += stats.sums.threads) {
      const A x = LayerNormXhat(row[k], mu, rs);
      if (xhat != nullptr) xhat[r * n + k] = x;
      const A y = x * gamma[k] + beta[k];
      row[k] = bias == nullptr ? y : y + bias[k];
    }
    if (thread == 0 && rstd != nullptr) rstd[r * rstd_stride] = rs;
  }
};

// Its backward, in place: d (dL/d(LN(x·W)·γ), zero for rows past their length) becomes
// dL/d(x·W). Rows past their length hold zeros already.
template <typename A>
struct InputNormBackFn {
  static constexpr int kParts = RowGradSums<A>::kParts + 1;
  RowGradSums<A> sums;  // n = the row's width
  A* d;                 // [T·B, n]
  const A *xhat, *rstd;
  int64_t rstd_stride;
  const A* gamma;
  const int32_t* len;
  int64_t batch;
  TF_LSTM_HOST_DEVICE void operator()(int64_t r, int thread, int part, void* shared) const {
    if (r / batch >= len[r % batch]) return;
    const int64_t n = sums.n;
    A* row = d + r * n;
    if (part < RowGradSums<A>::kParts) {
      sums.Part(part, row, gamma, xhat + r * n, thread, shared);
    } else {
      sums.ForEachGrad(row, gamma, xhat + r * n, rstd[r * rstd_stride], thread, shared,
                       [&](int64_t k, A g) { row[k] = g; });
    }
  }
};

// ---- the recurrent state ------------------------------------------------------------------------

// out [steps·B, H] (i < n): h_{t-1} of every (t, b), times the mask when given: the recurrent
// GEMMs' operand (the forward's first, all of dR's).
template <typename A>
struct MaskedPrevStateFn {
  const A *h0, *h;  // h0 [B, H]; the workspace's states [T·B, H]
  const A* mask;    // [B, H] or null
  A* out;
  int64_t bh;  // B·H
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t t = i / bh, k = i - t * bh;
    const A v = t == 0 ? h0[k] : h[(t - 1) * bh + k];
    out[i] = mask == nullptr ? v : MaskedOperand(v, mask[k]);
  }
};

// dL/dh_{t-1} of the rows that ran step t from that step's GEMM d(h·R)·Rᵀ (`carry`): through the
// mask, plus the terms that reach h_{t-1} directly (zoneout's, the GRU's blend).
template <typename A>
struct Carry {
  const A* carry;   // [B, H]
  const A* direct;  // [B, H], or null: none
  const A* mask;    // [B, H] or null
  TF_LSTM_HOST_DEVICE A At(int64_t i) const {
    const A through_r = mask == nullptr ? carry[i] : MaskedOperand(carry[i], mask[i]);
    return through_r + (direct == nullptr ? A(0) : direct[i]);
  }
};

// dL/dh_0 after the loop: the rows that ran step 0 take its GEMM (Carry), the others keep theirs.
template <typename A, typename T>
struct FirstStateGradFn {
  Carry<A> carry;
  const A* dh;
  T* out;
  const int32_t* len;
  int64_t H;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const {
    out[i] = Cast<T>(len[i / H] > 0 ? carry.At(i) : dh[i]);
  }
};

// ---- the engines' scaffolding -------------------------------------------------------------------

// What every pass converts to the compute type alike: N weight arrays (a family's weights struct,
// in order), the sequence x (time-major), S initial states [B, H], the recurrent mask [B, H] and
// zoneout's weights. Each is the storage itself where T == A allows, else a compute-type copy in
// scratch: Take carves the copies (the same call for the size query and the run), Convert fills
// them and gives the views.
template <typename T, int N, int S>
struct InputStaging {
  using A = Acc<T>;
  static constexpr bool kSame = std::is_same_v<T, A>;
  struct Inputs {
    const A* weights[N];
    const A *x, *states[S];
    const A* mask;  // null without one
    Zoneout<A> zoneout;
  };
  int64_t sizes[N], input_size, H;
  A *weights[N], *x, *states[S], *mask;
  ZoneoutStaging<A> zoneout;

  template <typename Run>
  static InputStaging Take(ScratchCarver* s, const Run& run, const int64_t (&weight_sizes)[N],
                           int64_t input_size, int64_t H) {
    const int64_t B = run.batch;
    InputStaging st;
    st.input_size = input_size;
    st.H = H;
    for (int k = 0; k < N; ++k) {
      st.sizes[k] = weight_sizes[k];
      st.weights[k] = s->Take<A>(kSame ? 0 : weight_sizes[k]);
    }
    st.x = s->Take<A>(kSame && run.time_major ? 0 : run.time * B * input_size);
    for (int k = 0; k < S; ++k) st.states[k] = s->Take<A>(kSame ? 0 : B * H);
    st.mask = s->Take<A>(kSame || run.recurrent_mask == nullptr ? 0 : B * H);
    st.zoneout = TakeZoneout<T, A>(s, run, H);
    return st;
  }

  template <typename Backend, typename Run>
  cudaError_t Convert(const Backend& be, const Run& run, const T* const (&w)[N], const T* seq,
                      const T* const (&initial)[S], Inputs* in) const {
    const int64_t B = run.batch;
    for (int k = 0; k < N; ++k) {
      TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, w[k], sizes[k], weights[k], &in->weights[k]));
    }
    TF_LSTM_GPU_RETURN_IF_ERROR(ToTimeMajor(be, run, input_size, seq, x, &in->x));
    for (int k = 0; k < S; ++k) {
      TF_LSTM_GPU_RETURN_IF_ERROR(AsAcc(be, initial[k], B * H, states[k], &in->states[k]));
    }
    in->mask = nullptr;
    if (run.recurrent_mask != nullptr) {
      TF_LSTM_GPU_RETURN_IF_ERROR(
          AsAcc(be, static_cast<const T*>(run.recurrent_mask), B * H, mask, &in->mask));
    }
    return ConvertZoneout<T>(be, run, H, zoneout, &in->zoneout);
  }
};

// The size query of a scratch carving: carve(nullptr, m, run, &bytes)'s bytes.
template <typename Buffers, typename Model, typename Run>
size_t CarvedBytes(Buffers (*carve)(void*, const Model&, const Run&, size_t*), const Model& m,
                   const Run& run) {
  size_t bytes;
  carve(nullptr, m, run, &bytes);
  return bytes;
}

// The output itself where it is in the compute type (and, for a sequence, time-major), else the
// compute-type scratch it is converted from.
template <typename T, typename A>
A* OutOrScratch(T* out, A* scratch, bool time_major = true) {
  if constexpr (std::is_same_v<T, A>) {
    if (time_major) return out;
  }
  (void)out;
  return scratch;
}

}  // namespace ln_common
}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_LAYER_NORM_COMMON_H_
