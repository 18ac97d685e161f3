// CudaBackend: the engines' device calls as CUDA kernels and cuBLAS GEMMs, all on one stream
// (the op's), never synchronising and never touching the default stream. Include only from
// .cu.cc files compiled by nvcc.
#ifndef TF_LSTM_OPS_CC_GPU_BACKEND_CUDA_CUH_
#define TF_LSTM_OPS_CC_GPU_BACKEND_CUDA_CUH_

#include <cuda_runtime.h>

#include <type_traits>

#include "cc/gpu/common.h"
#include "cc/gpu/cublas_runtime.h"

namespace tf_lstm_ops {
namespace gpu {

template <typename F>
__global__ void ForEachKernel(int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    f(i);
  }
}

template <typename T>
struct BlasType;
template <>
struct BlasType<float> {
  static constexpr cudaDataType kType = CUDA_R_32F;
};
template <>
struct BlasType<double> {
  static constexpr cudaDataType kType = CUDA_R_64F;
};
template <>
struct BlasType<__half> {
  static constexpr cudaDataType kType = CUDA_R_16F;
};
template <>
struct BlasType<__nv_bfloat16> {
  static constexpr cudaDataType kType = CUDA_R_16BF;
};

class CudaBackend {
 public:
  // cuBLAS gets an explicit workspace from the op's scratch: with the default pool its choice
  // of algorithm (and so the bits of the result) could depend on what other streams do.
  static constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;  // NVIDIA's figure for Hopper

  explicit CudaBackend(cudaStream_t stream) : stream_(stream) {}
  void SetBlasWorkspace(void* workspace) { workspace_ = workspace; }
  cudaStream_t stream() const { return stream_; }

  template <typename F>
  cudaError_t ForEach(int64_t n, const F& f) const {
    static_assert(std::is_trivially_copyable_v<F>, "functors travel to the device by value");
    if (n <= 0) return cudaSuccess;
    constexpr int kThreads = 256;
    constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
    ForEachKernel<F><<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(n, f);
    return cudaGetLastError();
  }

  cudaError_t Copy(void* dst, const void* src, size_t bytes) const {
    if (bytes == 0 || dst == src) return cudaSuccess;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
  }

  template <typename In, typename Out>
  cudaError_t BlasGemm(bool trans_a, bool trans_b, int m, int n, int k, const In* a, int lda,
                       const In* b, int ldb, bool accumulate, Out* c, int ldc) const {
    static_assert(std::is_same_v<Out, Acc<In>>, "GEMMs write the compute type");
    return BlasGemmEx(stream_, workspace_, kBlasWorkspaceBytes, trans_a, trans_b, m, n, k, a,
                      BlasType<In>::kType, lda, b, BlasType<In>::kType, ldb, accumulate, c,
                      BlasType<Out>::kType, ldc);
  }

 private:
  cudaStream_t stream_;
  void* workspace_ = nullptr;
};

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_BACKEND_CUDA_CUH_
