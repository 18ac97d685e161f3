// Functors behind the LayerNorm LSTM ops (docs/layer_norm_lstm.md), templated on device and
// storage type: the OpKernels (kernels.cc) call them; every device specialisation is declared
// here and defined in functor_cpu.cc (the CPU engine) or functor_gpu.cc (the GPU launchers).
#ifndef TF_LSTM_OPS_CC_TF_LAYER_NORM_LSTM_FUNCTOR_H_
#define TF_LSTM_OPS_CC_TF_LAYER_NORM_LSTM_FUNCTOR_H_

#include "cc/core/layer_norm_lstm_types.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

// Declared only: each device below specialises both.
template <typename Device, typename T>
struct LayerNormLstmForward;
template <typename Device, typename T>
struct LayerNormLstmBackward;

// Contracts:
//  - LayerNormLstmForward: workspace is LayerNormLstmWorkspaceBytes bytes (the reserve space when
//    run.training; scratch otherwise), 64-byte aligned. Writes y, h_last, c_last and the
//    workspace, its header (LayerNormLstmHeader) first.
//  - LayerNormLstmBackward: reserve is what the matching training forward wrote, whose header
//    must equal `expected`. On the CPU the kernel has compared them; on the GPU the header is
//    device memory the host cannot read without a synchronisation, so it is compared on the
//    device (every output NaN on a mismatch) after the kernel checked the reserve space's size.
//    Writes the gradients of <dy, y> + <dh_last, h_T> + <dc_last, c_T> w.r.t. x, h0, c0 and
//    every weight.
// The run's seq_lengths are host memory; everything else lives on the op's device.
#define TF_LSTM_OPS_DECLARE_LAYER_NORM_LSTM_FUNCTORS(Device)                                    \
  template <typename T>                                                                        \
  struct LayerNormLstmForward<Device, T> {                                                     \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LayerNormLstmModel& m,     \
                            const LayerNormLstmRun& run, const T* x, const T* h0,              \
                            const T* c0, const LayerNormLstmWeights<T>& w, T* y, T* h_last,    \
                            T* c_last, uint8_t* workspace);                                    \
  };                                                                                           \
  template <typename T>                                                                        \
  struct LayerNormLstmBackward<Device, T> {                                                    \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LayerNormLstmModel& m,     \
                            const LayerNormLstmRun& run, const RnnReserveHeader& expected,     \
                            const T* x, const T* h0, const T* c0,                              \
                            const LayerNormLstmWeights<T>& w, const T* dy, const T* dh_last,   \
                            const T* dc_last, const uint8_t* reserve, T* dx, T* dh0, T* dc0,   \
                            const LayerNormLstmWeightGrads<T>& grads);                         \
  };

TF_LSTM_OPS_DECLARE_LAYER_NORM_LSTM_FUNCTORS(CPUDevice)
#ifdef TF_LSTM_OPS_WITH_CUDA
TF_LSTM_OPS_DECLARE_LAYER_NORM_LSTM_FUNCTORS(GpuDevice)
#endif
#undef TF_LSTM_OPS_DECLARE_LAYER_NORM_LSTM_FUNCTORS

// The explicit instantiations of one device's functors, for every element type (in
// functor_cpu.cc and functor_gpu.cc).
#define TF_LSTM_OPS_INSTANTIATE_LAYER_NORM_LSTM_FUNCTORS(Device) \
  template struct LayerNormLstmForward<Device, Eigen::half>;     \
  template struct LayerNormLstmBackward<Device, Eigen::half>;    \
  template struct LayerNormLstmForward<Device, Eigen::bfloat16>; \
  template struct LayerNormLstmBackward<Device, Eigen::bfloat16>; \
  template struct LayerNormLstmForward<Device, float>;           \
  template struct LayerNormLstmBackward<Device, float>;          \
  template struct LayerNormLstmForward<Device, double>;          \
  template struct LayerNormLstmBackward<Device, double>;

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_LAYER_NORM_LSTM_FUNCTOR_H_
