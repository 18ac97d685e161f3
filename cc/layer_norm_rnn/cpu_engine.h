// The CPU engine of the LayerNorm GRU and SimpleRNN (docs/layer_norm_rnn.md): framework-free, a
// scratch-size query and a run on caller-owned memory, as the other families' engines
// (cc/cudnn_rnn/cpu_engine.h: threads of `device`, scratch of at least the query's bytes, false
// only when it is smaller, sizes validated by the caller).
#ifndef TF_LSTM_OPS_CC_LAYER_NORM_RNN_CPU_ENGINE_H_
#define TF_LSTM_OPS_CC_LAYER_NORM_RNN_CPU_ENGINE_H_

#include <cstddef>
#include <cstdint>

#include "cc/core/layer_norm_rnn_types.h"
#include "cc/cpu/device.h"

namespace tf_lstm_ops {
namespace cpu {

// Forward. x [T, B, I] (or [B, T, I]), h0 [B, H]; writes y [T, B, H] (or [B, T, H]; zero past a
// row's length), h_T [B, H] and `workspace`: LayerNormRnnWorkspaceBytes(m, run,
// sizeof(AccFor<T>)) bytes, 64-byte aligned, header first (LayerNormRnnHeader).
template <typename T>
size_t LayerNormRnnForwardScratchBytes(const CPUDevice& device, const LayerNormRnnModel& m,
                                       const LayerNormRnnRun& run);
template <typename T>
bool LayerNormRnnForward(const CPUDevice& device, const LayerNormRnnModel& m,
                         const LayerNormRnnRun& run, const T* x, const T* h0,
                         const LayerNormRnnWeights<T>& w, T* y, T* h_last, uint8_t* workspace,
                         void* scratch, size_t scratch_bytes);

// Backward of a training forward's `reserve` (checked by the caller): the gradients of
// <dy, y> + <dh, h_T> w.r.t. x, h0 and every weight (a SimpleRNN's gamma_h: none).
template <typename T>
size_t LayerNormRnnBackwardScratchBytes(const CPUDevice& device, const LayerNormRnnModel& m,
                                        const LayerNormRnnRun& run);
template <typename T>
bool LayerNormRnnBackward(const CPUDevice& device, const LayerNormRnnModel& m,
                          const LayerNormRnnRun& run, const T* x, const T* h0,
                          const LayerNormRnnWeights<T>& w, const T* dy, const T* dh_last,
                          const uint8_t* reserve, T* dx, T* dh0,
                          const LayerNormRnnWeightGrads<T>& grads, void* scratch,
                          size_t scratch_bytes);

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_LAYER_NORM_RNN_CPU_ENGINE_H_
