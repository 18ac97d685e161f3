// Self-test bindings of the LSTM block-op engine (cc/block_lstm/gpu_engine.h).
//
// Conventions (every function):
//   backend   "cuda": the launchers of cc/block_lstm/gpu_launchers.h (what the TensorFlow
//             kernels call) on `stream`;
//             "host": LstmEngine<HostBackend, T> on the CPU (buffers are host memory).
//   dtype     "half", "bfloat16", "float32" or "float64": the storage type of every buffer.
//   stream    a cudaStream_t as a Python int (0: the legacy default stream); ignored on "host".
//   T, B, I, H  time, batch, input and cell sizes; layout "ICFO" (BlockLSTM, LSTMBlockCell) or
//             "IFCO" (BlockLSTMV2).
//   buffers   Python ints: addresses of dense row-major arrays of `dtype` (NumPy's
//             .ctypes.data, torch's .data_ptr()); 0 is nullptr (allowed only where stated).
//   scratch   an address of at least the matching *_scratch_bytes() bytes, 256-byte aligned
//             for "cuda" (0 when that size is 0).
// Calls return nothing; a failed call raises RuntimeError (CUDA error + launcher detail), a bad
// backend, dtype, layout or size raises ValueError. "cuda" calls are asynchronous on `stream`.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cc/gpu/backend_host.h"
#include "cc/block_lstm/gpu_engine.h"
#include "cc/block_lstm/gpu_launchers.h"
#include "tools/gpu_selftest/bindings.h"

namespace py = pybind11;

