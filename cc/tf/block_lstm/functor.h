// Functors behind the LSTM block ops, templated on device and storage type (TensorFlow's
// lstm_ops.h split): the OpKernels (kernels.cc) call them; every device specialisation is
// declared here and defined in functor_cpu.cc (the CPU engine) or functor_gpu.cc (the GPU
// launchers). Kernels validate every shape first; functors assume valid, non-aliased buffers.
#ifndef TF_LSTM_OPS_CC_TF_BLOCK_LSTM_FUNCTOR_H_
#define TF_LSTM_OPS_CC_TF_BLOCK_LSTM_FUNCTOR_H_

#include "cc/core/block_lstm_types.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

// Declared only: each device below specialises all four.
template <typename Device, typename T>
struct LstmForward;
template <typename Device, typename T>
struct LstmBackward;
template <typename Device, typename T>
struct LstmCellBackward;
template <typename Device, typename T>
struct LstmBackwardGrad;

// The four functors of one device. Contracts:
//  - LstmForward: BlockLSTM / BlockLSTMV2 / LSTMBlockCell (time = 1); runs seq_len_max steps;
//    every output is zero at steps >= seq_len_max.
//  - LstmBackward: BlockLSTMGrad(V2); `out_grads` holds the gradients w.r.t. the seven
//    outputs, its i, f, o, ci, co may be nullptr (zero: the TF ops have no such inputs). Writes
//    every gradient; the peephole ones are zero without use_peephole.
//  - LstmCellBackward: LSTMBlockCellGrad, the element-wise step only: cs_prev_grad [B,H],
//    dgates [B,4H] and, with use_peephole, wci/wcf/wco_grad [H].
//  - LstmBackwardGrad: BlockLSTMFullGradGrad (docs/block_lstm.md §7.2), the gradient of the
//    backward with every output gradient w.r.t. all its inputs, given the cotangents `cot` of
//    its eight results; writes all 22 results.
// On the GPU they run on the op's stream (never synchronising) and name the op and step in
// errors, with CUDA's message.
#define TF_LSTM_OPS_DECLARE_LSTM_FUNCTORS(Device)                                               \
  template <typename T>                                                                        \
  struct LstmForward<Device, T> {                                                              \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,            \
                            const LstmAttrs& attrs, int64_t seq_len_max,                       \
                            const LstmInputs<T>& in, const LstmActivations<T*>& out);          \
  };                                                                                           \
  template <typename T>                                                                        \
  struct LstmBackward<Device, T> {                                                             \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,            \
                            const LstmAttrs& attrs, int64_t seq_len_max,                       \
                            const LstmInputs<T>& in, const LstmActivations<const T*>& act,     \
                            const LstmActivations<const T*>& out_grads,                        \
                            const LstmInputGrads<T>& grads);                                   \
  };                                                                                           \
  template <typename T>                                                                        \
  struct LstmCellBackward<Device, T> {                                                         \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,            \
                            const LstmAttrs& attrs, const LstmInputs<T>& in,                   \
                            const LstmActivations<const T*>& act,                              \
                            const LstmActivations<const T*>& out_grads, T* cs_prev_grad,       \
                            T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad);                 \
  };                                                                                           \
  template <typename T>                                                                        \
  struct LstmBackwardGrad<Device, T> {                                                         \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,            \
                            const LstmAttrs& attrs, int64_t seq_len_max,                       \
                            const LstmInputs<T>& in, const LstmActivations<const T*>& act,     \
                            const LstmActivations<const T*>& out_grads,                        \
                            const LstmInputGrads<const T>& cot,                                \
                            const LstmBackwardGrads<T>& grads);                                \
  };

TF_LSTM_OPS_DECLARE_LSTM_FUNCTORS(CPUDevice)
#ifdef TF_LSTM_OPS_WITH_CUDA
TF_LSTM_OPS_DECLARE_LSTM_FUNCTORS(GpuDevice)
#endif
#undef TF_LSTM_OPS_DECLARE_LSTM_FUNCTORS

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_BLOCK_LSTM_FUNCTOR_H_
