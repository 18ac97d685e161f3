// GPU functors of the LSTM block ops: thin bindings over the launchers of
// cc/block_lstm/gpu_launchers.h (the op's stream, scratch from ctx->allocate_temp,
// Eigen::half/bfloat16 as __half/__nv_bfloat16). Never synchronises.
#include "cc/block_lstm/gpu_launchers.h"
#include "cc/tf/block_lstm/functor.h"
#include "cc/tf/device.h"
#include "cc/tf/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_lstm_ops {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;


namespace {

using gpu_op::Dev;
using gpu_op::StorageOf;

template <typename T>
LstmInputs<StorageOf<T>> DevInputs(const LstmInputs<T>& in) {
  return {Dev(in.x),   Dev(in.cs_prev), Dev(in.h_prev), Dev(in.w),
          Dev(in.wci), Dev(in.wcf),     Dev(in.wco),    Dev(in.b)};
}

template <typename P>
auto DevActivations(const LstmActivations<P>& a) -> LstmActivations<decltype(Dev(a.i))> {
  return {Dev(a.i), Dev(a.cs), Dev(a.f), Dev(a.o), Dev(a.ci), Dev(a.co), Dev(a.h)};
}

template <typename T>
auto DevGrads(const LstmInputGrads<T>& g) -> LstmInputGrads<
    std::remove_pointer_t<decltype(Dev(g.x))>> {
  return {Dev(g.x),   Dev(g.cs_prev), Dev(g.h_prev), Dev(g.w),
          Dev(g.wci), Dev(g.wcf),     Dev(g.wco),    Dev(g.b)};
}

}  // namespace

// ---- the LSTM functors ----

template <typename T>
absl::Status LstmForward<GpuDevice, T>::operator()(OpKernelContext* ctx, const LstmDims& dims,
                                                   const LstmAttrs& attrs, int64_t seq_len_max,
                                                   const LstmInputs<T>& in,
                                                   const LstmActivations<T*>& out) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the forward pass", gpu::LstmForwardScratchBytes<D>(dims, attrs, seq_len_max),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LstmForward<D>(stream, dims, attrs, seq_len_max, DevInputs(in),
                                   DevActivations(out), scratch);
      });
}

template <typename T>
absl::Status LstmBackward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, int64_t seq_len_max,
    const LstmInputs<T>& in, const LstmActivations<const T*>& act,
    const LstmActivations<const T*>& out_grads, const LstmInputGrads<T>& grads) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the backward pass", gpu::LstmBackwardScratchBytes<D>(dims, attrs, seq_len_max),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LstmBackward<D>(stream, dims, attrs, seq_len_max, DevInputs(in),
                                    DevActivations(act), DevActivations(out_grads),
                                    DevGrads(grads), scratch);
      });
}

template <typename T>
absl::Status LstmCellBackward<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, const LstmInputs<T>& in,
    const LstmActivations<const T*>& act, const LstmActivations<const T*>& out_grads,
    T* cs_prev_grad, T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad) {
  using D = StorageOf<T>;
  return gpu_op::RunOnStream(
      ctx, "the cell's backward step", gpu::LstmCellBackwardScratchBytes<D>(dims, attrs),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LstmCellBackward<D>(stream, dims, attrs, DevInputs(in), DevActivations(act),
                                        DevActivations(out_grads), Dev(cs_prev_grad),
                                        Dev(dgates), Dev(wci_grad), Dev(wcf_grad),
                                        Dev(wco_grad), scratch);
      });
}

template <typename T>
absl::Status LstmBackwardGrad<GpuDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, int64_t seq_len_max,
    const LstmInputs<T>& in, const LstmActivations<const T*>& act,
    const LstmActivations<const T*>& out_grads, const LstmInputGrads<const T>& cot,
    const LstmBackwardGrads<T>& grads) {
  using D = StorageOf<T>;
  const LstmBackwardGrads<D> dev_grads{DevGrads(grads.inputs), DevActivations(grads.act),
                                       DevActivations(grads.out_grads)};
  return gpu_op::RunOnStream(
      ctx, "the backward's gradient",
      gpu::LstmBackwardGradScratchBytes<D>(dims, attrs, seq_len_max),
      [&](cudaStream_t stream, void* scratch) {
        return gpu::LstmBackwardGrad<D>(stream, dims, attrs, seq_len_max, DevInputs(in),
                                        DevActivations(act), DevActivations(out_grads),
                                        DevGrads(cot), dev_grads, scratch);
      });
}

#define TF_LSTM_INSTANTIATE_GPU(T)                  \
  template struct LstmForward<GpuDevice, T>;        \
  template struct LstmBackward<GpuDevice, T>;       \
  template struct LstmCellBackward<GpuDevice, T>;   \
  template struct LstmBackwardGrad<GpuDevice, T>;
TF_LSTM_INSTANTIATE_GPU(Eigen::half)
TF_LSTM_INSTANTIATE_GPU(Eigen::bfloat16)
TF_LSTM_INSTANTIATE_GPU(float)
TF_LSTM_INSTANTIATE_GPU(double)
#undef TF_LSTM_INSTANTIATE_GPU

}  // namespace tf_lstm_ops
