// The GPU launchers of the LayerNorm GRU and SimpleRNN (gpu_launchers.h): LayerNormRnnEngine
// (gpu_engine.h) on a CudaBackend.
#include "cc/gpu/backend_cuda.cuh"
#include "cc/layer_norm_rnn/gpu_engine.h"
#include "cc/layer_norm_rnn/gpu_launchers.h"

namespace tf_lstm_ops {
namespace gpu {

template <typename T>
size_t LayerNormRnnForwardScratchBytes(const LayerNormRnnModel& m, const LayerNormRnnRun& run) {
  return LayerNormRnnEngine<CudaBackend, T>::ForwardScratchBytes(m, run);
}

template <typename T>
cudaError_t LayerNormRnnForward(cudaStream_t stream, const LayerNormRnnModel& m,
                                const LayerNormRnnRun& run, const T* x, const T* h0,
                                const LayerNormRnnWeights<T>& w, T* y, T* h_last,
                                uint8_t* workspace, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return LayerNormRnnEngine<CudaBackend, T>::Forward(be, m, run, x, h0, w, y, h_last, workspace,
                                                     scratch);
}

template <typename T>
size_t LayerNormRnnBackwardScratchBytes(const LayerNormRnnModel& m, const LayerNormRnnRun& run) {
  return LayerNormRnnEngine<CudaBackend, T>::BackwardScratchBytes(m, run);
}

template <typename T>
cudaError_t LayerNormRnnBackward(cudaStream_t stream, const LayerNormRnnModel& m,
                                 const LayerNormRnnRun& run, const RnnReserveHeader& expected,
                                 const T* x, const T* h0, const LayerNormRnnWeights<T>& w,
                                 const T* dy, const T* dh_last, const uint8_t* reserve, T* dx,
                                 T* dh0, const LayerNormRnnWeightGrads<T>& grads, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return LayerNormRnnEngine<CudaBackend, T>::Backward(be, m, run, expected, x, h0, w, dy, dh_last,
                                                      reserve, dx, dh0, grads, scratch);
}

#define TF_LSTM_INSTANTIATE_LAYER_NORM_RNN_GPU(T)                                                \
  template size_t LayerNormRnnForwardScratchBytes<T>(const LayerNormRnnModel&,                   \
                                                     const LayerNormRnnRun&);                    \
  template cudaError_t LayerNormRnnForward<T>(cudaStream_t, const LayerNormRnnModel&,            \
                                              const LayerNormRnnRun&, const T*, const T*,        \
                                              const LayerNormRnnWeights<T>&, T*, T*, uint8_t*,   \
                                              void*);                                            \
  template size_t LayerNormRnnBackwardScratchBytes<T>(const LayerNormRnnModel&,                  \
                                                      const LayerNormRnnRun&);                   \
  template cudaError_t LayerNormRnnBackward<T>(                                                  \
      cudaStream_t, const LayerNormRnnModel&, const LayerNormRnnRun&, const RnnReserveHeader&,   \
      const T*, const T*, const LayerNormRnnWeights<T>&, const T*, const T*, const uint8_t*, T*, \
      T*, const LayerNormRnnWeightGrads<T>&, void*);
TF_LSTM_INSTANTIATE_LAYER_NORM_RNN_GPU(__half)
TF_LSTM_INSTANTIATE_LAYER_NORM_RNN_GPU(__nv_bfloat16)
TF_LSTM_INSTANTIATE_LAYER_NORM_RNN_GPU(float)
TF_LSTM_INSTANTIATE_LAYER_NORM_RNN_GPU(double)
#undef TF_LSTM_INSTANTIATE_LAYER_NORM_RNN_GPU

}  // namespace gpu
}  // namespace tf_lstm_ops
