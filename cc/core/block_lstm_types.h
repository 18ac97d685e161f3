// The sizes, attributes and buffer sets of the LSTM block ops: plain structs shared by the
// framework-free CPU and GPU engines, the TensorFlow binding and the GPU self-test (no TF headers).
#ifndef TF_LSTM_OPS_CC_CORE_BLOCK_LSTM_TYPES_H_
#define TF_LSTM_OPS_CC_CORE_BLOCK_LSTM_TYPES_H_

#include <cstdint>

#include "cc/core/gate_layout.h"

namespace tf_lstm_ops {

// T time steps, B batch, I input size, H cell size.
struct LstmDims {
  int64_t time, batch, input, cell;
};

struct LstmAttrs {
  GateLayout layout;
  float forget_bias;  // 0 for V2
  float cell_clip;    // > 0 enables clipping
  bool use_peephole;
};

// The nine forward inputs (seq_len_max aside). w is [I+H, 4H], b [4H], wc* [H] (read only with
// use_peephole).
template <typename T>
struct LstmInputs {
  const T *x, *cs_prev, *h_prev, *w, *wci, *wcf, *wco, *b;
};

// The seven per-step outputs, each [T, B, H] ([B, H] for the cell ops).
template <typename P>
struct LstmActivations {
  P i, cs, f, o, ci, co, h;
};

// A per-sequence tensor set at step t: every non-null pointer offset by t·step elements.
template <typename P>
inline LstmActivations<P> AtStep(const LstmActivations<P>& p, int64_t t, int64_t step) {
  auto at = [&](P q) -> P { return q == nullptr ? nullptr : q + t * step; };
  return {at(p.i), at(p.cs), at(p.f), at(p.o), at(p.ci), at(p.co), at(p.h)};
}

// Gradients w.r.t. the eight float inputs, shaped like them.
template <typename T>
struct LstmInputGrads {
  T *x, *cs_prev, *h_prev, *w, *wci, *wcf, *wco, *b;
};

// The gradients of a backward run (BlockLSTMFullGrad) w.r.t. its inputs, each shaped like its
// input.
template <typename T>
struct LstmBackwardGrads {
  LstmInputGrads<T> inputs;       // w.r.t. x, cs_prev, h_prev, w, wci, wcf, wco, b
  LstmActivations<T*> act;        // w.r.t. the saved i, cs, f, o, ci, co, h
  LstmActivations<T*> out_grads;  // w.r.t. the output gradients i_grad .. h_grad
};

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_BLOCK_LSTM_TYPES_H_
