// The cuDNN RNN model description and its opaque parameter buffer layout (docs/cudnn_rnn.md §6.2):
// the one place that knows where each matrix and bias of each pseudo-layer lives. Framework-free.
//
//   params = [ M_0 | M_1 | ... | M_{LD-1} | Bias_0 | ... | Bias_{LD-1} ]
//   M_p    = W_0..W_{G-1} (each H x in_l, row-major) R_0..R_{G-1} (each H x Hr) [Pmat (P x H)]
//   Bias_p = bW_0..bW_{G-1} bR_0..bR_{G-1} (each H)
// so the G input matrices of a pseudo-layer form one [G*H, in_l] matrix, the G recurrent ones
// one [G*H, Hr] matrix, and each bias set one [G*H] vector.
#ifndef TF_LSTM_OPS_CC_CORE_CUDNN_RNN_LAYOUT_H_
#define TF_LSTM_OPS_CC_CORE_CUDNN_RNN_LAYOUT_H_

#include <cstdint>

namespace tf_lstm_ops {

enum class RnnMode { kRnnRelu, kRnnTanh, kLstm, kGru };

// Gates per cell; LSTM gates are i, f, c, o and GRU gates r, u, h (cuDNN order).
inline constexpr int GatesOf(RnnMode mode) {
  return mode == RnnMode::kLstm ? 4 : mode == RnnMode::kGru ? 3 : 1;
}

struct RnnModel {
  RnnMode mode;
  int64_t num_layers;  // L >= 1
  int64_t num_units;   // H: cell and gate width
  int64_t input_size;  // I
  int64_t num_proj;    // P; 0 = no projection (LSTM only, 0 < P < H otherwise)
  int64_t num_dirs;    // D: 1 or 2
  bool skip_input;     // layer 0 adds x to every gate instead of W·x (needs I == H)

  int gates() const { return GatesOf(mode); }
  int64_t gate_width() const { return gates() * num_units; }
  bool has_proj() const { return num_proj > 0; }
  int64_t output_width() const { return has_proj() ? num_proj : num_units; }  // Hr
  int64_t num_pseudo_layers() const { return num_layers * num_dirs; }
  // Width of layer l's input, and of its W matrices (0 for skip-input layer 0).
  int64_t layer_input(int64_t layer) const {
    return layer == 0 ? input_size : num_dirs * output_width();
  }
  bool skips(int64_t layer) const { return layer == 0 && skip_input; }
  int64_t w_cols(int64_t layer) const { return skips(layer) ? 0 : layer_input(layer); }
};

// Element offsets of one pseudo-layer's regions in the params buffer.
struct PseudoLayerRegions {
  int64_t w;       // [G*H, w_cols]
  int64_t r;       // [G*H, Hr]
  int64_t proj;    // [P, H] (when has_proj)
  int64_t bias_w;  // [G*H]
  int64_t bias_r;  // [G*H]
};

// Sizes in elements; callers validate the model first (CheckedParamsSize) so these never
// overflow.
inline int64_t MatrixBlockSize(const RnnModel& m, int64_t layer) {
  return m.gate_width() * (m.w_cols(layer) + m.output_width()) +
         (m.has_proj() ? m.num_proj * m.num_units : 0);
}

// Layers >= 1 are all alike (their input is the D·Hr output of the layer below), so every offset
// has a closed form: O(1) per pseudo-layer, whatever the number of layers.
inline PseudoLayerRegions RegionsOf(const RnnModel& m, int64_t p) {
  const int64_t layer = p / m.num_dirs, D = m.num_dirs;
  const int64_t first = MatrixBlockSize(m, 0), rest = MatrixBlockSize(m, 1);
  const int64_t matrices = D * first + (m.num_pseudo_layers() - D) * rest;
  PseudoLayerRegions r;
  r.w = p < D ? p * first : D * first + (p - D) * rest;
  r.r = r.w + m.gate_width() * m.w_cols(layer);
  r.proj = r.r + m.gate_width() * m.output_width();
  r.bias_w = matrices + p * 2 * m.gate_width();
  r.bias_r = r.bias_w + m.gate_width();
  return r;
}

// ParamsSize (docs/cudnn_rnn.md §6.3), or -1 when it overflows int64 (or a size is negative),
// in closed form: D·(layer 0's block) + D·(L - 1)·(a later layer's block), each block its
// matrices and biases.
inline int64_t CheckedParamsSize(const RnnModel& m) {
  if (m.num_layers < 1 || m.num_units < 0 || m.input_size < 0 || m.num_proj < 0 ||
      m.num_dirs < 1) {
    return -1;
  }
  int64_t rec, proj, later_input;
  if (__builtin_mul_overflow(static_cast<int64_t>(m.gates()), m.num_units, &rec) ||
      __builtin_mul_overflow(m.num_proj, m.num_units, &proj) ||
      __builtin_mul_overflow(m.num_dirs, m.output_width(), &later_input)) {
    return -1;
  }
  // One pseudo-layer's elements when its W has `cols` columns.
  auto block = [&](int64_t cols, int64_t* out) {
    int64_t width, size;
    return !(__builtin_add_overflow(cols, m.output_width(), &width) ||
             __builtin_mul_overflow(rec, width, &size) ||
             __builtin_add_overflow(size, proj, &size) ||
             __builtin_add_overflow(size, rec, &size) ||  // the two bias sets
             __builtin_add_overflow(size, rec, out));
  };
  int64_t first, rest, total, later;
  if (!block(m.skip_input ? 0 : m.input_size, &first) || !block(later_input, &rest) ||
      __builtin_mul_overflow(first, m.num_dirs, &total) ||
      __builtin_mul_overflow(rest, m.num_dirs, &later) ||
      __builtin_mul_overflow(later, m.num_layers - 1, &later) ||
      __builtin_add_overflow(total, later, &total)) {
    return -1;
  }
  return total;
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_CUDNN_RNN_LAYOUT_H_
