// Functors behind the CudnnRNN ops (forward and backprop of a multi-layer, optionally
// bidirectional RNN in cuDNN's canonical form), templated on device and storage type.
#ifndef TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_FUNCTOR_H_
#define TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_FUNCTOR_H_

#include "cc/core/cudnn_rnn_types.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

template <typename Device, typename T>
struct CudnnRnnForward {
  // workspace: RnnWorkspaceBytes bytes (the reserve space when training; scratch otherwise),
  // 64-byte aligned. Writes output, output_h, output_c (LSTM) and the workspace, its header
  // (MakeReserveHeader) first.
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const RnnDropout& dropout, const T* input, const T* input_h,
                          const T* input_c, const T* params, T* output, T* output_h,
                          T* output_c, uint8_t* workspace);
};

template <typename Device, typename T>
struct CudnnRnnBackward {
  // reserve: what the matching forward wrote, whose header must equal `expected` (the kernel
  // checks what the device lets it: see ReserveCheck). Writes the gradients of
  // <dy, output> + <dh, output_h> + <dc, output_c> w.r.t. every input.
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const RnnReserveHeader& expected, const T* input, const T* input_h,
                          const T* input_c, const T* params,
                          const T* output_backprop, const T* output_h_backprop,
                          const T* output_c_backprop, const uint8_t* reserve, T* input_backprop,
                          T* input_h_backprop, T* input_c_backprop, T* params_backprop);
};

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_FUNCTOR_H_
