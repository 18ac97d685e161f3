// The GPU launcher API's shared part: the contract of every launcher (each family declares its
// own in cc/<family>/gpu_launchers.h), the runtime's initialisation and error detail, and two
// utilities. Framework-free (CUDA runtime and our own headers only): raw device pointers, sizes
// and a cudaStream_t in, cudaError_t out (details of non-CUDA failures in ErrorDetail()). The
// TensorFlow functors (cc/tf/*/functor_gpu.cc) and the GPU self-test (tools/gpu_selftest/) are
// thin bindings over it.
//
// T is the device storage type: __half, __nv_bfloat16, float or double. Every call:
//  - runs on `stream` only, never synchronises, never allocates: `scratch` is device memory of
//    at least the matching *ScratchBytes() bytes (any 256-byte aligned block), owned by the
//    caller until the stream has passed the call;
//  - computes in float (double for double) and rounds each output once, like the CPU kernels,
//    except that with 16-bit T the block LSTM's and CudnnRNN's GEMMs multiply 16-bit operands
//    (weights and inputs as given; h, later layers' inputs and gate gradients rounded once; see
//    the engines' Precision notes);
//  - is deterministic: the same inputs give the same bits (no atomics; cuBLAS with a fixed
//    workspace on one stream);
//  - expects validated sizes and non-aliased buffers (the OpKernels of cc/tf/ validate:
//    docs/validation.md).
// Host pointers: only the runs' seq_lengths (RnnRun's, LayerNormLstmRun's; read during the call,
// not after it returns).
#ifndef TF_LSTM_OPS_CC_GPU_LAUNCHERS_H_
#define TF_LSTM_OPS_CC_GPU_LAUNCHERS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>


namespace tf_lstm_ops {
namespace gpu {

// Driver check (a clear error when the driver is older than the runtime we were built with) and
// cuBLAS loading, once per process; every launcher calls it first.
cudaError_t Initialize();

// Explains the last error of a launcher on this thread when it was not a plain CUDA error
// (cuBLAS missing, driver too old); empty otherwise.
const char* ErrorDetail();

// ---- small utilities for the bindings ----
template <typename T>
cudaError_t FillZero(cudaStream_t stream, T* dst, int64_t n);
cudaError_t CopyDevice(cudaStream_t stream, void* dst, const void* src, size_t bytes);

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_LAUNCHERS_H_
