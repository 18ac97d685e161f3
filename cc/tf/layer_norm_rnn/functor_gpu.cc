// GPU functors of the LayerNorm GRU / SimpleRNN: thin bindings over gpu::LayerNormRnnForward /
// gpu::LayerNormRnnBackward (cc/layer_norm_rnn/gpu_launchers.h) on the op's stream, with scratch
// from ctx->allocate_temp. The workspace (the reserve space when training) is allocated by the
// kernel; the engine writes its header.
#define EIGEN_USE_THREADS

#include "cc/layer_norm_rnn/gpu_launchers.h"
#include "cc/tf/device.h"
#include "cc/tf/gpu_util.h"
#include "cc/tf/layer_norm_rnn/functor.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

using gpu_op::Dev;
using gpu_op::StorageOf;
using tensorflow::OpKernelContext;

namespace {

// The weights (their gradients) as the device storage type: the same bits.
template <typename T>
LayerNormRnnWeights<StorageOf<T>> DevWeights(const LayerNormRnnWeights<T>& w) {
  return {Dev(w.kernel), Dev(w.recurrent_kernel), Dev(w.bias), Dev(w.gamma_x), Dev(w.gamma_h)};
}
template <typename T>
LayerNormRnnWeightGrads<StorageOf<T>> DevGrads(const LayerNormRnnWeightGrads<T>& g) {
  return {Dev(g.kernel), Dev(g.recurrent_kernel), Dev(g.bias), Dev(g.gamma_x), Dev(g.gamma_h)};
}

}  // namespace

template <typename T>
absl::Status LayerNormRnnForward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormRnnModel& m, const LayerNormRnnRun& run, const T* x,
    const T* h0, const LayerNormRnnWeights<T>& w, T* y, T* h_last, uint8_t* workspace) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the forward pass", gpu::LayerNormRnnForwardScratchBytes<D>(m, run),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LayerNormRnnForward<D>(stream, m, run, Dev(x), Dev(h0), DevWeights(w), Dev(y),
                                           Dev(h_last), workspace, scratch);
      });
}

template <typename T>
absl::Status LayerNormRnnBackward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormRnnModel& m, const LayerNormRnnRun& run,
    const RnnReserveHeader& expected, const T* x, const T* h0, const LayerNormRnnWeights<T>& w,
    const T* dy, const T* dh_last, const uint8_t* reserve, T* dx, T* dh0,
    const LayerNormRnnWeightGrads<T>& grads) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the backward pass", gpu::LayerNormRnnBackwardScratchBytes<D>(m, run),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LayerNormRnnBackward<D>(stream, m, run, expected, Dev(x), Dev(h0),
                                            DevWeights(w), Dev(dy), Dev(dh_last), reserve,
                                            Dev(dx), Dev(dh0), DevGrads(grads), scratch);
      });
}

TF_LSTM_OPS_INSTANTIATE_LAYER_NORM_RNN_FUNCTORS(GpuDevice)

}  // namespace tf_lstm_ops
