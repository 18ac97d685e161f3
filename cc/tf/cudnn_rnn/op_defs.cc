// Op definitions of the CudnnRNN family under our namespace, with TF's exact inputs, outputs and
// attrs (order included, so the generated Python signatures equal tf.raw_ops'). The same
// kernels are also registered for TF's own op names on CPU (kernels.cc beside this file).
#include <string>

#include "absl/strings/str_cat.h"
#include "cc/core/cudnn_rnn_layout.h"
#include "cc/tf/cudnn_rnn/validation.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_lstm_ops {
namespace {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr char kTypes[] = "T: {bfloat16, half, float, double}";
constexpr char kMode[] = "rnn_mode: {'rnn_relu', 'rnn_tanh', 'lstm', 'gru'} = 'lstm'";
constexpr char kInputMode[] =
    "input_mode: {'linear_input', 'skip_input', 'auto_select'} = 'linear_input'";
constexpr char kDirection[] = "direction: { 'unidirectional', 'bidirectional' } = 'unidirectional'";

bool IsLstm(InferenceContext* c) {
  std::string mode;
  return c->GetAttr("rnn_mode", &mode).ok() && mode == "lstm";
}

int NumDirs(InferenceContext* c) {
  std::string direction;
  return c->GetAttr("direction", &direction).ok() && direction == "bidirectional" ? 2 : 1;
}

// output = [input.d0, input.d1, D * input_h.d2]; output_h like input_h; output_c like input_c
// (V3) or input_h (V1/V2) for LSTM, a scalar otherwise; reserve space and host_reserved unknown.
// keras_weights: KerasRNN's kernel, recurrent_kernel and bias (V3's inputs otherwise).
absl::Status ForwardShape(InferenceContext* c, bool v3, bool keras_weights = false) {
  ShapeHandle input, input_h, input_c, unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &input));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &input_h));
  if (keras_weights) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &unused));  // kernel
    TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 2, &unused));  // recurrent_kernel
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(5), 1, &unused));  // bias
    TF_RETURN_IF_ERROR(c->WithRankAtMost(c->input(5), 2, &unused));
  } else {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &unused));  // params
  }
  const bool lstm = IsLstm(c);
  input_c = input_h;
  if (v3) {
    TF_RETURN_IF_ERROR(c->WithRank(c->input(keras_weights ? 6 : 4), 1, &unused));  // lengths
    if (lstm) TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &input_c));
  }
  DimensionHandle width;
  TF_RETURN_IF_ERROR(c->Multiply(c->Dim(input_h, 2), NumDirs(c), &width));
  c->set_output(0, c->MakeShape({c->Dim(input, 0), c->Dim(input, 1), width}));
  c->set_output(1, input_h);
  c->set_output(2, lstm ? input_c : c->Scalar());
  c->set_output(3, c->UnknownShape());
  if (c->num_outputs() > 4) c->set_output(4, c->UnknownShape());
  return absl::OkStatus();
}

// The gradients are shaped like input, input_h, input_c and params.
absl::Status BackpropShape(InferenceContext* c) {
  for (int k = 0; k < 4; ++k) c->set_output(k, c->input(k));
  return absl::OkStatus();
}

absl::Status ScalarInputs(InferenceContext* c) {
  ShapeHandle unused;
  for (int k = 0; k < 3; ++k) TF_RETURN_IF_ERROR(c->WithRank(c->input(k), 0, &unused));
  return absl::OkStatus();
}

}  // namespace

#define TF_LSTM_RNN_COMMON_ATTRS \
  .Attr(kMode).Attr(kInputMode).Attr(kDirection).Attr("dropout: float = 0.0").Attr( \
      "seed: int = 0").Attr("seed2: int = 0")

// V3's inputs and outputs (and those of its Backprop), shared by the *Keras ops.
#define TF_LSTM_RNN_V3_FORWARD_IO \
  .Input("input: T") \
  .Input("input_h: T") \
  .Input("input_c: T") \
  .Input("params: T") \
  .Input("sequence_lengths: int32") \
  .SetIsStateful() \
  .Output("output: T") \
  .Output("output_h: T") \
  .Output("output_c: T") \
  .Output("reserve_space: T") \
  .Output("host_reserved: int8")
