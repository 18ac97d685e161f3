// The CPU engine of the LayerNorm LSTM (docs/layer_norm_lstm.md): framework-free, a scratch-size
// query and a run on caller-owned memory, as the other families' engines (cc/cudnn_rnn/
// cpu_engine.h: threads of `device`, scratch of at least the query's bytes, false only when it
// is smaller, sizes validated by the caller).
#ifndef TF_LSTM_OPS_CC_LAYER_NORM_LSTM_CPU_ENGINE_H_
#define TF_LSTM_OPS_CC_LAYER_NORM_LSTM_CPU_ENGINE_H_

#include <cstddef>
#include <cstdint>

#include "cc/core/layer_norm_lstm_types.h"
#include "cc/cpu/device.h"

namespace tf_lstm_ops {
namespace cpu {

// The weights and their gradients: LayerNormLstmWeights<T>, LayerNormLstmWeightGrads<T>
// (cc/core/layer_norm_lstm_types.h).

// Forward. x [T, B, I] (or [B, T, I]), h0 and c0 [B, H]; writes y [T, B, H] (or [B, T, H]; zero
// past a row's length), h_T and c_T [B, H], and `workspace`: LayerNormLstmWorkspaceBytes(m, run,
// sizeof(AccFor<T>)) bytes, 64-byte aligned, header first (LayerNormLstmHeader).
template <typename T>
size_t LayerNormLstmForwardScratchBytes(const CPUDevice& device, const LayerNormLstmModel& m,
                                        const LayerNormLstmRun& run);
template <typename T>
bool LayerNormLstmForward(const CPUDevice& device, const LayerNormLstmModel& m,
                          const LayerNormLstmRun& run, const T* x, const T* h0, const T* c0,
                          const LayerNormLstmWeights<T>& w, T* y, T* h_last, T* c_last,
                          uint8_t* workspace, void* scratch, size_t scratch_bytes);

// Backward of a training forward's `reserve` (checked by the caller): the gradients of
// <dy, y> + <dh, h_T> + <dc, c_T> w.r.t. x, h0, c0 and every weight.
template <typename T>
size_t LayerNormLstmBackwardScratchBytes(const CPUDevice& device, const LayerNormLstmModel& m,
                                         const LayerNormLstmRun& run);
template <typename T>
bool LayerNormLstmBackward(const CPUDevice& device, const LayerNormLstmModel& m,
                           const LayerNormLstmRun& run, const T* x, const T* h0, const T* c0,
                           const LayerNormLstmWeights<T>& w, const T* dy, const T* dh_last,
                           const T* dc_last, const uint8_t* reserve, T* dx, T* dh0, T* dc0,
                           const LayerNormLstmWeightGrads<T>& grads, void* scratch,
                           size_t scratch_bytes);

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_LAYER_NORM_LSTM_CPU_ENGINE_H_
