// The CPU engine of the CudnnRNN family (CudnnRNN V1-V3 and their Backprop ops): framework-free,
// with the API shape of the GPU launchers (gpu_launchers.h beside it): a scratch-size query and a
// run on caller-owned memory. Same contract as cc/block_lstm/cpu_engine.h (threads of `device`,
// scratch of at least the query's bytes, false only when it is smaller, validated sizes);
// semantics: docs/cudnn_rnn.md.
#ifndef TF_LSTM_OPS_CC_CUDNN_RNN_CPU_ENGINE_H_
#define TF_LSTM_OPS_CC_CUDNN_RNN_CPU_ENGINE_H_

#include <cstddef>
#include <cstdint>

#include "cc/core/cudnn_rnn_layout.h"
#include "cc/core/cudnn_rnn_types.h"
#include "cc/cpu/device.h"

namespace tf_lstm_ops {
namespace cpu {

// Forward. `workspace` is the reserve space (training) or an inference workspace of
// RnnWorkspaceBytes(m, run, dropout.active(m), sizeof(AccFor<T>)) bytes, 64-byte aligned; the
// run writes its header (MakeReserveHeader) and the saved activations (the states only when
// run.keeps_gates is false: inference). output_c is nullptr for non-LSTM modes. params is
// nullptr when run.keras gives Keras' weights instead (a model KerasWeightsInPlace accepts).
template <typename T>
size_t RnnForwardScratchBytes(const CPUDevice& device, const RnnModel& m, const RnnRun& run,
                              const RnnDropout& dropout);
template <typename T>
bool RnnForward(const CPUDevice& device, const RnnModel& m, const RnnRun& run,
                const RnnDropout& dropout, const T* input, const T* input_h, const T* input_c,
                const T* params, T* output, T* output_h, T* output_c, uint8_t* workspace,
                void* scratch, size_t scratch_bytes);

// Backprop. `reserve` is what the matching forward wrote (the caller has checked its header):
// writes the gradients of <dy, output> + <dh, output_h> + <dc, output_c> w.r.t. every input.
// input_c, output_c_backprop and input_c_backprop are nullptr for non-LSTM modes.
template <typename T>
size_t RnnBackwardScratchBytes(const CPUDevice& device, const RnnModel& m, const RnnRun& run);
template <typename T>
bool RnnBackward(const CPUDevice& device, const RnnModel& m, const RnnRun& run, const T* input,
                 const T* input_h, const T* input_c, const T* params, const T* output_backprop,
                 const T* output_h_backprop, const T* output_c_backprop, const uint8_t* reserve,
                 T* input_backprop, T* input_h_backprop, T* input_c_backprop,
                 T* params_backprop, void* scratch, size_t scratch_bytes);

// Keras' weights <-> the params buffer of the one-layer, one-direction model they describe
// (KerasBlocks in cc/core/cudnn_rnn_layout.h; docs/cudnn_rnn.md §6.5): what tf_lstm_ops.keras
// runs on every call, so one pass of cache-sized tiles instead of a graph of transposes. With
// bias_rows == 1, KerasToParams writes b_W = 0 and ParamsToKeras ignores params' b_W (each is
// the other's adjoint). Sizes: validated by the caller.
template <typename T>
void KerasToParams(const CPUDevice& device, RnnMode mode, int64_t input_size, int64_t num_units,
                   int bias_rows, const T* kernel, const T* recurrent_kernel, const T* bias,
                   T* params);
template <typename T>
void ParamsToKeras(const CPUDevice& device, RnnMode mode, int64_t input_size, int64_t num_units,
                   int bias_rows, const T* params, T* kernel, T* recurrent_kernel, T* bias);

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CUDNN_RNN_CPU_ENGINE_H_
