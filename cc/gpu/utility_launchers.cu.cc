// The launcher API's small utilities: FillZero, CopyDevice (Initialize: cublas_runtime.cc).
#include "cc/gpu/backend_cuda.cuh"
#include "cc/gpu/launchers.h"

namespace tf_lstm_ops {
namespace gpu {

template <typename T>
cudaError_t FillZero(cudaStream_t stream, T* dst, int64_t n) {
  return Fill(CudaBackend(stream), dst, n, Cast<T>(0.0f));
}

cudaError_t CopyDevice(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
  return CudaBackend(stream).Copy(dst, src, bytes);
}

template cudaError_t FillZero<__half>(cudaStream_t, __half*, int64_t);
template cudaError_t FillZero<__nv_bfloat16>(cudaStream_t, __nv_bfloat16*, int64_t);
template cudaError_t FillZero<float>(cudaStream_t, float*, int64_t);
template cudaError_t FillZero<double>(cudaStream_t, double*, int64_t);

}  // namespace gpu
}  // namespace tf_lstm_ops