// What a V3 Backprop takes after the forward's inputs (V3's and KerasRNN's): the forward's
// results, their gradients and its reserve.
#define TF_LSTM_RNN_V3_BACKPROP_OF_RESULTS \
  .Input("output: T") \
  .Input("output_h: T") \
  .Input("output_c: T") \
  .Input("output_backprop: T") \
  .Input("output_h_backprop: T") \
  .Input("output_c_backprop: T") \
  .Input("reserve_space: T") \
  .Input("host_reserved: int8")
#define TF_LSTM_RNN_V3_BACKPROP_IO \
  .Input("input: T") \
  .Input("input_h: T") \
  .Input("input_c: T") \
  .Input("params: T") \
  .Input("sequence_lengths: int32") TF_LSTM_RNN_V3_BACKPROP_OF_RESULTS \
  .SetIsStateful() \
  .Output("input_backprop: T") \
  .Output("input_h_backprop: T") \
  .Output("input_c_backprop: T") \
  .Output("params_backprop: T")

REGISTER_OP("TfLstm>CudnnRNN")
    .Input("input: T")
    .Input("input_h: T")
    .Input("input_c: T")
    .Input("params: T")
    .SetIsStateful()
    .Output("output: T")
    .Output("output_h: T")
    .Output("output_c: T")
    .Output("reserve_space: T")
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS.Attr("is_training: bool = true")
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, false); });

REGISTER_OP("TfLstm>CudnnRNNV2")
    .Input("input: T")
    .Input("input_h: T")
    .Input("input_c: T")
    .Input("params: T")
    .SetIsStateful()
    .Output("output: T")
    .Output("output_h: T")
    .Output("output_c: T")
    .Output("reserve_space: T")
    .Output("host_reserved: int8")
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS.Attr("is_training: bool = true")
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, false); });

REGISTER_OP("TfLstm>CudnnRNNV3")
    TF_LSTM_RNN_V3_FORWARD_IO
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .Attr("is_training: bool = true")
    .Attr("time_major: bool = true")
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, true); });

REGISTER_OP("TfLstm>CudnnRNNBackprop")
    .Input("input: T")
    .Input("input_h: T")
    .Input("input_c: T")
    .Input("params: T")
    .Input("output: T")
    .Input("output_h: T")
    .Input("output_c: T")
    .Input("output_backprop: T")
    .Input("output_h_backprop: T")
    .Input("output_c_backprop: T")
    .Input("reserve_space: T")
    .SetIsStateful()
    .Output("input_backprop: T")
    .Output("input_h_backprop: T")
    .Output("input_c_backprop: T")
    .Output("params_backprop: T")
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS
    .SetShapeFn(BackpropShape);

REGISTER_OP("TfLstm>CudnnRNNBackpropV2")
    .Input("input: T")
    .Input("input_h: T")
    .Input("input_c: T")
    .Input("params: T")
    .Input("output: T")
    .Input("output_h: T")
    .Input("output_c: T")
    .Input("output_backprop: T")
    .Input("output_h_backprop: T")
    .Input("output_c_backprop: T")
    .Input("reserve_space: T")
    .Input("host_reserved: int8")
    .SetIsStateful()
    .Output("input_backprop: T")
    .Output("input_h_backprop: T")
    .Output("input_c_backprop: T")
    .Output("params_backprop: T")
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS
    .SetShapeFn(BackpropShape);

REGISTER_OP("TfLstm>CudnnRNNBackpropV3")
    TF_LSTM_RNN_V3_BACKPROP_IO
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .Attr("time_major: bool = true")
    .SetShapeFn(BackpropShape);

// CudnnRNNV3Keras and its Backprop (ours alone): CudnnRNNV3 and CudnnRNNBackpropV3 with Keras'
// cell options. Its element-wise activations (docs/cudnn_rnn.md §4.7): `activation` for the
// candidate and LSTM's output (a plain RNN's one activation), `recurrent_activation` for the
// gates (LSTM, GRU); "" is cuDNN's (tanh / sigmoid; relu for rnn_relu). `reset_after` false: a
// GRU resetting before its recurrent product (§4.8; Keras' GRU(reset_after=False)). Everything
// else is V3's. TF's CudnnRNNV3 keeps its signature; the Keras layers run these.
#define TF_LSTM_RNN_KERAS_CELL_ATTRS \
  .Attr("activation: string = ''").Attr("recurrent_activation: string = ''") \
  .Attr("reset_after: bool = true")

