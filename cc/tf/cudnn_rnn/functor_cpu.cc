// CPU functors of the CudnnRNN family: the CPU engine (cc/cudnn_rnn/cpu_engine.h) on the op's
// intra-op pool, its scratch from TensorFlow's allocator.
#include "cc/cudnn_rnn/cpu_engine.h"

#include "cc/tf/cudnn_rnn/functor.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

using tensorflow::OpKernelContext;

template <typename T>
absl::Status CudnnRnnForward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const RnnModel& m, const RnnRun& run, const RnnDropout& dropout,
    const T* input, const T* input_h, const T* input_c, const T* params, T* output, T* output_h,
    T* output_c, uint8_t* workspace) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the forward pass", cpu::RnnForwardScratchBytes<T>(d, m, run, dropout),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::RnnForward<T>(device, m, run, dropout, input, input_h, input_c,
                                              params, output, output_h, output_c, workspace,
                                              scratch, bytes);
                  });
}

template <typename T>
absl::Status CudnnRnnBackward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
    const RnnReserveHeader& /*expected: the kernel has compared it*/, const T* input,
    const T* input_h, const T* input_c, const T* params, const T* output_backprop,
    const T* output_h_backprop, const T* output_c_backprop, const uint8_t* reserve,
    T* input_backprop, T* input_h_backprop, T* input_c_backprop, T* params_backprop) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the backward pass", cpu::RnnBackwardScratchBytes<T>(d, m, run),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::RnnBackward<T>(device, m, run, input, input_h, input_c, params,
                                               output_backprop, output_h_backprop,
                                               output_c_backprop, reserve, input_backprop,
                                               input_h_backprop, input_c_backprop,
                                               params_backprop, scratch, bytes);
                  });
}

template <typename T>
absl::Status KerasParams<CPUDevice, T>::ToParams(OpKernelContext* ctx, RnnMode mode,
                                                 int64_t input_size, int64_t num_units,
                                                 int bias_rows, const T* kernel,
                                                 const T* recurrent_kernel, const T* bias,
                                                 T* params) {
  cpu::KerasToParams<T>(ctx->eigen_device<CPUDevice>(), mode, input_size, num_units, bias_rows,
                        kernel, recurrent_kernel, bias, params);
  return absl::OkStatus();
}

template <typename T>
absl::Status KerasParams<CPUDevice, T>::ToKeras(OpKernelContext* ctx, RnnMode mode,
                                                int64_t input_size, int64_t num_units,
                                                int bias_rows, const T* params, T* kernel,
                                                T* recurrent_kernel, T* bias) {
  cpu::ParamsToKeras<T>(ctx->eigen_device<CPUDevice>(), mode, input_size, num_units, bias_rows,
                        params, kernel, recurrent_kernel, bias);
  return absl::OkStatus();
}

#define TF_LSTM_OPS_INSTANTIATE(T)                \
  template struct CudnnRnnForward<CPUDevice, T>;  \
  template struct CudnnRnnBackward<CPUDevice, T>; \
  template struct KerasParams<CPUDevice, T>;
TF_LSTM_OPS_INSTANTIATE(Eigen::half)
TF_LSTM_OPS_INSTANTIATE(Eigen::bfloat16)
TF_LSTM_OPS_INSTANTIATE(float)
TF_LSTM_OPS_INSTANTIATE(double)
#undef TF_LSTM_OPS_INSTANTIATE

}  // namespace tf_lstm_ops
