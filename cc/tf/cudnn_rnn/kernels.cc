// OpKernels of the CudnnRNN family: validate every input, allocate outputs, run the functors.
// Registered twice on CPU: for our namespaced ops (TfLstm>CudnnRNN...) and for TF's own op names,
// which a CPU build of TF has no kernels for, so existing graphs and SavedModels run on CPU.
// With CUDA, also on the GPU for our namespaced ops only (TF's GPU build has cuDNN kernels for
// its own names). The kernels are device-generic: validation is shared, and what differs per
// device (how much of the reserve header the kernel can check, host writes into outputs) is in
// ReserveCheck (cc/tf/validation.h) and DeviceMemory; the functors write the header themselves.
#define EIGEN_USE_THREADS

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/tf/cudnn_rnn/functor.h"
#include "cc/tf/cudnn_rnn/validation.h"
#include "cc/core/cudnn_rnn_layout.h"
#include "cc/tf/device.h"
#include "cc/core/precision.h"
#include "cc/tf/validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/env_var.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tf_lstm_ops {
namespace {

using tensorflow::OpInputList;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::OpOutputList;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// The attributes every op of the family has (and the optional ones some have), read once.
struct RnnAttrs {
  RnnMode mode = RnnMode::kLstm;
  std::string input_mode;
  int64_t num_dirs = 1;
  float dropout = 0;
  uint64_t seed = 0;
  int64_t num_proj = 0;
  bool is_training = false;
  bool time_major = true;
  bool reset_after = true;  // false: a GRU resetting before (the *Keras ops' reset_after)

  absl::Status Read(OpKernelConstruction* ctx) {
    std::string mode, direction;
    TF_RETURN_IF_ERROR(ctx->GetAttr("rnn_mode", &mode));
    mode_name = mode;
    this->mode = RnnModeNamed(mode);
    if (!ctx->HasAttr("input_mode")) {  // KerasRNN: one layer, one direction, linear input
      input_mode = "linear_input";
    } else {
      TF_RETURN_IF_ERROR(ctx->GetAttr("input_mode", &input_mode));
      TF_RETURN_IF_ERROR(ctx->GetAttr("direction", &direction));
      num_dirs = direction == "bidirectional" ? 2 : 1;
      TF_RETURN_IF_ERROR(ctx->GetAttr("dropout", &dropout));
      if (!(dropout >= 0 && dropout <= 1)) {  // 1: every input of layers 1..L-1 dropped, as TF
        return absl::InvalidArgumentError(
            absl::StrCat("dropout must be in [0, 1] but is ", dropout));
      }
      int seed_attr, seed2_attr;
      TF_RETURN_IF_ERROR(ctx->GetAttr("seed", &seed_attr));
      TF_RETURN_IF_ERROR(ctx->GetAttr("seed2", &seed2_attr));
      seed = (static_cast<uint64_t>(static_cast<uint32_t>(seed_attr)) << 32) |
             static_cast<uint32_t>(seed2_attr);  // as TF combines them
    }
    if (ctx->HasAttr("num_proj")) {
      int proj;
      TF_RETURN_IF_ERROR(ctx->GetAttr("num_proj", &proj));
      num_proj = proj;
      if (num_proj < 0) {
        return absl::InvalidArgumentError(absl::StrCat("num_proj must be >= 0 but is ", proj));
      }
      if (num_proj > 0 && mode != "lstm") {
        return absl::InvalidArgumentError(absl::StrCat(
            "num_proj (", proj, ") is only supported with rnn_mode 'lstm', not '", mode, "'"));
      }
    }
    if (ctx->HasAttr("is_training")) TF_RETURN_IF_ERROR(ctx->GetAttr("is_training", &is_training));
    if (ctx->HasAttr("time_major")) TF_RETURN_IF_ERROR(ctx->GetAttr("time_major", &time_major));
    if (ctx->HasAttr("activation")) {  // the *Keras ops and CudnnRNNDropoutKept
      TF_RETURN_IF_ERROR(ctx->GetAttr("activation", &activation));
      TF_RETURN_IF_ERROR(ctx->GetAttr("recurrent_activation", &recurrent_activation));
      RnnModel probe;  // checked when the kernel is built, before any input is read
      probe.mode = this->mode;
      TF_RETURN_IF_ERROR(SetActivations(&probe));
    }
    if (ctx->HasAttr("reset_after")) {
      TF_RETURN_IF_ERROR(ctx->GetAttr("reset_after", &reset_after));
      if (!reset_after && this->mode != RnnMode::kGru) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reset_after=false (Keras' GRU(reset_after=False)) is for rnn_mode 'gru' only, not '",
            mode, "'"));
      }
    }
    return absl::OkStatus();
  }

  // Keras' activations (docs/cudnn_rnn.md §4.7) into m, or an error naming the attribute.
  absl::Status SetActivations(RnnModel* m) const {
    const std::string known = absl::StrJoin(kRnnActivationNames, ", ");
    switch (SetRnnActivations(activation, recurrent_activation, m)) {
      case RnnActivationError::kNone:
        return absl::OkStatus();
      case RnnActivationError::kUnknownActivation:
        return absl::InvalidArgumentError(absl::StrCat(
            "activation must be '' (cuDNN's) or one of ", known, " but is '", activation, "'"));
      case RnnActivationError::kUnknownRecurrent:
        return absl::InvalidArgumentError(
            absl::StrCat("recurrent_activation must be '' (cuDNN's) or one of ", known,
                         " but is '", recurrent_activation, "'"));
      case RnnActivationError::kRecurrentNotGated:
        return absl::InvalidArgumentError(absl::StrCat(
            "recurrent_activation is for rnn_mode 'lstm' and 'gru' only (the gates), not '",
            mode_name, "'; got '", recurrent_activation, "'"));
    }
    return absl::OkStatus();
  }

  // The projection width of a model with `num_units` cells: num_proj, or 0 (none) when it
  // equals num_units, as TF's kernels read it.
  int64_t ProjectionFor(int64_t num_units) const { return num_proj == num_units ? 0 : num_proj; }

  // skip_input / auto_select (auto: skip iff the input width equals the cell width), for a model
  // whose projection width is `proj` (0: none).
  absl::Status ResolveSkip(int64_t input_size, int64_t cell_width, int64_t proj,
                           bool* skip) const {
    *skip = input_mode == "skip_input" || (input_mode == "auto_select" && input_size == cell_width);
    if (proj > 0 && input_mode != "linear_input") {
      return absl::InvalidArgumentError(absl::StrCat(
          "input_mode '", input_mode, "' cannot be combined with num_proj (", num_proj,
          "): use linear_input"));
    }
    if (input_mode == "skip_input" && input_size != cell_width) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input_mode 'skip_input' needs input_size == num_units, but input_size is ", input_size,
          " and num_units is ", cell_width));
    }
    return absl::OkStatus();
  }

  std::string mode_name;
  std::string activation, recurrent_activation;  // "" (cuDNN's) on ops without the attributes
};

