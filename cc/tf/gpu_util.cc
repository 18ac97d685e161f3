// The GPU binding helpers every GPU functor shares (gpu_util.h) and DeviceMemory<GpuDevice>
// (device.h): the op's stream, CUDA errors as Status, zero-fills and copies on that stream.
#include "cc/tf/gpu_util.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "cc/gpu/launchers.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "xla/stream_executor/stream.h"

namespace tf_lstm_ops {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

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

template <typename T>
absl::Status DeviceMemory<GpuDevice>::SetZero(OpKernelContext* ctx, Tensor* t) {
  cudaStream_t stream;
  TF_RETURN_IF_ERROR(gpu_op::Stream(ctx, &stream));
  return gpu_op::FromCuda(
      ctx, "zero-filling an output",
      gpu::FillZero(stream, gpu_op::Dev(t->flat<T>().data()), t->NumElements()));
}

absl::Status DeviceMemory<GpuDevice>::Copy(OpKernelContext* ctx, void* dst, const void* src,
                                           size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  cudaStream_t stream;
  TF_RETURN_IF_ERROR(gpu_op::Stream(ctx, &stream));
  return gpu_op::FromCuda(ctx, "a device-to-device copy",
                          gpu::CopyDevice(stream, dst, src, bytes));
}

template absl::Status DeviceMemory<GpuDevice>::SetZero<Eigen::half>(OpKernelContext*, Tensor*);
template absl::Status DeviceMemory<GpuDevice>::SetZero<Eigen::bfloat16>(OpKernelContext*,
                                                                        Tensor*);
template absl::Status DeviceMemory<GpuDevice>::SetZero<float>(OpKernelContext*, Tensor*);
template absl::Status DeviceMemory<GpuDevice>::SetZero<double>(OpKernelContext*, Tensor*);

}  // namespace tf_lstm_ops
