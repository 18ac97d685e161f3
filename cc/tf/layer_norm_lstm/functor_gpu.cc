// GPU functors of the LayerNorm LSTM: thin bindings over gpu::LayerNormLstmForward /
// gpu::LayerNormLstmBackward (cc/layer_norm_lstm/gpu_launchers.h) on the op's stream, with
// scratch from ctx->allocate_temp. The workspace (the reserve space when training) is allocated
// by the kernel; the engine writes its header.
#define EIGEN_USE_THREADS

#include "cc/layer_norm_lstm/gpu_launchers.h"
#include "cc/tf/device.h"
#include "cc/tf/gpu_util.h"
#include "cc/tf/layer_norm_lstm/functor.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

using gpu_op::Dev;
using gpu_op::StorageOf;
using tensorflow::OpKernelContext;

namespace {

// The weights (their gradients) as the device storage type: the same bits.
template <typename T>
LayerNormLstmWeights<StorageOf<T>> DevWeights(const LayerNormLstmWeights<T>& w) {
  return {Dev(w.kernel),  Dev(w.recurrent_kernel), Dev(w.bias),    Dev(w.gamma_x), Dev(w.beta_x),
          Dev(w.gamma_h), Dev(w.beta_h),           Dev(w.gamma_c), Dev(w.beta_c)};
}
template <typename T>
LayerNormLstmWeightGrads<StorageOf<T>> DevGrads(const LayerNormLstmWeightGrads<T>& g) {
  return {Dev(g.kernel),  Dev(g.recurrent_kernel), Dev(g.bias),    Dev(g.gamma_x), Dev(g.beta_x),
          Dev(g.gamma_h), Dev(g.beta_h),           Dev(g.gamma_c), Dev(g.beta_c)};
}

}  // namespace

template <typename T>
absl::Status LayerNormLstmForward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormLstmModel& m, const LayerNormLstmRun& run, const T* x,
    const T* h0, const T* c0, const LayerNormLstmWeights<T>& w, T* y, T* h_last, T* c_last,
    uint8_t* workspace) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the forward pass", gpu::LayerNormLstmForwardScratchBytes<D>(m, run),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LayerNormLstmForward<D>(stream, m, run, Dev(x), Dev(h0), Dev(c0),
                                            DevWeights(w), Dev(y), Dev(h_last), Dev(c_last),
                                            workspace, scratch);
      });
}

template <typename T>
absl::Status LayerNormLstmBackward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LayerNormLstmModel& m, const LayerNormLstmRun& run,
    const RnnReserveHeader& expected, const T* x, const T* h0, const T* c0,
    const LayerNormLstmWeights<T>& w, const T* dy, const T* dh_last, const T* dc_last,
    const uint8_t* reserve, T* dx, T* dh0, T* dc0, const LayerNormLstmWeightGrads<T>& grads) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the backward pass", gpu::LayerNormLstmBackwardScratchBytes<D>(m, run),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LayerNormLstmBackward<D>(stream, m, run, expected, Dev(x), Dev(h0), Dev(c0),
                                             DevWeights(w), Dev(dy), Dev(dh_last), Dev(dc_last),
                                             reserve, Dev(dx), Dev(dh0), Dev(dc0),
                                             DevGrads(grads), scratch);
      });
}

TF_LSTM_OPS_INSTANTIATE_LAYER_NORM_LSTM_FUNCTORS(GpuDevice)

}  // namespace tf_lstm_ops
