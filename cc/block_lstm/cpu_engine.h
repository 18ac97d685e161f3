// The CPU engine of the LSTM block ops (LSTMBlockCell(Grad), BlockLSTM(V2), BlockLSTMGrad(V2),
// BlockLSTMFullGrad): framework-free, with the API shape of the GPU launchers (gpu_launchers.h
// beside it): a scratch-size query and a run on caller-owned memory.
//
// T is the storage type: Eigen::half, Eigen::bfloat16, float or double; it computes in AccFor<T>
// (cc/core/precision.h). Every run:
//  - runs on `device`'s threads (Eigen's ThreadPoolDevice: the caller's intra-op pool) and
//    returns when done;
//  - takes all its temporary memory from `scratch`, at least the matching *ScratchBytes() bytes
//    (any alignment) that the caller owns for the call; false only when it is smaller (then the
//    outputs are not written);
//  - expects validated sizes and non-aliased buffers (the TF binding validates them:
//    docs/validation.md §3).
// Semantics: docs/block_lstm.md.
#ifndef TF_LSTM_OPS_CC_BLOCK_LSTM_CPU_ENGINE_H_
#define TF_LSTM_OPS_CC_BLOCK_LSTM_CPU_ENGINE_H_

#include <cstddef>
#include <cstdint>

#include "cc/core/block_lstm_types.h"
#include "cc/cpu/device.h"

namespace tf_lstm_ops {
namespace cpu {

// BlockLSTM / BlockLSTMV2 / LSTMBlockCell (dims.time = 1): runs seq_len_max steps; every output
// is zero at steps >= seq_len_max.
template <typename T>
size_t LstmForwardScratchBytes(const CPUDevice& device, const LstmDims& dims,
                               const LstmAttrs& attrs, int64_t seq_len_max);
template <typename T>
bool LstmForward(const CPUDevice& device, const LstmDims& dims, const LstmAttrs& attrs,
                 int64_t seq_len_max, const LstmInputs<T>& in, const LstmActivations<T*>& out,
                 void* scratch, size_t scratch_bytes);

// The backward's saved i, f, ci, o when the caller lets the engine overwrite them (they are
// act's own buffers, which nothing else reads any more): the sweep then stores each gate's
// gradient in place of the gate, and the whole sequence's gate gradients take no scratch. Used
// for float and double only (16-bit storage cannot hold a float gradient); nullptr: none.
template <typename T>
struct ReusableGates {
  T *i, *f, *ci, *o;
};

// BlockLSTMGrad(V2) / BlockLSTMFullGrad: backpropagation through seq_len_max steps. `out_grads`
// holds the gradients w.r.t. the seven outputs; its i, f, o, ci, co may be nullptr (zero: the TF
// ops have no such inputs). Writes every gradient in `grads`: the peephole ones are zero without
// use_peephole. The query takes the same `reuse` (only whether it is nullptr matters).
template <typename T>
size_t LstmBackwardScratchBytes(const CPUDevice& device, const LstmDims& dims,
                                const LstmAttrs& attrs, int64_t seq_len_max,
                                const ReusableGates<T>* reuse);
template <typename T>
bool LstmBackward(const CPUDevice& device, const LstmDims& dims, const LstmAttrs& attrs,
                  int64_t seq_len_max, const LstmInputs<T>& in,
                  const LstmActivations<const T*>& act,
                  const LstmActivations<const T*>& out_grads, const LstmInputGrads<T>& grads,
                  const ReusableGates<T>* reuse, void* scratch, size_t scratch_bytes);

// LSTMBlockCellGrad: the element-wise step of the backward pass only (no GEMMs); `out_grads` as
// for LstmBackward (h is the cell's h_grad). Writes cs_prev_grad [B,H], dgates [B,4H] and, with
// use_peephole, wci/wcf/wco_grad [H] (without it they are not touched).
template <typename T>
size_t LstmCellBackwardScratchBytes(const CPUDevice& device, const LstmDims& dims,
                                    const LstmAttrs& attrs);
template <typename T>
bool LstmCellBackward(const CPUDevice& device, const LstmDims& dims, const LstmAttrs& attrs,
                      const LstmInputs<T>& in, const LstmActivations<const T*>& act,
                      const LstmActivations<const T*>& out_grads, T* cs_prev_grad, T* dgates,
                      T* wci_grad, T* wcf_grad, T* wco_grad, void* scratch, size_t scratch_bytes);

// The gradient of LstmBackward (BlockLSTMFullGrad) w.r.t. each of its inputs, given the
// cotangents of its eight results (`cot`, shaped like them): one reverse sweep recomputes the
// backward's per-step state gradients and dgates (a [B, 4H] x [4H, H] product per step), one
// forward sweep runs its adjoint (docs/block_lstm.md §7.2; a [B, H] x [H, 4H] product per
// step); the rest are whole-sequence products. Keeps 10·T·B·H values of scratch in the compute
// type (more for half/bfloat16: cpu_engine.cc). `out_grads` must have all seven. Writes every
// result in `grads` (zero past seq_len_max; b's, which the backward never reads, is zero).
template <typename T>
size_t LstmBackwardGradScratchBytes(const CPUDevice& device, const LstmDims& dims,
                                    const LstmAttrs& attrs, int64_t seq_len_max);
template <typename T>
bool LstmBackwardGrad(const CPUDevice& device, const LstmDims& dims, const LstmAttrs& attrs,
                      int64_t seq_len_max, const LstmInputs<T>& in,
                      const LstmActivations<const T*>& act,
                      const LstmActivations<const T*>& out_grads,
                      const LstmInputGrads<const T>& cot, const LstmBackwardGrads<T>& grads,
                      void* scratch, size_t scratch_bytes);

// How many LstmBackward runs kept the gate gradients in place (a test hook).
int64_t InPlaceBackwardRuns();

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_BLOCK_LSTM_CPU_ENGINE_H_
