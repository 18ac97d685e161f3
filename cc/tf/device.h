// Devices of the OpKernels: the CPU (Eigen's ThreadPoolDevice) and a GPU tag, and the few host
// writes an OpKernel makes into its output or temporary tensors, done where that memory lives.
//
// No CUDA headers and no EIGEN_USE_GPU / GOOGLE_CUDA here: every build compiles this header; the
// GPU declarations (TF_LSTM_OPS_WITH_CUDA, set by Bazel when CUDA is configured) are defined in
// lstm_gpu.cc and cudnn_rnn_gpu.cc, thin bindings over the launchers of cc/gpu/rnn_gpu.h.
#ifndef TF_LSTM_OPS_CC_KERNELS_DEVICE_H_
#define TF_LSTM_OPS_CC_KERNELS_DEVICE_H_

#ifndef EIGEN_USE_THREADS
#define EIGEN_USE_THREADS  // Eigen::ThreadPoolDevice
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cc/tf/cudnn_rnn/functor.h"
#include "cc/core/cudnn_rnn_types.h"
#include "cc/tf/block_lstm/functor.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tf_lstm_ops {

using CPUDevice = Eigen::ThreadPoolDevice;

// The GPU as a template argument of functors and kernels (TF's Eigen::GpuDevice would need
// EIGEN_USE_GPU and with it CUDA in every TensorFlow header). The stream is the op's:
// ctx->op_device_context()->stream().
struct GpuDevice {};

// Host-initiated writes into device memory of an op: zero-filling an output and copying between
// two tensors of the op's device. Ordered on the op's stream on the GPU, never synchronising.
template <typename Device>
struct DeviceMemory;

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

// Defined in lstm_gpu.cc for Eigen::half, Eigen::bfloat16, float and double.
template <>
struct DeviceMemory<GpuDevice> {
  template <typename T>
  static absl::Status SetZero(tensorflow::OpKernelContext* ctx, tensorflow::Tensor* t);
  static absl::Status Copy(tensorflow::OpKernelContext* ctx, void* dst, const void* src,
                           size_t bytes);
};

// The GPU functors (lstm_gpu.cc, cudnn_rnn_gpu.cc): same contracts as the CPU ones, on the op's
// stream, scratch from ctx->allocate_temp. Errors name the op and step, with CUDA's message.
template <typename T>
struct LstmForward<GpuDevice, T> {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,
                          const LstmAttrs& attrs, int64_t seq_len_max, const LstmInputs<T>& in,
                          const LstmActivations<T*>& out);
};

template <typename T>
struct LstmBackward<GpuDevice, T> {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,
                          const LstmAttrs& attrs, int64_t seq_len_max, const LstmInputs<T>& in,
                          const LstmActivations<const T*>& act,
                          const LstmActivations<const T*>& out_grads,
                          const LstmInputGrads<T>& grads);
};

template <typename T>
struct LstmCellBackward<GpuDevice, T> {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const LstmDims& dims,
                          const LstmAttrs& attrs, const LstmInputs<T>& in,
                          const LstmActivations<const T*>& act,
                          const LstmActivations<const T*>& out_grads, T* cs_prev_grad,
                          T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad);
};

// Forward: the engine writes the reserve header itself (device memory).
template <typename T>
struct CudnnRnnForward<GpuDevice, T> {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const RnnDropout& dropout, const T* input, const T* input_h,
                          const T* input_c, const T* params, T* output, T* output_h,
                          T* output_c, uint8_t* workspace);
};

// Backprop: the reserve space is device memory the host cannot read without a synchronisation,
// so the header the forward must have written is compared on the device against `expected`
// (every output NaN on a mismatch); the kernel has checked the reserve space's size on the host.
template <typename T>
struct CudnnRnnBackward<GpuDevice, T> {
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const RnnReserveHeader& expected, const T* input, const T* input_h,
                          const T* input_c, const T* params, const T* output_backprop,
                          const T* output_h_backprop, const T* output_c_backprop,
                          const uint8_t* reserve, T* input_backprop, T* input_h_backprop,
                          T* input_c_backprop, T* params_backprop);
};

#endif  // TF_LSTM_OPS_WITH_CUDA

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_KERNELS_DEVICE_H_
