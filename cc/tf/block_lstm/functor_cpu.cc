// CPU functors of the LSTM block ops: the CPU engine (cc/block_lstm/cpu_engine.h) on the op's
// intra-op pool, its scratch from TensorFlow's allocator. The one TensorFlow-specific decision
// is which saved activations the backward may overwrite (ReusableGatesOf).
#include "cc/block_lstm/cpu_engine.h"

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "cc/core/precision.h"
#include "cc/tf/block_lstm/functor.h"
#include "cc/tf/device.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_lstm_ops {
namespace {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

// The grad op's saved-activation inputs i, f, ci, o, when TensorFlow lets the kernel take them
// over (input forwarding: only when no other reference to a buffer exists, as inside a graph or
// tf.function where this op is their only consumer; an eager tape still holds them). All four or
// none; float and double only (the engine keeps float gradients in them). `taken` keeps the
// buffers for the call.
template <typename T>
bool ReusableGatesOf(OpKernelContext* ctx, Tensor (&taken)[4], cpu::ReusableGates<T>* gates) {
  if constexpr (!std::is_same_v<T, AccFor<T>>) {
    return false;
  } else {
    const char* names[4] = {"i", "f", "ci", "o"};
    T** slots[4] = {&gates->i, &gates->f, &gates->ci, &gates->o};
    for (int k = 0; k < 4; ++k) {
      int start, stop;
      if (!ctx->op_kernel().InputRange(names[k], &start, &stop).ok()) return false;
      const Tensor& input = ctx->input(start);
      std::unique_ptr<Tensor> forwarded = ctx->forward_input(
          start, OpKernelContext::Params::kNoReservation, input.dtype(), input.shape(),
          ctx->input_memory_type(start), tensorflow::AllocatorAttributes());
      if (forwarded == nullptr) return false;
      taken[k] = std::move(*forwarded);
      *slots[k] = taken[k].flat<T>().data();
    }
    return true;
  }
}

}  // namespace

template <typename T>
absl::Status LstmForward<CPUDevice, T>::operator()(OpKernelContext* ctx, const LstmDims& dims,
                                                   const LstmAttrs& attrs, int64_t seq_len_max,
                                                   const LstmInputs<T>& in,
                                                   const LstmActivations<T*>& out) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the forward pass",
                  cpu::LstmForwardScratchBytes<T>(d, dims, attrs, seq_len_max),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LstmForward<T>(device, dims, attrs, seq_len_max, in, out,
                                               scratch, bytes);
                  });
}

template <typename T>
absl::Status LstmBackward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, int64_t seq_len_max,
    const LstmInputs<T>& in, const LstmActivations<const T*>& act,
    const LstmActivations<const T*>& out_grads, const LstmInputGrads<T>& grads) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  Tensor taken[4];
  cpu::ReusableGates<T> gates{};
  const cpu::ReusableGates<T>* reuse = ReusableGatesOf(ctx, taken, &gates) ? &gates : nullptr;
  return RunOnCpu(ctx, "the backward pass",
                  cpu::LstmBackwardScratchBytes<T>(d, dims, attrs, seq_len_max, reuse),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LstmBackward<T>(device, dims, attrs, seq_len_max, in, act,
                                                out_grads, grads, reuse, scratch, bytes);
                  });
}

template <typename T>
absl::Status LstmCellBackward<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, const LstmInputs<T>& in,
    const LstmActivations<const T*>& act, const LstmActivations<const T*>& out_grads,
    T* cs_prev_grad, T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the cell's backward step",
                  cpu::LstmCellBackwardScratchBytes<T>(d, dims, attrs),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LstmCellBackward<T>(device, dims, attrs, in, act, out_grads,
                                                    cs_prev_grad, dgates, wci_grad, wcf_grad,
                                                    wco_grad, scratch, bytes);
                  });
}

template <typename T>
absl::Status LstmBackwardGrad<CPUDevice, T>::operator()(
    OpKernelContext* ctx, const LstmDims& dims, const LstmAttrs& attrs, int64_t seq_len_max,
    const LstmInputs<T>& in, const LstmActivations<const T*>& act,
    const LstmActivations<const T*>& out_grads, const LstmInputGrads<const T>& cot,
    const LstmBackwardGrads<T>& grads) {
  const CPUDevice& d = ctx->eigen_device<CPUDevice>();
  return RunOnCpu(ctx, "the backward's gradient",
                  cpu::LstmBackwardGradScratchBytes<T>(d, dims, attrs, seq_len_max),
                  [&](const CPUDevice& device, void* scratch, size_t bytes) {
                    return cpu::LstmBackwardGrad<T>(device, dims, attrs, seq_len_max, in, act,
                                                    out_grads, cot, grads, scratch, bytes);
                  });
}

#define TF_LSTM_OPS_INSTANTIATE(T)               \
  template struct LstmForward<CPUDevice, T>;     \
  template struct LstmBackward<CPUDevice, T>;    \
  template struct LstmCellBackward<CPUDevice, T>; \
  template struct LstmBackwardGrad<CPUDevice, T>;
TF_LSTM_OPS_INSTANTIATE(Eigen::half)
TF_LSTM_OPS_INSTANTIATE(Eigen::bfloat16)
TF_LSTM_OPS_INSTANTIATE(float)
TF_LSTM_OPS_INSTANTIATE(double)
#undef TF_LSTM_OPS_INSTANTIATE

// Backward runs that kept the gate gradients in place (read by the tests through ctypes).
extern "C" __attribute__((visibility("default"))) int64_t tf_lstm_ops_in_place_backward_runs() {
  return cpu::InPlaceBackwardRuns();
}

}  // namespace tf_lstm_ops
