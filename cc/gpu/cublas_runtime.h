// The CUDA runtime services the GPU engines need beyond kernels: cuBLAS, loaded at run time with
// dlopen (no link-time dependency and no cuBLAS headers: the process's TensorFlow or PyTorch has
// normally loaded a libcublas already, which is reused). The driver check and the cuBLAS loading
// at first use are launchers.h's Initialize() (defined in cublas_runtime.cc).
#ifndef TF_LSTM_OPS_CC_GPU_CUBLAS_RUNTIME_H_
#define TF_LSTM_OPS_CC_GPU_CUBLAS_RUNTIME_H_

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstddef>

namespace tf_lstm_ops {
namespace gpu {

// cublasGemmEx on `stream` with `workspace`, column-major, alpha = 1, beta = accumulate ? 1 : 0.
// A and B share a type; C is float (with float, half or bfloat16 inputs: CUBLAS_COMPUTE_32F, or
// CUBLAS_COMPUTE_32F_FAST_TF32 for float inputs when TF_LSTM_OPS_ALLOW_TF32=1) or double.
cudaError_t BlasGemmEx(cudaStream_t stream, void* workspace, size_t workspace_bytes, bool trans_a,
                       bool trans_b, int m, int n, int k, const void* a, cudaDataType a_type,
                       int lda, const void* b, cudaDataType b_type, int ldb, bool accumulate,
                       void* c, cudaDataType c_type, int ldc);

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_CUBLAS_RUNTIME_H_