namespace tf_lstm_ops {
namespace gpu {
namespace selftest {
namespace {

GateLayout ParseLayout(const std::string& layout) {
  if (layout == "ICFO") return GateLayout::kICFO;
  if (layout == "IFCO") return GateLayout::kIFCO;
  throw py::value_error("layout must be 'ICFO' or 'IFCO', not '" + layout + "'");
}

LstmDims MakeDims(int64_t T, int64_t B, int64_t I, int64_t H) {
  if (T < 0 || B < 0 || I < 0 || H < 0) throw py::value_error("sizes must be non-negative");
  return LstmDims{T, B, I, H};
}

void CheckSeqLenMax(const LstmDims& dims, int64_t seq_len_max) {
  if (seq_len_max < 0 || seq_len_max > dims.time) {
    throw py::value_error("seq_len_max must be between 0 and T = " + std::to_string(dims.time) +
                          ", not " + std::to_string(seq_len_max));
  }
}

template <typename T>
LstmInputs<T> Inputs(uintptr_t x, uintptr_t cs_prev, uintptr_t h_prev, uintptr_t w,
                     uintptr_t wci, uintptr_t wcf, uintptr_t wco, uintptr_t b) {
  return {Ptr<const T>(x),   Ptr<const T>(cs_prev), Ptr<const T>(h_prev), Ptr<const T>(w),
          Ptr<const T>(wci), Ptr<const T>(wcf),     Ptr<const T>(wco),    Ptr<const T>(b)};
}

template <typename P>
LstmActivations<P*> Activations(uintptr_t i, uintptr_t cs, uintptr_t f, uintptr_t o,
                                uintptr_t ci, uintptr_t co, uintptr_t h) {
  return {Ptr<P>(i), Ptr<P>(cs), Ptr<P>(f), Ptr<P>(o), Ptr<P>(ci), Ptr<P>(co), Ptr<P>(h)};
}

size_t ForwardScratchBytes(const std::string& backend, const std::string& dtype, int64_t T,
                           int64_t B, int64_t I, int64_t H, const std::string& layout,
                           float forget_bias, float cell_clip, bool use_peephole,
                           int64_t seq_len_max) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(T, B, I, H);
  CheckSeqLenMax(dims, seq_len_max);
  const LstmAttrs attrs{ParseLayout(layout), forget_bias, cell_clip, use_peephole};
  return WithDtype(dtype, [&](auto tag) -> size_t {
    using S = decltype(tag);
    return cuda ? LstmForwardScratchBytes<S>(dims, attrs, seq_len_max)
                : LstmEngine<HostBackend, S>::ForwardScratchBytes(dims, attrs, seq_len_max);
  });
}

void Forward(const std::string& backend, const std::string& dtype, uintptr_t stream, int64_t T,
             int64_t B, int64_t I, int64_t H, const std::string& layout, float forget_bias,
             float cell_clip, bool use_peephole, int64_t seq_len_max, uintptr_t x,
             uintptr_t cs_prev, uintptr_t h_prev, uintptr_t w, uintptr_t wci, uintptr_t wcf,
             uintptr_t wco, uintptr_t b, uintptr_t i, uintptr_t cs, uintptr_t f, uintptr_t o,
             uintptr_t ci, uintptr_t co, uintptr_t h, uintptr_t scratch) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(T, B, I, H);
  CheckSeqLenMax(dims, seq_len_max);
  const LstmAttrs attrs{ParseLayout(layout), forget_bias, cell_clip, use_peephole};
  WithDtype(dtype, [&](auto tag) {
    using S = decltype(tag);
    const LstmInputs<S> in = Inputs<S>(x, cs_prev, h_prev, w, wci, wcf, wco, b);
    const LstmActivations<S*> out = Activations<S>(i, cs, f, o, ci, co, h);
    void* scratch_ptr = Ptr<void>(scratch);
    cudaError_t status;
    {
      py::gil_scoped_release release;
      if (cuda) {
        status = LstmForward<S>(Stream(stream), dims, attrs, seq_len_max, in, out, scratch_ptr);
      } else {
        HostBackend be;
        status = LstmEngine<HostBackend, S>::Forward(be, dims, attrs, seq_len_max, in, out,
                                                     scratch_ptr);
      }
    }
    Check(status, "LstmForward");
  });
}

size_t BackwardScratchBytes(const std::string& backend, const std::string& dtype, int64_t T,
                            int64_t B, int64_t I, int64_t H, const std::string& layout,
                            bool use_peephole, int64_t seq_len_max) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(T, B, I, H);
  CheckSeqLenMax(dims, seq_len_max);
  const LstmAttrs attrs{ParseLayout(layout), 0.0f, 0.0f, use_peephole};
  return WithDtype(dtype, [&](auto tag) -> size_t {
    using S = decltype(tag);
    return cuda ? LstmBackwardScratchBytes<S>(dims, attrs, seq_len_max)
                : LstmEngine<HostBackend, S>::BackwardScratchBytes(dims, attrs, seq_len_max);
  });
}

void Backward(const std::string& backend, const std::string& dtype, uintptr_t stream, int64_t T,
              int64_t B, int64_t I, int64_t H, const std::string& layout, bool use_peephole,
              int64_t seq_len_max, uintptr_t x, uintptr_t cs_prev, uintptr_t h_prev, uintptr_t w,
              uintptr_t wci, uintptr_t wcf, uintptr_t wco, uintptr_t b, uintptr_t i,
              uintptr_t cs, uintptr_t f, uintptr_t o, uintptr_t ci, uintptr_t co, uintptr_t h,
              uintptr_t cs_grad, uintptr_t h_grad, uintptr_t x_grad, uintptr_t cs_prev_grad,
              uintptr_t h_prev_grad, uintptr_t w_grad, uintptr_t wci_grad, uintptr_t wcf_grad,
              uintptr_t wco_grad, uintptr_t b_grad, uintptr_t scratch, uintptr_t i_grad,
              uintptr_t f_grad, uintptr_t o_grad, uintptr_t ci_grad, uintptr_t co_grad) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(T, B, I, H);
  CheckSeqLenMax(dims, seq_len_max);
  const LstmAttrs attrs{ParseLayout(layout), 0.0f, 0.0f, use_peephole};
  WithDtype(dtype, [&](auto tag) {
    using S = decltype(tag);
    const LstmInputs<S> in = Inputs<S>(x, cs_prev, h_prev, w, wci, wcf, wco, b);
    const LstmActivations<const S*> act = Activations<const S>(i, cs, f, o, ci, co, h);
    const LstmActivations<const S*> out_grads =
        Activations<const S>(i_grad, cs_grad, f_grad, o_grad, ci_grad, co_grad, h_grad);
    const LstmInputGrads<S> grads{Ptr<S>(x_grad),   Ptr<S>(cs_prev_grad), Ptr<S>(h_prev_grad),
                                  Ptr<S>(w_grad),   Ptr<S>(wci_grad),     Ptr<S>(wcf_grad),
                                  Ptr<S>(wco_grad), Ptr<S>(b_grad)};
    void* scratch_ptr = Ptr<void>(scratch);
    cudaError_t status;
    {
      py::gil_scoped_release release;
      if (cuda) {
        status = LstmBackward<S>(Stream(stream), dims, attrs, seq_len_max, in, act, out_grads,
                                 grads, scratch_ptr);
      } else {
        HostBackend be;
        status = LstmEngine<HostBackend, S>::Backward(be, dims, attrs, seq_len_max, in, act,
                                                      out_grads, grads, scratch_ptr);
      }
    }
    Check(status, "LstmBackward");
  });
}