// They also take Keras' recurrent dropout masks (docs/keras_layers.md §5): input_masks
// [gates, batch_size, input_size] and recurrent_masks [gates, batch_size, num_units], each [0]
// for none; the Backprop takes the forward's.
#define TF_LSTM_RNN_OPERAND_MASKS .Input("input_masks: T").Input("recurrent_masks: T")

// And zoneout (docs/cudnn_rnn.md §4.9): the weights of the new h and LSTM's new c in the state
// carried, w ⊙ new + (1 - w) ⊙ previous: each [max_time, batch_size, num_units] in the input's
// layout (training's keep-new masks), a scalar for every element (inference's 1 - rate), or [0]
// (not zoned); the Backprop takes the forward's.
#define TF_LSTM_RNN_ZONEOUT .Input("zoneout_h_weights: T").Input("zoneout_c_weights: T")

REGISTER_OP("TfLstm>CudnnRNNV3Keras")
    TF_LSTM_RNN_V3_FORWARD_IO TF_LSTM_RNN_OPERAND_MASKS TF_LSTM_RNN_ZONEOUT
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .Attr("is_training: bool = true")
    .Attr("time_major: bool = true") TF_LSTM_RNN_KERAS_CELL_ATTRS
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, true); });

// KerasRNN (ours alone; docs/cudnn_rnn.md §6.6): CudnnRNNV3Keras of the one-layer, one-direction
// model a Keras layer describes, on the layer's weights as Keras stores them instead of params:
// kernel [input_size, gates * num_units], recurrent_kernel [num_units, gates * num_units] and
// bias [gates * num_units] (b_R; b_W = 0) or [2, gates * num_units] (b_W, b_R), Keras' gate
// order (LSTM i, f, c, o; GRU z, r, h). The CPU engine reads them in place (the GRU's gates in
// Keras' order), so a layer call copies no weights. Outputs and reserve space are
// CudnnRNNV3Keras's.
// KerasRNNBackprop is CudnnRNNBackpropV3Keras on the same weights, with their gradients
// (kernel_backprop, recurrent_kernel_backprop, bias_backprop) in place of params_backprop.
REGISTER_OP("TfLstm>KerasRNN")
    .Input("input: T")
    .Input("input_h: T")
    .Input("input_c: T")
    .Input("kernel: T")
    .Input("recurrent_kernel: T")
    .Input("bias: T")
    .Input("sequence_lengths: int32") TF_LSTM_RNN_OPERAND_MASKS TF_LSTM_RNN_ZONEOUT
    .Output("output: T")
    .Output("output_h: T")
    .Output("output_c: T")
    .Output("reserve_space: T")
    .Output("host_reserved: int8")
    .Attr(kTypes).Attr(kMode).Attr("is_training: bool = true")
    .Attr("time_major: bool = true") TF_LSTM_RNN_KERAS_CELL_ATTRS
    .SetShapeFn([](InferenceContext* c) { return ForwardShape(c, true, true); });

REGISTER_OP("TfLstm>KerasRNNBackprop")
    .Input("input: T")
    .Input("input_h: T")
    .Input("input_c: T")
    .Input("kernel: T")
    .Input("recurrent_kernel: T")
    .Input("bias: T")
    .Input("sequence_lengths: int32") TF_LSTM_RNN_V3_BACKPROP_OF_RESULTS
    TF_LSTM_RNN_OPERAND_MASKS TF_LSTM_RNN_ZONEOUT
    .Output("input_backprop: T")
    .Output("input_h_backprop: T")
    .Output("input_c_backprop: T")
    .Output("kernel_backprop: T")
    .Output("recurrent_kernel_backprop: T")
    .Output("bias_backprop: T")
    .Attr(kTypes).Attr(kMode).Attr("time_major: bool = true") TF_LSTM_RNN_KERAS_CELL_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      for (int k = 0; k < 6; ++k) c->set_output(k, c->input(k));
      return absl::OkStatus();
    });

