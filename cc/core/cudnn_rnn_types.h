// The run description, reserve-space format and dropout RNG of the CudnnRNN ops: framework-free, so
// the CPU and GPU engines, the binding and the GPU self-test share one definition (a reserve space
// and a dropout mask mean the same on every device).
#ifndef TF_LSTM_OPS_CC_CORE_CUDNN_RNN_TYPES_H_
#define TF_LSTM_OPS_CC_CORE_CUDNN_RNN_TYPES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cc/core/cudnn_rnn_layout.h"
#include "cc/core/host_device.h"

namespace tf_lstm_ops {

// Zoneout's weights for one state (docs/cudnn_rnn.md §4.9): the state carried is
// w ⊙ s~_t + (1 - w) ⊙ s_{t-1} (ZoneoutBlend), w per element ([T, B, H] in the run's layout:
// training's keep-new masks) or one value for all (inference's 1 - rate). In the run's dtype
// and on its device; null: that state is not zoned.
struct RnnZoneout {
  const void* keep = nullptr;
  bool per_element = false;
  bool active() const { return keep != nullptr; }
};

// One run's sizes: T, B and the memory order of input/output ([T,B,.] or [B,T,.]). The state
// tensors are always read as [L*D, B, n] (TF's reinterpretation for batch-major;
// docs/cudnn_rnn.md §3).
struct RnnRun {
  int64_t time, batch;
  bool time_major;
  const int32_t* seq_lengths;  // [B] in [0, T] (host memory), or nullptr: every length is T
  // Whether the forward's workspace keeps the saved gates a backward needs: always when
  // training; an inference forward on the CPU keeps only the states (WorkspaceLayout), and
  // writes no gates. (The GPU engine's kernels always write them.)
  bool keeps_gates = true;
  // Keras' recurrent dropout (docs/keras_layers.md §5): per-gate masks on the two operands of
  // the gate products, the same at every step, or nullptr for none. In the run's dtype T and on
  // its device: input_masks [G, B, I] (gate g reads x ⊙ input_masks[g] before W_g),
  // recurrent_masks [G, B, Hr] (h_{t-1} ⊙ recurrent_masks[g] before R_g), G = m.gates() in
  // cuDNN's gate order. Only for models RnnTakesMasks accepts.
  const void* input_masks = nullptr;
  const void* recurrent_masks = nullptr;
  bool masked() const { return input_masks != nullptr || recurrent_masks != nullptr; }
  // Zoneout of h (every mode) and of LSTM's c: only for models with m.zoneout that
  // RnnTakesMasks accepts.
  RnnZoneout zoneout_h, zoneout_c;
  bool zoned() const { return zoneout_h.active() || zoneout_c.active(); }
  // Keras' weights read where they are stored instead of params (docs/cudnn_rnn.md §6.6): the
  // CPU forward and backward of a model KerasWeightsInPlace accepts. In the run's dtype;
  // kernel [I, G*H], recurrent_kernel [H, G*H], bias [bias_rows, G*H] (one row: b_R, with
  // b_W = 0); a backward writes their gradients to the *_backprop tensors of the same shapes
  // (instead of params_backprop).
  struct KerasWeights {
    const void *kernel = nullptr, *recurrent_kernel = nullptr, *bias = nullptr;
    int bias_rows = 1;
    void *kernel_backprop = nullptr, *recurrent_kernel_backprop = nullptr,
         *bias_backprop = nullptr;
    bool given() const { return kernel != nullptr; }
  } keras;
};

// Models whose runs may carry operand masks: what a Keras layer describes (one layer, one
// direction, linear input, no projection).
inline bool RnnTakesMasks(const RnnModel& m) {
  return m.num_layers == 1 && m.num_dirs == 1 && !m.skip_input && !m.has_proj();
}

// Models whose CPU forward reads Keras' weights in place (RnnRun::keras): a Keras layer's (the
// GRU's gates in Keras' order: PseudoLayer::gate_block).
inline bool KerasWeightsInPlace(const RnnModel& m) { return RnnTakesMasks(m); }

// Zoneout's carried state from the new one and the previous one: keep-new weight w 1 gives the
// new value exactly, 0 the previous one. Its backward: w·ds to the new state, (1 - w)·ds to the
// previous one.
template <typename A>
TF_LSTM_HOST_DEVICE inline A ZoneoutBlend(A w, A s_new, A s_prev) {
  return w * s_new + (A(1) - w) * s_prev;
}

// One state's zoneout weights in the compute type as a cell reads them: element k's weight is
// keep[k·stride] (stride 1: per element, 0: one value for all); keep null: not zoned. Blend is
// ZoneoutBlend (the new state as it is when not zoned), ToNew / ToPrevious its backward: of
// ds = dL/d(the carried state), what reaches the new state (w·ds; all of it when not zoned) and
// what the previous one keeps ((1 - w)·ds; none).
template <typename A>
struct ZoneoutView {
  const A* keep = nullptr;
  int64_t stride = 0;
  // The weights from element `offset` on of weights given per element (a run's elements in
  // one order, e.g. time-major [T·B, H]) or as one value.
  TF_LSTM_HOST_DEVICE static ZoneoutView At(const A* keep, bool per_element, int64_t offset) {
    if (keep == nullptr) return {};
    return per_element ? ZoneoutView{keep + offset, 1} : ZoneoutView{keep, 0};
  }
  TF_LSTM_HOST_DEVICE bool zoned() const { return keep != nullptr; }
  TF_LSTM_HOST_DEVICE A operator[](int64_t k) const { return keep[k * stride]; }
  TF_LSTM_HOST_DEVICE A Blend(int64_t k, A s_new, A s_prev) const {
    return zoned() ? ZoneoutBlend((*this)[k], s_new, s_prev) : s_new;
  }
  TF_LSTM_HOST_DEVICE A ToNew(int64_t k, A ds) const { return zoned() ? (*this)[k] * ds : ds; }
  TF_LSTM_HOST_DEVICE A ToPrevious(int64_t k, A ds) const {
    return zoned() ? (A(1) - (*this)[k]) * ds : A(0);
  }
};

// One state's zoneout weights in an engine's compute type, as it converted them from the run's:
// per element, time-major [T·B, width], or one value for all; keep null: not zoned. At(offset):
// the view of the weights from element `offset` on (row b of step t, unit j0: (t·B + b)·width +
// j0).
template <typename A>
struct ZoneoutWeights {
  const A* keep = nullptr;
  bool per_element = false;
  TF_LSTM_HOST_DEVICE ZoneoutView<A> At(int64_t offset) const {
    return ZoneoutView<A>::At(keep, per_element, offset);
  }
};
template <typename A>
struct Zoneout {
  ZoneoutWeights<A> h, c;
};

// x ⊙ mask, the masked operand of a gate product (Keras' recurrent dropout).
template <typename A>
TF_LSTM_HOST_DEVICE inline A MaskedOperand(A x, A mask) {
  return x * mask;
}

// Whether a run computes nothing: no steps, no rows, or zero-width states (num_units 0: no layer
// changes anything, whatever the layer count). Outputs then hold no elements, the final states
// are the initial ones and every other gradient is zero; the engines return at once, so the work
// stays proportional to the inputs and outputs (docs/validation.md), never to num_layers.
inline bool RnnRunsNothing(const RnnModel& m, const RnnRun& run) {
  return run.time == 0 || run.batch == 0 || m.num_units == 0;
}

// Inverted dropout on the inputs of layers 1..L-1, from a counter-based RNG: the mask of
// element k is a pure function of (seed, call, layer, k).
struct RnnDropout {
  float rate;  // 0 <= rate <= 1; 0 = none
  uint64_t seed;
  uint64_t call;
  bool active(const RnnModel& m) const { return rate > 0 && m.num_layers > 1; }
};

// splitmix64's finaliser: the hash behind the config hash and the dropout RNG.
TF_LSTM_HOST_DEVICE inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The RNG stream of the dropout in front of `layer` (>= 1) in forward call `call`.
inline uint64_t DropoutStream(const RnnDropout& dropout, int64_t layer_below) {
  return Mix(dropout.seed ^ Mix(dropout.call * 0x100 + layer_below));
}

// The value a kept element is multiplied by: 1 / (1 - rate). With rate 1 every element is dropped
// (DropoutDrops is always true) and the scale is 0, never inf.
template <typename A>
TF_LSTM_HOST_DEVICE inline A DropoutKeepScale(float rate) {
  return rate < 1 ? A(1) / (A(1) - A(rate)) : A(0);
}

// Whether element k of that stream is dropped: a uniform double in [0, 1) below the rate.
TF_LSTM_HOST_DEVICE inline bool DropoutDrops(uint64_t stream, int64_t k, float rate) {
  const double u = (Mix(stream + k) >> 11) * (1.0 / 9007199254740992.0);
  return u < rate;
}

// Saved gate activations per element: LSTM i, f, c~, o; GRU r, u, h~, R_h h + b_Rh. With
// Keras' activations the pre-activations instead (cudnn_rnn_cells.h), a plain RNN's one.
constexpr int kSavedGates = 4;
inline constexpr int SavedGatesOf(RnnMode mode) {
  return mode == RnnMode::kLstm || mode == RnnMode::kGru ? kSavedGates : 1;
}

// The reserve space is our own format (docs/cudnn_rnn.md §7.3: only our Backprop reads it): a
// header, then in the compute type, per pseudo-layer the per-step states h [T,B,Hr], c [T,B,H]
// (LSTM) and gate activations [T,B,4H] (LSTM: i, f, c~, o; GRU: r, u, h~, R_h h + b_Rh), then
// per layer l >= 1 its (dropped-out) input [T,B,D*Hr] and, with dropout, the mask scale.
struct RnnReserveHeader {
  uint64_t magic;
  uint64_t config_hash;  // model, run sizes and layout, lengths, dropout and dtype of the forward
  int64_t bytes;         // header included
  uint64_t dropout;      // 1 when the workspace holds dropout masks
  uint64_t padding[4];   // keeps the data 64-byte aligned
};
constexpr uint64_t kRnnReserveMagic = 0x746c737472737631ULL;  // "tlstrsv1"

// Offsets (in compute-type elements, after the header) of everything the workspace holds.
class WorkspaceLayout {
 public:
  WorkspaceLayout(const RnnModel& m, const RnnRun& run, bool dropout) {
    const int64_t tb = run.time * run.batch;
    const bool lstm = m.mode == RnnMode::kLstm;
    // Keras' activations save pre-activations, a plain RNN's too (its slope may need them).
    const bool gated = m.mode == RnnMode::kLstm || m.mode == RnnMode::kGru;
    const bool saved = (gated || m.saves_pre_activations()) && run.keeps_gates;
    keeps_gates_ = saved;
    const int64_t per_pseudo_layer = tb * (m.output_width() + (lstm ? m.num_units : 0) +
                                           (saved ? SavedGatesOf(m.mode) * m.num_units : 0));
    h_ = 0;
    c_ = tb * m.output_width();
    gates_ = c_ + (lstm ? tb * m.num_units : 0);
    pseudo_layer_size_ = per_pseudo_layer;
    layer_inputs_ = per_pseudo_layer * m.num_pseudo_layers();
    layer_input_size_ = tb * m.num_dirs * m.output_width();
    mask_ = dropout ? layer_input_size_ : 0;
    total_ = layer_inputs_ + (m.num_layers - 1) * (layer_input_size_ + mask_);
  }
  int64_t h(int64_t p) const { return p * pseudo_layer_size_ + h_; }
  int64_t c(int64_t p) const { return p * pseudo_layer_size_ + c_; }
  int64_t gates(int64_t p) const { return p * pseudo_layer_size_ + gates_; }
  bool keeps_gates() const { return keeps_gates_; }  // (only gated modes have any)
  // Input of layer l >= 1 (after dropout) and its dropout scale (0 or 1 / (1 - rate)).
  int64_t input(int64_t l) const { return layer_inputs_ + (l - 1) * (layer_input_size_ + mask_); }
  int64_t mask(int64_t l) const { return input(l) + layer_input_size_; }
  int64_t total() const { return total_; }

