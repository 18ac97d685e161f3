// GPU functors of the CudnnRNN family: thin bindings over gpu::RnnForward / gpu::RnnBackward
// (cc/cudnn_rnn/gpu_launchers.h) on the op's stream, with scratch from ctx->allocate_temp. The
// reserve space (training) or the inference workspace is allocated by the kernel; the engine writes
// its header.
#define EIGEN_USE_THREADS

#include "cc/cudnn_rnn/gpu_launchers.h"
#include "cc/tf/cudnn_rnn/functor.h"
#include "cc/tf/device.h"
#include "cc/tf/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_lstm_ops {

using gpu_op::Dev;
using gpu_op::StorageOf;
using tensorflow::OpKernelContext;

template <typename T>
absl::Status CudnnRnnForward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const RnnModel& m, const RnnRun& run, const RnnDropout& dropout,
    const T* input, const T* input_h, const T* input_c, const T* params, T* output, T* output_h,
    T* output_c, uint8_t* workspace) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the forward pass", gpu::RnnForwardScratchBytes<D>(m, run, dropout),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::RnnForward<D>(stream, m, run, dropout, Dev(input), Dev(input_h),
                                  Dev(input_c), Dev(params), Dev(output), Dev(output_h),
                                  Dev(output_c), workspace, scratch);
      });
}

template <typename T>
absl::Status CudnnRnnBackward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const RnnModel& m, const RnnRun& run, const RnnReserveHeader& expected,
    const T* input, const T* input_h, const T* input_c, const T* params, const T* output_backprop,
    const T* output_h_backprop, const T* output_c_backprop, const uint8_t* reserve,
    T* input_backprop, T* input_h_backprop, T* input_c_backprop, T* params_backprop) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the backward pass", gpu::RnnBackwardScratchBytes<D>(m, run),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::RnnBackward<D>(stream, m, run, expected, Dev(input), Dev(input_h),
                                   Dev(input_c), Dev(params), Dev(output_backprop),
                                   Dev(output_h_backprop), Dev(output_c_backprop), reserve,
                                   Dev(input_backprop), Dev(input_h_backprop),
                                   Dev(input_c_backprop), Dev(params_backprop), scratch);
      });
}

template <typename T>
absl::Status KerasParams<GpuDevice, T>::ToParams(OpKernelContext* ctx, RnnMode mode,
                                                 int64_t input_size, int64_t num_units,
                                                 int bias_rows, const T* kernel,
                                                 const T* recurrent_kernel, const T* bias,
                                                 T* params) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(ctx, "the weight conversion", 0, [&](cudaStream_t stream, void*) {
    return gpu::KerasToParams<D>(stream, mode, input_size, num_units, bias_rows, Dev(kernel),
                                 Dev(recurrent_kernel), Dev(bias), Dev(params));
  });
}

template <typename T>
absl::Status KerasParams<GpuDevice, T>::ToKeras(OpKernelContext* ctx, RnnMode mode,
                                                int64_t input_size, int64_t num_units,
                                                int bias_rows, const T* params, T* kernel,
                                                T* recurrent_kernel, T* bias) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(ctx, "the weight conversion", 0, [&](cudaStream_t stream, void*) {
    return gpu::ParamsToKeras<D>(stream, mode, input_size, num_units, bias_rows, Dev(params),
                                 Dev(kernel), Dev(recurrent_kernel), Dev(bias));
  });
}

#define TF_LSTM_INSTANTIATE_GPU(T)                 \
  template struct CudnnRnnForward<GpuDevice, T>;   \
  template struct CudnnRnnBackward<GpuDevice, T>;  \
  template struct KerasParams<GpuDevice, T>;
TF_LSTM_INSTANTIATE_GPU(Eigen::half)
TF_LSTM_INSTANTIATE_GPU(Eigen::bfloat16)
TF_LSTM_INSTANTIATE_GPU(float)
TF_LSTM_INSTANTIATE_GPU(double)
#undef TF_LSTM_INSTANTIATE_GPU

}  // namespace tf_lstm_ops
