// The LayerNorm GRU and LayerNorm SimpleRNN (docs/layer_norm_rnn.md): their model, run and
// reserve-space layout, and the cells around the norms, framework-free so every engine and the
// binding share them. The GRU's cell after its norms is the CudnnRNN family's GRU resetting after
// (cc/core/cudnn_rnn_cells.h), so the two families compute a gate the same way.
#ifndef TF_LSTM_OPS_CC_CORE_LAYER_NORM_RNN_TYPES_H_
#define TF_LSTM_OPS_CC_CORE_LAYER_NORM_RNN_TYPES_H_

#include <cstdint>
#include <cstring>
#include <string_view>

#include "cc/core/cudnn_rnn_cells.h"
#include "cc/core/cudnn_rnn_types.h"
#include "cc/core/rnn_activation.h"

namespace tf_lstm_ops {

// kGru: haste's LayerNormGRU on Keras' GRU(reset_after=True) weights, X = LN(x·W; γx) + b_x,
// U = LN(h·R; γh) + b_h (each norm over all 3H gates z, r, h), z = rec(X_z + U_z), r =
// rec(X_r + U_r), g = act(X_h + r ⊙ U_h), h = z ⊙ h_{t-1} + (1 - z) ⊙ g.
// kSimpleRnn: TF Addons' LayerNormSimpleRNNCell, h = act(LN(x·W + h·R; γ) + b).
enum class LayerNormCell { kGru, kSimpleRnn };

inline bool LayerNormCellNamed(std::string_view name, LayerNormCell* cell) {
  if (name == "gru") {
    *cell = LayerNormCell::kGru;
  } else if (name == "simple_rnn") {
    *cell = LayerNormCell::kSimpleRnn;
  } else {
    return false;
  }
  return true;
}

struct LayerNormRnnModel {
  int64_t input_size;  // I
  int64_t num_units;   // H
  LayerNormCell cell;
  RnnActivation activation;            // the GRU candidate's, the SimpleRNN's
  RnnActivation recurrent_activation;  // the GRU gates' (unused by the SimpleRNN)
  float epsilon;                       // of every norm
  bool gru() const { return cell == LayerNormCell::kGru; }
  int64_t gates() const { return gru() ? 3 : 1; }
  int64_t gate_width() const { return gates() * num_units; }
};

// One run: sizes, lengths, the recurrent dropout mask (one [B, H] mask on h_{t-1} in h·R for
// every gate, the GRU's blend reading the unmasked h_{t-1}, as Keras; null: none) and zoneout of h
// (RnnZoneout, docs/cudnn_rnn.md §4.9). There is no cell state: zoneout_c is never active (it
// is there for the helpers every RNN engine shares, cc/cpu/rnn_inputs.h).
struct LayerNormRnnRun {
  int64_t time, batch;
  bool time_major;
  const int32_t* seq_lengths;  // [B] in [0, T] (host memory), or nullptr: every length is T
  bool training;               // whether the workspace keeps what a backward reads
  const void* recurrent_mask = nullptr;
  RnnZoneout zoneout_h;
  static constexpr RnnZoneout zoneout_c{};
};

// The weights in Keras' layout, in the element type P: kernel [I, G·H], recurrent_kernel
// [H, G·H], and
//  - GRU: bias [2, 3H] (Keras' reset_after bias: b_x, then b_h), gamma_x and gamma_h [3H];
//  - SimpleRNN: bias [H], gamma_x [H] (the norm of x·W + h·R), gamma_h unused (null).
template <typename P>
struct LayerNormRnnWeights {
  const P *kernel, *recurrent_kernel, *bias, *gamma_x, *gamma_h;
};
template <typename P>
struct LayerNormRnnWeightGrads {
  P *kernel, *recurrent_kernel, *bias, *gamma_x, *gamma_h;
};

// Offsets (in compute-type elements, after the header) of what the workspace holds: the state h
// after every step ([T·B, H], time-major) and, when training, per (t, b) row
//  - GRU: the cell's saved values [a_r, a_z, a_g, U_h] ([4H], as GruAnyForwardAt saves them: the
//    pre-activations of r, z and the candidate and the candidate's recurrent term), the
//    normalised x·W and h·R ([3H] each) and the two norms' r = 1/σ;
//  - SimpleRNN: the normalised x·W + h·R ([H]) and its r.
class LayerNormRnnLayout {
 public:
  LayerNormRnnLayout(const LayerNormRnnModel& m, const LayerNormRnnRun& run) {
    const int64_t rows = run.time * run.batch, H = m.num_units, G = m.gate_width();
    const bool gru = m.gru();
    h_ = 0;
    saved_ = rows * H;
    xhat_x_ = saved_ + (gru ? rows * 4 * H : 0);
    xhat_h_ = xhat_x_ + rows * G;
    rstd_ = xhat_h_ + (gru ? rows * G : 0);
    total_ = run.training ? rstd_ + rows * 2 : saved_;
  }
  int64_t h() const { return h_; }
  int64_t saved() const { return saved_; }    // GRU only
  int64_t xhat_x() const { return xhat_x_; }  // SimpleRNN: of x·W + h·R
  int64_t xhat_h() const { return xhat_h_; }  // GRU only
  int64_t rstd() const { return rstd_; }      // [T·B][2]: x·W's (SimpleRNN: the sum's), h·R's
  int64_t total() const { return total_; }

