// The GPU launchers of the LayerNorm GRU and SimpleRNN (docs/layer_norm_rnn.md).
// The contract every launcher keeps is in cc/gpu/launchers.h; the engine behind them is
// gpu_engine.h, run by layer_norm_rnn_launchers.cu.cc. The GEMMs of this family multiply
// compute-type operands (float for every 16-bit type): the norms come right after them.
#ifndef TF_LSTM_OPS_CC_LAYER_NORM_RNN_GPU_LAUNCHERS_H_
#define TF_LSTM_OPS_CC_LAYER_NORM_RNN_GPU_LAUNCHERS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cc/core/layer_norm_rnn_types.h"
#include "cc/gpu/launchers.h"

namespace tf_lstm_ops {
namespace gpu {

// Forward. x [T, B, I] (or [B, T, I]), h0 [B, H] and the weights in Keras' layout
// (LayerNormRnnWeights; a SimpleRNN's gamma_h unread); writes y [T, B, H] (or [B, T, H]; zero
// past a row's length), h_last [B, H], and `workspace`: device memory of
// LayerNormRnnWorkspaceBytes(m, run, sizeof(Acc<T>)) bytes, its header (LayerNormRnnHeader) and
// what it keeps in the CPU engine's exact layout (LayerNormRnnLayout; the reserve space when
// run.training). The run's recurrent mask and zoneout weights are device memory in T, read by the
// forward and again by the backward, which must get the forward's (the header records which were
// present, and how).
template <typename T>
size_t LayerNormRnnForwardScratchBytes(const LayerNormRnnModel& m, const LayerNormRnnRun& run);
template <typename T>
cudaError_t LayerNormRnnForward(cudaStream_t stream, const LayerNormRnnModel& m,
                                const LayerNormRnnRun& run, const T* x, const T* h0,
                                const LayerNormRnnWeights<T>& w, T* y, T* h_last,
                                uint8_t* workspace, void* scratch);

// Backward of a training forward's `reserve`: the gradients of <dy, y> + <dh_last, h_T> w.r.t.
// x, h0 and every weight (a SimpleRNN's gamma_h: none, unwritten). `expected` is the header the
// matching forward must have written (LayerNormRnnHeader of this call's model and run): it is
// compared with the reserve space's on the device, and on a mismatch every output is NaN
// (telling the host would need a synchronisation; the host has checked the reserve space's size).
template <typename T>
size_t LayerNormRnnBackwardScratchBytes(const LayerNormRnnModel& m, const LayerNormRnnRun& run);
template <typename T>
cudaError_t LayerNormRnnBackward(cudaStream_t stream, const LayerNormRnnModel& m,
                                 const LayerNormRnnRun& run, const RnnReserveHeader& expected,
                                 const T* x, const T* h0, const LayerNormRnnWeights<T>& w,
                                 const T* dy, const T* dh_last, const uint8_t* reserve, T* dx,
                                 T* dh0, const LayerNormRnnWeightGrads<T>& grads, void* scratch);

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_LAYER_NORM_RNN_GPU_LAUNCHERS_H_
