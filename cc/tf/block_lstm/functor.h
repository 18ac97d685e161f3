// Functors behind the LSTM block ops, templated on device and storage type (TF's lstm_ops.h
// split). Kernels validate every shape first; functors assume valid, non-aliased buffers.
#ifndef TF_LSTM_OPS_CC_KERNELS_LSTM_FUNCTOR_H_
#define TF_LSTM_OPS_CC_KERNELS_LSTM_FUNCTOR_H_

#include "cc/core/block_lstm_types.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

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
// have no such inputs). Writes every gradient: the peephole ones are zero without use_peephole
// (as the GPU launcher does, so the kernel does not zero-fill them a second time).
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