size_t BackwardGradScratchBytes(const std::string& backend, const std::string& dtype, int64_t T,
                                int64_t B, int64_t I, int64_t H, const std::string& layout,
                                bool use_peephole, int64_t seq_len_max) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(T, B, I, H);
  CheckSeqLenMax(dims, seq_len_max);
  const LstmAttrs attrs{ParseLayout(layout), 0.0f, 0.0f, use_peephole};
  return WithDtype(dtype, [&](auto tag) -> size_t {
    using S = decltype(tag);
    return cuda ? LstmBackwardGradScratchBytes<S>(dims, attrs, seq_len_max)
                : LstmEngine<HostBackend, S>::BackwardGradScratchBytes(dims, attrs, seq_len_max);
  });
}

// Address lists in the orders of block_lstm_types.h: inputs and cotangents x, cs_prev, h_prev,
// w, wci, wcf, wco, b (8); activations and output gradients i, cs, f, o, ci, co, h (7).
std::vector<uintptr_t> Addresses(const std::vector<uintptr_t>& list, size_t count,
                                 const char* name) {
  if (list.size() != count) {
    throw py::value_error(std::string(name) + " must hold " + std::to_string(count) +
                          " addresses, not " + std::to_string(list.size()));
  }
  return list;
}

void BackwardGrad(const std::string& backend, const std::string& dtype, uintptr_t stream,
                  int64_t T, int64_t B, int64_t I, int64_t H, const std::string& layout,
                  bool use_peephole, int64_t seq_len_max, const std::vector<uintptr_t>& inputs,
                  const std::vector<uintptr_t>& act, const std::vector<uintptr_t>& out_grads,
                  const std::vector<uintptr_t>& cot, const std::vector<uintptr_t>& grads,
                  uintptr_t scratch) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(T, B, I, H);
  CheckSeqLenMax(dims, seq_len_max);
  const LstmAttrs attrs{ParseLayout(layout), 0.0f, 0.0f, use_peephole};
  const auto in_p = Addresses(inputs, 8, "inputs"), act_p = Addresses(act, 7, "act");
  const auto og_p = Addresses(out_grads, 7, "out_grads"), cot_p = Addresses(cot, 8, "cot");
  const auto g_p = Addresses(grads, 22, "grads");
  WithDtype(dtype, [&](auto tag) {
    using S = decltype(tag);
    const LstmInputs<S> in =
        Inputs<S>(in_p[0], in_p[1], in_p[2], in_p[3], in_p[4], in_p[5], in_p[6], in_p[7]);
    const LstmActivations<const S*> a = Activations<const S>(
        act_p[0], act_p[1], act_p[2], act_p[3], act_p[4], act_p[5], act_p[6]);
    const LstmActivations<const S*> og =
        Activations<const S>(og_p[0], og_p[1], og_p[2], og_p[3], og_p[4], og_p[5], og_p[6]);
    const LstmInputGrads<const S> c{Ptr<const S>(cot_p[0]), Ptr<const S>(cot_p[1]),
                                    Ptr<const S>(cot_p[2]), Ptr<const S>(cot_p[3]),
                                    Ptr<const S>(cot_p[4]), Ptr<const S>(cot_p[5]),
                                    Ptr<const S>(cot_p[6]), Ptr<const S>(cot_p[7])};
    const LstmBackwardGrads<S> g{
        {Ptr<S>(g_p[0]), Ptr<S>(g_p[1]), Ptr<S>(g_p[2]), Ptr<S>(g_p[3]), Ptr<S>(g_p[4]),
         Ptr<S>(g_p[5]), Ptr<S>(g_p[6]), Ptr<S>(g_p[7])},
        Activations<S>(g_p[8], g_p[9], g_p[10], g_p[11], g_p[12], g_p[13], g_p[14]),
        Activations<S>(g_p[15], g_p[16], g_p[17], g_p[18], g_p[19], g_p[20], g_p[21])};
    void* scratch_ptr = Ptr<void>(scratch);
    cudaError_t status;
    {
      py::gil_scoped_release release;
      if (cuda) {
        status = LstmBackwardGrad<S>(Stream(stream), dims, attrs, seq_len_max, in, a, og, c, g,
                                     scratch_ptr);
      } else {
        HostBackend be;
        status = LstmEngine<HostBackend, S>::BackwardGrad(be, dims, attrs, seq_len_max, in, a,
                                                          og, c, g, scratch_ptr);
      }
    }
    Check(status, "LstmBackwardGrad");
  });
}

