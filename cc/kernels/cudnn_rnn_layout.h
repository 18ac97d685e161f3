// The cuDNN RNN model description and its opaque parameter buffer layout (spec §5.2): the one
// place that knows where each matrix and bias of each pseudo-layer lives. Framework-free.
//
//   params = [ M_0 | M_1 | ... | M_{LD-1} | Bias_0 | ... | Bias_{LD-1} ]
//   M_p    = W_0..W_{G-1} (each H x in_l, row-major) R_0..R_{G-1} (each H x Hr) [Pmat (P x H)]
//   Bias_p = bW_0..bW_{G-1} bR_0..bR_{G-1} (each H)
// so the G input matrices of a pseudo-layer form one [G*H, in_l] matrix, the G recurrent ones
// one [G*H, Hr] matrix, and each bias set one [G*H] vector.
#ifndef TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_LAYOUT_H_
#define TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_LAYOUT_H_

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

inline PseudoLayerRegions RegionsOf(const RnnModel& m, int64_t p) {
  const int64_t layer = p / m.num_dirs;
  int64_t matrices = 0, before = 0;
  for (int64_t q = 0; q < m.num_pseudo_layers(); ++q) {
    const int64_t size = MatrixBlockSize(m, q / m.num_dirs);
    if (q < p) before += size;
    matrices += size;
  }
  PseudoLayerRegions r;
  r.w = before;
  r.r = r.w + m.gate_width() * m.w_cols(layer);
  r.proj = r.r + m.gate_width() * m.output_width();
  r.bias_w = matrices + p * 2 * m.gate_width();
  r.bias_r = r.bias_w + m.gate_width();
  return r;
}

// ParamsSize (spec §5.3), or -1 when it overflows int64 (or a size is negative).
inline int64_t CheckedParamsSize(const RnnModel& m) {
  if (m.num_layers < 1 || m.num_units < 0 || m.input_size < 0 || m.num_proj < 0) return -1;
  int64_t total = 0;
  for (int64_t layer = 0; layer < m.num_layers; ++layer) {
    int64_t rec = 0, proj = 0, cols = 0, block = 0, per_layer = 0;
    if (__builtin_add_overflow(m.w_cols(layer), m.output_width(), &cols) ||
        __builtin_mul_overflow(static_cast<int64_t>(m.gates()), m.num_units, &rec) ||
        __builtin_mul_overflow(rec, cols, &block) ||
        __builtin_mul_overflow(m.num_proj, m.num_units, &proj) ||
        __builtin_add_overflow(block, proj, &block) ||
        __builtin_add_overflow(block, 2 * rec, &block) ||
        __builtin_mul_overflow(block, m.num_dirs, &per_layer) ||
        __builtin_add_overflow(total, per_layer, &total)) {
      return -1;
    }
  }
  return total;
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_LAYOUT_H_
