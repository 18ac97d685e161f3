// The GPU launchers of the LSTM block ops (gpu_launchers.h): LstmEngine (gpu_engine.h) on a
// CudaBackend.
// Every launcher runs Initialize() first (driver check, cuBLAS loading; cached after the first
// call) and returns its error.
#include "cc/gpu/backend_cuda.cuh"
#include "cc/block_lstm/gpu_engine.h"
#include "cc/block_lstm/gpu_launchers.h"

namespace tf_lstm_ops {
namespace gpu {

template <typename T>
using CudaLstm = LstmEngine<CudaBackend, T>;

template <typename T>
size_t LstmForwardScratchBytes(const LstmDims& dims, const LstmAttrs& attrs,
                               int64_t seq_len_max) {
  return CudaLstm<T>::ForwardScratchBytes(dims, attrs, seq_len_max);
}

template <typename T>
cudaError_t LstmForward(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                        int64_t seq_len_max, const LstmInputs<T>& in,
                        const LstmActivations<T*>& out, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return CudaLstm<T>::Forward(be, dims, attrs, seq_len_max, in, out, scratch);
}

template <typename T>
size_t LstmBackwardScratchBytes(const LstmDims& dims, const LstmAttrs& attrs,
                                int64_t seq_len_max) {
  return CudaLstm<T>::BackwardScratchBytes(dims, attrs, seq_len_max);
}

template <typename T>
cudaError_t LstmBackward(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                         int64_t seq_len_max, const LstmInputs<T>& in,
                         const LstmActivations<const T*>& act,
                         const LstmActivations<const T*>& out_grads,
                         const LstmInputGrads<T>& grads, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return CudaLstm<T>::Backward(be, dims, attrs, seq_len_max, in, act, out_grads, grads, scratch);
}

template <typename T>
size_t LstmBackwardGradScratchBytes(const LstmDims& dims, const LstmAttrs& attrs,
                                    int64_t seq_len_max) {
  return CudaLstm<T>::BackwardGradScratchBytes(dims, attrs, seq_len_max);
}

template <typename T>
cudaError_t LstmBackwardGrad(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                             int64_t seq_len_max, const LstmInputs<T>& in,
                             const LstmActivations<const T*>& act,
                             const LstmActivations<const T*>& out_grads,
                             const LstmInputGrads<const T>& cot, const LstmBackwardGrads<T>& grads,
                             void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return CudaLstm<T>::BackwardGrad(be, dims, attrs, seq_len_max, in, act, out_grads, cot, grads,
                                   scratch);
}

template <typename T>
size_t LstmCellBackwardScratchBytes(const LstmDims& dims, const LstmAttrs& attrs) {
  return CudaLstm<T>::CellBackwardScratchBytes(dims, attrs);
}

template <typename T>
cudaError_t LstmCellBackward(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                             const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                             const LstmActivations<const T*>& out_grads, T* cs_prev_grad,
                             T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return CudaLstm<T>::CellBackward(be, dims, attrs, in, act, out_grads, cs_prev_grad, dgates,
                                   wci_grad, wcf_grad, wco_grad, scratch);
}

#define TF_LSTM_INSTANTIATE_GPU(T)                                                             \
  template size_t LstmForwardScratchBytes<T>(const LstmDims&, const LstmAttrs&, int64_t);      \
  template cudaError_t LstmForward<T>(cudaStream_t, const LstmDims&, const LstmAttrs&, int64_t, \
                                      const LstmInputs<T>&, const LstmActivations<T*>&, void*); \
  template size_t LstmBackwardScratchBytes<T>(const LstmDims&, const LstmAttrs&, int64_t);     \
  template cudaError_t LstmBackward<T>(                                                        \
      cudaStream_t, const LstmDims&, const LstmAttrs&, int64_t, const LstmInputs<T>&,          \
      const LstmActivations<const T*>&, const LstmActivations<const T*>&,                      \
      const LstmInputGrads<T>&, void*);                                                        \
  template size_t LstmBackwardGradScratchBytes<T>(const LstmDims&, const LstmAttrs&, int64_t); \
  template cudaError_t LstmBackwardGrad<T>(                                                    \
      cudaStream_t, const LstmDims&, const LstmAttrs&, int64_t, const LstmInputs<T>&,          \
      const LstmActivations<const T*>&, const LstmActivations<const T*>&,                      \
      const LstmInputGrads<const T>&, const LstmBackwardGrads<T>&, void*);                     \
  template size_t LstmCellBackwardScratchBytes<T>(const LstmDims&, const LstmAttrs&);          \
  template cudaError_t LstmCellBackward<T>(                                                    \
      cudaStream_t, const LstmDims&, const LstmAttrs&, const LstmInputs<T>&,                   \
      const LstmActivations<const T*>&, const LstmActivations<const T*>&, T*, T*, T*, T*, T*,  \
      void*);
TF_LSTM_INSTANTIATE_GPU(__half)
TF_LSTM_INSTANTIATE_GPU(__nv_bfloat16)
TF_LSTM_INSTANTIATE_GPU(float)
TF_LSTM_INSTANTIATE_GPU(double)
#undef TF_LSTM_INSTANTIATE_GPU

}  // namespace gpu
}  // namespace tf_lstm_ops
