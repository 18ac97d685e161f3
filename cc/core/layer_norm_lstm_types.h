// The LayerNorm LSTM (docs/layer_norm_lstm.md): its model, run and reserve-space layout, and the
// cell equations around the norms, framework-free so every engine and the binding share them.
#ifndef TF_LSTM_OPS_CC_CORE_LAYER_NORM_LSTM_TYPES_H_
#define TF_LSTM_OPS_CC_CORE_LAYER_NORM_LSTM_TYPES_H_

#include <cstdint>
#include <cstring>
#include <string_view>

#include "cc/core/cudnn_rnn_types.h"

namespace tf_lstm_ops {

// Where the cell state is normalised (docs/layer_norm_lstm.md §1): kAddons (TF Addons'
// LayerNormLSTMCell, PyTorch's fastrnns cell) carries c = LN(c'); kPaper (Ba et al.'s
// supplement, haste) carries the raw c' and normalises it only inside the output's tanh.
enum class LayerNormPreset { kAddons, kPaper };

inline bool LayerNormPresetNamed(std::string_view name, LayerNormPreset* preset) {
  if (name == "addons") {
    *preset = LayerNormPreset::kAddons;
  } else if (name == "paper") {
    *preset = LayerNormPreset::kPaper;
  } else {
    return false;
  }
  return true;
}

struct LayerNormLstmModel {
  int64_t input_size;  // I
  int64_t num_units;   // H; gates i, f, c, o (Keras' order), each H wide
  LayerNormPreset preset;
  float epsilon;  // of all three norms
  int64_t gate_width() const { return 4 * num_units; }
};

// One run: sizes, lengths, the recurrent dropout mask (TF Addons': one [B, H] mask on h_{t-1}
// for every gate; null: none) and zoneout (RnnZoneout, docs/cudnn_rnn.md §4.9: h and c).
struct LayerNormLstmRun {
  int64_t time, batch;
  bool time_major;
  const int32_t* seq_lengths;  // [B] in [0, T] (host memory), or nullptr: every length is T
  bool training;               // whether the workspace keeps what a backward reads
  const void* recurrent_mask = nullptr;
  RnnZoneout zoneout_h, zoneout_c;
};

// The weights in Keras' layout, in the element type P (a storage type, or the compute type of an
// engine's converted copies): kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H] (gates i, f,
// c, o), and the norms' γ and β: of x·W and h·R [4H] each, of c [H].
template <typename P>
struct LayerNormLstmWeights {
  const P *kernel, *recurrent_kernel, *bias;
  const P *gamma_x, *beta_x, *gamma_h, *beta_h, *gamma_c, *beta_c;
};
// Their gradients, the same shapes.
template <typename P>
struct LayerNormLstmWeightGrads {
  P *kernel, *recurrent_kernel, *bias;
  P *gamma_x, *beta_x, *gamma_h, *beta_h, *gamma_c, *beta_c;
};

// Offsets (in compute-type elements, after the header) of what the workspace holds: the states
// h and c after every step ([T·B, H] each, time-major) and, when training, per (t, b) row the
// gate values i, f, g, o ([4H]), the normalised x·W and h·R ([4H] each), the normalised c'
// ([H]) and the three norms' r = 1/σ.
class LayerNormLstmLayout {
 public:
  LayerNormLstmLayout(const LayerNormLstmModel& m, const LayerNormLstmRun& run) {
    const int64_t rows = run.time * run.batch, H = m.num_units;
    h_ = 0;
    c_ = rows * H;
    gates_ = 2 * rows * H;
    xhat_x_ = gates_ + rows * 4 * H;
    xhat_h_ = xhat_x_ + rows * 4 * H;
    xhat_c_ = xhat_h_ + rows * 4 * H;
    rstd_ = xhat_c_ + rows * H;
    total_ = run.training ? rstd_ + rows * 3 : gates_;
  }
  int64_t h() const { return h_; }
  int64_t c() const { return c_; }
  int64_t gates() const { return gates_; }
  int64_t xhat_x() const { return xhat_x_; }
  int64_t xhat_h() const { return xhat_h_; }
  int64_t xhat_c() const { return xhat_c_; }
  int64_t rstd() const { return rstd_; }  // [T·B][3]: x·W's, h·R's, c's
  int64_t total() const { return total_; }