// The model and run sizes of a forward or backprop call, validated (docs/cudnn_rnn.md §3,
// docs/validation.md §4.2). params is null for KerasRNN (ReadKerasWeights checks its weights).
absl::Status ResolveRun(const RnnAttrs& attrs, const Tensor& input, const Tensor& input_h,
                        const Tensor& input_c, const Tensor* params, const Tensor* seq_lengths,
                        RnnModel* m, RnnRun* run) {
  const bool lstm = attrs.mode == RnnMode::kLstm;
  TF_RETURN_IF_ERROR(CheckRank(input, "input", 3, "RNN input must be a 3-D vector."));
  TF_RETURN_IF_ERROR(CheckRank(input_h, "input_h", 3, "RNN input_h must be a 3-D vector."));
  if (lstm) TF_RETURN_IF_ERROR(CheckRank(input_c, "input_c", 3));
  if (params != nullptr) TF_RETURN_IF_ERROR(CheckRank(*params, "params", 1));
  const int time_axis = attrs.time_major ? 0 : 1, batch_axis = 1 - time_axis;
  run->time = input.dim_size(time_axis);
  run->batch = input.dim_size(batch_axis);
  run->time_major = attrs.time_major;
  run->seq_lengths = nullptr;

  const int64_t D = attrs.num_dirs, B = run->batch;
  const int64_t states = input_h.dim_size(time_axis), Hr = input_h.dim_size(2);
  const char* h_meaning = attrs.time_major ? "[num_layers * num_dirs, batch_size, num_units]"
                                           : "[batch_size, num_layers * num_dirs, num_units]";
  if (states < D || states % D != 0 || input_h.dim_size(batch_axis) != B) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Invalid input_h shape: input_h must have shape ", h_meaning,
        " with num_layers >= 1, num_dirs = ", D, " and batch_size = ", B, " (from input ",
        input.shape().DebugString(), ") but has shape ", input_h.shape().DebugString()));
  }
  m->mode = attrs.mode;
  TF_RETURN_IF_ERROR(attrs.SetActivations(m));
  m->gru_reset_before = !attrs.reset_after;
  m->num_layers = states / D;
  m->num_dirs = D;
  m->input_size = input.dim_size(2);
  m->num_units = Hr;
  // num_proj == num_units (input_c as wide as input_h) is no projection, as in TF.
  m->num_proj = lstm ? attrs.ProjectionFor(input_c.dim_size(2)) : 0;
  if (m->has_proj()) {
    m->num_units = input_c.dim_size(2);
    if (Hr != m->num_proj || m->num_proj >= m->num_units ||
        input_c.dim_size(0) != input_h.dim_size(0) || input_c.dim_size(1) != input_h.dim_size(1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Invalid input_h and input_c w/ projection size: with num_proj = ", m->num_proj,
          ", input_h must end in num_proj and input_c in num_units > num_proj, with equal "
          "leading dims; got input_h ", input_h.shape().DebugString(), " and input_c ",
          input_c.shape().DebugString()));
    }
  } else if (lstm && input_c.shape() != input_h.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_h and input_c must have the same shape w/o projection: input_c must have the "
        "shape of input_h ", input_h.shape().DebugString(),
        " (no projection) but has shape ", input_c.shape().DebugString()));
  }
  TF_RETURN_IF_ERROR(attrs.ResolveSkip(m->input_size, Hr, m->num_proj, &m->skip_input));

  const int64_t expected = CheckedParamsSize(*m);
  if (expected < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_h ", input_h.shape().DebugString(), " and input ", input.shape().DebugString(),
        " describe a model (num_layers ", m->num_layers, ", num_units ", m->num_units,
        ", input_size ", m->input_size, ") whose params size overflows int64"));
  }
  // As TF's GPU kernels: a longer buffer (a layer's params built for a wider input) is used
  // through its first `expected` elements; a shorter one is an error (TF reads past its end).
  if (params != nullptr && params->dim_size(0) < expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "params must have at least ", expected, " elements (CudnnRNNParamsSize of ",
        attrs.mode_name, ", ", m->num_layers, " layer(s), num_units ", m->num_units,
        ", input_size ", m->input_size, ", ", D, " direction(s)",
        m->has_proj() ? absl::StrCat(", num_proj ", m->num_proj) : "", ") but has shape ",
        params->shape().DebugString()));
  }
  int64_t unused;
  TF_RETURN_IF_ERROR(
      CheckedProduct({run->time, B, D, std::max(Hr, m->input_size)},
                     "the output size from input and input_h (max_time * batch_size * num_dirs * "
                     "width)", &unused));

  if (seq_lengths != nullptr) {
    TF_RETURN_IF_ERROR(CheckShape(*seq_lengths, "sequence_lengths", {{B, "batch_size"}}));
    const auto lengths = seq_lengths->flat<int32_t>();
    for (int64_t b = 0; b < B; ++b) {
      if (lengths(b) < 0 || lengths(b) > run->time) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence_lengths[", b, "] must be in [0, max_time = ", run->time, "] but is ",
            lengths(b)));
      }
    }
    run->seq_lengths = lengths.data();
  }
  if (RnnWorkspaceBytes(*m, *run, true, 8) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the activations of this run (input ", input.shape().DebugString(), ", num_layers ",
        m->num_layers, " and num_units ", m->num_units, " from input_h ",
        input_h.shape().DebugString(), ") overflow int64 bytes"));
  }
  return absl::OkStatus();
}

// The operand masks of a *V3Keras op (Keras' recurrent dropout, docs/keras_layers.md §5) into
// run: each [0] (none) or [gates, batch_size, width], and only for a model a Keras layer
// describes (RnnTakesMasks).
absl::Status ResolveMasks(const Tensor& input_masks, const Tensor& recurrent_masks,
                          const RnnModel& m, RnnRun* run) {
  const struct {
    const Tensor& mask;
    const char *name, *width_meaning;
    int64_t width;
    const void** slot;
  } masks[] = {
      {input_masks, "input_masks", "input_size", m.input_size, &run->input_masks},
      {recurrent_masks, "recurrent_masks", "num_units", m.output_width(), &run->recurrent_masks},
  };
  for (const auto& k : masks) {
    const Tensor& t = k.mask;
    if (t.dims() == 1 && t.dim_size(0) == 0) continue;  // none
    if (t.dims() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          k.name, " must be rank 3 ([gates, batch_size, ", k.width_meaning,
          "]) or the empty vector [0] (none) but is rank ", t.dims(), " (shape ",
          t.shape().DebugString(), ")"));
    }
    TF_RETURN_IF_ERROR(CheckShape(t, k.name,
                                  {{m.gates(), "gates"}, {run->batch, "batch_size"},
                                   {k.width, k.width_meaning}}));
    if (!RnnTakesMasks(m)) {
      return absl::InvalidArgumentError(absl::StrCat(
          k.name, " (shape ", t.shape().DebugString(),
          ") is for one-layer, unidirectional models with linear input and no projection "
          "(Keras' layers), not num_layers ", m.num_layers, ", ", m.num_dirs,
          " direction(s)", m.skip_input ? ", skip input" : "",
          m.has_proj() ? absl::StrCat(", num_proj ", m.num_proj) : ""));
    }
    *k.slot = t.tensor_data().data();
  }
  return absl::OkStatus();
}

