// Devices of the OpKernels: the CPU (Eigen's ThreadPoolDevice) and a GPU tag; the few host
// writes an OpKernel makes into its output or temporary tensors, done where that memory lives;
// and the engines' scratch from TensorFlow's allocator.
//
// No CUDA headers and no EIGEN_USE_GPU / GOOGLE_CUDA here: every build compiles this header; the
// GPU declarations (TF_LSTM_OPS_WITH_CUDA, set by Bazel when CUDA is configured) are defined in
// gpu_util.cc.
#ifndef TF_LSTM_OPS_CC_TF_DEVICE_H_
#define TF_LSTM_OPS_CC_TF_DEVICE_H_

#ifndef EIGEN_USE_THREADS
#define EIGEN_USE_THREADS  // Eigen::ThreadPoolDevice
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tf_lstm_ops {

using CPUDevice = Eigen::ThreadPoolDevice;

// X(T) for each element type the kernels take (instantiations, registrations).
#define TF_LSTM_OPS_FOR_EACH_TYPE(X) X(Eigen::half) X(Eigen::bfloat16) X(float) X(double)

// The GPU as a template argument of functors and kernels (TF's Eigen::GpuDevice would need
// EIGEN_USE_GPU and with it CUDA in every TensorFlow header). The stream is the op's:
// ctx->op_device_context()->stream().
struct GpuDevice {};

// Host-initiated writes into device memory of an op: zero-filling an output and copying between
// two tensors of the op's device. Ordered on the op's stream on the GPU, never synchronising.
template <typename Device>
struct DeviceMemory;

// `bytes` of scratch from TF's allocator for this op (64-byte aligned), alive while `holder` is;
// on the GPU, freed memory is reused only by work ordered after ours on the same stream.
inline absl::Status AllocateScratch(tensorflow::OpKernelContext* ctx, size_t bytes,
                                    tensorflow::Tensor* holder, void** data) {
  TF_RETURN_IF_ERROR(ctx->allocate_temp(
      tensorflow::DT_UINT8, tensorflow::TensorShape({static_cast<int64_t>(bytes)}), holder));
  *data = bytes == 0 ? nullptr : holder->flat<uint8_t>().data();
  return absl::OkStatus();
}

// Every CPU functor's shape: a CPU engine call run(device, scratch, bytes) with `scratch_bytes`
// (its query's answer) of scratch. The engine fails only if the scratch is smaller than its query
// said, which would be our bug: an Internal error naming the op and `step`.
template <typename Run>
absl::Status RunOnCpu(tensorflow::OpKernelContext* ctx, const char* step, size_t scratch_bytes,
                      Run run) {
  tensorflow::Tensor holder;
  void* scratch;
  TF_RETURN_IF_ERROR(AllocateScratch(ctx, scratch_bytes, &holder, &scratch));
  if (run(ctx->eigen_device<CPUDevice>(), scratch, scratch_bytes)) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(ctx->op_kernel().type_string(), " (",
                                          ctx->op_kernel().name(), "): ", step,
                                          " ran out of its scratch: ", scratch_bytes, " bytes"));
}

template <>
struct DeviceMemory<CPUDevice> {
  template <typename T>
  static absl::Status SetZero(tensorflow::OpKernelContext*, tensorflow::Tensor* t) {
    t->flat<T>().setZero();
    return absl::OkStatus();
  }
  static absl::Status Copy(tensorflow::OpKernelContext*, void* dst, const void* src,
                           size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
};

#ifdef TF_LSTM_OPS_WITH_CUDA
// Defined in gpu_util.cc for Eigen::half, Eigen::bfloat16, float and double.
template <>
struct DeviceMemory<GpuDevice> {
  template <typename T>
  static absl::Status SetZero(tensorflow::OpKernelContext* ctx, tensorflow::Tensor* t);
  static absl::Status Copy(tensorflow::OpKernelContext* ctx, void* dst, const void* src,
                           size_t bytes);
};
#endif  // TF_LSTM_OPS_WITH_CUDA

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_DEVICE_H_
