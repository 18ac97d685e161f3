// A C driver over both families' CPU engines, built by tests/test_framework_free.py with the
// system compiler, the repository's cc/ and Eigen's headers only: no TensorFlow header or
// library. Each entry point queries the engine's scratch size, allocates it, runs the engine on
// a thread pool of its own and returns 1 (0: the engine refused its scratch, -1: none could be
// allocated). Buffers are row-major, as the ops' tensors; float and double variants.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "cc/block_lstm/cpu_engine.h"
#include "cc/cudnn_rnn/cpu_engine.h"

namespace {

using tf_lstm_ops::GateLayout;
using tf_lstm_ops::LstmActivations;
using tf_lstm_ops::LstmAttrs;
using tf_lstm_ops::LstmDims;
using tf_lstm_ops::LstmInputGrads;
using tf_lstm_ops::LstmInputs;
using tf_lstm_ops::RnnDropout;
using tf_lstm_ops::RnnMode;
using tf_lstm_ops::RnnModel;
using tf_lstm_ops::RnnRun;
using tf_lstm_ops::cpu::CPUDevice;

// The caller's side of the engine API: an intra-op pool and scratch of the queried size.
struct Host {
  Eigen::ThreadPool pool{2};
  CPUDevice device{&pool, 2};

  template <typename Run>
  int RunWithScratch(size_t bytes, Run run) {
    std::unique_ptr<unsigned char[]> scratch(new (std::nothrow) unsigned char[bytes]);
    if (scratch == nullptr) return -1;
    return run(scratch.get(), bytes) ? 1 : 0;
  }
};

// p[0..7]: x, cs_prev, h_prev, w, wci, wcf, wco, b.
template <typename T>
LstmInputs<T> InputsOf(T* const* p) {
  return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
}
// p[0..6]: i, cs, f, o, ci, co, h.
template <typename P>
LstmActivations<P> ActivationsOf(P const* p) {
  return {p[0], p[1], p[2], p[3], p[4], p[5], p[6]};
}

LstmAttrs AttrsOf(int layout_ifco, double forget_bias, double cell_clip, int use_peephole) {
  return {layout_ifco ? GateLayout::kIFCO : GateLayout::kICFO, static_cast<float>(forget_bias),
          static_cast<float>(cell_clip), use_peephole != 0};
}

template <typename T>
int BlockLstmForward(const int64_t* dims4, int layout_ifco, double forget_bias, double cell_clip,
                     int use_peephole, int64_t seq_len_max, T* const* inputs, T* const* outputs) {
  Host host;
  const LstmDims dims{dims4[0], dims4[1], dims4[2], dims4[3]};
  const LstmAttrs attrs = AttrsOf(layout_ifco, forget_bias, cell_clip, use_peephole);
  const size_t bytes =
      tf_lstm_ops::cpu::LstmForwardScratchBytes<T>(host.device, dims, attrs, seq_len_max);
  return host.RunWithScratch(bytes, [&](void* scratch, size_t size) {
    return tf_lstm_ops::cpu::LstmForward<T>(host.device, dims, attrs, seq_len_max,
                                            InputsOf(inputs), ActivationsOf(outputs), scratch,
                                            size);
  });
}

// act: the forward's seven outputs; out_grads: cs and h gradients (the TF op's), the others
// null; grads: the eight input gradients. reuse_gates: hand act's i, f, ci, o to the engine.
template <typename T>
int BlockLstmBackward(const int64_t* dims4, int layout_ifco, int use_peephole,
                      int64_t seq_len_max, T* const* inputs, T* const* act, const T* cs_grad,
                      const T* h_grad, T* const* grads, int reuse_gates) {
  Host host;
  const LstmDims dims{dims4[0], dims4[1], dims4[2], dims4[3]};
  const LstmAttrs attrs = AttrsOf(layout_ifco, 0.0, 0.0, use_peephole);
  const T* saved[7] = {act[0], act[1], act[2], act[3], act[4], act[5], act[6]};
  const LstmActivations<const T*> out_grads{nullptr, cs_grad, nullptr, nullptr,
                                            nullptr, nullptr, h_grad};
  const tf_lstm_ops::cpu::ReusableGates<T> gates{act[0], act[2], act[4], act[3]};
  const auto* reuse = reuse_gates ? &gates : nullptr;
  const size_t bytes = tf_lstm_ops::cpu::LstmBackwardScratchBytes<T>(host.device, dims, attrs,
                                                                     seq_len_max, reuse);
  const LstmInputGrads<T> g{grads[0], grads[1], grads[2], grads[3],
                            grads[4], grads[5], grads[6], grads[7]};
  return host.RunWithScratch(bytes, [&](void* scratch, size_t size) {
    return tf_lstm_ops::cpu::LstmBackward<T>(host.device, dims, attrs, seq_len_max,
                                             InputsOf(inputs), ActivationsOf(saved), out_grads,
                                             g, reuse, scratch, size);
  });
}

// model6: mode (0 relu, 1 tanh, 2 lstm, 3 gru), layers, units, input size, projection, dirs.
RnnModel ModelOf(const int64_t* model6) {
  return {static_cast<RnnMode>(model6[0]), model6[1], model6[2], model6[3], model6[4],
          model6[5], false};
}

// The reserve space of RnnForward, which RnnBackward reads: `workspace` of
// cudnn_rnn_workspace_bytes(...) bytes, allocated by the caller.
template <typename T>
int CudnnRnnForward(const int64_t* model6, int64_t time, int64_t batch, const T* input,
                    const T* input_h, const T* input_c, const T* params, T* output, T* output_h,
                    T* output_c, uint8_t* workspace) {
  Host host;
  const RnnModel m = ModelOf(model6);
  const RnnRun run{time, batch, true, nullptr};
  const RnnDropout none{0.f, 0, 0};
  const size_t bytes = tf_lstm_ops::cpu::RnnForwardScratchBytes<T>(host.device, m, run, none);
  return host.RunWithScratch(bytes, [&](void* scratch, size_t size) {
    return tf_lstm_ops::cpu::RnnForward<T>(host.device, m, run, none, input, input_h, input_c,
                                           params, output, output_h, output_c, workspace,
                                           scratch, size);
  });
}

template <typename T>
int CudnnRnnBackward(const int64_t* model6, int64_t time, int64_t batch, const T* input,
                     const T* input_h, const T* input_c, const T* params, const T* dy,
                     const T* dh, const T* dc, const uint8_t* reserve, T* dx, T* dh0, T* dc0,
                     T* dparams) {
  Host host;
  const RnnModel m = ModelOf(model6);
  const RnnRun run{time, batch, true, nullptr};
  const size_t bytes = tf_lstm_ops::cpu::RnnBackwardScratchBytes<T>(host.device, m, run);
  return host.RunWithScratch(bytes, [&](void* scratch, size_t size) {
    return tf_lstm_ops::cpu::RnnBackward<T>(host.device, m, run, input, input_h, input_c,
                                            params, dy, dh, dc, reserve, dx, dh0, dc0, dparams,
                                            scratch, size);
  });
}

}  // namespace