// The zoneout weights of a *V3Keras op (docs/cudnn_rnn.md §4.9) into run, and m->zoneout:
// each [0] (not zoned), a scalar (one weight for all) or [T, B, H] in the input's layout; c's
// only for LSTM, and only for a model a Keras layer describes (RnnTakesMasks).
absl::Status ResolveZoneout(const Tensor& h_weights, const Tensor& c_weights, RnnModel* m,
                            RnnRun* run) {
  const struct {
    const Tensor& weights;
    const char* name;
    RnnZoneout* slot;
  } states[] = {{h_weights, "zoneout_h_weights", &run->zoneout_h},
                {c_weights, "zoneout_c_weights", &run->zoneout_c}};
  for (const auto& k : states) {
    const Tensor& t = k.weights;
    TF_RETURN_IF_ERROR(ResolveZoneoutWeights(t, k.name, run->time, run->batch, run->time_major,
                                             m->num_units, k.slot));
    if (!k.slot->active()) continue;
    if (k.slot == &run->zoneout_c && m->mode != RnnMode::kLstm) {
      return absl::InvalidArgumentError(absl::StrCat(
          k.name, " (shape ", t.shape().DebugString(),
          ") zones LSTM's cell state: it must be [0] for rnn_mode other than lstm"));
    }
    if (!RnnTakesMasks(*m)) {
      return absl::InvalidArgumentError(absl::StrCat(
          k.name, " (shape ", t.shape().DebugString(),
          ") is for one-layer, unidirectional models with linear input and no projection "
          "(Keras' layers), not num_layers ", m->num_layers, ", ", m->num_dirs,
          " direction(s)", m->skip_input ? ", skip input" : "",
          m->has_proj() ? absl::StrCat(", num_proj ", m->num_proj) : ""));
    }
  }
  m->zoneout = run->zoned();
  return absl::OkStatus();
}

// The op's own operand masks and zoneout weights (a *V3Keras op's, forward or Backprop) into
// run (and m).
absl::Status ResolveKerasInputs(OpKernelContext* ctx, RnnModel* m, RnnRun* run) {
  const Tensor *input_masks, *recurrent_masks, *zoneout_h, *zoneout_c;
  TF_RETURN_IF_ERROR(ctx->input("input_masks", &input_masks));
  TF_RETURN_IF_ERROR(ctx->input("recurrent_masks", &recurrent_masks));
  TF_RETURN_IF_ERROR(ctx->input("zoneout_h_weights", &zoneout_h));
  TF_RETURN_IF_ERROR(ctx->input("zoneout_c_weights", &zoneout_c));
  TF_RETURN_IF_ERROR(ResolveMasks(*input_masks, *recurrent_masks, *m, run));
  return ResolveZoneout(*zoneout_h, *zoneout_c, m, run);
}

// Whether a kernel's op is a *V3Keras op, KerasRNN or its Backprop (operand masks and zoneout
// weights among its inputs).
bool TakesOperandMasks(OpKernelConstruction* ctx) {
  const std::string& op = ctx->def().op();
  return absl::EndsWith(op, "V3Keras") || absl::StrContains(op, "KerasRNN");
}

// Keras' weights of a one-layer model (docs/cudnn_rnn.md §6.5): kernel [I, G*H],
// recurrent_kernel [H, G*H], bias [G*H] or [2, G*H], ranks first. I and H are the model's, or
// -1 to read them off kernel and recurrent_kernel; returns them and the bias rows.
absl::Status CheckKerasWeights(RnnMode mode, const Tensor& kernel, const Tensor& recurrent_kernel,
                               const Tensor& bias, int64_t* input_size, int64_t* num_units,
                               int* bias_rows) {
  TF_RETURN_IF_ERROR(CheckRank(kernel, "kernel", 2));
  TF_RETURN_IF_ERROR(CheckRank(recurrent_kernel, "recurrent_kernel", 2));
  if (bias.dims() != 1 && bias.dims() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bias must be rank 1 ([gates * num_units]) or 2 ([2, gates * num_units]) but has shape ",
        bias.shape().DebugString()));
  }
  if (*input_size < 0) *input_size = kernel.dim_size(0);
  if (*num_units < 0) *num_units = recurrent_kernel.dim_size(0);
  const int64_t I = *input_size, H = *num_units;
  int64_t width;  // G * H
  TF_RETURN_IF_ERROR(CheckedProduct({GatesOf(mode), H}, "gates * num_units", &width));
  TF_RETURN_IF_ERROR(CheckShape(recurrent_kernel, "recurrent_kernel",
                                {{H, "num_units"}, {width, "gates * num_units"}}));
  TF_RETURN_IF_ERROR(
      CheckShape(kernel, "kernel", {{I, "input_size"}, {width, "gates * num_units"}}));
  *bias_rows = bias.dims() == 1 ? 1 : 2;
  if (*bias_rows == 1) return CheckShape(bias, "bias", {{width, "gates * num_units"}});
  return CheckShape(bias, "bias", {{2, "2"}, {width, "gates * num_units"}});
}

// The sizes of KerasRNN's weights.
struct KerasWeightSizes {
  int64_t input_size, num_units;
  int bias_rows;
};

// KerasRNN's (or its Backprop's) weights, inputs 3-5, for the run: read in place by the CPU
// engine where it can (KerasWeightsInPlace: run->keras), else converted into `converted`
// (params of the one-layer model, *params).
template <typename Device, typename T>
absl::Status ReadKerasWeights(OpKernelContext* ctx, const RnnModel& m, RnnRun* run,
                              Tensor* converted, const T** params, KerasWeightSizes* sizes) {
  const Tensor &kernel = ctx->input(3), &recurrent_kernel = ctx->input(4), &bias = ctx->input(5);
  if (m.num_layers != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_h must have shape ",
        run->time_major ? "[1, batch_size, num_units]" : "[batch_size, 1, num_units]",
        " (KerasRNN runs one layer) but has shape ", ctx->input(1).shape().DebugString()));
  }
  int64_t I = m.input_size, H = m.num_units;
  int bias_rows;
  TF_RETURN_IF_ERROR(CheckKerasWeights(m.mode, kernel, recurrent_kernel, bias, &I, &H, &bias_rows));
  *sizes = {I, H, bias_rows};
  if (std::is_same_v<Device, CPUDevice> && KerasWeightsInPlace(m)) {
    run->keras = {kernel.tensor_data().data(), recurrent_kernel.tensor_data().data(),
                  bias.tensor_data().data(), bias_rows};
    *params = nullptr;
    return absl::OkStatus();
  }
  int64_t size;
  TF_RETURN_IF_ERROR(KerasParamsSize(m.mode, I, H, &size));
  TF_RETURN_IF_ERROR(
      ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value, TensorShape({size}), converted));
  *params = converted->flat<T>().data();
  return KerasParams<Device, T>().ToParams(ctx, m.mode, I, H, bias_rows, kernel.flat<T>().data(),
                                          recurrent_kernel.flat<T>().data(),
                                          bias.flat<T>().data(), converted->flat<T>().data());
}