REGISTER_OP("TfLstm>CudnnRNNBackpropV3Keras")
    TF_LSTM_RNN_V3_BACKPROP_IO TF_LSTM_RNN_OPERAND_MASKS TF_LSTM_RNN_ZONEOUT
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .Attr("time_major: bool = true") TF_LSTM_RNN_KERAS_CELL_ATTRS
    .SetShapeFn(BackpropShape);

// CudnnRNNDropoutKept (ours alone): which elements of the inputs of layers 1..L-1 the training
// forward that wrote reserve_space kept (docs/cudnn_rnn.md §5.3): [L - 1, T, B, D * Hr], time-major
// on every layout. Takes V3's inputs (V1 and V2 pass every length as T) and attrs, and checks
// the reserve space as Backprop does; the second derivatives' composite reads it (§7.4).
REGISTER_OP("TfLstm>CudnnRNNDropoutKept")
    .Input("input: T")
    .Input("input_h: T")
    .Input("input_c: T")
    .Input("params: T")
    .Input("sequence_lengths: int32")
    .Input("reserve_space: T")
    .Output("kept: bool")
    .Attr(kTypes) TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .Attr("time_major: bool = true") TF_LSTM_RNN_KERAS_CELL_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle input, input_h, unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &input));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, &input_h));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(5), 1, &unused));
      if (IsLstm(c)) TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &unused));
      bool time_major;
      TF_RETURN_IF_ERROR(c->GetAttr("time_major", &time_major));
      const int time_axis = time_major ? 0 : 1;
      const int64_t D = NumDirs(c), states = c->Value(c->Dim(input_h, time_axis));
      DimensionHandle layers_above = c->UnknownDim(), width;
      if (states >= 0 && states >= D && states % D == 0) {
        layers_above = c->MakeDim(states / D - 1);
      }
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(input_h, 2), D, &width));
      c->set_output(0, c->MakeShape({layers_above, c->Dim(input, time_axis),
                                     c->Dim(input, 1 - time_axis), width}));
      return absl::OkStatus();
    });

REGISTER_OP("TfLstm>CudnnRNNParamsSize")
    .Input("num_layers: int32")
    .Input("num_units: int32")
    .Input("input_size: int32")
    .Attr(kTypes)
    .Attr("S: {int32, int64}") TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .Output("params_size: S")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(ScalarInputs(c));
      c->set_output(0, c->Vector(1));
      return absl::OkStatus();
    });

REGISTER_OP("TfLstm>CudnnRNNParamsToCanonical")
    .Input("num_layers: int32")
    .Input("num_units: int32")
    .Input("input_size: int32")
    .Input("params: T")
    .Output("weights: num_params * T")
    .Output("biases: num_params * T")
    .Attr(kTypes)
    .Attr("num_params: int >= 1") TF_LSTM_RNN_COMMON_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(ScalarInputs(c));
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &unused));
      int num_params;
      TF_RETURN_IF_ERROR(c->GetAttr("num_params", &num_params));
      for (int k = 0; k < num_params; ++k) {
        c->set_output(k, c->Matrix(InferenceContext::kUnknownDim, InferenceContext::kUnknownDim));
        c->set_output(num_params + k, c->Vector(InferenceContext::kUnknownDim));
      }
      return absl::OkStatus();
    });

REGISTER_OP("TfLstm>CudnnRNNParamsToCanonicalV2")
    .Input("num_layers: int32")
    .Input("num_units: int32")
    .Input("input_size: int32")
    .Input("params: T")
    .Output("weights: num_params_weights * T")
    .Output("biases: num_params_biases * T")
    .Attr(kTypes)
    .Attr("num_params_weights: int >= 1")
    .Attr("num_params_biases: int >= 1") TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(ScalarInputs(c));
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 1, &unused));
      int weights, biases;
      TF_RETURN_IF_ERROR(c->GetAttr("num_params_weights", &weights));
      TF_RETURN_IF_ERROR(c->GetAttr("num_params_biases", &biases));
      for (int k = 0; k < weights; ++k) {
        c->set_output(k, c->Matrix(InferenceContext::kUnknownDim, InferenceContext::kUnknownDim));
      }
      for (int k = 0; k < biases; ++k) {
        c->set_output(weights + k, c->Vector(InferenceContext::kUnknownDim));
      }
      return absl::OkStatus();
    });

