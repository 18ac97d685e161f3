// What the GPU functors (block_lstm/, cudnn_rnn/, layer_norm_lstm/functor_gpu.cc) share: the op's
// CUDA stream, TF <-> CUDA storage types and cudaError_t -> Status. Defined in gpu_util.cc.
// Compiled by g++ only when CUDA is configured: TF headers plus the CUDA runtime API headers, no
// EIGEN_USE_GPU / GOOGLE_CUDA (those would pull CUDA and Eigen's GPU code into TF's headers).
#ifndef TF_LSTM_OPS_CC_TF_GPU_UTIL_H_
#define TF_LSTM_OPS_CC_TF_GPU_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "cc/gpu/launchers.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

// Internal to the library: not exported even though the names mention tensorflow:: types.
#define TF_LSTM_OPS_INTERNAL __attribute__((visibility("hidden")))

namespace tf_lstm_ops {
namespace gpu_op {

// The device storage type of a TF element type (same bits).
template <typename T>
struct Storage {
  using type = T;  // float, double
};
template <>
struct Storage<Eigen::half> {
  using type = __half;
};
template <>
struct Storage<Eigen::bfloat16> {
  using type = __nv_bfloat16;
};
template <typename T>
using StorageOf = typename Storage<T>::type;

template <typename T>
StorageOf<T>* Dev(T* p) {
  static_assert(sizeof(StorageOf<T>) == sizeof(T), "storage types share the element size");
  return reinterpret_cast<StorageOf<T>*>(p);
}
template <typename T>
const StorageOf<T>* Dev(const T* p) {
  static_assert(sizeof(StorageOf<T>) == sizeof(T), "storage types share the element size");
  return reinterpret_cast<const StorageOf<T>*>(p);
}

// The op's stream: the one TensorFlow runs this kernel's GPU work on (never the default stream).
TF_LSTM_OPS_INTERNAL absl::Status Stream(tensorflow::OpKernelContext* ctx,
                                          cudaStream_t* stream);

// OK for cudaSuccess; otherwise an error naming the op and `step`, with CUDA's error name and
// message and gpu::ErrorDetail(): FailedPrecondition when the driver is too old for the runtime
// (nothing to retry until it is upgraded), Internal otherwise.
TF_LSTM_OPS_INTERNAL absl::Status FromCuda(tensorflow::OpKernelContext* ctx, const char* step,
                                            cudaError_t error);

// Every GPU functor's shape: launch(stream, scratch) on the op's stream with `scratch_bytes` of
// scratch, its cudaError_t turned into a Status naming `step`.
template <typename Launch>
TF_LSTM_OPS_INTERNAL absl::Status RunOnStream(tensorflow::OpKernelContext* ctx, const char* step,
                                               size_t scratch_bytes, Launch launch) {
  cudaStream_t stream;
  TF_RETURN_IF_ERROR(Stream(ctx, &stream));
  tensorflow::Tensor holder;
  void* scratch;
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &holder, &scratch));
  return FromCuda(ctx, step, launch(stream, scratch));
}

}  // namespace gpu_op
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_GPU_UTIL_H_
