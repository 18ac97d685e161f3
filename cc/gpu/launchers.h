// The GPU launcher API: framework-free (CUDA runtime and our own headers only), raw device
// pointers, sizes and a cudaStream_t in, cudaError_t out (details of non-CUDA failures in
// ErrorDetail()). The TensorFlow OpKernels (cc/kernels/*_gpu.cc) and the GPU self-test
// (cc/gpu/selftest/) are thin bindings over it.
//
// T is the device storage type: __half, __nv_bfloat16, float or double. Every call:
//  - runs on `stream` only, never synchronises, never allocates: `scratch` is device memory of
//    at least the matching *ScratchBytes() bytes (any 256-byte aligned block), owned by the
//    caller until the stream has passed the call;
//  - computes in float (double for double) and rounds each output once, like the CPU kernels,
//    except that with 16-bit T the GEMMs multiply 16-bit operands (weights and inputs as given;
//    h, later layers' inputs and gate gradients rounded once; see the engines' Precision notes);
//  - is deterministic: the same inputs give the same bits (no atomics; cuBLAS with a fixed
//    workspace on one stream);
//  - expects validated sizes and non-aliased buffers (the OpKernels validate; see
//    cc/kernels/lstm_validation.h).
// Host pointers: only RnnRun::seq_lengths (read during the call, not after it returns).
#ifndef TF_LSTM_OPS_CC_GPU_LAUNCHERS_H_
#define TF_LSTM_OPS_CC_GPU_LAUNCHERS_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cc/core/cudnn_rnn_types.h"
#include "cc/core/block_lstm_types.h"

namespace tf_lstm_ops {
namespace gpu {

// Driver check (a clear error when the driver is older than the runtime we were built with) and
// cuBLAS loading, once per process; every launcher calls it first.
cudaError_t Initialize();

// Explains the last error of a launcher on this thread when it was not a plain CUDA error
// (cuBLAS missing, driver too old); empty otherwise.
const char* ErrorDetail();

// ---- LSTM block ops (spec block_lstm.md; the CPU functors in cc/kernels/lstm_functor.h) ----

// BlockLSTM / BlockLSTMV2 / LSTMBlockCell (dims.time = 1): seq_len_max steps; every output is
// zero at steps >= seq_len_max.
template <typename T>
size_t LstmForwardScratchBytes(const LstmDims& dims, const LstmAttrs& attrs, int64_t seq_len_max);
template <typename T>
cudaError_t LstmForward(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                        int64_t seq_len_max, const LstmInputs<T>& in,
                        const LstmActivations<T*>& out, void* scratch);

// BlockLSTMGrad(V2) / BlockLSTMFullGrad: out_grads.i/f/o/ci/co may be nullptr (zero). Writes
// every gradient in `grads`; the peephole ones are zero without use_peephole.
template <typename T>
size_t LstmBackwardScratchBytes(const LstmDims& dims, const LstmAttrs& attrs,
                                int64_t seq_len_max);
template <typename T>
cudaError_t LstmBackward(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                         int64_t seq_len_max, const LstmInputs<T>& in,
                         const LstmActivations<const T*>& act,
                         const LstmActivations<const T*>& out_grads,
                         const LstmInputGrads<T>& grads, void* scratch);

// LSTMBlockCellGrad: cs_prev_grad [B,H], dgates [B,4H] (ICFO) and, with use_peephole only,
// wci/wcf/wco_grad [H]. Without use_peephole they are not touched: the op does not check the
// peephole lengths then (as TF), so the caller zero-fills them with their own length.
template <typename T>
size_t LstmCellBackwardScratchBytes(const LstmDims& dims, const LstmAttrs& attrs);
template <typename T>
cudaError_t LstmCellBackward(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                             const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                             const LstmActivations<const T*>& out_grads, T* cs_prev_grad,
                             T* dgates, T* wci_grad, T* wcf_grad, T* wco_grad, void* scratch);

// ---- the CudnnRNN family (spec cudnn_rnn.md; the CPU functors in cudnn_rnn_functor.h) ----

// Forward. `workspace` is the reserve space (training) or an inference workspace: device memory
// of RnnWorkspaceBytes(m, run, dropout.active(m), sizeof(Acc)) bytes; the call writes its
// header (MakeReserveHeader) and saved activations in the CPU kernels' exact format.
// output_c is nullptr for non-LSTM modes.
template <typename T>
size_t RnnForwardScratchBytes(const RnnModel& m, const RnnRun& run, const RnnDropout& dropout);
template <typename T>
cudaError_t RnnForward(cudaStream_t stream, const RnnModel& m, const RnnRun& run,
                       const RnnDropout& dropout, const T* input, const T* input_h,
                       const T* input_c, const T* params, T* output, T* output_h, T* output_c,
                       uint8_t* workspace, void* scratch);

// Which path RnnForward's recurrence takes for this model and run on the current device (for
// reports, e.g. the GPU self-test): blocks > 0 is one persistent launch per pseudo-layer of
// `blocks` blocks of `units_per_block` hidden units and `shared_bytes` of shared memory each
// (small batches without a projection, when it fits); blocks == 0 is a GEMM and a kernel per
// step. Backprop always runs per step.
struct RnnForwardPath {
  int blocks = 0;
  int64_t units_per_block = 0;
  size_t shared_bytes = 0;
};
template <typename T>
RnnForwardPath RnnForwardPathOf(const RnnModel& m, const RnnRun& run);

// Backprop. `expected` is the header the matching forward must have written (the caller builds
// it with MakeReserveHeader from this call's model, run and dropout): the reserve space's
// header is compared with it on the device, and on a mismatch every output is NaN (telling the
// host would need a synchronisation; the host has already checked the reserve space's size).
// input_c, output_c_backprop and input_c_backprop are nullptr for non-LSTM modes.
template <typename T>
size_t RnnBackwardScratchBytes(const RnnModel& m, const RnnRun& run);
template <typename T>
cudaError_t RnnBackward(cudaStream_t stream, const RnnModel& m, const RnnRun& run,
                        const RnnReserveHeader& expected, const T* input, const T* input_h,
                        const T* input_c, const T* params, const T* output_backprop,
                        const T* output_h_backprop, const T* output_c_backprop,
                        const uint8_t* reserve, T* input_backprop, T* input_h_backprop,
                        T* input_c_backprop, T* params_backprop, void* scratch);

// ---- small utilities for the OpKernels ----
template <typename T>
cudaError_t FillZero(cudaStream_t stream, T* dst, int64_t n);
cudaError_t CopyDevice(cudaStream_t stream, void* dst, const void* src, size_t bytes);

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_GPU_LAUNCHERS_H_