REGISTER_OP("TfLstm>CudnnRNNCanonicalToParams")
    .Input("num_layers: int32")
    .Input("num_units: int32")
    .Input("input_size: int32")
    .Input("weights: num_params * T")
    .Input("biases: num_params * T")
    .Output("params: T")
    .Attr(kTypes)
    .Attr("num_params: int >= 1") TF_LSTM_RNN_COMMON_ATTRS
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(ScalarInputs(c));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    });

REGISTER_OP("TfLstm>CudnnRNNCanonicalToParamsV2")
    .Input("num_layers: int32")
    .Input("num_units: int32")
    .Input("input_size: int32")
    .Input("weights: num_params_weights * T")
    .Input("biases: num_params_biases * T")
    .Output("params: T")
    .Attr(kTypes)
    .Attr("num_params_weights: int >= 1")
    .Attr("num_params_biases: int >= 1") TF_LSTM_RNN_COMMON_ATTRS.Attr("num_proj: int = 0")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(ScalarInputs(c));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    });

// Ours alone: the Keras layers' weights (kernel [I, G*H], recurrent_kernel [H, G*H], bias [G*H]
// or [2, G*H]) and the params buffer of the one-layer model they describe (docs/cudnn_rnn.md
// §6.5); each is the other's gradient.
REGISTER_OP("TfLstm>KerasToCudnnParams")
    .Input("kernel: T")
    .Input("recurrent_kernel: T")
    .Input("bias: T")
    .Output("params: T")
    .Attr(kTypes)
    .Attr(kMode)
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle kernel, recurrent_kernel, bias;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &kernel));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &recurrent_kernel));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(2), 1, &bias));
      TF_RETURN_IF_ERROR(c->WithRankAtMost(bias, 2, &bias));
      const int64_t I = c->Value(c->Dim(kernel, 0)), H = c->Value(c->Dim(recurrent_kernel, 0));
      int64_t size = InferenceContext::kUnknownDim;
      if (I >= 0 && H >= 0) {
        std::string mode;
        TF_RETURN_IF_ERROR(c->GetAttr("rnn_mode", &mode));
        TF_RETURN_IF_ERROR(KerasParamsSize(RnnModeNamed(mode), I, H, &size));
      }
      c->set_output(0, c->Vector(size));
      return absl::OkStatus();
    });

REGISTER_OP("TfLstm>CudnnParamsToKeras")
    .Input("params: T")
    .Output("kernel: T")
    .Output("recurrent_kernel: T")
    .Output("bias: T")
    .Attr(kTypes)
    .Attr(kMode)
    .Attr("input_size: int >= 0")
    .Attr("num_units: int >= 0")
    .Attr("bias_rows: int = 1")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle params;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &params));
      std::string mode;
      int64_t I, H;
      int bias_rows;
      TF_RETURN_IF_ERROR(c->GetAttr("rnn_mode", &mode));
      TF_RETURN_IF_ERROR(c->GetAttr("input_size", &I));
      TF_RETURN_IF_ERROR(c->GetAttr("num_units", &H));
      TF_RETURN_IF_ERROR(c->GetAttr("bias_rows", &bias_rows));
      if (bias_rows != 1 && bias_rows != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("bias_rows must be 1 or 2 but is ", bias_rows));
      }
      const RnnMode m = RnnModeNamed(mode);
      int64_t size;
      TF_RETURN_IF_ERROR(KerasParamsSize(m, I, H, &size));
      DimensionHandle unused;
      TF_RETURN_IF_ERROR(c->WithValue(c->Dim(params, 0), size, &unused));
      const int64_t width = GatesOf(m) * H;
      c->set_output(0, c->Matrix(I, width));
      c->set_output(1, c->Matrix(H, width));
      c->set_output(2, bias_rows == 1 ? c->Vector(width) : c->Matrix(2, width));
      return absl::OkStatus();
    });

#undef TF_LSTM_RNN_COMMON_ATTRS

}  // namespace tf_lstm_ops