TensorShape OutputShape(const RnnModel& m, const RnnRun& run) {
  const int64_t width = m.num_dirs * m.output_width();
  return run.time_major ? TensorShape({run.time, run.batch, width})
                        : TensorShape({run.batch, run.time, width});
}

// The reserve space must come from our training forward with exactly this configuration.
template <typename Device, typename T>
absl::Status CheckReserve(const Tensor& reserve, const RnnReserveHeader& expected) {
  if (ReserveCheck<Device, T>::Matches(reserve, expected)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "reserve_space ", reserve.shape().DebugString(),
      " was not produced by a training-mode (is_training=true) forward pass of this "
      "model with these inputs' shapes, sequence_lengths, dropout, operand masks, zoneout and "
      "dtype"));
}

// CudnnRNN (kVersion 1), CudnnRNNV2 (2), CudnnRNNV3 (3) and its *Keras ops; KerasRNN (3 with
// kKerasWeights: Keras' weights instead of params, docs/cudnn_rnn.md §6.6).
template <typename Device, typename T, int kVersion, bool kKerasWeights = false>
class CudnnRNNForwardOp : public OpKernel {
 public:
  explicit CudnnRNNForwardOp(OpKernelConstruction* ctx)
      : OpKernel(ctx), takes_masks_(TakesOperandMasks(ctx)) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
    // As TF's kernels (read once, when the kernel is built): the dropout RNG restarts from the
    // seeds on every call, so two calls with the same seeds draw the same masks.
    OP_REQUIRES_OK(ctx, tensorflow::ReadBoolFromEnvVar("TF_CUDNN_RESET_RND_GEN_STATE", false,
                                                       &reset_rng_state_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    const Tensor& input_h = ctx->input(1);
    const Tensor& input_c = ctx->input(2);
    // KerasRNN takes kernel, recurrent_kernel and bias where the others take params.
    const Tensor* params = kKerasWeights ? nullptr : &ctx->input(3);
    const Tensor* seq_lengths = kVersion == 3 ? &ctx->input(kKerasWeights ? 6 : 4) : nullptr;
    RnnModel m;
    RnnRun run;
    OP_REQUIRES_OK(ctx, ResolveRun(attrs_, input, input_h, input_c, params, seq_lengths, &m, &run));
    if (takes_masks_) OP_REQUIRES_OK(ctx, ResolveKerasInputs(ctx, &m, &run));
    const T* params_data = params ? params->flat<T>().data() : nullptr;
    Tensor converted;
    KerasWeightSizes sizes;
    if constexpr (kKerasWeights) {
      OP_REQUIRES_OK(ctx,
                     ReadKerasWeights<Device, T>(ctx, m, &run, &converted, &params_data, &sizes));
    }
    const bool lstm = m.mode == RnnMode::kLstm;
    // Inference on the CPU: a workspace of the states only, no saved gates written.
    run.keeps_gates = attrs_.is_training || !std::is_same_v<Device, CPUDevice>;

    Tensor *output, *output_h, *output_c, *reserve;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, OutputShape(m, run), &output));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, input_h.shape(), &output_h));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, lstm ? input_c.shape() : TensorShape({}),
                                             &output_c));
    if (!lstm) {  // TF leaves it uninitialised
      OP_REQUIRES_OK(ctx, DeviceMemory<Device>::template SetZero<T>(ctx, output_c));
    }

    using Acc = AccFor<T>;
    const RnnDropout dropout{attrs_.is_training ? attrs_.dropout : 0.0f, attrs_.seed,
                             reset_rng_state_ ? 0 : call_.fetch_add(1)};
    const int64_t bytes = RnnWorkspaceBytes(m, run, dropout.active(m), sizeof(Acc));
    Tensor scratch;
    uint8_t* workspace;
    if (attrs_.is_training) {  // the reserve space: what our Backprop needs
      OP_REQUIRES_OK(ctx, ctx->allocate_output(
                              3, TensorShape({ReserveElements(bytes, sizeof(T))}), &reserve));
      workspace = reinterpret_cast<uint8_t*>(reserve->flat<T>().data());
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({}), &reserve));
      OP_REQUIRES_OK(ctx, DeviceMemory<Device>::template SetZero<T>(ctx, reserve));
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DT_UINT8, TensorShape({bytes}), &scratch));
      workspace = scratch.flat<uint8_t>().data();
    }

    if (kVersion >= 2) {  // {algo id, tensor-op flag} for V2 training; a scalar otherwise
      Tensor* host_reserved;  // host memory on every device
      const bool pair = kVersion == 2 && attrs_.is_training;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(4, pair ? TensorShape({2}) : TensorShape({}),
                                               &host_reserved));
      host_reserved->flat<int8_t>().setZero();
    }
    OP_REQUIRES_OK(ctx, CudnnRnnForward<Device, T>()(
                            ctx, m, run, dropout, input.flat<T>().data(),
                            input_h.flat<T>().data(), lstm ? input_c.flat<T>().data() : nullptr,
                            params_data, output->flat<T>().data(),
                            output_h->flat<T>().data(), lstm ? output_c->flat<T>().data() : nullptr,
                            workspace));
  }

 private:
  RnnAttrs attrs_;
  const bool takes_masks_;
  std::atomic<uint64_t> call_{0};  // dropout masks differ call to call, like cuDNN's RNG state
  bool reset_rng_state_ = false;   // TF_CUDNN_RESET_RND_GEN_STATE: call_ stays 0
};

// CudnnRNNBackprop (kVersion 1), V2 (2), V3 (3) and its *Keras op; KerasRNNBackprop (3 with
// kKerasWeights: Keras' weights and their gradients instead of params', docs/cudnn_rnn.md §6.6).
template <typename Device, typename T, int kVersion, bool kKerasWeights = false>
class CudnnRNNBackpropOp : public OpKernel {
 public:
  explicit CudnnRNNBackpropOp(OpKernelConstruction* ctx)
      : OpKernel(ctx), takes_masks_(TakesOperandMasks(ctx)) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor* in[13];
    const char* names[] = {"input",           "input_h",           "input_c",
                           kKerasWeights ? "kernel" : "params",
                           "output",          "output_h",          "output_c",
                           "output_backprop", "output_h_backprop", "output_c_backprop",
                           "reserve_space"};
    for (int k = 0; k < 11; ++k) OP_REQUIRES_OK(ctx, ctx->input(names[k], &in[k]));
    const Tensor* seq_lengths = nullptr;
    if (kVersion == 3) OP_REQUIRES_OK(ctx, ctx->input("sequence_lengths", &seq_lengths));
    RnnModel m;
    RnnRun run;
    OP_REQUIRES_OK(ctx, ResolveRun(attrs_, *in[0], *in[1], *in[2], kKerasWeights ? nullptr : in[3],
                                   seq_lengths, &m, &run));
    if (takes_masks_) OP_REQUIRES_OK(ctx, ResolveKerasInputs(ctx, &m, &run));
    const bool lstm = m.mode == RnnMode::kLstm;
    auto data = [](const Tensor* t) { return t->flat<T>().data(); };
    const T* params_data = kKerasWeights ? nullptr : data(in[3]);
    Tensor converted;
    KerasWeightSizes sizes;
    if constexpr (kKerasWeights) {
      OP_REQUIRES_OK(ctx,
                     ReadKerasWeights<Device, T>(ctx, m, &run, &converted, &params_data, &sizes));
    }

