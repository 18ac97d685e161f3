// The LayerNorm GRU / SimpleRNN engine in the self-test module (cc/layer_norm_rnn/gpu_engine.h):
// sizes, the reserve header, forward and backward. backend "cuda" calls the launchers of
// cc/layer_norm_rnn/gpu_launchers.h (what the TensorFlow kernels call) on the given stream;
// "host" runs LayerNormRnnEngine<HostBackend, T> on the CPU (NumPy buffers).
//
// Every entry point takes the model and run as keyword-friendly fields:
//   input_size, num_units, cell ("gru" or "simple_rnn"), activation and recurrent_activation
//   (cc/core/rnn_activation.h's names), epsilon (rounded to float, as the op's attribute), time,
//   batch, time_major, lengths (a list of B ints in [0, time], or None: every length is time),
//   training (whether the forward keeps the reserve space; the backward is always a training
//   run's), recurrent_mask ([B, H] in the dtype on the backend's memory, or 0 for none),
//   zoneout_h (docs/cudnn_rnn.md §4.9: [T, B, H] in the run's layout, or with
//   zoneout_h_per_element false one value, in the dtype on the backend's memory; 0 for none).
// The weights (and their gradients) are a list of five addresses in the op's order: kernel,
// recurrent_kernel, bias, gamma_x, gamma_h (0 for a SimpleRNN). Pointers are Python ints.
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "cc/gpu/backend_host.h"
#include "cc/layer_norm_rnn/gpu_engine.h"
#include "tools/gpu_selftest/bindings.h"

namespace py = pybind11;

namespace tf_lstm_ops {
namespace gpu {
namespace selftest {
namespace {

RnnActivation ActivationNamed(const std::string& name, const char* what) {
  RnnActivation a;
  if (!RnnActivationNamed(name, &a)) {
    throw py::value_error(std::string(what) + " '" + name + "' is not a known activation");
  }
  return a;
}

// The model and run of one call (with the lengths kept alive here), validated like the
// OpKernels validate (the engine expects valid sizes).
struct LayerNormRnnCall {
  LayerNormRnnModel m;
  LayerNormRnnRun run{};
  std::vector<int32_t> lengths;

  LayerNormRnnCall(int64_t input_size, int64_t num_units, const std::string& cell,
                   const std::string& activation, const std::string& recurrent_activation,
                   double epsilon, int64_t time, int64_t batch, bool time_major,
                   const std::optional<std::vector<int32_t>>& lens, bool training,
                   uintptr_t recurrent_mask, uintptr_t zoneout_h, bool zoneout_h_per_element) {
    LayerNormCell kind;
    if (!LayerNormCellNamed(cell, &kind)) {
      throw py::value_error("cell must be 'gru' or 'simple_rnn', not '" + cell + "'");
    }
    const float eps = static_cast<float>(epsilon);
    if (!(eps > 0) || !std::isfinite(eps)) {
      throw py::value_error("epsilon must be a positive finite number");
    }
    if (input_size < 0 || num_units < 0 || time < 0 || batch < 0) {
      throw py::value_error("sizes must be non-negative");
    }
    m = LayerNormRnnModel{input_size,
                          num_units,
                          kind,
                          ActivationNamed(activation, "activation"),
                          ActivationNamed(recurrent_activation, "recurrent_activation"),
                          eps};
    run.time = time;
    run.batch = batch;
    run.time_major = time_major;
    run.training = training;
    run.recurrent_mask = Ptr<const void>(recurrent_mask);
    run.zoneout_h = ZoneoutAt(zoneout_h, zoneout_h_per_element);
    run.seq_lengths = CheckedLengths(lens, batch, time, &lengths);
    if (LayerNormRnnWorkspaceBytes(m, run, 8) < 0) throw py::value_error("workspace overflows");
  }
  LayerNormRnnCall(const LayerNormRnnCall&) = delete;
  LayerNormRnnCall& operator=(const LayerNormRnnCall&) = delete;

