// Functors behind the LSTM block ops, templated on device and storage type (TF's lstm_ops.h
// split). Kernels validate every shape first; functors assume valid, non-aliased buffers.
#ifndef TF_LSTM_OPS_CC_KERNELS_LSTM_FUNCTOR_H_
#define TF_LSTM_OPS_CC_KERNELS_LSTM_FUNCTOR_H_

#include <cstdint>

#include "cc/kernels/gate_layout.h"
#include "tensorflow/core/framework/op_kernel.h"

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

// Gradients w.r.t. the eight float inputs, shaped like them.
template <typename T>
struct LstmInputGrads {
  T *x, *cs_prev, *h_prev, *w, *wci, *wcf, *wco, *b;
};

// BlockLSTM / BlockLSTMV2 / LSTMBlockCell (time = 1): runs seq_len_max steps; every output is
// zero at steps >= seq_len_max.
template <typename Device, typename T>
struct LstmForward {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,
                                const LstmAttrs& attrs, int64_t seq_len_max,
                                const LstmInputs<T>& in, const LstmActivations<T*>& out);
};

// BlockLSTMGrad / BlockLSTMGradV2: backpropagation through seq_len_max steps. `out_grads` holds
// the gradients w.r.t. the seven outputs; its i, f, o, ci, co may be nullptr (zero: the TF ops
// have no such inputs). Peephole gradients are written only with use_peephole (the kernel
// zero-fills them otherwise).
template <typename Device, typename T>
struct LstmBackward {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,
                                const LstmAttrs& attrs, int64_t seq_len_max,
                                const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                                const LstmActivations<const T*>& out_grads,
                                const LstmInputGrads<T>& grads);
};

// LSTMBlockCellGrad: the element-wise step of the backward pass only (no GEMMs); `out_grads` as
// for LstmBackward (h is the cell's h_grad). Writes
// cs_prev_grad [B,H], dgates [B,4H] and, with use_peephole, wci/wcf/wco_grad [H].
template <typename Device, typename T>
struct LstmCellBackward {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,
                                const LstmAttrs& attrs, const LstmInputs<T>& in,
                                const LstmActivations<const T*>& act,
                                const LstmActivations<const T*>& out_grads, T* cs_prev_grad,
                                T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad);
};

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_KERNELS_LSTM_FUNCTOR_H_