    // The forward results and their gradients must have the forward's shapes.
    const TensorShape output_shape = OutputShape(m, run);
    for (int k : {4, 7}) {
      OP_REQUIRES_OK(ctx, CheckGradShape(*in[k], names[k], output_shape,
                                         "the forward output's shape"));
    }
    for (int k : {5, 8}) {
      OP_REQUIRES_OK(ctx, CheckGradShape(*in[k], names[k], in[1]->shape(), "the shape of input_h"));
    }
    if (lstm) {
      for (int k : {6, 9}) {
        OP_REQUIRES_OK(ctx,
                       CheckGradShape(*in[k], names[k], in[2]->shape(), "the shape of input_c"));
      }
    }
    // host_reserved must be what our training forward wrote: {algo, tensor-op flag} for V2 (TF's
    // V2 kernel reads both), a scalar for V3.
    if (kVersion >= 2) {
      const Tensor* host_reserved;
      OP_REQUIRES_OK(ctx, ctx->input("host_reserved", &host_reserved));
      const TensorShape expected_shape = kVersion == 2 ? TensorShape({2}) : TensorShape({});
      OP_REQUIRES(ctx, host_reserved->shape() == expected_shape,
                  absl::InvalidArgumentError(absl::StrCat(
                      "host_reserved must have shape ", expected_shape.DebugString(),
                      " (as the training forward writes it) but has shape ",
                      host_reserved->shape().DebugString())));
    }
    // The reserve space must come from our forward with this exact configuration.
    const Tensor& reserve = *in[10];
    const RnnDropout dropout{attrs_.dropout, attrs_.seed, 0};
    const RnnReserveHeader expected =
        MakeReserveHeader(m, run, dropout, sizeof(T), sizeof(AccFor<T>));
    OP_REQUIRES_OK(ctx, (CheckReserve<Device, T>(reserve, expected)));

    Tensor *input_backprop, *input_h_backprop, *input_c_backprop, *params_backprop = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, in[0]->shape(), &input_backprop));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, in[1]->shape(), &input_h_backprop));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, lstm ? in[2]->shape() : TensorShape({}),
                                             &input_c_backprop));
    if (!lstm) {
      OP_REQUIRES_OK(ctx, DeviceMemory<Device>::template SetZero<T>(ctx, input_c_backprop));
    }
    Tensor params_grad;  // KerasRNNBackprop on converted weights: params' gradient, converted back
    Tensor* weight_grads[3] = {nullptr, nullptr, nullptr};  // KerasRNNBackprop's
    if constexpr (kKerasWeights) {
      for (int k = 0; k < 3; ++k) {
        OP_REQUIRES_OK(ctx, ctx->allocate_output(3 + k, ctx->input(3 + k).shape(),
                                                 &weight_grads[k]));
      }
      if (run.keras.given()) {
        run.keras.kernel_backprop = weight_grads[0]->flat<T>().data();
        run.keras.recurrent_kernel_backprop = weight_grads[1]->flat<T>().data();
        run.keras.bias_backprop = weight_grads[2]->flat<T>().data();
      } else {
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value,
                                               converted.shape(), &params_grad));
        params_backprop = &params_grad;
      }
    } else {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3, in[3]->shape(), &params_backprop));
      if (in[3]->NumElements() > CheckedParamsSize(m)) {  // the unused tail's gradient is 0, as
        OP_REQUIRES_OK(ctx, DeviceMemory<Device>::template SetZero<T>(ctx, params_backprop));
      }
    }
    OP_REQUIRES_OK(
        ctx, CudnnRnnBackward<Device, T>()(
                 ctx, m, run, expected, data(in[0]), data(in[1]), lstm ? data(in[2]) : nullptr,
                 params_data, data(in[7]), data(in[8]), lstm ? data(in[9]) : nullptr,
                 reinterpret_cast<const uint8_t*>(reserve.flat<T>().data()),
                 input_backprop->flat<T>().data(), input_h_backprop->flat<T>().data(),
                 lstm ? input_c_backprop->flat<T>().data() : nullptr,
                 params_backprop ? params_backprop->flat<T>().data() : nullptr));
    if (kKerasWeights && !run.keras.given()) {
      OP_REQUIRES_OK(ctx, KerasParams<Device, T>().ToKeras(
                              ctx, m.mode, sizes.input_size, sizes.num_units, sizes.bias_rows,
                              params_grad.flat<T>().data(), weight_grads[0]->flat<T>().data(),
                              weight_grads[1]->flat<T>().data(),
                              weight_grads[2]->flat<T>().data()));
    }
  }

 private:
  RnnAttrs attrs_;
  const bool takes_masks_;
};

// CudnnRNNDropoutKept (CPU): the dropout masks a training forward drew, read from its reserve
// space (docs/cudnn_rnn.md §5.3): kept[l - 1, t, b, k] for the input of layer l >= 1; every
// element is kept when the forward drew no masks (dropout 0 or one layer).
template <typename T>
class CudnnRNNDropoutKeptOp : public OpKernel {
 public:
  explicit CudnnRNNDropoutKeptOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& reserve = ctx->input(5);
    RnnModel m;
    RnnRun run;
    OP_REQUIRES_OK(ctx, ResolveRun(attrs_, ctx->input(0), ctx->input(1), ctx->input(2),
                                   &ctx->input(3), &ctx->input(4), &m, &run));
    using Acc = AccFor<T>;
    const RnnDropout dropout{attrs_.dropout, attrs_.seed, 0};
    const RnnReserveHeader expected = MakeReserveHeader(m, run, dropout, sizeof(T), sizeof(Acc));
    OP_REQUIRES_OK(ctx, (CheckReserve<CPUDevice, T>(reserve, expected)));

    const int64_t layer_input_size = run.time * run.batch * m.num_dirs * m.output_width();
    Tensor* kept;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({m.num_layers - 1, run.time, run.batch,
                                            m.num_dirs * m.output_width()}),
                            &kept));
    bool* out = kept->flat<bool>().data();
    // No dropout, or nothing to report (zero-width layers: no loop over num_layers then).
    if (expected.dropout == 0 || kept->NumElements() == 0) {
      std::fill(out, out + kept->NumElements(), true);
      return;
    }
    const WorkspaceLayout layout(m, run, true);
    const Acc* ws = reinterpret_cast<const Acc*>(
        reinterpret_cast<const uint8_t*>(reserve.flat<T>().data()) + sizeof(RnnReserveHeader));
    for (int64_t l = 1; l < m.num_layers; ++l) {
      const Acc* mask = ws + layout.mask(l);  // 0 or the keep scale (0 too when dropout is 1)
      bool* layer_kept = out + (l - 1) * layer_input_size;
      for (int64_t k = 0; k < layer_input_size; ++k) layer_kept[k] = mask[k] != Acc(0);
    }
  }

 private:
  RnnAttrs attrs_;
};