  template <typename T>
  RnnReserveHeader Header() const {
    return LayerNormRnnHeader(m, run, sizeof(T), sizeof(Acc<T>));
  }
};

// Five addresses in the op's order as the weights (P = const T) or their gradients (P = T).
template <typename P>
std::vector<P*> FivePointers(const std::vector<uintptr_t>& addresses, const char* what) {
  if (addresses.size() != 5) {
    throw py::value_error(std::string(what) + " must be five addresses (kernel, "
                          "recurrent_kernel, bias, gamma_x, gamma_h)");
  }
  std::vector<P*> p;
  for (uintptr_t a : addresses) p.push_back(Ptr<P>(a));
  return p;
}
template <typename T>
LayerNormRnnWeights<T> WeightsAt(const std::vector<uintptr_t>& addresses) {
  const std::vector<const T*> p = FivePointers<const T>(addresses, "weights");
  return {p[0], p[1], p[2], p[3], p[4]};
}
template <typename T>
LayerNormRnnWeightGrads<T> GradsAt(const std::vector<uintptr_t>& addresses) {
  const std::vector<T*> p = FivePointers<T>(addresses, "weight_grads");
  return {p[0], p[1], p[2], p[3], p[4]};
}

// Each entry point once for both backends: "cuda" calls the launcher (what the TensorFlow
// kernels call), "host" the engine on a HostBackend, with the same arguments.
template <typename T>
struct Calls {
  using Engine = LayerNormRnnEngine<HostBackend, T>;
  static size_t ScratchBytes(bool cuda, bool forward, const LayerNormRnnCall& c) {
    if (forward) {
      return cuda ? LayerNormRnnForwardScratchBytes<T>(c.m, c.run)
                  : Engine::ForwardScratchBytes(c.m, c.run);
    }
    return cuda ? LayerNormRnnBackwardScratchBytes<T>(c.m, c.run)
                : Engine::BackwardScratchBytes(c.m, c.run);
  }
  template <typename... Args>
  static void Forward(bool cuda, uintptr_t stream, const Args&... args) {
    HostBackend be;
    Check(cuda ? LayerNormRnnForward<T>(Stream(stream), args...) : Engine::Forward(be, args...),
          "LayerNormRnnForward");
  }
  template <typename... Args>
  static void Backward(bool cuda, uintptr_t stream, const Args&... args) {
    HostBackend be;
    Check(cuda ? LayerNormRnnBackward<T>(Stream(stream), args...)
               : Engine::Backward(be, args...),
          "LayerNormRnnBackward");
  }
};

#define TF_LSTM_LNR_MODEL_ARGS                                                                  \
  int64_t input_size, int64_t num_units, const std::string &cell, const std::string &activation, \
      const std::string &recurrent_activation, double epsilon, int64_t time, int64_t batch,      \
      bool time_major, const std::optional<std::vector<int32_t>>&lengths, bool training,         \
      uintptr_t recurrent_mask, uintptr_t zoneout_h, bool zoneout_h_per_element
#define TF_LSTM_LNR_MODEL_VALUES                                                                \
  input_size, num_units, cell, activation, recurrent_activation, epsilon, time, batch,          \
      time_major, lengths, training, recurrent_mask, zoneout_h, zoneout_h_per_element
#define TF_LSTM_LNR_MODEL_PYARGS                                                                \
  py::arg("input_size"), py::arg("num_units"), py::arg("cell"), py::arg("activation") = "tanh", \
      py::arg("recurrent_activation") = "sigmoid", py::arg("epsilon"), py::arg("time"),         \
      py::arg("batch"), py::arg("time_major"), py::arg("lengths"), py::arg("training") = true,  \
      py::arg("recurrent_mask") = 0, py::arg("zoneout_h") = 0,                                  \
      py::arg("zoneout_h_per_element") = true

}  // namespace

void RegisterLayerNormRnn(py::module_& mod) {
  mod.def(
      "lnr_workspace_bytes",
      [](const std::string& dtype, TF_LSTM_LNR_MODEL_ARGS) {
        const LayerNormRnnCall c(TF_LSTM_LNR_MODEL_VALUES);
        return WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          return LayerNormRnnWorkspaceBytes(c.m, c.run, static_cast<int>(sizeof(Acc<T>)));
        });
      },
      py::arg("dtype"), TF_LSTM_LNR_MODEL_PYARGS,
      "LayerNormRnnWorkspaceBytes: bytes of the reserve space (training) or the inference "
      "workspace, header included");