extern "C" {

int64_t cudnn_rnn_workspace_bytes(const int64_t* model6, int64_t time, int64_t batch,
                                  int acc_size) {
  const RnnRun run{time, batch, true, nullptr};
  return tf_lstm_ops::RnnWorkspaceBytes(ModelOf(model6), run, false, acc_size);
}

// A scratch smaller than the query must be refused, never overrun: 1 when it is.
int block_lstm_forward_refuses_short_scratch(const int64_t* dims4, int64_t seq_len_max,
                                             float* const* inputs, float* const* outputs) {
  Host host;
  const LstmDims dims{dims4[0], dims4[1], dims4[2], dims4[3]};
  const LstmAttrs attrs = AttrsOf(0, 1.0, 0.0, 0);
  const size_t bytes =
      tf_lstm_ops::cpu::LstmForwardScratchBytes<float>(host.device, dims, attrs, seq_len_max);
  std::unique_ptr<unsigned char[]> scratch(new unsigned char[bytes]);
  return !tf_lstm_ops::cpu::LstmForward<float>(host.device, dims, attrs, seq_len_max,
                                               InputsOf(inputs), ActivationsOf(outputs),
                                               scratch.get(), bytes / 2);
}

#define DRIVER_ENTRY_POINTS(T, SUFFIX)                                                          \
  int block_lstm_forward_##SUFFIX(const int64_t* dims4, int layout_ifco, double forget_bias,    \
                                  double cell_clip, int use_peephole, int64_t seq_len_max,      \
                                  T* const* inputs, T* const* outputs) {                        \
    return BlockLstmForward<T>(dims4, layout_ifco, forget_bias, cell_clip, use_peephole,        \
                               seq_len_max, inputs, outputs);                                   \
  }                                                                                             \
  int block_lstm_backward_##SUFFIX(const int64_t* dims4, int layout_ifco, int use_peephole,     \
                                   int64_t seq_len_max, T* const* inputs, T* const* act,        \
                                   const T* cs_grad, const T* h_grad, T* const* grads,          \
                                   int reuse_gates) {                                           \
    return BlockLstmBackward<T>(dims4, layout_ifco, use_peephole, seq_len_max, inputs, act,     \
                                cs_grad, h_grad, grads, reuse_gates);                           \
  }                                                                                             \
  int cudnn_rnn_forward_##SUFFIX(const int64_t* model6, int64_t time, int64_t batch,            \
                                 const T* input, const T* input_h, const T* input_c,            \
                                 const T* params, T* output, T* output_h, T* output_c,          \
                                 uint8_t* workspace) {                                          \
    return CudnnRnnForward<T>(model6, time, batch, input, input_h, input_c, params, output,     \
                              output_h, output_c, workspace);                                   \
  }                                                                                             \
  int cudnn_rnn_backward_##SUFFIX(const int64_t* model6, int64_t time, int64_t batch,           \
                                  const T* input, const T* input_h, const T* input_c,           \
                                  const T* params, const T* dy, const T* dh, const T* dc,       \
                                  const uint8_t* reserve, T* dx, T* dh0, T* dc0, T* dparams) {  \
    return CudnnRnnBackward<T>(model6, time, batch, input, input_h, input_c, params, dy, dh, dc, \
                               reserve, dx, dh0, dc0, dparams);                                 \
  }
DRIVER_ENTRY_POINTS(float, f32)
DRIVER_ENTRY_POINTS(double, f64)
#undef DRIVER_ENTRY_POINTS

}  // extern "C"