// The model the params ops describe, from their three int32 scalars and the attrs.
absl::Status ModelFromScalars(OpKernelContext* ctx, const RnnAttrs& attrs, RnnModel* m) {
  const char* names[] = {"num_layers", "num_units", "input_size"};
  int64_t values[3];
  for (int k = 0; k < 3; ++k) {
    const Tensor& t = ctx->input(k);
    if (t.dims() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(names[k], " is not a scalar: ", names[k],
                                                     " must be a scalar but has shape ",
                                                     t.shape().DebugString()));
    }
    values[k] = t.scalar<int32_t>()();
    if (values[k] < (k == 2 ? 0 : 1)) {
      return absl::InvalidArgumentError(absl::StrCat(names[k], " must be >= ", k == 2 ? 0 : 1,
                                                     " but is ", values[k]));
    }
  }
  *m = RnnModel{attrs.mode, values[0], values[1], values[2], attrs.ProjectionFor(values[1]),
                attrs.num_dirs, false};
  if (attrs.num_proj > 0 && attrs.num_proj > m->num_units) {
    return absl::InvalidArgumentError(absl::StrCat("num_proj (", attrs.num_proj,
                                                   ") must not exceed num_units (",
                                                   m->num_units, ")"));
  }
  TF_RETURN_IF_ERROR(attrs.ResolveSkip(m->input_size, m->num_units, m->num_proj,
                                       &m->skip_input));
  if (CheckedParamsSize(*m) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_layers (", values[0], "), num_units (", values[1], ") and input_size (", values[2],
        ") give a params size that overflows int64"));
  }
  return absl::OkStatus();
}

template <typename T, typename S>
class CudnnRNNParamsSizeOp : public OpKernel {
 public:
  explicit CudnnRNNParamsSizeOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
  }
  void Compute(OpKernelContext* ctx) override {
    RnnModel m;
    OP_REQUIRES_OK(ctx, ModelFromScalars(ctx, attrs_, &m));
    const int64_t size = CheckedParamsSize(m);
    OP_REQUIRES(ctx, size <= std::numeric_limits<S>::max(),
                absl::InvalidArgumentError(absl::StrCat(
                    "params_size ", size, " does not fit the output type; use S=int64")));
    Tensor* out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({1}), &out));
    out->flat<S>()(0) = static_cast<S>(size);
  }

 private:
  RnnAttrs attrs_;
};

// One canonical tensor (docs/cudnn_rnn.md §6.1): which output/input list entry it is, where it
// lives in params, and its shape ([rows, cols] for weights, [rows] for biases).
struct CanonicalRegion {
  bool is_weight;
  int index;  // in the weights or the biases list
  int64_t offset;
  TensorShape shape;
};

// The canonical weights, then the biases, of a model, in canonical order.
std::vector<CanonicalRegion> CanonicalRegions(const RnnModel& m) {
  std::vector<CanonicalRegion> weights, biases;
  const int64_t H = m.num_units, Hr = m.output_width();
  auto weight = [&](int64_t offset, int64_t rows, int64_t cols) {
    weights.push_back({true, static_cast<int>(weights.size()), offset, TensorShape({rows, cols})});
  };
  auto bias = [&](int64_t offset) {
    biases.push_back({false, static_cast<int>(biases.size()), offset, TensorShape({H})});
  };
  for (int64_t p = 0; p < m.num_pseudo_layers(); ++p) {
    const PseudoLayerRegions reg = RegionsOf(m, p);
    const int64_t cols = m.w_cols(p / m.num_dirs);
    for (int g = 0; g < m.gates(); ++g) weight(reg.w + g * H * cols, H, cols);
    for (int g = 0; g < m.gates(); ++g) weight(reg.r + g * H * Hr, H, Hr);
    if (m.has_proj()) weight(reg.proj, m.num_proj, H);
    for (int g = 0; g < m.gates(); ++g) bias(reg.bias_w + g * H);
    for (int g = 0; g < m.gates(); ++g) bias(reg.bias_r + g * H);
  }
  weights.insert(weights.end(), biases.begin(), biases.end());
  return weights;
}

// ParamsToCanonical(V2) and CanonicalToParams(V2): the model from the scalars and attrs, and its
// canonical regions, whose counts must be what the op's attrs promise (V1: num_params for both).
class CanonicalParamsOpBase : public OpKernel {
 public:
  CanonicalParamsOpBase(OpKernelConstruction* ctx, bool v2) : OpKernel(ctx), v2_(v2) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
    if (v2) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("num_params_weights", &num_weights_));
      OP_REQUIRES_OK(ctx, ctx->GetAttr("num_params_biases", &num_biases_));
    } else {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("num_params", &num_weights_));
      num_biases_ = num_weights_;
    }
  }

 protected:
  absl::Status Regions(OpKernelContext* ctx, RnnModel* m,
                       std::vector<CanonicalRegion>* regions) const {
    TF_RETURN_IF_ERROR(ModelFromScalars(ctx, attrs_, m));
    // The counts first, in closed form: the regions are built only for a model whose tensors
    // the op's lists hold (so their number is bounded by the op's own inputs or outputs).
    const int64_t per_pseudo_layer = 2 * int64_t{m->gates()};
    const int64_t weights = m->num_pseudo_layers() * (per_pseudo_layer + (m->has_proj() ? 1 : 0));
    const int64_t biases = m->num_pseudo_layers() * per_pseudo_layer;
    if (weights == num_weights_ && biases == num_biases_) {
      *regions = CanonicalRegions(*m);
      return absl::OkStatus();
    }
    const std::string model = absl::StrCat(
        " for this model (", m->num_layers, " layer(s), ", m->num_dirs, " direction(s), ",
        m->gates(), " gate(s)", m->has_proj() ? ", projection" : "", ")");
    if (!v2_) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_params (", num_weights_, ") must be ", weights, model));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "num_params_weights (", num_weights_, ") must be ", weights, " and num_params_biases (",
        num_biases_, ") must be ", biases, model));
  }

 private:
  const bool v2_;
  RnnAttrs attrs_;
  int num_weights_, num_biases_;
};

template <typename Device, typename T, bool kV2>
class CudnnRNNParamsToCanonicalOp : public CanonicalParamsOpBase {
 public:
  explicit CudnnRNNParamsToCanonicalOp(OpKernelConstruction* ctx)
      : CanonicalParamsOpBase(ctx, kV2) {}

