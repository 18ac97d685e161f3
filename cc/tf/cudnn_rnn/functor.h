// Functors behind the CudnnRNN ops (forward and backprop of a multi-layer, optionally
// bidirectional RNN in cuDNN's canonical form), templated on device and storage type: the
// OpKernels (kernels.cc) call them; every device specialisation is declared here and defined in
// functor_cpu.cc (the CPU engine) or functor_gpu.cc (the GPU launchers).
#ifndef TF_LSTM_OPS_CC_TF_CUDNN_RNN_FUNCTOR_H_
#define TF_LSTM_OPS_CC_TF_CUDNN_RNN_FUNCTOR_H_

#include "cc/core/cudnn_rnn_types.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

// Declared only: each device below specialises both.
template <typename Device, typename T>
struct CudnnRnnForward;
template <typename Device, typename T>
struct CudnnRnnBackward;
template <typename Device, typename T>
struct KerasParams;

// Contracts:
//  - CudnnRnnForward: workspace is RnnWorkspaceBytes bytes (the reserve space when training;
//    scratch otherwise), 64-byte aligned. Writes output, output_h, output_c (LSTM) and the
//    workspace, its header (MakeReserveHeader) first.
//  - CudnnRnnBackward: reserve is what the matching forward wrote, whose header must equal
//    `expected`. On the CPU the kernel has compared them; on the GPU the header is device memory
//    the host cannot read without a synchronisation, so it is compared on the device (every
//    output NaN on a mismatch) after the kernel checked the reserve space's size. Writes the
//    gradients of <dy, output> + <dh, output_h> + <dc, output_c> w.r.t. every input.
//  - KerasParams: ToParams and ToKeras convert between Keras' weights and params (the engines'
//    KerasToParams / ParamsToKeras) for sizes the kernel has validated.
#define TF_LSTM_OPS_DECLARE_CUDNN_RNN_FUNCTORS(Device)                                          \
  template <typename T>                                                                        \
  struct CudnnRnnForward<Device, T> {                                                          \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m,               \
                            const RnnRun& run, const RnnDropout& dropout, const T* input,      \
                            const T* input_h, const T* input_c, const T* params, T* output,    \
                            T* output_h, T* output_c, uint8_t* workspace);                     \
  };                                                                                           \
  template <typename T>                                                                        \
  struct CudnnRnnBackward<Device, T> {                                                         \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m,               \
                            const RnnRun& run, const RnnReserveHeader& expected,               \
                            const T* input, const T* input_h, const T* input_c,                \
                            const T* params, const T* output_backprop,                         \
                            const T* output_h_backprop, const T* output_c_backprop,            \
                            const uint8_t* reserve, T* input_backprop, T* input_h_backprop,    \
                            T* input_c_backprop, T* params_backprop);                          \
  };                                                                                           \
  template <typename T>                                                                        \
  struct KerasParams<Device, T> {                                                              \
    absl::Status ToParams(tensorflow::OpKernelContext* ctx, RnnMode mode, int64_t input_size,  \
                          int64_t num_units, int bias_rows, const T* kernel,                   \
                          const T* recurrent_kernel, const T* bias, T* params);                \
    absl::Status ToKeras(tensorflow::OpKernelContext* ctx, RnnMode mode, int64_t input_size,   \
                         int64_t num_units, int bias_rows, const T* params, T* kernel,         \
                         T* recurrent_kernel, T* bias);                                        \
  };

TF_LSTM_OPS_DECLARE_CUDNN_RNN_FUNCTORS(CPUDevice)
#ifdef TF_LSTM_OPS_WITH_CUDA
TF_LSTM_OPS_DECLARE_CUDNN_RNN_FUNCTORS(GpuDevice)
#endif
#undef TF_LSTM_OPS_DECLARE_CUDNN_RNN_FUNCTORS

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_CUDNN_RNN_FUNCTOR_H_
