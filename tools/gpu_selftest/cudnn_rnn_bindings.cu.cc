// The CudnnRNN engine in the self-test module: sizes, the reserve header, forward and backprop.
// backend "cuda" calls the launchers of cc/cudnn_rnn/gpu_launchers.h (what the TensorFlow kernels
// call) on the given stream; "host" runs RnnEngine<HostBackend, T> on the CPU (NumPy buffers).
//
// Every entry point takes the model and run as keyword-friendly fields:
//   mode ("lstm", "gru", "rnn_relu", "rnn_tanh"), num_layers, num_units, input_size, num_proj,
//   num_dirs, skip_input, time, batch, time_major, lengths (a list of B ints in [0, time], or
//   None: every length is time), activation and recurrent_activation (Keras' activations by the
//   ops' attribute values; "" = cuDNN's), input_masks and recurrent_masks (RnnRun's operand
//   masks [G, B, I] / [G, B, H] in the dtype, on the backend's memory, or 0 for none; the size
//   and header functions only ask whether each is non-zero), reset_after (false: the GRU
//   resetting before, Keras' GRU(reset_after=False); gru only), zoneout_h and zoneout_c
//   (RnnRun's zoneout weights, docs/cudnn_rnn.md §4.9: [T, B, H] in the run's layout, or with
//   zoneout_*_per_element false one value, in the dtype on the backend's memory; 0 for none; c's
//   for lstm only; the models that take operand masks)
// and, where it matters, the dropout (rate, seed, call). Pointers are Python ints.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "cc/gpu/backend_host.h"
#include "cc/cudnn_rnn/gpu_engine.h"
#include "tools/gpu_selftest/bindings.h"

namespace py = pybind11;

namespace tf_lstm_ops {
namespace gpu {
namespace selftest {
namespace {

// The model, the run (with the lengths kept alive here) and the dropout of one call, validated
// like the OpKernels validate (the engine expects valid sizes).
struct RnnCall {
  RnnModel m;
  RnnRun run;
  RnnDropout dropout;
  std::vector<int32_t> lengths;

  RnnCall(const std::string& mode, int64_t num_layers, int64_t num_units, int64_t input_size,
          int64_t num_proj, int64_t num_dirs, bool skip_input, int64_t time, int64_t batch,
          bool time_major, const std::optional<std::vector<int32_t>>& lens,
          const std::string& activation, const std::string& recurrent_activation,
          uintptr_t input_masks, uintptr_t recurrent_masks, bool reset_after,
          uintptr_t zoneout_h, bool zoneout_h_per_element, uintptr_t zoneout_c,
          bool zoneout_c_per_element, double rate = 0, uint64_t seed = 0, uint64_t call = 0) {
    RnnMode rnn_mode;
    if (mode == "lstm") {
      rnn_mode = RnnMode::kLstm;
    } else if (mode == "gru") {
      rnn_mode = RnnMode::kGru;
    } else if (mode == "rnn_relu") {
      rnn_mode = RnnMode::kRnnRelu;
    } else if (mode == "rnn_tanh") {
      rnn_mode = RnnMode::kRnnTanh;
    } else {
      throw py::value_error("mode must be lstm, gru, rnn_relu or rnn_tanh, not " + mode);
    }
    m = RnnModel{rnn_mode, num_layers, num_units, input_size, num_proj, num_dirs, skip_input};
    if (SetRnnActivations(activation, recurrent_activation, &m) != RnnActivationError::kNone) {
      throw py::value_error("unknown activation or recurrent_activation, or a recurrent one "
                            "for a plain RNN");
    }
    if (!reset_after && rnn_mode != RnnMode::kGru) {
      throw py::value_error("reset_after=False needs mode gru");
    }
    m.gru_reset_before = !reset_after;
    if (num_layers < 1 || num_units < 0 || input_size < 0 || (num_dirs != 1 && num_dirs != 2) ||
        time < 0 || batch < 0) {
      throw py::value_error("invalid RNN sizes");
    }
    if (num_proj < 0 || (num_proj > 0 && (rnn_mode != RnnMode::kLstm || num_proj >= num_units ||
                                          skip_input))) {
      throw py::value_error("num_proj needs lstm, 0 < num_proj < num_units and linear input");
    }
    if (skip_input && input_size != num_units) {
      throw py::value_error("skip_input needs input_size == num_units");
    }
    if (CheckedParamsSize(m) < 0) throw py::value_error("params size overflows");
    if (!(rate >= 0 && rate < 1)) throw py::value_error("dropout must be in [0, 1)");
    run = RnnRun{time, batch, time_major, nullptr};
    run.input_masks = Ptr<const void>(input_masks);
    run.recurrent_masks = Ptr<const void>(recurrent_masks);
    if (run.masked() && !RnnTakesMasks(m)) {
      throw py::value_error("operand masks need one layer, one direction, linear input and no "
                            "projection");
    }
    run.zoneout_h = ZoneoutAt(zoneout_h, zoneout_h_per_element);
    run.zoneout_c = ZoneoutAt(zoneout_c, zoneout_c_per_element);
    if (run.zoned() && !RnnTakesMasks(m)) {
      throw py::value_error("zoneout needs one layer, one direction, linear input and no "
                            "projection");
    }
    if (run.zoneout_c.active() && rnn_mode != RnnMode::kLstm) {
      throw py::value_error("zoneout_c needs mode lstm");
    }
    m.zoneout = run.zoned();  // as the OpKernels set it: Keras' cells
    run.seq_lengths = CheckedLengths(lens, batch, time, &lengths);
    if (RnnWorkspaceBytes(m, run, true, 8) < 0) throw py::value_error("workspace overflows");
    dropout = RnnDropout{static_cast<float>(rate), seed, call};
  }
  // The lengths pointer must follow the vector when the struct is copied or moved.
  RnnCall(const RnnCall&) = delete;
  RnnCall& operator=(const RnnCall&) = delete;