  void Compute(OpKernelContext* ctx) override {
    RnnModel m;
    std::vector<CanonicalRegion> regions;
    OP_REQUIRES_OK(ctx, Regions(ctx, &m, &regions));
    const Tensor& params = ctx->input(3);
    const int64_t size = CheckedParamsSize(m);
    // A longer buffer is read through its first `size` elements, as by TF and the RNN ops.
    OP_REQUIRES(ctx, params.dims() == 1 && params.dim_size(0) >= size,
                absl::InvalidArgumentError(absl::StrCat(
                    "params must be rank 1 with at least ", size,
                    " elements (CudnnRNNParamsSize) but has shape ",
                    params.shape().DebugString())));
    OpOutputList weights, biases;
    OP_REQUIRES_OK(ctx, ctx->output_list("weights", &weights));
    OP_REQUIRES_OK(ctx, ctx->output_list("biases", &biases));
    for (const CanonicalRegion& r : regions) {
      Tensor* t;
      OP_REQUIRES_OK(ctx, (r.is_weight ? weights : biases).allocate(r.index, r.shape, &t));
      OP_REQUIRES_OK(ctx, DeviceMemory<Device>::Copy(ctx, t->flat<T>().data(),
                                                     params.flat<T>().data() + r.offset,
                                                     t->NumElements() * sizeof(T)));
    }
  }
};

template <typename Device, typename T, bool kV2>
class CudnnRNNCanonicalToParamsOp : public CanonicalParamsOpBase {
 public:
  explicit CudnnRNNCanonicalToParamsOp(OpKernelConstruction* ctx)
      : CanonicalParamsOpBase(ctx, kV2) {}

  void Compute(OpKernelContext* ctx) override {
    RnnModel m;
    std::vector<CanonicalRegion> regions;
    OP_REQUIRES_OK(ctx, Regions(ctx, &m, &regions));
    OpInputList weights, biases;
    OP_REQUIRES_OK(ctx, ctx->input_list("weights", &weights));
    OP_REQUIRES_OK(ctx, ctx->input_list("biases", &biases));
    // Element counts, not shapes, as TF: its format converters pass every tensor flattened.
    // All are checked before the output is allocated.
    for (const CanonicalRegion& r : regions) {
      const Tensor& t = (r.is_weight ? weights : biases)[r.index];
      OP_REQUIRES(ctx, t.NumElements() == r.shape.num_elements(),
                  absl::InvalidArgumentError(absl::StrCat(
                      "Params size mismatch. Expected ", r.shape.num_elements(), ", got ",
                      t.NumElements(), ": ", r.is_weight ? "weights[" : "biases[", r.index,
                      "] must have ", r.shape.num_elements(), " elements (canonical shape ",
                      r.shape.DebugString(), ", or any shape of that size) but has shape ",
                      t.shape().DebugString())));
    }
    Tensor* params;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({CheckedParamsSize(m)}), &params));
    for (const CanonicalRegion& r : regions) {
      const Tensor& t = (r.is_weight ? weights : biases)[r.index];
      OP_REQUIRES_OK(ctx, DeviceMemory<Device>::Copy(ctx, params->flat<T>().data() + r.offset,
                                                     t.flat<T>().data(),
                                                     t.NumElements() * sizeof(T)));
    }
  }
};

// KerasToCudnnParams and CudnnParamsToKeras (docs/cudnn_rnn.md §6.5): the Keras layers' weights
// and the params buffer of the one-layer, one-direction model they describe; each op is the
// other's gradient. bias has one row (b_R; b_W = 0) or two (b_W, b_R).
absl::Status ReadRnnMode(OpKernelConstruction* ctx, RnnMode* mode) {
  std::string name;
  TF_RETURN_IF_ERROR(ctx->GetAttr("rnn_mode", &name));
  *mode = RnnModeNamed(name);
  return absl::OkStatus();
}

template <typename Device, typename T>
class KerasToCudnnParamsOp : public OpKernel {
 public:
  explicit KerasToCudnnParamsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadRnnMode(ctx, &mode_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& kernel = ctx->input(0);
    const Tensor& recurrent_kernel = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    int64_t I = -1, H = -1;  // from kernel and recurrent_kernel
    int bias_rows;
    OP_REQUIRES_OK(ctx,
                   CheckKerasWeights(mode_, kernel, recurrent_kernel, bias, &I, &H, &bias_rows));
    // Fits whenever the tensors exist; checked like every size (and like the way back).
    int64_t size;
    OP_REQUIRES_OK(ctx, KerasParamsSize(mode_, I, H, &size));
    Tensor* params;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({size}), &params));
    OP_REQUIRES_OK(ctx, KerasParams<Device, T>().ToParams(
                            ctx, mode_, I, H, bias_rows, kernel.flat<T>().data(),
                            recurrent_kernel.flat<T>().data(), bias.flat<T>().data(),
                            params->flat<T>().data()));
  }

 private:
  RnnMode mode_;
};

template <typename Device, typename T>
class CudnnParamsToKerasOp : public OpKernel {
 public:
  explicit CudnnParamsToKerasOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadRnnMode(ctx, &mode_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("input_size", &input_size_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_units", &num_units_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bias_rows", &bias_rows_));
    OP_REQUIRES(ctx, bias_rows_ == 1 || bias_rows_ == 2,
                absl::InvalidArgumentError(
                    absl::StrCat("bias_rows must be 1 or 2 but is ", bias_rows_)));
    OP_REQUIRES_OK(ctx, KerasParamsSize(mode_, input_size_, num_units_, &params_size_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& params = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckShape(params, "params", {{params_size_, "params size"}}));
    const int64_t width = GatesOf(mode_) * num_units_;  // fits: params_size_ did
    Tensor *kernel, *recurrent_kernel, *bias;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({input_size_, width}), &kernel));
    OP_REQUIRES_OK(ctx,
                   ctx->allocate_output(1, TensorShape({num_units_, width}), &recurrent_kernel));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, bias_rows_ == 1 ? TensorShape({width})
                                                                : TensorShape({2, width}),
                                             &bias));
    OP_REQUIRES_OK(ctx, KerasParams<Device, T>().ToKeras(
                            ctx, mode_, input_size_, num_units_, bias_rows_,
                            params.flat<T>().data(), kernel->flat<T>().data(),
                            recurrent_kernel->flat<T>().data(), bias->flat<T>().data()));
  }

 private:
  RnnMode mode_;
  int64_t input_size_, num_units_, params_size_;
  int bias_rows_;
};

}  // namespace

