// The GPU launchers of the CudnnRNN family (docs/cudnn_rnn.md).
// The contract every launcher keeps is in cc/gpu/launchers.h; the engine behind them is
// gpu_engine.h, run by cudnn_rnn_launchers.cu.cc.
#ifndef TF_LSTM_OPS_CC_CUDNN_RNN_GPU_LAUNCHERS_H_
#define TF_LSTM_OPS_CC_CUDNN_RNN_GPU_LAUNCHERS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cc/core/cudnn_rnn_types.h"
#include "cc/gpu/launchers.h"

namespace tf_lstm_ops {
namespace gpu {

// Forward. `workspace` is the reserve space (training) or an inference workspace: device memory
// of RnnWorkspaceBytes(m, run, dropout.active(m), sizeof(Acc)) bytes; the call writes its
// header (MakeReserveHeader) and saved activations in the CPU kernels' exact format.
// output_c is nullptr for non-LSTM modes. The run's operand masks (RnnRun::input_masks,
// recurrent_masks) and zoneout weights (RnnRun::zoneout_h, zoneout_c; docs/cudnn_rnn.md §4.9) are
// device memory in T, read by the forward and again by the backprop, which must get the
// forward's (the reserve header records which were present, and how the weights were given).
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

// Keras' weights <-> the params buffer of the one-layer, one-direction model they describe (the
// CPU engine's KerasToParams / ParamsToKeras, on the device).
template <typename T>
cudaError_t KerasToParams(cudaStream_t stream, RnnMode mode, int64_t input_size,
                          int64_t num_units, int bias_rows, const T* kernel,
                          const T* recurrent_kernel, const T* bias, T* params);
template <typename T>
cudaError_t ParamsToKeras(cudaStream_t stream, RnnMode mode, int64_t input_size,
                          int64_t num_units, int bias_rows, const T* params, T* kernel,
                          T* recurrent_kernel, T* bias);

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CUDNN_RNN_GPU_LAUNCHERS_H_