  template <typename T>
  RnnReserveHeader Header() const {
    return MakeReserveHeader(m, run, dropout, sizeof(T), sizeof(Acc<T>));
  }
};

#define TF_LSTM_RNN_MODEL_ARGS                                                              \
  const std::string &mode, int64_t num_layers, int64_t num_units, int64_t input_size,      \
      int64_t num_proj, int64_t num_dirs, bool skip_input, int64_t time, int64_t batch,     \
      bool time_major, const std::optional<std::vector<int32_t>>&lengths,                   \
      const std::string &activation, const std::string &recurrent_activation,               \
      uintptr_t input_masks, uintptr_t recurrent_masks, bool reset_after,                   \
      uintptr_t zoneout_h, bool zoneout_h_per_element, uintptr_t zoneout_c,                 \
      bool zoneout_c_per_element
#define TF_LSTM_RNN_MODEL_VALUES                                                             \
  mode, num_layers, num_units, input_size, num_proj, num_dirs, skip_input, time, batch,     \
      time_major, lengths, activation, recurrent_activation, input_masks, recurrent_masks,  \
      reset_after, zoneout_h, zoneout_h_per_element, zoneout_c, zoneout_c_per_element
#define TF_LSTM_RNN_MODEL_PYARGS                                                             \
  py::arg("mode"), py::arg("num_layers"), py::arg("num_units"), py::arg("input_size"),     \
      py::arg("num_proj"), py::arg("num_dirs"), py::arg("skip_input"), py::arg("time"),     \
      py::arg("batch"), py::arg("time_major"), py::arg("lengths"),                          \
      py::arg("activation") = "", py::arg("recurrent_activation") = "",                     \
      py::arg("input_masks") = 0, py::arg("recurrent_masks") = 0,                           \
      py::arg("reset_after") = true, py::arg("zoneout_h") = 0,                              \
      py::arg("zoneout_h_per_element") = true, py::arg("zoneout_c") = 0,                    \
      py::arg("zoneout_c_per_element") = true

}  // namespace

void RegisterRnn(py::module_& mod) {
  mod.def(
      "rnn_params_size",
      [](const std::string& mode, int64_t num_layers, int64_t num_units, int64_t input_size,
         int64_t num_proj, int64_t num_dirs, bool skip_input) {
        const RnnCall c(mode, num_layers, num_units, input_size, num_proj, num_dirs, skip_input,
                        0, 0, true, std::nullopt, "", "", 0, 0, true, 0, true, 0, true);
        return CheckedParamsSize(c.m);
      },
      py::arg("mode"), py::arg("num_layers"), py::arg("num_units"), py::arg("input_size"),
      py::arg("num_proj"), py::arg("num_dirs"), py::arg("skip_input"),
      "CheckedParamsSize: elements of the opaque params buffer");

  mod.def(
      "rnn_workspace_bytes",
      [](const std::string& dtype, TF_LSTM_RNN_MODEL_ARGS, double dropout) {
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES, dropout);
        return WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          return RnnWorkspaceBytes(c.m, c.run, c.dropout.active(c.m),
                                   static_cast<int>(sizeof(Acc<T>)));
        });
      },
      py::arg("dtype"), TF_LSTM_RNN_MODEL_PYARGS, py::arg("dropout") = 0.0,
      "RnnWorkspaceBytes: bytes of the reserve space (or inference workspace), header included");