 private:
  int64_t h_, c_, gates_, pseudo_layer_size_, layer_inputs_, layer_input_size_, mask_, total_;
  bool keeps_gates_;
};

// Bytes of the reserve space (or the inference workspace) of a run, or -1 on int64 overflow.
inline int64_t RnnWorkspaceBytes(const RnnModel& m, const RnnRun& run, bool dropout,
                                 int acc_size) {
  // Overflow guard on the largest product before the layout's plain arithmetic.
  int64_t tb, per_elem, total;
  const int64_t widest = std::max<int64_t>(m.output_width() + (kSavedGates + 1) * m.num_units,
                                           2 * m.num_dirs * m.output_width());
  if (__builtin_mul_overflow(run.time, run.batch, &tb) ||
      __builtin_mul_overflow(widest, m.num_pseudo_layers() + m.num_layers, &per_elem) ||
      __builtin_mul_overflow(tb, per_elem, &total) ||
      __builtin_mul_overflow(total, static_cast<int64_t>(acc_size), &total) ||
      total > (int64_t{1} << 62)) {
    return -1;
  }
  return sizeof(RnnReserveHeader) + WorkspaceLayout(m, run, dropout).total() * acc_size;
}

inline uint64_t RnnConfigHash(const RnnModel& m, const RnnRun& run, const RnnDropout& dropout,
                              int dtype_size) {
  uint64_t h = Mix(static_cast<uint64_t>(m.mode) + 1);
  // Every fact that changes what the saved activations mean (time_major: T and B swap roles
  // in the input and output, so a forward with T == B matches every size).
  const int64_t activations =
      m.custom_activations ? 1 + static_cast<int64_t>(m.activation) * kNumRnnActivations +
                                 static_cast<int64_t>(m.recurrent_activation)
                           : 0;
  for (int64_t v : {m.num_layers, m.num_units, m.input_size, m.num_proj, m.num_dirs,
                    static_cast<int64_t>(m.skip_input), activations,
                    static_cast<int64_t>(m.gru_reset_before), run.time, run.batch,
                    static_cast<int64_t>(run.time_major), static_cast<int64_t>(dtype_size),
                    // (a backward must multiply by masks where the forward did)
                    static_cast<int64_t>(run.input_masks != nullptr) +
                        2 * static_cast<int64_t>(run.recurrent_masks != nullptr),
                    // (and zone where the forward did; Keras' cells when zoned)
                    static_cast<int64_t>(m.zoneout) +
                        2 * (run.zoneout_h.active() + 2 * run.zoneout_h.per_element) +
                        8 * (run.zoneout_c.active() + 2 * run.zoneout_c.per_element)}) {
    h = Mix(h ^ static_cast<uint64_t>(v));
  }
  const float rate = dropout.active(m) ? dropout.rate : 0.0f;  // only when masks exist
  uint32_t rate_bits;
  std::memcpy(&rate_bits, &rate, sizeof(rate_bits));
  h = Mix(h ^ rate_bits);
  for (int64_t b = 0; b < run.batch; ++b) {
    h = Mix(h ^ static_cast<uint64_t>(run.seq_lengths ? run.seq_lengths[b] : run.time));
  }
  return h;
}

// The header a forward pass writes in front of its workspace.
inline RnnReserveHeader MakeReserveHeader(const RnnModel& m, const RnnRun& run,
                                          const RnnDropout& dropout, int dtype_size,
                                          int acc_size) {
  RnnReserveHeader header{};
  header.magic = kRnnReserveMagic;
  header.config_hash = RnnConfigHash(m, run, dropout, dtype_size);
  header.bytes = RnnWorkspaceBytes(m, run, dropout.active(m), acc_size);
  header.dropout = dropout.active(m) ? 1 : 0;
  return header;
}

// Step `step` of direction `dir` processes time index t; its predecessor is t -+ 1.
TF_LSTM_HOST_DEVICE inline int64_t TimeOf(int64_t dir, int64_t step, int64_t time) {
  return dir == 0 ? step : time - 1 - step;
}

// Pseudo-layer p (layer p / D, direction p % D) resolved once, for the CPU and GPU passes alike:
// its params regions (A: the compute type), its per-step states and saved gates in the
// workspace, and its initial state. Host-side (it holds a reference to the model).
template <typename A>
struct PseudoLayer {
  const RnnModel& m;
  int64_t p, layer, dir, in_width;
  PseudoLayerRegions reg;                   // offsets into params (and params' gradient)
  const A *w = nullptr, *r = nullptr, *proj = nullptr, *bias_w = nullptr,
          *bias_r = nullptr;  // params regions
  // Whether w and r are Keras' kernel [in_width, G*H] and recurrent_kernel [Hr, G*H] (the
  // transposes of params' W and R; ReadKerasWeights) rather than params regions.
  bool keras_layout = false;
  A *h, *c, *gates;  // per-step states and saved activations (workspace; gates may be null)
  const A *h0, *c0;                         // initial state of this pseudo-layer