 private:
  int64_t h_, c_, gates_, xhat_x_, xhat_h_, xhat_c_, rstd_, total_;
};

constexpr uint64_t kLayerNormLstmMagic = 0x746c736c6e6c7631ULL;  // "tlslnlv1"

// Bytes of the workspace (header included), or -1 on int64 overflow.
inline int64_t LayerNormLstmWorkspaceBytes(const LayerNormLstmModel& m,
                                           const LayerNormLstmRun& run, int acc_size) {
  int64_t rows, per_row, total;
  if (__builtin_mul_overflow(run.time, run.batch, &rows) ||
      __builtin_mul_overflow(m.num_units, int64_t{15}, &per_row) ||
      __builtin_add_overflow(per_row, int64_t{3}, &per_row) ||
      __builtin_mul_overflow(rows, per_row, &total) ||
      __builtin_mul_overflow(total, static_cast<int64_t>(acc_size), &total) ||
      total > (int64_t{1} << 62)) {
    return -1;
  }
  return sizeof(RnnReserveHeader) + LayerNormLstmLayout(m, run).total() * acc_size;
}

// What the saved activations depend on, for Backprop's check of its reserve space.
inline uint64_t LayerNormLstmConfigHash(const LayerNormLstmModel& m, const LayerNormLstmRun& run,
                                        int dtype_size) {
  uint32_t epsilon_bits;
  std::memcpy(&epsilon_bits, &m.epsilon, sizeof(epsilon_bits));
  uint64_t h = Mix(kLayerNormLstmMagic);
  for (int64_t v : {m.input_size, m.num_units, static_cast<int64_t>(m.preset),
                    static_cast<int64_t>(epsilon_bits), run.time, run.batch,
                    static_cast<int64_t>(run.time_major), static_cast<int64_t>(dtype_size),
                    static_cast<int64_t>(run.recurrent_mask != nullptr),
                    static_cast<int64_t>(run.zoneout_h.active() + 2 * run.zoneout_h.per_element),
                    static_cast<int64_t>(run.zoneout_c.active() + 2 * run.zoneout_c.per_element)}) {
    h = Mix(h ^ static_cast<uint64_t>(v));
  }
  for (int64_t b = 0; b < run.batch; ++b) {
    h = Mix(h ^ static_cast<uint64_t>(run.seq_lengths ? run.seq_lengths[b] : run.time));
  }
  return h;
}

inline RnnReserveHeader LayerNormLstmHeader(const LayerNormLstmModel& m,
                                            const LayerNormLstmRun& run, int dtype_size,
                                            int acc_size) {
  RnnReserveHeader header{};
  header.magic = kLayerNormLstmMagic;
  header.config_hash = LayerNormLstmConfigHash(m, run, dtype_size);
  header.bytes = LayerNormLstmWorkspaceBytes(m, run, acc_size);
  return header;
}

// ---- the cell around the norms (docs/layer_norm_lstm.md §1), one unit of one row ----------------
// A row's gates are [i, f, g, o], each H wide; every engine calls these, so that the CPU and GPU
// engines differ only in how they sum a row (cc/core/layer_norm.h).

// A gate's activation from its pre-activation z: tanh for the candidate g, σ for i, f and o
// (kCandidate a constant: a CPU loop over one gate's block vectorises).
template <bool kCandidate, typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A LayerNormLstmGateOf(A z) {
  return kCandidate ? Math::Tanh(z) : Math::Sigmoid(z);
}
// Element k of a row's gate activations: the candidate's block is [2H, 3H).
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline A LayerNormLstmGate(int64_t k, int64_t H, A z) {
  return k >= 2 * H && k < 3 * H ? LayerNormLstmGateOf<true, A, Math>(z)
                                 : LayerNormLstmGateOf<false, A, Math>(z);
}

// c' = f ⊙ c_{t-1} + i ⊙ g at unit j.
template <typename A>
TF_LSTM_HOST_DEVICE inline A LayerNormLstmCell(const A* gates, int64_t H, int64_t j, A c_prev) {
  return gates[H + j] * c_prev + gates[j] * gates[2 * H + j];
}

// Unit j after the state's norm: q = LN(c') = x̂_c·γc + βc, h̃ = o ⊙ tanh(q), and the state the
// preset carries (before zoneout): q (addons) or c' (paper).
template <typename A>
struct LayerNormLstmOutput {
  A h, c;
};
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline LayerNormLstmOutput<A> LayerNormLstmOutputAt(
    LayerNormPreset preset, const A* gates, int64_t H, int64_t j, A xhat_c, A gamma_c, A beta_c,
    A c_cell) {
  const A q = xhat_c * gamma_c + beta_c;
  return {gates[3 * H + j] * Math::Tanh(q), preset == LayerNormPreset::kAddons ? q : c_cell};
}

// Backward through h̃ = o ⊙ tanh(q): from dh_new (the gradient reaching h̃) and dc_q (the carried
// state's gradient when the preset carries q itself, else 0), o's pre-activation gradient and
// dq = dL/dq.
template <typename A>
struct LayerNormLstmOutputGrads {
  A dz_o, dq;
};
template <typename A, typename Math>
TF_LSTM_HOST_DEVICE inline LayerNormLstmOutputGrads<A> LayerNormLstmOutputBackward(
    const A* gates, int64_t H, int64_t j, A xhat_c, A gamma_c, A beta_c, A dh_new, A dc_q) {
  const A q = xhat_c * gamma_c + beta_c;
  const A th = Math::Tanh(q), o = gates[3 * H + j];
  return {dh_new * th * o * (A(1) - o), dh_new * o * (A(1) - th * th) + dc_q};
}

// Backward through c' = f ⊙ c_{t-1} + i ⊙ g from dc_cell = dL/dc': the pre-activation gradients
// of i, f and g and c'’s share of dL/dc_{t-1}.
template <typename A>
struct LayerNormLstmCellGrads {
  A dz_i, dz_f, dz_g, dc_prev;
};
template <typename A>
TF_LSTM_HOST_DEVICE inline LayerNormLstmCellGrads<A> LayerNormLstmCellBackward(
    const A* gates, int64_t H, int64_t j, A c_prev, A dc_cell) {
  const A i = gates[j], f = gates[H + j], g = gates[2 * H + j];
  return {dc_cell * g * i * (A(1) - i), dc_cell * c_prev * f * (A(1) - f),
          dc_cell * i * (A(1) - g * g), dc_cell * f};
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_LAYER_NORM_LSTM_TYPES_H_
