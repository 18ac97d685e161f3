// Functors behind the CudnnRNN ops (forward and backprop of a multi-layer, optionally
// bidirectional RNN in cuDNN's canonical form), templated on device and storage type.
#ifndef TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_FUNCTOR_H_
#define TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_FUNCTOR_H_

#include <cstdint>

#include "cc/kernels/cudnn_rnn_layout.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace tf_lstm_ops {

// One run's sizes: T, B and the memory order of input/output ([T,B,.] or [B,T,.]). The state
// tensors are always read as [L*D, B, n] (TF's reinterpretation for batch-major; spec §2).
struct RnnRun {
  int64_t time, batch;
  bool time_major;
  const int32_t* seq_lengths;  // [B] in [0, T] (host memory), or nullptr: every length is T
};

// Inverted dropout on the inputs of layers 1..L-1, from a counter-based RNG: the mask of
// element k is a pure function of (seed, call, k).
struct RnnDropout {
  float rate;  // 0 <= rate < 1; 0 = none
  uint64_t seed;
  uint64_t call;
  bool active(const RnnModel& m) const { return rate > 0 && m.num_layers > 1; }
};

// The reserve space is our own format (spec §6 allows it: only our Backprop reads it): a
// header, then in the compute type, per pseudo-layer the per-step states h [T,B,Hr], c [T,B,H]
// (LSTM) and gate activations [T,B,4H] (LSTM: i, f, c~, o; GRU: r, u, h~, R_h h + b_Rh), then
// per layer l >= 1 its (dropped-out) input [T,B,D*Hr] and, with dropout, the mask scale.
struct RnnReserveHeader {
  uint64_t magic;
  uint64_t config_hash;  // model, run sizes, lengths, dropout and dtype of the forward
  int64_t bytes;         // header included
  uint64_t dropout;      // 1 when the workspace holds dropout masks
  uint64_t padding[4];   // keeps the data 64-byte aligned
};
constexpr uint64_t kRnnReserveMagic = 0x746c737472737631ULL;  // "tlstrsv1"

// Bytes of the reserve space (or the inference workspace) of a run, or -1 on int64 overflow.
int64_t RnnWorkspaceBytes(const RnnModel& m, const RnnRun& run, bool dropout, int acc_size);
uint64_t RnnConfigHash(const RnnModel& m, const RnnRun& run, const RnnDropout& dropout,
                       int dtype_size);

template <typename Device, typename T>
struct CudnnRnnForward {
  // workspace: RnnWorkspaceBytes bytes (the reserve space when training; scratch otherwise),
  // 64-byte aligned, header first. Writes output, output_h, output_c (LSTM) and the workspace.
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const RnnDropout& dropout, const T* input, const T* input_h,
                          const T* input_c, const T* params, T* output, T* output_h,
                          T* output_c, uint8_t* workspace);
};

template <typename Device, typename T>
struct CudnnRnnBackward {
  // reserve: what the matching forward wrote (already checked against the header). Writes the
  // gradients of <dy, output> + <dh, output_h> + <dc, output_c> w.r.t. every input.
  absl::Status operator()(tensorflow::OpKernelContext* ctx, const RnnModel& m, const RnnRun& run,
                          const T* input, const T* input_h, const T* input_c, const T* params,
                          const T* output_backprop, const T* output_h_backprop,
                          const T* output_c_backprop, const uint8_t* reserve, T* input_backprop,
                          T* input_h_backprop, T* input_c_backprop, T* params_backprop);
};

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_KERNELS_CUDNN_RNN_FUNCTOR_H_
