// The GPU launchers of the LayerNorm LSTM (gpu_launchers.h): LayerNormLstmEngine (gpu_engine.h)
// on a CudaBackend.
#include "cc/gpu/backend_cuda.cuh"
#include "cc/layer_norm_lstm/gpu_engine.h"
#include "cc/layer_norm_lstm/gpu_launchers.h"

namespace tf_lstm_ops {
namespace gpu {

template <typename T>
size_t LayerNormLstmForwardScratchBytes(const LayerNormLstmModel& m,
                                        const LayerNormLstmRun& run) {
  return LayerNormLstmEngine<CudaBackend, T>::ForwardScratchBytes(m, run);
}

template <typename T>
cudaError_t LayerNormLstmForward(cudaStream_t stream, const LayerNormLstmModel& m,
                                 const LayerNormLstmRun& run, const T* x, const T* h0,
                                 const T* c0, const LayerNormLstmWeights<T>& w, T* y, T* h_last,
                                 T* c_last, uint8_t* workspace, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return LayerNormLstmEngine<CudaBackend, T>::Forward(be, m, run, x, h0, c0, w, y, h_last, c_last,
                                                      workspace, scratch);
}

template <typename T>
size_t LayerNormLstmBackwardScratchBytes(const LayerNormLstmModel& m,
                                         const LayerNormLstmRun& run) {
  return LayerNormLstmEngine<CudaBackend, T>::BackwardScratchBytes(m, run);
}

template <typename T>
cudaError_t LayerNormLstmBackward(cudaStream_t stream, const LayerNormLstmModel& m,
                                  const LayerNormLstmRun& run, const RnnReserveHeader& expected,
                                  const T* x, const T* h0, const T* c0,
                                  const LayerNormLstmWeights<T>& w, const T* dy,
                                  const T* dh_last, const T* dc_last, const uint8_t* reserve,
                                  T* dx, T* dh0, T* dc0, const LayerNormLstmWeightGrads<T>& grads,
                                  void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return LayerNormLstmEngine<CudaBackend, T>::Backward(be, m, run, expected, x, h0, c0, w, dy,
                                                       dh_last, dc_last, reserve, dx, dh0, dc0,
                                                       grads, scratch);
}

#define TF_LSTM_INSTANTIATE_LAYER_NORM_LSTM_GPU(T)                                              \
  template size_t LayerNormLstmForwardScratchBytes<T>(const LayerNormLstmModel&,                \
                                                      const LayerNormLstmRun&);                 \
  template cudaError_t LayerNormLstmForward<T>(                                                 \
      cudaStream_t, const LayerNormLstmModel&, const LayerNormLstmRun&, const T*, const T*,     \
      const T*, const LayerNormLstmWeights<T>&, T*, T*, T*, uint8_t*, void*);                   \
  template size_t LayerNormLstmBackwardScratchBytes<T>(const LayerNormLstmModel&,               \
                                                       const LayerNormLstmRun&);                \
  template cudaError_t LayerNormLstmBackward<T>(                                                \
      cudaStream_t, const LayerNormLstmModel&, const LayerNormLstmRun&, const RnnReserveHeader&, \
      const T*, const T*, const T*, const LayerNormLstmWeights<T>&, const T*, const T*,         \
      const T*, const uint8_t*, T*, T*, T*, const LayerNormLstmWeightGrads<T>&, void*);
TF_LSTM_INSTANTIATE_LAYER_NORM_LSTM_GPU(__half)
TF_LSTM_INSTANTIATE_LAYER_NORM_LSTM_GPU(__nv_bfloat16)
TF_LSTM_INSTANTIATE_LAYER_NORM_LSTM_GPU(float)
TF_LSTM_INSTANTIATE_LAYER_NORM_LSTM_GPU(double)
#undef TF_LSTM_INSTANTIATE_LAYER_NORM_LSTM_GPU

}  // namespace gpu
}  // namespace tf_lstm_ops
