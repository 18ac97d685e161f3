// The GPU launchers of the LayerNorm LSTM (docs/layer_norm_lstm.md).
// The contract every launcher keeps is in cc/gpu/launchers.h; the engine behind them is
// gpu_engine.h, run by layer_norm_lstm_launchers.cu.cc. The GEMMs of this family multiply
// compute-type operands (float for every 16-bit type): the norms come right after them.
#ifndef TF_LSTM_OPS_CC_LAYER_NORM_LSTM_GPU_LAUNCHERS_H_
#define TF_LSTM_OPS_CC_LAYER_NORM_LSTM_GPU_LAUNCHERS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cc/core/layer_norm_lstm_types.h"
#include "cc/gpu/launchers.h"

namespace tf_lstm_ops {
namespace gpu {

// Forward. x [T, B, I] (or [B, T, I]), h0 and c0 [B, H] and the weights in Keras' layout; writes
// y [T, B, H] (or [B, T, H]; zero past a row's length), h_last and c_last [B, H], and
// `workspace`: device memory of LayerNormLstmWorkspaceBytes(m, run, sizeof(Acc<T>)) bytes, its
// header (LayerNormLstmHeader) and what it keeps in the CPU engine's exact layout
// (LayerNormLstmLayout; the reserve space when run.training). The run's recurrent mask and
// zoneout weights are device memory in T, read by the forward and again by the backward, which
// must get the forward's (the header records which were present, and how).
template <typename T>
size_t LayerNormLstmForwardScratchBytes(const LayerNormLstmModel& m, const LayerNormLstmRun& run);
template <typename T>
cudaError_t LayerNormLstmForward(cudaStream_t stream, const LayerNormLstmModel& m,
                                 const LayerNormLstmRun& run, const T* x, const T* h0,
                                 const T* c0, const LayerNormLstmWeights<T>& w, T* y, T* h_last,
                                 T* c_last, uint8_t* workspace, void* scratch);

// Backward of a training forward's `reserve`: the gradients of <dy, y> + <dh_last, h_T> +
// <dc_last, c_T> w.r.t. x, h0, c0 and every weight. `expected` is the header the matching
// forward must have written (LayerNormLstmHeader of this call's model and run): it is compared
// with the reserve space's on the device, and on a mismatch every output is NaN (telling the
// host would need a synchronisation; the host has checked the reserve space's size).
template <typename T>
size_t LayerNormLstmBackwardScratchBytes(const LayerNormLstmModel& m, const LayerNormLstmRun& run);
template <typename T>
cudaError_t LayerNormLstmBackward(cudaStream_t stream, const LayerNormLstmModel& m,
                                  const LayerNormLstmRun& run, const RnnReserveHeader& expected,
                                  const T* x, const T* h0, const T* c0,
                                  const LayerNormLstmWeights<T>& w, const T* dy,
                                  const T* dh_last, const T* dc_last, const uint8_t* reserve,
                                  T* dx, T* dh0, T* dc0, const LayerNormLstmWeightGrads<T>& grads,
                                  void* scratch);

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_LAYER_NORM_LSTM_GPU_LAUNCHERS_H_
