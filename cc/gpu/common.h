// What the framework-free GPU engines share, whatever backend runs them: storage-type traits,
// scratch carving, the row-major GEMM expressed in cuBLAS's column-major terms, and errors.
//
// Engines (cc/<family>/gpu_engine.h) are templates on a Backend:
//   CudaBackend (backend_cuda.cuh)  kernels and cuBLAS on a cudaStream_t: the real thing;
//   HostBackend (backend_host.h)    the same calls executed on the CPU, with a reference
//                                   column-major GEMM of cuBLAS's exact semantics, so that the
//                                   engines' logic (offsets, step order, GEMM transposes) is
//                                   tested on machines without a GPU.
// A Backend provides:
//   cudaError_t ForEach(int64_t n, const F& f)   f(i) for every i in [0, n); F is a trivially
//                                                copyable functor with a TF_LSTM_HOST_DEVICE
//                                                operator()(int64_t) const
//   cudaError_t Copy(void* dst, const void* src, size_t bytes)         device to device
//   cudaError_t BlasGemm(bool trans_a, bool trans_b, int m, int n, int k, const In* a, int lda,
//                        const In* b, int ldb, bool accumulate, Out* c, int ldc)
//                                                cuBLAS's column-major C = op(A)·op(B) (+ C)
//   static constexpr size_t kBlasWorkspaceBytes  (scratch the engine reserves for cuBLAS)
//   void SetBlasWorkspace(void* p)
//   int PersistentCapacity<F>(int threads, size_t shared_bytes)
//                                                how many blocks of a Persistent launch of F can
//                                                be resident at once (0: no such launch)
//   cudaError_t Persistent(int blocks, int threads, size_t shared_bytes, int64_t phases,
//                          int parts, const F& f)
//                                                one launch of `blocks` co-resident blocks that
//                                                runs f(block, thread, phase, part, shared) for
//                                                every phase and part in order: a grid-wide
//                                                barrier between phases, a block barrier between
//                                                parts; `shared` is the block's dynamic shared
//                                                memory and lives for the whole launch
//   cudaError_t Blocks(int64_t blocks, int threads, size_t shared_bytes, int parts, const F& f)
//                                                `blocks` independent blocks of `threads` threads
//                                                (a multiple of 32, at most 1024; shared_bytes at
//                                                most 48 KiB) that run f(block, thread, part,
//                                                shared) for every part in order, a block barrier
//                                                between parts; `shared` is the block's dynamic
//                                                shared memory, alive for its parts (row
//                                                reductions: cc/gpu/reductions.h)
// Nothing here includes TensorFlow. Device code: no exceptions, no allocation; every buffer
// comes from the caller (one scratch block whose size the engine reports up front).
#ifndef TF_LSTM_OPS_CC_GPU_COMMON_H_
#define TF_LSTM_OPS_CC_GPU_COMMON_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cc/core/host_device.h"
#include "cc/core/lstm_cell.h"