  mod.def(
      "lnr_reserve_header",
      [](const std::string& dtype, TF_LSTM_LNR_MODEL_ARGS) {
        const LayerNormRnnCall c(TF_LSTM_LNR_MODEL_VALUES);
        const RnnReserveHeader h = WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          return c.Header<T>();
        });
        return py::bytes(reinterpret_cast<const char*>(&h), sizeof(h));
      },
      py::arg("dtype"), TF_LSTM_LNR_MODEL_PYARGS,
      "LayerNormRnnHeader's 64 bytes: what a forward writes in front of its workspace");

  for (const bool forward : {true, false}) {
    mod.def(
        forward ? "lnr_forward_scratch_bytes" : "lnr_backward_scratch_bytes",
        [forward](const std::string& backend, const std::string& dtype, TF_LSTM_LNR_MODEL_ARGS) {
          const bool cuda = IsCuda(backend);
          LayerNormRnnCall c(TF_LSTM_LNR_MODEL_VALUES);
          c.run.training = c.run.training || !forward;  // (a backward reads a training run's)
          return WithDtype(dtype, [&](auto tag) {
            return Calls<decltype(tag)>::ScratchBytes(cuda, forward, c);
          });
        },
        py::arg("backend"), py::arg("dtype"), TF_LSTM_LNR_MODEL_PYARGS);
  }

  mod.def(
      "lnr_forward",
      [](const std::string& backend, const std::string& dtype, uintptr_t stream,
         TF_LSTM_LNR_MODEL_ARGS, uintptr_t input, uintptr_t input_h,
         const std::vector<uintptr_t>& weights, uintptr_t output, uintptr_t output_h,
         uintptr_t workspace, uintptr_t scratch) {
        const bool cuda = IsCuda(backend);
        const LayerNormRnnCall c(TF_LSTM_LNR_MODEL_VALUES);
        WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          Calls<T>::Forward(cuda, stream, c.m, c.run, Ptr<const T>(input), Ptr<const T>(input_h),
                            WeightsAt<T>(weights), Ptr<T>(output), Ptr<T>(output_h),
                            Ptr<uint8_t>(workspace), Ptr<void>(scratch));
        });
      },
      py::arg("backend"), py::arg("dtype"), py::arg("stream"), TF_LSTM_LNR_MODEL_PYARGS,
      py::arg("input"), py::arg("input_h"), py::arg("weights"), py::arg("output"),
      py::arg("output_h"), py::arg("workspace"), py::arg("scratch"),
      "Forward (writes the workspace's header and what it keeps).");

  mod.def(
      "lnr_backward",
      [](const std::string& backend, const std::string& dtype, uintptr_t stream,
         TF_LSTM_LNR_MODEL_ARGS, uintptr_t input, uintptr_t input_h,
         const std::vector<uintptr_t>& weights, uintptr_t output_backprop,
         uintptr_t output_h_backprop, uintptr_t reserve, uintptr_t input_backprop,
         uintptr_t input_h_backprop, const std::vector<uintptr_t>& weight_grads,
         uintptr_t scratch) {
        const bool cuda = IsCuda(backend);
        LayerNormRnnCall c(TF_LSTM_LNR_MODEL_VALUES);
        c.run.training = true;  // (as the Grad op: a training forward's reserve space)
        WithDtype(dtype, [&](auto tag) {
          using T = decltype(tag);
          // the expected header, as the OpKernel builds it
          Calls<T>::Backward(cuda, stream, c.m, c.run, c.Header<T>(), Ptr<const T>(input),
                             Ptr<const T>(input_h), WeightsAt<T>(weights),
                             Ptr<const T>(output_backprop), Ptr<const T>(output_h_backprop),
                             Ptr<const uint8_t>(reserve), Ptr<T>(input_backprop),
                             Ptr<T>(input_h_backprop), GradsAt<T>(weight_grads),
                             Ptr<void>(scratch));
        });
      },
      py::arg("backend"), py::arg("dtype"), py::arg("stream"), TF_LSTM_LNR_MODEL_PYARGS,
      py::arg("input"), py::arg("input_h"), py::arg("weights"), py::arg("output_backprop"),
      py::arg("output_h_backprop"), py::arg("reserve"), py::arg("input_backprop"),
      py::arg("input_h_backprop"), py::arg("weight_grads"), py::arg("scratch"),
      "Backward of a training forward's reserve space. The expected reserve header is built "
      "from the arguments (as a training run's); on a mismatch every output is NaN.");
}

#undef TF_LSTM_LNR_MODEL_ARGS
#undef TF_LSTM_LNR_MODEL_VALUES
#undef TF_LSTM_LNR_MODEL_PYARGS

}  // namespace selftest
}  // namespace gpu
}  // namespace tf_lstm_ops