  // params may be null for a layer whose weights ReadKerasWeights sets.
  PseudoLayer(const RnnModel& model, int64_t p_, const A* params, A* ws,
              const WorkspaceLayout& lay, const A* h0_all, const A* c0_all, int64_t batch)
      : m(model), p(p_), layer(p_ / model.num_dirs), dir(p_ % model.num_dirs) {
    in_width = m.layer_input(layer);
    reg = RegionsOf(m, p);
    if (params != nullptr) {
      w = params + reg.w;
      r = params + reg.r;
      proj = params + reg.proj;
      bias_w = params + reg.bias_w;
      bias_r = params + reg.bias_r;
    }
    h = ws + lay.h(p);
    c = m.mode == RnnMode::kLstm ? ws + lay.c(p) : nullptr;
    gates = lay.keeps_gates() ? ws + lay.gates(p) : nullptr;
    h0 = h0_all + p * batch * m.output_width();
    c0 = c0_all == nullptr ? nullptr : c0_all + p * batch * m.num_units;
  }
  // Keras' weights instead of params (a model KerasWeightsInPlace accepts): b_W and b_R
  // [G*H] each.
  void ReadKerasWeights(const A* kernel, const A* recurrent_kernel, const A* b_w, const A* b_r) {
    w = kernel;
    r = recurrent_kernel;
    proj = nullptr;
    bias_w = b_w;
    bias_r = b_r;
    keras_layout = true;
  }
  // Which of the G blocks of H gate units holds gate g (cuDNN's order) in the weights, their
  // gradients, the biases and every gate buffer of a run: block g, but for Keras' GRU weights
  // read in place, which order their blocks z, r, h (cuDNN: r, u = z, h), so that r and u trade
  // places and every whole-matrix product keeps Keras' layout. The map is its own inverse: it
  // also gives the gate held by block g (the one whose operand mask block g's product reads).
  int gate_block(int g) const { return GateBlock(keras_gru_order(), g); }
  bool keras_gru_order() const { return keras_layout && m.mode == RnnMode::kGru; }
  static int GateBlock(bool keras_gru_order, int g) {
    return keras_gru_order && g < 2 ? 1 - g : g;
  }
  // Strides of R [G*H, Hr] (params' layout: row-major; Keras': recurrent_kernel is Rᵀ) along
  // its gate-unit axis and along its state axis.
  int64_t r_gate_unit_stride() const { return keras_layout ? 1 : m.output_width(); }
  int64_t r_state_stride() const { return keras_layout ? m.gate_width() : 1; }
  // W [G*H, in_width] as a GEMM operand: its leading dimension (params' W is W, Keras' kernel
  // Wᵀ), and where gate g's block starts (w + g * w_gate_offset()).
  int64_t ldw() const { return keras_layout ? m.gate_width() : in_width; }
  int64_t w_gate_offset() const { return keras_layout ? m.num_units : m.num_units * in_width; }
  // State before step `step`: the initial state, or the state after the previous step.
  const A* h_before(int64_t step, int64_t time, int64_t batch) const {
    return step == 0 ? h0 : h + TimeOf(dir, step - 1, time) * batch * m.output_width();
  }
  const A* c_before(int64_t step, int64_t time, int64_t batch) const {
    return step == 0 ? c0 : c + TimeOf(dir, step - 1, time) * batch * m.num_units;
  }
};

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_CUDNN_RNN_TYPES_H_