  mod.def(
      "rnn_reserve_header",
      [](const std::string& dtype, TF_LSTM_RNN_MODEL_ARGS, double dropout) {
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES, dropout);
        const RnnReserveHeader h = WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          return c.Header<T>();
        });
        return py::bytes(reinterpret_cast<const char*>(&h), sizeof(h));
      },
      py::arg("dtype"), TF_LSTM_RNN_MODEL_PYARGS, py::arg("dropout") = 0.0,
      "MakeReserveHeader's 64 bytes: what a forward writes in front of its workspace");

  mod.def(
      "rnn_workspace_layout",
      [](TF_LSTM_RNN_MODEL_ARGS, bool dropout_active) {
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES);
        const WorkspaceLayout lay(c.m, c.run, dropout_active);
        py::dict d;
        std::vector<int64_t> h, cs, gates, inputs, masks;
        for (int64_t p = 0; p < c.m.num_pseudo_layers(); ++p) {
          h.push_back(lay.h(p));
          cs.push_back(lay.c(p));
          gates.push_back(lay.gates(p));
        }
        for (int64_t l = 1; l < c.m.num_layers; ++l) {
          inputs.push_back(lay.input(l));
          masks.push_back(lay.mask(l));
        }
        d["h"] = h;
        d["c"] = cs;
        d["gates"] = gates;
        d["input"] = inputs;  // layers 1..L-1
        d["mask"] = masks;
        d["total"] = lay.total();
        d["header_bytes"] = sizeof(RnnReserveHeader);
        return d;
      },
      TF_LSTM_RNN_MODEL_PYARGS, py::arg("dropout_active"),
      "WorkspaceLayout's offsets, in compute-type elements after the header");

  mod.def(
      "rnn_forward_scratch_bytes",
      [](const std::string& backend, const std::string& dtype, TF_LSTM_RNN_MODEL_ARGS,
         double dropout) {
        const bool cuda = IsCuda(backend);
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES, dropout);
        return WithDtype(dtype, [&](auto tag) -> size_t {
          using T = decltype(tag);
          return cuda ? RnnForwardScratchBytes<T>(c.m, c.run, c.dropout)
                      : RnnEngine<HostBackend, T>::ForwardScratchBytes(c.m, c.run, c.dropout);
        });
      },
      py::arg("backend"), py::arg("dtype"), TF_LSTM_RNN_MODEL_PYARGS, py::arg("dropout") = 0.0);

  mod.def(
      "rnn_forward_path",
      [](const std::string& backend, const std::string& dtype, TF_LSTM_RNN_MODEL_ARGS) {
        const bool cuda = IsCuda(backend);
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES);
        bool storage_operands = false;
        const RnnForwardPath path = WithDtype(dtype, [&](auto tag) -> RnnForwardPath {
          using T = decltype(tag);
          storage_operands = RnnEngine<HostBackend, T>::LoOperands(c.m);  // backend-independent
          if (cuda) return RnnForwardPathOf<T>(c.m, c.run);
          return RnnEngine<HostBackend, T>::PlanPersistent(HostBackend(), c.m, c.run);
        });
        py::dict d;
        d["path"] = path.blocks > 0 ? "persistent" : "per_step";
        // what the GEMMs multiply: the 16-bit storage type, or float/double copies
        d["gemm_operands"] = storage_operands ? "storage" : "compute";
        d["blocks"] = path.blocks;
        d["units_per_block"] = path.units_per_block;
        d["shared_bytes"] = path.shared_bytes;
        return d;
      },
      py::arg("backend"), py::arg("dtype"), TF_LSTM_RNN_MODEL_PYARGS,
      "RnnForwardPathOf: the forward recurrence's path (persistent or per_step) and, when "
      "persistent, its grid: blocks, units_per_block, shared_bytes. Honours the test-only "
      "TF_LSTM_OPS_RNN_PERSISTENT=0 (always per_step).");

  mod.def(
      "rnn_backward_scratch_bytes",
      [](const std::string& backend, const std::string& dtype, TF_LSTM_RNN_MODEL_ARGS) {
        const bool cuda = IsCuda(backend);
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES);
        return WithDtype(dtype, [&](auto tag) -> size_t {
          using T = decltype(tag);
          return cuda ? RnnBackwardScratchBytes<T>(c.m, c.run)
                      : RnnEngine<HostBackend, T>::BackwardScratchBytes(c.m, c.run);
        });
      },
      py::arg("backend"), py::arg("dtype"), TF_LSTM_RNN_MODEL_PYARGS);

  mod.def(
      "rnn_forward",
      [](const std::string& backend, const std::string& dtype, uintptr_t stream,
         TF_LSTM_RNN_MODEL_ARGS, double dropout, uint64_t seed, uint64_t call, uintptr_t input,
         uintptr_t input_h, uintptr_t input_c, uintptr_t params, uintptr_t output,
         uintptr_t output_h, uintptr_t output_c, uintptr_t workspace, uintptr_t scratch) {
        const bool cuda = IsCuda(backend);
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES, dropout, seed, call);
        WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          cudaError_t status;
          if (cuda) {
            status = RnnForward<T>(Stream(stream), c.m, c.run, c.dropout, Ptr<const T>(input),
                                   Ptr<const T>(input_h), Ptr<const T>(input_c),
                                   Ptr<const T>(params), Ptr<T>(output), Ptr<T>(output_h),
                                   Ptr<T>(output_c), Ptr<uint8_t>(workspace), Ptr<void>(scratch));
          } else {
            HostBackend be;
            status = RnnEngine<HostBackend, T>::Forward(
                be, c.m, c.run, c.dropout, Ptr<const T>(input), Ptr<const T>(input_h),
                Ptr<const T>(input_c), Ptr<const T>(params), Ptr<T>(output), Ptr<T>(output_h),
                Ptr<T>(output_c), Ptr<uint8_t>(workspace), Ptr<void>(scratch));
          }
          Check(status, "RnnForward");
        });
      },
      py::arg("backend"), py::arg("dtype"), py::arg("stream"), TF_LSTM_RNN_MODEL_PYARGS,
      py::arg("dropout"), py::arg("seed"), py::arg("call"), py::arg("input"), py::arg("input_h"),
      py::arg("input_c"), py::arg("params"), py::arg("output"), py::arg("output_h"),
      py::arg("output_c"), py::arg("workspace"), py::arg("scratch"),
      "Forward (writes the workspace's header and activations). input_c/output_c: 0 for "
      "non-LSTM modes.");

  mod.def(
      "rnn_backward",
      [](const std::string& backend, const std::string& dtype, uintptr_t stream,
         TF_LSTM_RNN_MODEL_ARGS, double dropout, uintptr_t input, uintptr_t input_h,
         uintptr_t input_c, uintptr_t params, uintptr_t output_backprop,
         uintptr_t output_h_backprop, uintptr_t output_c_backprop, uintptr_t reserve,
         uintptr_t input_backprop, uintptr_t input_h_backprop, uintptr_t input_c_backprop,
         uintptr_t params_backprop, uintptr_t scratch) {
        const bool cuda = IsCuda(backend);
        const RnnCall c(TF_LSTM_RNN_MODEL_VALUES, dropout);
        WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          const RnnReserveHeader expected = c.Header<T>();  // as the OpKernel builds it
          cudaError_t status;
          if (cuda) {
            status = RnnBackward<T>(
                Stream(stream), c.m, c.run, expected, Ptr<const T>(input), Ptr<const T>(input_h),
                Ptr<const T>(input_c), Ptr<const T>(params), Ptr<const T>(output_backprop),
                Ptr<const T>(output_h_backprop), Ptr<const T>(output_c_backprop),
                Ptr<const uint8_t>(reserve), Ptr<T>(input_backprop), Ptr<T>(input_h_backprop),
                Ptr<T>(input_c_backprop), Ptr<T>(params_backprop), Ptr<void>(scratch));
          } else {
            HostBackend be;
            status = RnnEngine<HostBackend, T>::Backward(
                be, c.m, c.run, expected, Ptr<const T>(input), Ptr<const T>(input_h),
                Ptr<const T>(input_c), Ptr<const T>(params), Ptr<const T>(output_backprop),
                Ptr<const T>(output_h_backprop), Ptr<const T>(output_c_backprop),
                Ptr<const uint8_t>(reserve), Ptr<T>(input_backprop), Ptr<T>(input_h_backprop),
                Ptr<T>(input_c_backprop), Ptr<T>(params_backprop), Ptr<void>(scratch));
          }
          Check(status, "RnnBackward");
        });
      },
      py::arg("backend"), py::arg("dtype"), py::arg("stream"), TF_LSTM_RNN_MODEL_PYARGS,
      py::arg("dropout"), py::arg("input"), py::arg("input_h"), py::arg("input_c"),
      py::arg("params"), py::arg("output_backprop"), py::arg("output_h_backprop"),
      py::arg("output_c_backprop"), py::arg("reserve"), py::arg("input_backprop"),
      py::arg("input_h_backprop"), py::arg("input_c_backprop"), py::arg("params_backprop"),
      py::arg("scratch"),
      "Backprop. The expected reserve header is built from the arguments (dropout: the rate the "
      "forward used; its seed and call do not enter the header); on a mismatch every output is "
      "NaN. input_c, output_c_backprop, input_c_backprop: 0 for non-LSTM modes.");

  mod.def(
      "keras_params",
      [](const std::string& backend, const std::string& dtype, uintptr_t stream,
         const std::string& mode, int64_t input_size, int64_t num_units, int bias_rows,
         bool to_params, uintptr_t kernel, uintptr_t recurrent_kernel, uintptr_t bias,
         uintptr_t params) {
        if (mode != "lstm" && mode != "gru" && mode != "rnn_relu" && mode != "rnn_tanh") {
          throw py::value_error("mode must be lstm, gru, rnn_relu or rnn_tanh, not " + mode);
        }
        const RnnModel m = KerasModel(RnnModeNamed(mode), input_size, num_units);
        if (input_size < 0 || num_units < 0 || (bias_rows != 1 && bias_rows != 2) ||
            CheckedParamsSize(m) < 0) {
          throw py::value_error("invalid Keras weight sizes");
        }
        const bool cuda = IsCuda(backend);
        WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          cudaError_t status;
          if (to_params) {
            const T* const keras[3] = {Ptr<const T>(kernel), Ptr<const T>(recurrent_kernel),
                                       Ptr<const T>(bias)};
            status = cuda ? KerasToParams<T>(Stream(stream), m.mode, input_size, num_units,
                                             bias_rows, keras[0], keras[1], keras[2],
                                             Ptr<T>(params))
                          : CopyKerasBlocks<true, HostBackend, T>(
                                HostBackend(), m.mode, input_size, num_units, bias_rows, keras,
                                Ptr<T>(params));
          } else {
            T* const keras[3] = {Ptr<T>(kernel), Ptr<T>(recurrent_kernel), Ptr<T>(bias)};
            status = cuda ? ParamsToKeras<T>(Stream(stream), m.mode, input_size, num_units,
                                             bias_rows, Ptr<const T>(params), keras[0],
                                             keras[1], keras[2])
                          : CopyKerasBlocks<false, HostBackend, T>(
                                HostBackend(), m.mode, input_size, num_units, bias_rows, keras,
                                Ptr<const T>(params));
          }
          Check(status, to_params ? "KerasToParams" : "ParamsToKeras");
        });
      },
      py::arg("backend"), py::arg("dtype"), py::arg("stream"), py::arg("mode"),
      py::arg("input_size"), py::arg("num_units"), py::arg("bias_rows"), py::arg("to_params"),
      py::arg("kernel"), py::arg("recurrent_kernel"), py::arg("bias"), py::arg("params"),
      "Keras' weights (kernel [I, G*H], recurrent_kernel [H, G*H], bias [G*H] or [2, G*H]) to "
      "the one-layer params buffer (to_params) or back (docs/cudnn_rnn.md section 6.5).");
}

#undef TF_LSTM_RNN_MODEL_ARGS
#undef TF_LSTM_RNN_MODEL_VALUES
#undef TF_LSTM_RNN_MODEL_PYARGS

}  // namespace selftest
}  // namespace gpu
}  // namespace tf_lstm_ops
