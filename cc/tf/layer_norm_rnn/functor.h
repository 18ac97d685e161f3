// Functors behind the LayerNorm GRU / SimpleRNN ops (docs/layer_norm_rnn.md), templated on device
// and storage type: the OpKernels (kernels.cc) call them; every device specialisation is declared
// here and defined in functor_cpu.cc (the CPU engine) or functor_gpu.cc (the GPU launchers).
#ifndef TF_LSTM_OPS_CC_TF_LAYER_NORM_RNN_FUNCTOR_H_
#define TF_LSTM_OPS_CC_TF_LAYER_NORM_RNN_FUNCTOR_H_

#include "cc/core/layer_norm_rnn_types.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

// Declared only: each device below specialises both.
template <typename Device, typename T>
struct LayerNormRnnForward;
template <typename Device, typename T>
struct LayerNormRnnBackward;

// Contracts: as the LayerNorm LSTM's (cc/tf/layer_norm_lstm/functor.h), with one state h:
//  - LayerNormRnnForward: workspace is LayerNormRnnWorkspaceBytes bytes (the reserve space when
//    run.training; scratch otherwise), 64-byte aligned. Writes y, h_last and the workspace, its
//    header (LayerNormRnnHeader) first.
//  - LayerNormRnnBackward: reserve is what the matching training forward wrote, whose header
//    must equal `expected` (compared by the kernel on the CPU, on the device on the GPU: every
//    output NaN on a mismatch). Writes the gradients of <dy, y> + <dh_last, h_T> w.r.t. x, h0
//    and every weight (a SimpleRNN's gamma_h: none).
// The run's seq_lengths are host memory; everything else lives on the op's device.
#define TF_LSTM_OPS_DECLARE_LAYER_NORM_RNN_FUNCTORS(Device)                                    \
  template <typename T>                                                                       \
  struct LayerNormRnnForward<Device, T> {                                                     \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LayerNormRnnModel& m,     \
                            const LayerNormRnnRun& run, const T* x, const T* h0,              \
                            const LayerNormRnnWeights<T>& w, T* y, T* h_last,                 \
                            uint8_t* workspace);                                              \
  };                                                                                          \
  template <typename T>                                                                       \
  struct LayerNormRnnBackward<Device, T> {                                                    \
    absl::Status operator()(tensorflow::OpKernelContext* ctx, const LayerNormRnnModel& m,     \
                            const LayerNormRnnRun& run, const RnnReserveHeader& expected,     \
                            const T* x, const T* h0, const LayerNormRnnWeights<T>& w,         \
                            const T* dy, const T* dh_last, const uint8_t* reserve, T* dx,     \
                            T* dh0, const LayerNormRnnWeightGrads<T>& grads);                 \
  };

TF_LSTM_OPS_DECLARE_LAYER_NORM_RNN_FUNCTORS(CPUDevice)
#ifdef TF_LSTM_OPS_WITH_CUDA
TF_LSTM_OPS_DECLARE_LAYER_NORM_RNN_FUNCTORS(GpuDevice)
#endif
#undef TF_LSTM_OPS_DECLARE_LAYER_NORM_RNN_FUNCTORS

// The explicit instantiations of one device's functors, for every element type (in
// functor_cpu.cc and functor_gpu.cc).
#define TF_LSTM_OPS_INSTANTIATE_LAYER_NORM_RNN_FUNCTORS(Device)  \
  template struct LayerNormRnnForward<Device, Eigen::half>;      \
  template struct LayerNormRnnBackward<Device, Eigen::half>;     \
  template struct LayerNormRnnForward<Device, Eigen::bfloat16>;  \
  template struct LayerNormRnnBackward<Device, Eigen::bfloat16>; \
  template struct LayerNormRnnForward<Device, float>;            \
  template struct LayerNormRnnBackward<Device, float>;           \
  template struct LayerNormRnnForward<Device, double>;           \
  template struct LayerNormRnnBackward<Device, double>;

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_LAYER_NORM_RNN_FUNCTOR_H_
