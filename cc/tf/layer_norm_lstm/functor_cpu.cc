// CPU functors of the LayerNorm LSTM: the CPU engine (cc/layer_norm_lstm/cpu_engine.h) on the
// op's intra-op pool, its scratch from TensorFlow's allocator.
#include "cc/layer_norm_lstm/cpu_engine.h"

#include "cc/tf/device.h"
#include "cc/tf/layer_norm_lstm/functor.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

using tensorflow::OpKernelContext;

template <typename T>
absl::Status LayerNormLstmForward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormLstmModel& m, const LayerNormLstmRun& run, const T* x,
    const T* h0, const T* c0, const LayerNormLstmWeights<T>& w, T* y, T* h_last, T* c_last,
    uint8_t* workspace) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the forward pass", cpu::LayerNormLstmForwardScratchBytes<T>(d, m, run),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LayerNormLstmForward<T>(device, m, run, x, h0, c0, w, y, h_last,
                                                        c_last, workspace, scratch, bytes);
                  });
}

template <typename T>
absl::Status LayerNormLstmBackward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormLstmModel& m, const LayerNormLstmRun& run,
    const RnnReserveHeader& /*expected: the kernel has compared it*/, const T* x, const T* h0,
    const T* c0, const LayerNormLstmWeights<T>& w, const T* dy, const T* dh_last,
    const T* dc_last, const uint8_t* reserve, T* dx, T* dh0, T* dc0,
    const LayerNormLstmWeightGrads<T>& grads) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the backward pass", cpu::LayerNormLstmBackwardScratchBytes<T>(d, m, run),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LayerNormLstmBackward<T>(device, m, run, x, h0, c0, w, dy,
                                                         dh_last, dc_last, reserve, dx, dh0, dc0,
                                                         grads, scratch, bytes);
                  });
}

TF_LSTM_OPS_INSTANTIATE_LAYER_NORM_LSTM_FUNCTORS(CPUDevice)

}  // namespace tf_lstm_ops