// One registration per device. HOST(arg) marks what the GPU kernels keep in host memory, as TF's
// own GPU kernels do: the params ops' three scalars and params_size, sequence_lengths (read on the
// host to size and check the run) and host_reserved.
#define TF_LSTM_REGISTER_RNN(PREFIX, DEVICE, DEVICE_TYPE, HOST, T)                             \
  REGISTER_KERNEL_BUILDER(                                                                     \
      Name(PREFIX "CudnnRNN").Device(DEVICE_TYPE).TypeConstraint<T>("T"),                      \
      CudnnRNNForwardOp<DEVICE, T, 1>);                                                        \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNV2")                                            \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("host_reserved"),                   \
                          CudnnRNNForwardOp<DEVICE, T, 2>);                                    \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNV3")                                            \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths")                 \
                                  HOST("host_reserved"),                                       \
                          CudnnRNNForwardOp<DEVICE, T, 3>);                                    \
  REGISTER_KERNEL_BUILDER(                                                                     \
      Name(PREFIX "CudnnRNNBackprop").Device(DEVICE_TYPE).TypeConstraint<T>("T"),              \
      CudnnRNNBackpropOp<DEVICE, T, 1>);                                                       \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNBackpropV2")                                    \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("host_reserved"),                   \
                          CudnnRNNBackpropOp<DEVICE, T, 2>);                                   \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNBackpropV3")                                    \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths")                 \
                                  HOST("host_reserved"),                                       \
                          CudnnRNNBackpropOp<DEVICE, T, 3>);                                   \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNParamsSize")                                    \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T")                                          \
                              .TypeConstraint<int32_t>("S") HOST("num_layers")                 \
                                  HOST("num_units") HOST("input_size") HOST("params_size"),    \
                          CudnnRNNParamsSizeOp<T, int32_t>);                                   \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNParamsSize")                                    \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T")                                          \
                              .TypeConstraint<int64_t>("S") HOST("num_layers")                 \
                                  HOST("num_units") HOST("input_size") HOST("params_size"),    \
                          CudnnRNNParamsSizeOp<T, int64_t>);                                   \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNParamsToCanonical")                             \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("num_layers") HOST("num_units")     \
                                  HOST("input_size"),                                          \
                          CudnnRNNParamsToCanonicalOp<DEVICE, T, false>);                      \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNParamsToCanonicalV2")                           \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("num_layers") HOST("num_units")     \
                                  HOST("input_size"),                                          \
                          CudnnRNNParamsToCanonicalOp<DEVICE, T, true>);                       \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNCanonicalToParams")                             \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("num_layers") HOST("num_units")     \
                                  HOST("input_size"),                                          \
                          CudnnRNNCanonicalToParamsOp<DEVICE, T, false>);                      \
  REGISTER_KERNEL_BUILDER(Name(PREFIX "CudnnRNNCanonicalToParamsV2")                           \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("num_layers") HOST("num_units")     \
                                  HOST("input_size"),                                          \
                          CudnnRNNCanonicalToParamsOp<DEVICE, T, true>);

// The Keras weight conversions: ours alone (no TF namesake), on every device.
#define TF_LSTM_REGISTER_KERAS_PARAMS(DEVICE, DEVICE_TYPE, T)                                   \
  REGISTER_KERNEL_BUILDER(                                                                     \
      Name("TfLstm>KerasToCudnnParams").Device(DEVICE_TYPE).TypeConstraint<T>("T"),            \
      KerasToCudnnParamsOp<DEVICE, T>);                                                        \
  REGISTER_KERNEL_BUILDER(                                                                     \
      Name("TfLstm>CudnnParamsToKeras").Device(DEVICE_TYPE).TypeConstraint<T>("T"),            \
      CudnnParamsToKerasOp<DEVICE, T>);

// CudnnRNNV3 with Keras' cell options, and KerasRNN: ours alone, on every device; V3's kernels
// (the attrs and the operand masks are read where present).
#define TF_LSTM_REGISTER_RNN_KERAS(DEVICE, DEVICE_TYPE, HOST, T)                                 \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>CudnnRNNV3Keras")                                        \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths")                 \
                                  HOST("host_reserved"),                                       \
                          CudnnRNNForwardOp<DEVICE, T, 3>);                                    \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>CudnnRNNBackpropV3Keras")                                \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths")                 \
                                  HOST("host_reserved"),                                       \
                          CudnnRNNBackpropOp<DEVICE, T, 3>);                                   \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>KerasRNN")                                               \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths")                 \
                                  HOST("host_reserved"),                                       \
                          CudnnRNNForwardOp<DEVICE, T, 3, true>);                              \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>KerasRNNBackprop")                                       \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths")                 \
                                  HOST("host_reserved"),                                       \
                          CudnnRNNBackpropOp<DEVICE, T, 3, true>);

#define TF_LSTM_CPU_MEMORY(arg)
#define TF_LSTM_HOST_MEMORY(arg) .HostMemory(arg)

// CPU: our namespaced ops and TF's own op names.
#define TF_LSTM_REGISTER_RNN_CPU(T)                                                     \
  TF_LSTM_REGISTER_RNN("TfLstm>", CPUDevice, tensorflow::DEVICE_CPU, TF_LSTM_CPU_MEMORY, T) \
  TF_LSTM_REGISTER_RNN("", CPUDevice, tensorflow::DEVICE_CPU, TF_LSTM_CPU_MEMORY, T)       \
  TF_LSTM_REGISTER_KERAS_PARAMS(CPUDevice, tensorflow::DEVICE_CPU, T)                       \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>CudnnRNNDropoutKept").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      CudnnRNNDropoutKeptOp<T>);                                                            \
  TF_LSTM_REGISTER_RNN_KERAS(CPUDevice, tensorflow::DEVICE_CPU, TF_LSTM_CPU_MEMORY, T)

TF_CALL_half(TF_LSTM_REGISTER_RNN_CPU);
TF_CALL_bfloat16(TF_LSTM_REGISTER_RNN_CPU);
TF_CALL_float(TF_LSTM_REGISTER_RNN_CPU);
TF_CALL_double(TF_LSTM_REGISTER_RNN_CPU);
#undef TF_LSTM_REGISTER_RNN_CPU

#ifdef TF_LSTM_OPS_WITH_CUDA
// GPU: our namespaced ops only. TF's own names keep TF-GPU's cuDNN kernels (registering ours for
// them would clash with those on a GPU build of TF).
#define TF_LSTM_REGISTER_RNN_GPU(T)                                                        \
  TF_LSTM_REGISTER_RNN("TfLstm>", GpuDevice, tensorflow::DEVICE_GPU, TF_LSTM_HOST_MEMORY, T) \
  TF_LSTM_REGISTER_KERAS_PARAMS(GpuDevice, tensorflow::DEVICE_GPU, T)                         \
  TF_LSTM_REGISTER_RNN_KERAS(GpuDevice, tensorflow::DEVICE_GPU, TF_LSTM_HOST_MEMORY, T)

TF_CALL_half(TF_LSTM_REGISTER_RNN_GPU);
TF_CALL_bfloat16(TF_LSTM_REGISTER_RNN_GPU);
TF_CALL_float(TF_LSTM_REGISTER_RNN_GPU);
TF_CALL_double(TF_LSTM_REGISTER_RNN_GPU);
#undef TF_LSTM_REGISTER_RNN_GPU
#endif  // TF_LSTM_OPS_WITH_CUDA

#undef TF_LSTM_HOST_MEMORY
#undef TF_LSTM_CPU_MEMORY
#undef TF_LSTM_REGISTER_RNN
#undef TF_LSTM_REGISTER_KERAS_PARAMS
#undef TF_LSTM_REGISTER_RNN_KERAS

}  // namespace tf_lstm_ops
