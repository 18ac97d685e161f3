// CPU functors of the LayerNorm GRU / SimpleRNN: the CPU engine (cc/layer_norm_rnn/cpu_engine.h)
// on the op's intra-op pool, its scratch from TensorFlow's allocator.
#include "cc/layer_norm_rnn/cpu_engine.h"

#include "cc/tf/device.h"
#include "cc/tf/layer_norm_rnn/functor.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

using tensorflow::OpKernelContext;

template <typename T>
absl::Status LayerNormRnnForward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormRnnModel& m, const LayerNormRnnRun& run, const T* x,
    const T* h0, const LayerNormRnnWeights<T>& w, T* y, T* h_last, uint8_t* workspace) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the forward pass", cpu::LayerNormRnnForwardScratchBytes<T>(d, m, run),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LayerNormRnnForward<T>(device, m, run, x, h0, w, y, h_last,
                                                       workspace, scratch, bytes);
                  });
}

template <typename T>
absl::Status LayerNormRnnBackward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormRnnModel& m, const LayerNormRnnRun& run,
    const RnnReserveHeader& /*expected: the kernel has compared it*/, const T* x, const T* h0,
    const LayerNormRnnWeights<T>& w, const T* dy, const T* dh_last, const uint8_t* reserve,
    T* dx, T* dh0, const LayerNormRnnWeightGrads<T>& grads) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the backward pass", cpu::LayerNormRnnBackwardScratchBytes<T>(d, m, run),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LayerNormRnnBackward<T>(device, m, run, x, h0, w, dy, dh_last,
                                                        reserve, dx, dh0, grads, scratch, bytes);
                  });
}

TF_LSTM_OPS_INSTANTIATE_LAYER_NORM_RNN_FUNCTORS(CPUDevice)

}  // namespace tf_lstm_ops
