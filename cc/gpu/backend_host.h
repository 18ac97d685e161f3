// HostBackend: the engines' device calls executed on the CPU, one element at a time, with a
// reference GEMM of cuBLAS's exact column-major semantics. It is not fast and not meant to be:
// it lets the GPU engines' logic run and be checked against the float64 reference on machines
// without a GPU (the self-test's --backend host, part of the test suite).
#ifndef TF_LSTM_OPS_CC_GPU_BACKEND_HOST_H_
#define TF_LSTM_OPS_CC_GPU_BACKEND_HOST_H_

#include <cstring>
#include <type_traits>
#include <vector>

#include "cc/gpu/common.h"

namespace tf_lstm_ops {
namespace gpu {

class HostBackend {
 public:
  static constexpr size_t kBlasWorkspaceBytes = 0;
  void SetBlasWorkspace(void*) {}

  template <typename F>
  cudaError_t ForEach(int64_t n, const F& f) const {
    static_assert(std::is_trivially_copyable_v<F>, "functors travel to the device by value");
    for (int64_t i = 0; i < n; ++i) f(i);
    return cudaSuccess;
  }

  cudaError_t Copy(void* dst, const void* src, size_t bytes) const {
    if (bytes > 0) std::memmove(dst, src, bytes);
    return cudaSuccess;
  }

  // Column-major C[m,n] = op(A)·op(B) (+ C): A is [m,k] (or [k,m] with trans_a) with leading
  // dimension lda, as cublasGemmEx reads it; accumulates in Acc<Out> like CUBLAS_COMPUTE_32F/64F.
  template <typename In, typename Out>
  cudaError_t BlasGemm(bool trans_a, bool trans_b, int m, int n, int k, const In* a, int lda,
                       const In* b, int ldb, bool accumulate, Out* c, int ldc) const {
    using A = Acc<Out>;
    if (lda < (trans_a ? k : m) || ldb < (trans_b ? n : k) || ldc < m) {
      return cudaErrorInvalidValue;  // cuBLAS: CUBLAS_STATUS_INVALID_VALUE
    }
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        A sum = accumulate ? Cast<A>(c[i + static_cast<int64_t>(j) * ldc]) : A(0);
        for (int p = 0; p < k; ++p) {
          const In av = trans_a ? a[p + static_cast<int64_t>(i) * lda]
                                : a[i + static_cast<int64_t>(p) * lda];
          const In bv = trans_b ? b[j + static_cast<int64_t>(p) * ldb]
                                : b[p + static_cast<int64_t>(j) * ldb];
          sum += Cast<A>(av) * Cast<A>(bv);
        }
        c[i + static_cast<int64_t>(j) * ldc] = Cast<Out>(sum);
      }
    }
    return cudaSuccess;
  }

  // A small emulated device for persistent launches: few blocks, so the tests' small hidden
  // sizes already split into several blocks with a partial last one, and the default 48 KiB of
  // shared memory per block, so larger models take the fallback.
  static constexpr int kEmulatedBlocks = 3;
  static constexpr size_t kEmulatedSharedBytes = size_t{48} << 10;

  template <typename F>
  int PersistentCapacity(int threads, size_t shared_bytes) const {
    return threads > 0 && shared_bytes <= kEmulatedSharedBytes ? kEmulatedBlocks : 0;
  }

  // Phase by phase (the grid barrier), every block with its own shared memory that survives
  // across phases, its parts in order (the block barrier), every thread of a part. Blocks, and
  // the threads of a part, run in ascending order in even phases and descending in odd ones:
  // code that reads what another block (thread) writes in the same phase (part), a race on a
  // GPU, then gets different values from phase to phase here too, which the tests would most
  // likely see. Shared memory starts as 0xFF bytes (NaN): reading what was never written shows.
  template <typename F>
  cudaError_t Persistent(int blocks, int threads, size_t shared_bytes, int64_t phases, int parts,
                         const F& f) const {
    static_assert(std::is_trivially_copyable_v<F>, "functors travel to the device by value");
    if (blocks > PersistentCapacity<F>(threads, shared_bytes)) {
      return cudaErrorCooperativeLaunchTooLarge;
    }
    std::vector<SharedMemory> shared(blocks, SharedMemory(shared_bytes));
    for (int64_t phase = 0; phase < phases; ++phase) {
      const bool up = phase % 2 == 0;
      for (int k = 0; k < blocks; ++k) {
        const int block = up ? k : blocks - 1 - k;
        for (int part = 0; part < parts; ++part) {
          for (int i = 0; i < threads; ++i) {
            f(block, up ? i : threads - 1 - i, phase, part, shared[block].data());
          }
        }
      }
    }
    return cudaSuccess;
  }

  // Block by block, each with fresh shared memory (0xFF bytes, as for Persistent), its parts in
  // order (the block barrier); the threads of a part ascending in even parts and descending in
  // odd ones, so that reading what another thread writes in the same part shows here too.
  template <typename F>
  cudaError_t Blocks(int64_t blocks, int threads, size_t shared_bytes, int parts,
                     const F& f) const {
    static_assert(std::is_trivially_copyable_v<F>, "functors travel to the device by value");
    if (threads <= 0 || threads > 1024 || threads % 32 != 0 ||
        shared_bytes > kEmulatedSharedBytes) {
      return cudaErrorInvalidConfiguration;  // (what the launch would say on a GPU)
    }
    for (int64_t block = 0; block < blocks; ++block) {
      SharedMemory shared(shared_bytes);
      for (int part = 0; part < parts; ++part) {
        const bool up = part % 2 == 0;
        for (int i = 0; i < threads; ++i) f(block, up ? i : threads - 1 - i, part, shared.data());
      }
    }
    return cudaSuccess;
  }

 private:
  // A block's dynamic shared memory: 16-byte aligned like a GPU's, starting as 0xFF bytes (NaN),
  // so that reading what was never written shows.
  class SharedMemory {
   public:
    explicit SharedMemory(size_t bytes) : chunks_((bytes + 15) / 16) {
      std::memset(chunks_.data(), 0xFF, chunks_.size() * sizeof(Chunk));
    }
    void* data() { return chunks_.data(); }

   private:
    struct alignas(16) Chunk {
      unsigned char bytes[16];
    };
    std::vector<Chunk> chunks_;
  };
};

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_BACKEND_HOST_H_
