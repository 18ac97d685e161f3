// The GPU launchers of the LSTM block ops (docs/block_lstm.md).
// The contract every launcher keeps is in cc/gpu/launchers.h; the engine behind them is
// gpu_engine.h, run by block_lstm_launchers.cu.cc.
#ifndef TF_LSTM_OPS_CC_BLOCK_LSTM_GPU_LAUNCHERS_H_
#define TF_LSTM_OPS_CC_BLOCK_LSTM_GPU_LAUNCHERS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cc/core/block_lstm_types.h"
#include "cc/gpu/launchers.h"

namespace tf_lstm_ops {
namespace gpu {

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

// BlockLSTMFullGradGrad (docs/block_lstm.md §7.2): the gradient of LstmBackward with every
// output gradient w.r.t. all its inputs, for the cotangents `cot` of its eight results. Writes
// every result in `grads` (zero at steps >= seq_len_max, b's zero, the peephole ones zero
// without use_peephole).
template <typename T>
size_t LstmBackwardGradScratchBytes(const LstmDims& dims, const LstmAttrs& attrs,
                                    int64_t seq_len_max);
template <typename T>
cudaError_t LstmBackwardGrad(cudaStream_t stream, const LstmDims& dims, const LstmAttrs& attrs,
                             int64_t seq_len_max, const LstmInputs<T>& in,
                             const LstmActivations<const T*>& act,
                             const LstmActivations<const T*>& out_grads,
                             const LstmInputGrads<const T>& cot, const LstmBackwardGrads<T>& grads,
                             void* scratch);

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

}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_BLOCK_LSTM_GPU_LAUNCHERS_H_
