// GPU functors of the LSTM block ops, DeviceMemory<GpuDevice> and the shared GPU binding helpers:
// thin bindings over the launchers of cc/gpu/rnn_gpu.h (the op's stream, scratch from
// ctx->allocate_temp, Eigen::half/bfloat16 as __half/__nv_bfloat16). Never synchronises.
#define EIGEN_USE_THREADS

#include <string>

#include "absl/strings/str_cat.h"
#include "cc/gpu/launchers.h"
#include "cc/tf/device.h"
#include "cc/tf/gpu_util.h"
#include "cc/tf/block_lstm/functor.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace tf_lstm_ops {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

namespace gpu_op {

absl::Status Stream(OpKernelContext* ctx, cudaStream_t* stream) {
  tensorflow::DeviceContext* device_context = ctx->op_device_context();
  stream_executor::Stream* se_stream =
      device_context == nullptr ? nullptr : device_context->stream();
  void* handle = se_stream == nullptr ? nullptr : se_stream->platform_specific_handle().stream;
  if (handle == nullptr) {
    return absl::InternalError(absl::StrCat(ctx->op_kernel().type_string(), " (",
                                            ctx->op_kernel().name(),
                                            "): the GPU kernel has no CUDA stream"));
  }
  *stream = static_cast<cudaStream_t>(handle);
  return absl::OkStatus();
}

absl::Status Scratch(OpKernelContext* ctx, size_t bytes, Tensor* holder, void** data) {
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT8,
                                        TensorShape({static_cast<int64_t>(bytes)}), holder));
  *data = bytes == 0 ? nullptr : holder->flat<uint8_t>().data();
  return absl::OkStatus();
}

absl::Status FromCuda(OpKernelContext* ctx, const char* step, cudaError_t error) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string message =
      absl::StrCat(ctx->op_kernel().type_string(), " (", ctx->op_kernel().name(), "): ", step,
                   " failed on the GPU: ", cudaGetErrorName(error), ": ",
                   cudaGetErrorString(error));
  const char* detail = gpu::ErrorDetail();
  if (detail != nullptr && detail[0] != '\0') absl::StrAppend(&message, " (", detail, ")");
  if (error == cudaErrorInsufficientDriver) return absl::FailedPreconditionError(message);
  return absl::InternalError(message);
}

}  // namespace gpu_op

namespace {

using gpu_op::Dev;
using gpu_op::StorageOf;

template <typename T>
LstmInputs<StorageOf<T>> DevInputs(const LstmInputs<T>& in) {
  return {Dev(in.x),   Dev(in.cs_prev), Dev(in.h_prev), Dev(in.w),
          Dev(in.wci), Dev(in.wcf),     Dev(in.wco),    Dev(in.b)};
}

template <typename P>
auto DevActivations(const LstmActivations<P>& a) -> LstmActivations<decltype(Dev(a.i))> {
  return {Dev(a.i), Dev(a.cs), Dev(a.f), Dev(a.o), Dev(a.ci), Dev(a.co), Dev(a.h)};
}

template <typename T>
LstmInputGrads<StorageOf<T>> DevGrads(const LstmInputGrads<T>& g) {
  return {Dev(g.x),   Dev(g.cs_prev), Dev(g.h_prev), Dev(g.w),
          Dev(g.wci), Dev(g.wcf),     Dev(g.wco),    Dev(g.b)};
}

}  // namespace

// ---- DeviceMemory<GpuDevice> ----

template <typename T>
absl::Status DeviceMemory<GpuDevice>::SetZero(OpKernelContext* ctx, Tensor* t) {
  cudaStream_t stream;
  TF_RETURN_IF_ERROR(gpu_op::Stream(ctx, &stream));
  return gpu_op::FromCuda(ctx, "zero-filling an output",
                          gpu::FillZero(stream, Dev(t->flat<T>().data()), t->NumElements()));
}

absl::Status DeviceMemory<GpuDevice>::Copy(OpKernelContext* ctx, void* dst, const void* src,
                                           size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  cudaStream_t stream;
  TF_RETURN_IF_ERROR(gpu_op::Stream(ctx, &stream));
  return gpu_op::FromCuda(ctx, "a device-to-device copy", gpu::CopyDevice(stream, dst, src, bytes));
}

template absl::Status DeviceMemory<GpuDevice>::SetZero<Eigen::half>(OpKernelContext*, Tensor*);
template absl::Status DeviceMemory<GpuDevice>::SetZero<Eigen::bfloat16>(OpKernelContext*,
                                                                        Tensor*);
template absl::Status DeviceMemory<GpuDevice>::SetZero<float>(OpKernelContext*, Tensor*);
template absl::Status DeviceMemory<GpuDevice>::SetZero<double>(OpKernelContext*, Tensor*);

// ---- the LSTM functors ----

template <typename T>
absl::Status LstmForward<GpuDevice, T>::operator()(OpKernelContext* ctx, const LstmDims& dims,
                                                   const LstmAttrs& attrs, int64_t seq_len_max,
                                                   const LstmInputs<T>& in,
                                                   const LstmActivations<T*>& out) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the forward pass", gpu::LstmForwardScratchBytes<D>(dims, attrs, seq_len_max),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LstmForward<D>(stream, dims, attrs, seq_len_max, DevInputs(in),
                                   DevActivations(out), scratch);
      });
}

template <typename T>
absl::Status LstmBackward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, int64_t seq_len_max,
    const LstmInputs<T>& in, const LstmActivations<const T*>& act,
    const LstmActivations<const T*>& out_grads, const LstmInputGrads<T>& grads) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the backward pass", gpu::LstmBackwardScratchBytes<D>(dims, attrs, seq_len_max),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LstmBackward<D>(stream, dims, attrs, seq_len_max, DevInputs(in),
                                    DevActivations(act), DevActivations(out_grads),
                                    DevGrads(grads), scratch);
      });
}

template <typename T>
absl::Status LstmCellBackward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, const LstmInputs<T>& in,
    const LstmActivations<const T*>& act, const LstmActivations<const T*>& out_grads,
    T* cs_prev_grad, T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the cell's backward step", gpu::LstmCellBackwardScratchBytes<D>(dims, attrs),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LstmCellBackward<D>(stream, dims, attrs, DevInputs(in), DevActivations(act),
                                        DevActivations(out_grads), Dev(cs_prev_grad),
                                        Dev(dgates), Dev(wci_grad), Dev(wcf_grad),
                                        Dev(wco_grad), scratch);
      });
}

#define TF_LSTM_INSTANTIATE_GPU(T)                  \
  template struct LstmForward<GpuDevice, T>;        \
  template struct LstmBackward<GpuDevice, T>;       \
  template struct LstmCellBackward<GpuDevice, T>;
TF_LSTM_INSTANTIATE_GPU(Eigen::half)
TF_LSTM_INSTANTIATE_GPU(Eigen::bfloat16)
TF_LSTM_INSTANTIATE_GPU(float)
TF_LSTM_INSTANTIATE_GPU(double)
#undef TF_LSTM_INSTANTIATE_GPU

}  // namespace tf_lstm_ops