 private:
  int64_t h_, saved_, xhat_x_, xhat_h_, rstd_, total_;
};

constexpr uint64_t kLayerNormRnnMagic = 0x746c736c6e726e31ULL;  // "tlslnrn1"

// Bytes of the workspace (header included), or -1 on int64 overflow.
inline int64_t LayerNormRnnWorkspaceBytes(const LayerNormRnnModel& m, const LayerNormRnnRun& run,
                                          int acc_size) {
  int64_t rows, per_row, total;
  if (__builtin_mul_overflow(run.time, run.batch, &rows) ||
      __builtin_mul_overflow(m.num_units, int64_t{11}, &per_row) ||
      __builtin_add_overflow(per_row, int64_t{2}, &per_row) ||
      __builtin_mul_overflow(rows, per_row, &total) ||
      __builtin_mul_overflow(total, static_cast<int64_t>(acc_size), &total) ||
      total > (int64_t{1} << 62)) {
    return -1;
  }
  return sizeof(RnnReserveHeader) + LayerNormRnnLayout(m, run).total() * acc_size;
}

// What the saved activations depend on, for Backprop's check of its reserve space.
inline uint64_t LayerNormRnnConfigHash(const LayerNormRnnModel& m, const LayerNormRnnRun& run,
                                       int dtype_size) {
  uint32_t epsilon_bits;
  std::memcpy(&epsilon_bits, &m.epsilon, sizeof(epsilon_bits));
  uint64_t h = Mix(kLayerNormRnnMagic);
  for (int64_t v :
       {m.input_size, m.num_units, static_cast<int64_t>(m.cell),
        static_cast<int64_t>(m.activation), static_cast<int64_t>(m.recurrent_activation),
        static_cast<int64_t>(epsilon_bits), run.time, run.batch,
        static_cast<int64_t>(run.time_major), static_cast<int64_t>(dtype_size),
        static_cast<int64_t>(run.recurrent_mask != nullptr),
        static_cast<int64_t>(run.zoneout_h.active() ? 1 + run.zoneout_h.per_element : 0)}) {
    h = Mix(h ^ static_cast<uint64_t>(v));
  }
  for (int64_t b = 0; b < run.batch; ++b) {
    h = Mix(h ^ static_cast<uint64_t>(run.seq_lengths ? run.seq_lengths[b] : run.time));
  }
  return h;
}

inline RnnReserveHeader LayerNormRnnHeader(const LayerNormRnnModel& m, const LayerNormRnnRun& run,
                                           int dtype_size, int acc_size) {
  RnnReserveHeader header{};
  header.magic = kLayerNormRnnMagic;
  header.config_hash = LayerNormRnnConfigHash(m, run, dtype_size);
  header.bytes = LayerNormRnnWorkspaceBytes(m, run, acc_size);
  return header;
}

// ---- the cells around the norms (docs/layer_norm_rnn.md §1), one unit of one row -----------------
// Every engine calls these, so that the CPU and GPU engines differ only in how they sum a row
// (cc/core/layer_norm.h). Keras' gate order z, r, h: gate g of a [3H] row is [g·H, (g+1)·H).

// The GRU's unit j from its input side X ([3H], b_x included) and recurrent side U ([3H], b_h
// included): the new h (before zoneout); saves [a_r, a_z, a_g, U_h] at saved[{0,1,2,3}·H + j].
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A LayerNormGruForwardAt(const LayerNormRnnModel& m, const A* X,
                                                   const A* U, int64_t j, A h_prev, A* saved) {
  const int64_t H = m.num_units;
  return GruAnyForwardAt<A, Math>(m.activation, m.recurrent_activation, X[H + j], X[j],
                                  X[2 * H + j], U[H + j], U[j], U[2 * H + j], h_prev, saved, H,
                                  j);
}

// Its backward from the saved values and dh = dL/dh̃ (the new h before zoneout): the gradients of
// X (dx[g·H + j]) and U (du[g·H + j]), and h_prev's direct term z ⊙ dh.
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A LayerNormGruBackwardAt(const LayerNormRnnModel& m, const A* saved,
                                                    int64_t j, A h_prev, A dh, A* dx, A* du) {
  const int64_t H = m.num_units;
  const GruGradients<A> g = GruAnyBackwardAt<A, Math>(m.activation, m.recurrent_activation,
                                                      saved, H, j, h_prev, dh);
  dx[j] = g.d_u;
  dx[H + j] = g.d_r;
  dx[2 * H + j] = g.d_xc;
  du[j] = g.d_u;
  du[H + j] = g.d_r;
  du[2 * H + j] = g.d_hc;
  return g.h_prev_direct;
}

// The SimpleRNN's pre-activation at unit j: a = x̂·γ + b.
template <typename A>
TF_LSTM_HOST_DEVICE inline A LayerNormSimplePreActivation(A xhat, A gamma, A bias) {
  return xhat * gamma + bias;
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_LAYER_NORM_RNN_TYPES_H_