namespace tf_lstm_ops {
namespace gpu {

// Storage types on the device: __half, __nv_bfloat16, float, double (TF's Eigen::half and
// Eigen::bfloat16 have the same bits). Acc is what the engines compute in: float for the
// 16-bit types and float, double for double (as on the CPU).
template <typename T>
using Acc = AccFor<T>;  // cc/core/precision.h

// Conversions that work on host and device for every storage type.
template <typename To, typename From>
TF_LSTM_HOST_DEVICE inline To Cast(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half>) {
    return static_cast<To>(__half2float(v));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return static_cast<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Carves one caller-provided scratch block into 256-byte aligned arrays. Run it once with
// base == nullptr to learn the size (Bytes()), then again on the real block.
class ScratchCarver {
 public:
  explicit ScratchCarver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename A>
  A* Take(int64_t count) {
    const size_t offset = used_;
    used_ += (static_cast<size_t>(count) * sizeof(A) + 255) / 256 * 256;
    return base_ == nullptr ? nullptr : reinterpret_cast<A*>(base_ + offset);
  }
  void* TakeBytes(size_t bytes) { return Take<char>(static_cast<int64_t>(bytes)); }
  size_t Bytes() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

#define TF_LSTM_GPU_RETURN_IF_ERROR(expr)     \
  do {                                        \
    const cudaError_t _status = (expr);       \
    if (_status != cudaSuccess) return _status; \
  } while (0)

// Zeroes a row-major [rows, n] block with leading dimension ldc (functors are namespace-scope
// types: CUDA does not launch kernels templated on local types).
template <typename Out>
struct ZeroRowsFn {
  Out* c;
  int64_t n, ldc;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const { c[(i / n) * ldc + i % n] = Out(0); }
};

// Row-major C[m,n] = op(A)·op(B) (+ C when accumulate), as cc/cpu/linalg.h's Gemm: op(A)
// is [m,k], stored [m,k] (lda >= k) or, with trans_a, [k,m] (lda >= m); op(B) likewise [k,n].
// In cuBLAS's column-major terms a row-major X is Xᵀ, so this is Cᵀ = op(B)ᵀ·op(A)ᵀ: the
// operands swap and m/n swap. Sizes beyond int32 (cuBLAS's int API) are split along m and k.
template <typename Backend, typename In, typename Out>
cudaError_t Gemm(const Backend& be, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const In* a, int64_t lda, const In* b, int64_t ldb, bool accumulate, Out* c,
                 int64_t ldc) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  constexpr int64_t kChunk = int64_t{1} << 30;
  if (n > kChunk || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) return cudaErrorInvalidValue;
  if (k <= 0) {  // C = 0 (or unchanged when accumulating)
    if (accumulate) return cudaSuccess;
    return be.ForEach(m * n, ZeroRowsFn<Out>{c, n, ldc});
  }
  for (int64_t m0 = 0; m0 < m; m0 += kChunk) {
    const int64_t mc = std::min(kChunk, m - m0);
    const In* a_rows = a + m0 * (trans_a ? 1 : lda);
    for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
      const int64_t kc = std::min(kChunk, k - k0);
      const In* a_k = a_rows + k0 * (trans_a ? lda : 1);
      const In* b_k = b + k0 * (trans_b ? 1 : ldb);
      TF_LSTM_GPU_RETURN_IF_ERROR(be.BlasGemm(
          trans_b, trans_a, static_cast<int>(n), static_cast<int>(mc), static_cast<int>(kc), b_k,
          static_cast<int>(ldb), a_k, static_cast<int>(lda), accumulate || k0 > 0, c + m0 * ldc,
          static_cast<int>(ldc)));
    }
  }
  return cudaSuccess;
}

// Contiguous operands: lda/ldb/ldc from the shapes.
template <typename Backend, typename In, typename Out>
cudaError_t Gemm(const Backend& be, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const In* a, const In* b, bool accumulate, Out* c) {
  return Gemm(be, trans_a, trans_b, m, n, k, a, trans_a ? m : k, b, trans_b ? k : n, accumulate,
              c, n);
}

// Element-wise helpers every engine needs.
template <typename To, typename From>
struct ConvertFn {
  const From* src;
  To* dst;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const { dst[i] = Cast<To>(src[i]); }
};
template <typename T>
struct FillFn {
  T* dst;
  T value;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const { dst[i] = value; }
};

template <typename Backend, typename From, typename To>
cudaError_t Convert(const Backend& be, const From* src, To* dst, int64_t n) {
  if constexpr (std::is_same_v<From, To>) {
    if (src == dst || n == 0) return cudaSuccess;
    return be.Copy(dst, src, static_cast<size_t>(n) * sizeof(To));
  } else {
    return be.ForEach(n, ConvertFn<To, From>{src, dst});
  }
}

template <typename Backend, typename T>
cudaError_t Fill(const Backend& be, T* dst, int64_t n, T value) {
  return be.ForEach(n, FillFn<T>{dst, value});
}

// `n` storage values seen in the compute type: the buffer itself when T == A, else a converted
// copy in scratch (`staging`, n elements, carved by the caller).
template <typename Backend, typename T, typename A>
cudaError_t AsAcc(const Backend& be, const T* src, int64_t n, A* staging, const A** out) {
  if constexpr (std::is_same_v<T, A>) {
    *out = src;
    return cudaSuccess;
  } else {
    *out = staging;
    return Convert(be, src, staging, n);
  }
}

// Host values to device memory without a synchronisation and without a host buffer that must
// outlive the copy: the values travel as kernel arguments, in chunks (used for the reserve
// header and per-example sequence lengths).
template <typename V>
struct HostChunk {
  static constexpr int kCount = 2048 / sizeof(V);  // 2 KiB: inside the 4 KiB argument limit
  V values[kCount];
  V* dst;
  int64_t count;
  TF_LSTM_HOST_DEVICE void operator()(int64_t i) const { dst[i] = values[i]; }
};
template <typename Backend, typename V>
cudaError_t Upload(const Backend& be, const V* host, V* dst, int64_t n) {
  for (int64_t begin = 0; begin < n; begin += HostChunk<V>::kCount) {
    HostChunk<V> chunk;
    chunk.count = std::min<int64_t>(HostChunk<V>::kCount, n - begin);
    chunk.dst = dst + begin;
    for (int64_t k = 0; k < chunk.count; ++k) chunk.values[k] = host[begin + k];
    TF_LSTM_GPU_RETURN_IF_ERROR(be.ForEach(chunk.count, chunk));
  }
  return cudaSuccess;
}

// For failures that are not CUDA errors (cuBLAS missing or failing): the launchers return
// cudaErrorUnknown or the closest cudaError_t and put the explanation here (thread-local), for
// launchers.h's ErrorDetail().
void SetErrorDetail(const char* message);

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_COMMON_H_
