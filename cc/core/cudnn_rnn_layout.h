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
#include <string_view>

#include "cc/core/rnn_activation.h"

namespace tf_lstm_ops {

enum class RnnMode { kRnnRelu, kRnnTanh, kLstm, kGru };

// The op attribute rnn_mode's value (the op defs allow only these four names).
inline RnnMode RnnModeNamed(std::string_view name) {
  return name == "lstm" ? RnnMode::kLstm
         : name == "gru" ? RnnMode::kGru
         : name == "rnn_relu" ? RnnMode::kRnnRelu
                              : RnnMode::kRnnTanh;
}

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
  // Keras' activations instead of cuDNN's (docs/cudnn_rnn.md §4.7): then `activation` is the
  // candidate's and LSTM's output's (the plain RNN's only one) and `recurrent_activation` the
  // gates', and the saved gates hold pre-activations. false: cuDNN's cells (tanh and sigmoid;
  // relu for kRnnRelu), whatever the two fields say.
  bool custom_activations = false;
  RnnActivation activation = RnnActivation::kTanh;
  RnnActivation recurrent_activation = RnnActivation::kSigmoid;
  // GRU only: reset before the recurrent product, (r ⊙ h)·R_hᵀ (Keras' reset_after=False),
  // instead of cuDNN's r ⊙ (h·R_hᵀ + b_Rh); its saved gates hold pre-activations.
  bool gru_reset_before = false;
  // Zoneout (docs/cudnn_rnn.md §4.9): its runs may carry zoneout weights (RnnRun::zoneout_h,
  // zoneout_c). Its cells then run as Keras' (whatever the activations), whose saved
  // pre-activations let the backward recompute the un-zoned new state.
  bool zoneout = false;

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
  // Whether the cells run as Keras' (activations from the two fields, pre-activations saved).
  bool keras_cells() const { return custom_activations || zoneout; }
  // Whether the saved gates hold pre-activations (Keras' cells) rather than cuDNN's values.
  bool saves_pre_activations() const { return keras_cells() || gru_reset_before; }
  ActivationChoice activations() const {
    return {keras_cells(), activation, recurrent_activation};
  }
  int64_t w_cols(int64_t layer) const { return skips(layer) ? 0 : layer_input(layer); }
};

// Why a model's activations cannot be set (SetRnnActivations).
enum class RnnActivationError { kNone, kUnknownActivation, kUnknownRecurrent, kRecurrentNotGated };

// m's activations from the *Keras ops' attribute values, "" meaning cuDNN's (tanh and
// sigmoid; relu for kRnnRelu): custom only where they differ from cuDNN's, so that spelling
// cuDNN's out runs cuDNN's cells. m->mode must be set.
inline RnnActivationError SetRnnActivations(std::string_view activation,
                                            std::string_view recurrent_activation, RnnModel* m) {
  const bool gated = m->mode == RnnMode::kLstm || m->mode == RnnMode::kGru;
  const RnnActivation cudnn = m->mode == RnnMode::kRnnRelu ? RnnActivation::kRelu
                                                           : RnnActivation::kTanh;
  RnnActivation act = cudnn, rec = RnnActivation::kSigmoid;
  if (!activation.empty() && !RnnActivationNamed(activation, &act)) {
    return RnnActivationError::kUnknownActivation;
  }
  if (!recurrent_activation.empty()) {
    if (!gated) return RnnActivationError::kRecurrentNotGated;
    if (!RnnActivationNamed(recurrent_activation, &rec)) {
      return RnnActivationError::kUnknownRecurrent;
    }
  }
  m->activation = act;
  m->recurrent_activation = rec;
  m->custom_activations = act != cudnn || rec != RnnActivation::kSigmoid;
  return RnnActivationError::kNone;
}

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

// Keras' weights (kernel [I, G*H], recurrent_kernel [H, G*H], bias [G*H] or [2, G*H]) in the
// params buffer of the one-layer, one-direction model without projection they describe
// (docs/cudnn_rnn.md §6.5): a list of blocks, each `rows` x `cols` elements, row-major and
// contiguous in params, strided in the Keras tensor (element (r, c) at keras_offset +
// r * keras_row_stride + c * keras_col_stride). Every params element is in exactly one block,
// except b_W when the bias has one row (then b_W = 0 and no Keras element maps to it).
enum class KerasOperand { kKernel, kRecurrentKernel, kBias };

struct KerasBlock {
  KerasOperand operand;
  int64_t rows, cols;
  int64_t keras_offset, keras_row_stride, keras_col_stride;
  int64_t params_offset;
};

inline constexpr int kMaxKerasBlocks = 16;  // 4 gates x (W, R, b_W, b_R)

// Keras orders the GRU gates z, r, h; cuDNN r, u(=z), h. Every other mode agrees.
inline constexpr int CudnnGateOfKeras(RnnMode mode, int keras_gate) {
  return mode == RnnMode::kGru && keras_gate < 2 ? 1 - keras_gate : keras_gate;
}

// The one-layer, one-direction model without projection that Keras' weights describe.
inline RnnModel KerasModel(RnnMode mode, int64_t input_size, int64_t num_units) {
  return RnnModel{mode, 1, num_units, input_size, 0, 1, false};
}

// The blocks of one conversion; returns their number. bias_rows is 1 (b_R only) or 2 (b_W, b_R);
// any other value gives no blocks (callers validate it first).
inline int KerasBlocks(RnnMode mode, int64_t input_size, int64_t num_units, int bias_rows,
                       KerasBlock blocks[kMaxKerasBlocks]) {
  if (bias_rows != 1 && bias_rows != 2) return 0;
  const RnnModel m = KerasModel(mode, input_size, num_units);
  const PseudoLayerRegions reg = RegionsOf(m, 0);
  const int64_t H = num_units, G = m.gate_width();
  int n = 0;
  for (int g = 0; g < m.gates(); ++g) {
    const int64_t at = CudnnGateOfKeras(mode, g) * H;  // this gate's rows in params
    // W_g = kernel[:, gH:(g+1)H]^T and R_g = recurrent_kernel[:, gH:(g+1)H]^T: [H, cols].
    blocks[n++] = {KerasOperand::kKernel, H, input_size, g * H, 1, G, reg.w + at * input_size};
    blocks[n++] = {KerasOperand::kRecurrentKernel, H, H, g * H, 1, G, reg.r + at * H};
    // Bias rows: the last is b_R, a first of two is b_W; each gate's H entries as one row.
    for (int row = 0; row < bias_rows; ++row) {
      const int64_t params_row = row == bias_rows - 1 ? reg.bias_r : reg.bias_w;
      blocks[n++] = {KerasOperand::kBias, 1, H, row * G + g * H, 0, 1, params_row + at};
    }
  }
  return n;
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_CUDNN_RNN_LAYOUT_H_