size_t CellBackwardScratchBytes(const std::string& backend, const std::string& dtype, int64_t B,
                                int64_t I, int64_t H, const std::string& layout,
                                bool use_peephole) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(1, B, I, H);
  const LstmAttrs attrs{ParseLayout(layout), 0.0f, 0.0f, use_peephole};
  return WithDtype(dtype, [&](auto tag) -> size_t {
    using S = decltype(tag);
    return cuda ? LstmCellBackwardScratchBytes<S>(dims, attrs)
                : LstmEngine<HostBackend, S>::CellBackwardScratchBytes(dims, attrs);
  });
}

void CellBackward(const std::string& backend, const std::string& dtype, uintptr_t stream,
                  int64_t B, int64_t I, int64_t H, const std::string& layout, bool use_peephole,
                  uintptr_t x, uintptr_t cs_prev, uintptr_t h_prev, uintptr_t w, uintptr_t wci,
                  uintptr_t wcf, uintptr_t wco, uintptr_t b, uintptr_t i, uintptr_t cs,
                  uintptr_t f, uintptr_t o, uintptr_t ci, uintptr_t co, uintptr_t cs_grad,
                  uintptr_t h_grad, uintptr_t cs_prev_grad, uintptr_t dicfo, uintptr_t wci_grad,
                  uintptr_t wcf_grad, uintptr_t wco_grad, uintptr_t scratch) {
  const bool cuda = IsCuda(backend);
  const LstmDims dims = MakeDims(1, B, I, H);
  const LstmAttrs attrs{ParseLayout(layout), 0.0f, 0.0f, use_peephole};
  WithDtype(dtype, [&](auto tag) {
    using S = decltype(tag);
    const LstmInputs<S> in = Inputs<S>(x, cs_prev, h_prev, w, wci, wcf, wco, b);
    const LstmActivations<const S*> act = Activations<const S>(i, cs, f, o, ci, co, 0);
    const LstmActivations<const S*> out_grads =
        Activations<const S>(0, cs_grad, 0, 0, 0, 0, h_grad);
    void* scratch_ptr = Ptr<void>(scratch);
    cudaError_t status;
    {
      py::gil_scoped_release release;
      if (cuda) {
        status = LstmCellBackward<S>(Stream(stream), dims, attrs, in, act, out_grads,
                                     Ptr<S>(cs_prev_grad), Ptr<S>(dicfo), Ptr<S>(wci_grad),
                                     Ptr<S>(wcf_grad), Ptr<S>(wco_grad), scratch_ptr);
      } else {
        HostBackend be;
        status = LstmEngine<HostBackend, S>::CellBackward(
            be, dims, attrs, in, act, out_grads, Ptr<S>(cs_prev_grad), Ptr<S>(dicfo),
            Ptr<S>(wci_grad), Ptr<S>(wcf_grad), Ptr<S>(wco_grad), scratch_ptr);
      }
    }
    Check(status, "LstmCellBackward");
  });
}

}  // namespace

