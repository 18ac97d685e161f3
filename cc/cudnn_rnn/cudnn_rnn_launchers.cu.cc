// The GPU launchers of the CudnnRNN family (gpu_launchers.h): RnnEngine (gpu_engine.h) on a
// CudaBackend.
#include "cc/gpu/backend_cuda.cuh"
#include "cc/cudnn_rnn/gpu_engine.h"
#include "cc/cudnn_rnn/gpu_launchers.h"

namespace tf_lstm_ops {
namespace gpu {

template <typename T>
size_t RnnForwardScratchBytes(const RnnModel& m, const RnnRun& run, const RnnDropout& dropout) {
  return RnnEngine<CudaBackend, T>::ForwardScratchBytes(m, run, dropout);
}

template <typename T>
cudaError_t RnnForward(cudaStream_t stream, const RnnModel& m, const RnnRun& run,
                       const RnnDropout& dropout, const T* input, const T* input_h,
                       const T* input_c, const T* params, T* output, T* output_h, T* output_c,
                       uint8_t* workspace, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return RnnEngine<CudaBackend, T>::Forward(be, m, run, dropout, input, input_h, input_c, params,
                                            output, output_h, output_c, workspace, scratch);
}

template <typename T>
RnnForwardPath RnnForwardPathOf(const RnnModel& m, const RnnRun& run) {
  return RnnEngine<CudaBackend, T>::PlanPersistent(CudaBackend(nullptr), m, run);
}

template <typename T>
size_t RnnBackwardScratchBytes(const RnnModel& m, const RnnRun& run) {
  return RnnEngine<CudaBackend, T>::BackwardScratchBytes(m, run);
}

template <typename T>
cudaError_t RnnBackward(cudaStream_t stream, const RnnModel& m, const RnnRun& run,
                        const RnnReserveHeader& expected, const T* input, const T* input_h,
                        const T* input_c, const T* params, const T* output_backprop,
                        const T* output_h_backprop, const T* output_c_backprop,
                        const uint8_t* reserve, T* input_backprop, T* input_h_backprop,
                        T* input_c_backprop, T* params_backprop, void* scratch) {
  TF_LSTM_GPU_RETURN_IF_ERROR(Initialize());
  CudaBackend be(stream);
  return RnnEngine<CudaBackend, T>::Backward(
      be, m, run, expected, input, input_h, input_c, params, output_backprop, output_h_backprop,
      output_c_backprop, reserve, input_backprop, input_h_backprop, input_c_backprop,
      params_backprop, scratch);
}

template <typename T>
cudaError_t KerasToParams(cudaStream_t stream, RnnMode mode, int64_t input_size,
                          int64_t num_units, int bias_rows, const T* kernel,
                          const T* recurrent_kernel, const T* bias, T* params) {
  const T* const keras[3] = {kernel, recurrent_kernel, bias};
  return CopyKerasBlocks<true, CudaBackend, T>(CudaBackend(stream), mode, input_size,
                                               num_units, bias_rows, keras, params);
}

template <typename T>
cudaError_t ParamsToKeras(cudaStream_t stream, RnnMode mode, int64_t input_size,
                          int64_t num_units, int bias_rows, const T* params, T* kernel,
                          T* recurrent_kernel, T* bias) {
  T* const keras[3] = {kernel, recurrent_kernel, bias};
  return CopyKerasBlocks<false, CudaBackend, T>(CudaBackend(stream), mode, input_size,
                                                num_units, bias_rows, keras, params);
}

#define TF_LSTM_INSTANTIATE_RNN_GPU(T)                                                          \
  template size_t RnnForwardScratchBytes<T>(const RnnModel&, const RnnRun&, const RnnDropout&); \
  template cudaError_t RnnForward<T>(cudaStream_t, const RnnModel&, const RnnRun&,              \
                                     const RnnDropout&, const T*, const T*, const T*, const T*, \
                                     T*, T*, T*, uint8_t*, void*);                              \
  template RnnForwardPath RnnForwardPathOf<T>(const RnnModel&, const RnnRun&);                  \
  template size_t RnnBackwardScratchBytes<T>(const RnnModel&, const RnnRun&);                   \
  template cudaError_t RnnBackward<T>(cudaStream_t, const RnnModel&, const RnnRun&,             \
                                      const RnnReserveHeader&, const T*, const T*, const T*,    \
                                      const T*, const T*, const T*, const T*, const uint8_t*,   \
                                      T*, T*, T*, T*, void*);                                   \
  template cudaError_t KerasToParams<T>(cudaStream_t, RnnMode, int64_t, int64_t, int, const T*, \
                                        const T*, const T*, T*);                                \
  template cudaError_t ParamsToKeras<T>(cudaStream_t, RnnMode, int64_t, int64_t, int, const T*, \
                                        T*, T*, T*);
TF_LSTM_INSTANTIATE_RNN_GPU(__half)
TF_LSTM_INSTANTIATE_RNN_GPU(__nv_bfloat16)
TF_LSTM_INSTANTIATE_RNN_GPU(float)
TF_LSTM_INSTANTIATE_RNN_GPU(double)
#undef TF_LSTM_INSTANTIATE_RNN_GPU

}  // namespace gpu
}  // namespace tf_lstm_ops
