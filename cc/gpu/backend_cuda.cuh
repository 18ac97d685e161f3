// CudaBackend: the engines' device calls as CUDA kernels and cuBLAS GEMMs, all on one stream
// (the op's), never synchronising and never touching the default stream. Include only from
// .cu.cc files compiled by nvcc.
#ifndef TF_LSTM_OPS_CC_GPU_BACKEND_CUDA_CUH_
#define TF_LSTM_OPS_CC_GPU_BACKEND_CUDA_CUH_

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <mutex>
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

// The persistent launch (CudaBackend::Persistent): phases separated by grid-wide barriers,
// parts by block barriers; the dynamic shared memory stays the block's for the whole launch.
template <typename F>
__global__ void PersistentKernel(int64_t phases, int parts, F f) {
  extern __shared__ __align__(16) unsigned char persistent_shared[];
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int64_t phase = 0; phase < phases; ++phase) {
    if (phase > 0) grid.sync();
    for (int part = 0; part < parts; ++part) {
      if (part > 0) __syncthreads();
      f(static_cast<int>(blockIdx.x), static_cast<int>(threadIdx.x), phase, part,
        static_cast<void*>(persistent_shared));
    }
  }
}

// Backend::Blocks: blocks [0, blocks) in grid-stride order, each through its parts with a block
// barrier between them (and one before the next block reuses the shared memory).
template <typename F>
__global__ void BlocksKernel(int64_t blocks, int parts, F f) {
  extern __shared__ __align__(16) unsigned char blocks_shared[];
  for (int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    if (block != static_cast<int64_t>(blockIdx.x)) __syncthreads();
    for (int part = 0; part < parts; ++part) {
      if (part > 0) __syncthreads();
      f(block, static_cast<int>(threadIdx.x), part, static_cast<void*>(blocks_shared));
    }
  }
}

// What a persistent launch needs to know about a device, queried once per device (attribute
// queries only: no synchronisation, no stream involved).
struct PersistentDeviceLimits {
  bool cooperative = false;   // cudaDevAttrCooperativeLaunch
  int multiprocessors = 0;
  size_t max_shared_optin = 0;  // per block, with cudaFuncAttributeMaxDynamicSharedMemorySize
};

inline cudaError_t QueryPersistentLimits(PersistentDeviceLimits* out) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static PersistentDeviceLimits cache[kMaxDevices];
  static bool known[kMaxDevices] = {};
  int device = 0;
  TF_LSTM_GPU_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  std::lock_guard<std::mutex> lock(mu);
  if (!known[device]) {
    int cooperative = 0, sms = 0, optin = 0;
    TF_LSTM_GPU_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    TF_LSTM_GPU_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    TF_LSTM_GPU_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cache[device] = PersistentDeviceLimits{cooperative != 0, sms, static_cast<size_t>(optin)};
    known[device] = true;
  }
  *out = cache[device];
  return cudaSuccess;
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

  template <typename F>
  cudaError_t Blocks(int64_t blocks, int threads, size_t shared_bytes, int parts,
                     const F& f) const {
    static_assert(std::is_trivially_copyable_v<F>, "functors travel to the device by value");
    if (blocks <= 0 || parts <= 0) return cudaSuccess;
    constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond
    BlocksKernel<F><<<static_cast<unsigned>(std::min(blocks, kMaxBlocks)), threads, shared_bytes,
                      stream_>>>(blocks, parts, f);
    return cudaGetLastError();
  }

  cudaError_t Copy(void* dst, const void* src, size_t bytes) const {
    if (bytes == 0 || dst == src) return cudaSuccess;
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
  }

  // Blocks of PersistentKernel<F> that fit on the device at once (all of a cooperative launch
  // must): 0 without cooperative launch, or when the shared memory exceeds the opt-in limit.
  // Failed queries count as "does not fit" and leave no error behind for later launches.
  template <typename F>
  int PersistentCapacity(int threads, size_t shared_bytes) const {
    PersistentDeviceLimits limits;
    if (QueryPersistentLimits(&limits) != cudaSuccess || !limits.cooperative ||
        shared_bytes > limits.max_shared_optin) {
      cudaGetLastError();
      return 0;
    }
    int per_sm = 0;
    if (AllowSharedBytes<F>(shared_bytes) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, PersistentKernel<F>, threads,
                                                      shared_bytes) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return per_sm * limits.multiprocessors;
  }

  // One cooperative launch on the stream. cudaErrorCooperativeLaunchTooLarge when the blocks do
  // not fit after all (the device shared with other work): nothing ran, the caller may fall back.
  template <typename F>
  cudaError_t Persistent(int blocks, int threads, size_t shared_bytes, int64_t phases, int parts,
                         const F& f) const {
    static_assert(std::is_trivially_copyable_v<F>, "functors travel to the device by value");
    if (blocks <= 0 || phases <= 0) return cudaSuccess;
    TF_LSTM_GPU_RETURN_IF_ERROR(AllowSharedBytes<F>(shared_bytes));
    F fn = f;
    void* args[] = {&phases, &parts, &fn};
    const cudaError_t status = cudaLaunchCooperativeKernel(
        reinterpret_cast<const void*>(&PersistentKernel<F>), dim3(static_cast<unsigned>(blocks)),
        dim3(static_cast<unsigned>(threads)), args, shared_bytes, stream_);
    if (status == cudaErrorCooperativeLaunchTooLarge) cudaGetLastError();  // not sticky: clear
    return status;
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
  // Beyond 48 KiB of dynamic shared memory a kernel must opt in (per device, so not cached).
  template <typename F>
  static cudaError_t AllowSharedBytes(size_t shared_bytes) {
    if (shared_bytes <= (size_t{48} << 10)) return cudaSuccess;
    return cudaFuncSetAttribute(PersistentKernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(shared_bytes));
  }

  cudaStream_t stream_;
  void* workspace_ = nullptr;
};

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_BACKEND_CUDA_CUH_