void RegisterLstm(py::module_& m) {
  m.def("lstm_forward_scratch_bytes", &ForwardScratchBytes, py::arg("backend"),
        py::arg("dtype"), py::arg("T"), py::arg("B"), py::arg("I"), py::arg("H"),
        py::arg("layout"), py::arg("forget_bias"), py::arg("cell_clip"),
        py::arg("use_peephole"), py::arg("seq_len_max"),
        "Scratch bytes lstm_forward needs (backend 'cuda' includes the cuBLAS workspace).");
  m.def("lstm_forward", &Forward, py::arg("backend"), py::arg("dtype"), py::arg("stream"),
        py::arg("T"), py::arg("B"), py::arg("I"), py::arg("H"), py::arg("layout"),
        py::arg("forget_bias"), py::arg("cell_clip"), py::arg("use_peephole"),
        py::arg("seq_len_max"), py::arg("x"), py::arg("cs_prev"), py::arg("h_prev"),
        py::arg("w"), py::arg("wci"), py::arg("wcf"), py::arg("wco"), py::arg("b"),
        py::arg("i"), py::arg("cs"), py::arg("f"), py::arg("o"), py::arg("ci"), py::arg("co"),
        py::arg("h"), py::arg("scratch"),
        "BlockLSTM / BlockLSTMV2 / LSTMBlockCell (T = 1) forward.\n\n"
        "Inputs x [T,B,I], cs_prev [B,H], h_prev [B,H], w [I+H,4H], wci/wcf/wco [H] (read only "
        "with use_peephole), b [4H]; outputs i, cs, f, o, ci, co, h [T,B,H] (zero at steps >= "
        "seq_len_max). Buffers are addresses (ints); see the module's conventions.");
  m.def("lstm_backward_scratch_bytes", &BackwardScratchBytes, py::arg("backend"),
        py::arg("dtype"), py::arg("T"), py::arg("B"), py::arg("I"), py::arg("H"),
        py::arg("layout"), py::arg("use_peephole"), py::arg("seq_len_max"),
        "Scratch bytes lstm_backward needs.");
  m.def("lstm_backward", &Backward, py::arg("backend"), py::arg("dtype"), py::arg("stream"),
        py::arg("T"), py::arg("B"), py::arg("I"), py::arg("H"), py::arg("layout"),
        py::arg("use_peephole"), py::arg("seq_len_max"), py::arg("x"), py::arg("cs_prev"),
        py::arg("h_prev"), py::arg("w"), py::arg("wci"), py::arg("wcf"), py::arg("wco"),
        py::arg("b"), py::arg("i"), py::arg("cs"), py::arg("f"), py::arg("o"), py::arg("ci"),
        py::arg("co"), py::arg("h"), py::arg("cs_grad"), py::arg("h_grad"), py::arg("x_grad"),
        py::arg("cs_prev_grad"), py::arg("h_prev_grad"), py::arg("w_grad"),
        py::arg("wci_grad"), py::arg("wcf_grad"), py::arg("wco_grad"), py::arg("b_grad"),
        py::arg("scratch"), py::arg("i_grad") = 0, py::arg("f_grad") = 0,
        py::arg("o_grad") = 0, py::arg("ci_grad") = 0, py::arg("co_grad") = 0,
        "BlockLSTMGrad (ICFO) / BlockLSTMGradV2 (IFCO); with any of i_grad, f_grad, o_grad, "
        "ci_grad, co_grad ([T,B,H]; 0 = zero) BlockLSTMFullGrad.\n\n"
        "Inputs: the forward's inputs, its seven outputs i..h [T,B,H] and cs_grad, h_grad "
        "[T,B,H]; only steps < seq_len_max are read. Writes every gradient x_grad [T,B,I] (zero "
        "at steps >= seq_len_max), cs_prev_grad, h_prev_grad [B,H], w_grad [I+H,4H], "
        "wci/wcf/wco_grad [H] (zero without use_peephole), b_grad [4H].");
  m.def("lstm_backward_grad_scratch_bytes", &BackwardGradScratchBytes, py::arg("backend"),
        py::arg("dtype"), py::arg("T"), py::arg("B"), py::arg("I"), py::arg("H"),
        py::arg("layout"), py::arg("use_peephole"), py::arg("seq_len_max"),
        "Scratch bytes lstm_backward_grad needs.");
  m.def("lstm_backward_grad", &BackwardGrad, py::arg("backend"), py::arg("dtype"),
        py::arg("stream"), py::arg("T"), py::arg("B"), py::arg("I"), py::arg("H"),
        py::arg("layout"), py::arg("use_peephole"), py::arg("seq_len_max"), py::arg("inputs"),
        py::arg("act"), py::arg("out_grads"), py::arg("cot"), py::arg("grads"),
        py::arg("scratch"),
        "BlockLSTMFullGradGrad: the gradient of BlockLSTMFullGrad w.r.t. its inputs.\n\n"
        "Address lists: inputs x, cs_prev, h_prev, w, wci, wcf, wco, b (the forward's); act i, "
        "cs, f, o, ci, co, h and out_grads (their gradients) [T,B,H]; cot: the cotangents of "
        "FullGrad's eight results, shaped like the inputs; grads (22): the results w.r.t. the "
        "eight inputs, the seven activations and the seven output gradients.");
  m.def("lstm_cell_backward_scratch_bytes", &CellBackwardScratchBytes, py::arg("backend"),
        py::arg("dtype"), py::arg("B"), py::arg("I"), py::arg("H"), py::arg("layout"),
        py::arg("use_peephole"), "Scratch bytes lstm_cell_backward needs.");
  m.def("lstm_cell_backward", &CellBackward, py::arg("backend"), py::arg("dtype"),
        py::arg("stream"), py::arg("B"), py::arg("I"), py::arg("H"), py::arg("layout"),
        py::arg("use_peephole"), py::arg("x"), py::arg("cs_prev"), py::arg("h_prev"),
        py::arg("w"), py::arg("wci"), py::arg("wcf"), py::arg("wco"), py::arg("b"),
        py::arg("i"), py::arg("cs"), py::arg("f"), py::arg("o"), py::arg("ci"), py::arg("co"),
        py::arg("cs_grad"), py::arg("h_grad"), py::arg("cs_prev_grad"), py::arg("dicfo"),
        py::arg("wci_grad"), py::arg("wcf_grad"), py::arg("wco_grad"), py::arg("scratch"),
        "LSTMBlockCellGrad: from the cell's inputs, its outputs i, cs, f, o, ci, co [B,H] and "
        "cs_grad, h_grad [B,H], writes cs_prev_grad [B,H], dicfo [B,4H] (in `layout`) and, "
        "with use_peephole only, wci/wcf/wco_grad [H] (without it they are not touched: the "
        "op zero-fills them with their own, unvalidated, length).");
}

}  // namespace selftest
}  // namespace gpu
}  // namespace tf_lstm_ops
