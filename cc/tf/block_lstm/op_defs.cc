// Op definitions: the eight LSTM block ops under our namespace (a core name would be silently
// ignored by TF's loader): TF's six, with TF's exact input, output and attr names, our own
// BlockLSTMFullGrad (docs/block_lstm.md §6.5) and its gradient BlockLSTMFullGradGrad (§7.2); and
// shape functions that merge every fact about B, I, H visible at graph construction.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_lstm_ops {
namespace {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

constexpr char kTypes[] = "T: {half, bfloat16, float, double}";

// Sizes of an LSTM op as far as the static shapes tell.
struct Dims {
  DimensionHandle time, batch, input, cell;
};

// Merges B, I, H from x, cs_prev, h_prev, w, b (and wci/wcf/wco when their length is meaningful).
// `first` is the index of x (1 when seq_len_max precedes it); `x_rank` 2 (cell) or 3 (sequence).
absl::Status InferLstmDims(InferenceContext* c, int first, int x_rank, bool check_peephole_len,
                     Dims* dims) {
  ShapeHandle x, cs_prev, h_prev, w, b;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(first), x_rank, &x));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(first + 1), 2, &cs_prev));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(first + 2), 2, &h_prev));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(first + 3), 2, &w));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(first + 7), 1, &b));
  const int t_axis = x_rank - 3;  // -1 for the cell ops
  dims->time = t_axis >= 0 ? c->Dim(x, 0) : c->MakeDim(1);
  dims->input = c->Dim(x, x_rank - 1);

  DimensionHandle batch = c->Dim(x, x_rank - 2);
  TF_RETURN_IF_ERROR(c->Merge(batch, c->Dim(cs_prev, 0), &batch));
  TF_RETURN_IF_ERROR(c->Merge(batch, c->Dim(h_prev, 0), &batch));
  dims->batch = batch;

  DimensionHandle cell = c->Dim(cs_prev, 1), from_b, from_w, rows;
  TF_RETURN_IF_ERROR(c->Merge(cell, c->Dim(h_prev, 1), &cell));
  TF_RETURN_IF_ERROR(c->Divide(c->Dim(b, 0), 4, /*evenly_divisible=*/true, &from_b));
  TF_RETURN_IF_ERROR(c->Merge(cell, from_b, &cell));
  TF_RETURN_IF_ERROR(c->Divide(c->Dim(w, 1), 4, /*evenly_divisible=*/true, &from_w));
  TF_RETURN_IF_ERROR(c->Merge(cell, from_w, &cell));
  for (int k = first + 4; k < first + 7; ++k) {
    ShapeHandle peephole;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(k), 1, &peephole));
    if (check_peephole_len) TF_RETURN_IF_ERROR(c->Merge(cell, c->Dim(peephole, 0), &cell));
  }
  TF_RETURN_IF_ERROR(c->Add(dims->input, cell, &rows));
  DimensionHandle unused;
  TF_RETURN_IF_ERROR(c->Merge(rows, c->Dim(w, 0), &unused));
  dims->cell = cell;
  return absl::OkStatus();
}

// Merges each of inputs [first, first + count) with `shape`.
absl::Status MergeInputs(InferenceContext* c, int first, int count, ShapeHandle shape) {
  for (int k = first; k < first + count; ++k) {
    ShapeHandle unused;
    TF_RETURN_IF_ERROR(c->Merge(c->input(k), shape, &unused));
  }
  return absl::OkStatus();
}

absl::Status SeqLenMaxIsScalar(InferenceContext* c) {
  ShapeHandle unused;
  return c->WithRank(c->input(0), 0, &unused);
}

bool PeepholeAttr(InferenceContext* c) {
  bool use_peephole = false;
  return c->GetAttr("use_peephole", &use_peephole).ok() && use_peephole;
}

absl::Status CellShape(InferenceContext* c) {
  Dims d;
  TF_RETURN_IF_ERROR(InferLstmDims(c, 0, 2, PeepholeAttr(c), &d));
  for (int k = 0; k < 7; ++k) c->set_output(k, c->Matrix(d.batch, d.cell));
  return absl::OkStatus();
}

// Sets output k to input `like`'s shape merged with what the sizes say (`derived`).
absl::Status SetMerged(InferenceContext* c, int k, int like, ShapeHandle derived) {
  ShapeHandle merged;
  TF_RETURN_IF_ERROR(c->Merge(c->input(like), derived, &merged));
  c->set_output(k, merged);
  return absl::OkStatus();
}

absl::Status CellGradShape(InferenceContext* c) {
  Dims d;
  const bool peephole = PeepholeAttr(c);
  TF_RETURN_IF_ERROR(InferLstmDims(c, 0, 2, peephole, &d));
  ShapeHandle bh = c->Matrix(d.batch, d.cell);
  TF_RETURN_IF_ERROR(MergeInputs(c, 8, 8, bh));  // i, cs, f, o, ci, co, cs_grad, h_grad
  DimensionHandle gates;
  TF_RETURN_IF_ERROR(c->Multiply(d.cell, 4, &gates));
  TF_RETURN_IF_ERROR(SetMerged(c, 0, 1, bh));
  c->set_output(1, c->Matrix(d.batch, gates));
  // Shaped like wci/wcf/wco: [H] with use_peephole; otherwise any length (zeros).
  for (int k = 0; k < 3; ++k) {
    TF_RETURN_IF_ERROR(
        SetMerged(c, 2 + k, 4 + k, peephole ? c->Vector(d.cell) : c->Vector(c->UnknownDim())));
  }
  return absl::OkStatus();
}

absl::Status SequenceShape(InferenceContext* c) {
  TF_RETURN_IF_ERROR(SeqLenMaxIsScalar(c));
  Dims d;
  TF_RETURN_IF_ERROR(InferLstmDims(c, 1, 3, /*check_peephole_len=*/true, &d));
  for (int k = 0; k < 7; ++k) c->set_output(k, c->MakeShape({d.time, d.batch, d.cell}));
  return absl::OkStatus();
}

// The sizes of a sequence gradient op (inputs: seq_len_max, the eight forward inputs, then
// `sequence_inputs` [T, B, H] activations and output gradients) and its eight results' shapes
// (each like its input 1 + k, merged with what the sizes say); `sequence`: [T, B, H].
absl::Status SequenceGradResults(InferenceContext* c, int sequence_inputs,
                                 ShapeHandle (&results)[8], ShapeHandle* sequence = nullptr) {
  TF_RETURN_IF_ERROR(SeqLenMaxIsScalar(c));
  Dims d;
  TF_RETURN_IF_ERROR(InferLstmDims(c, 1, 3, /*check_peephole_len=*/true, &d));
  const ShapeHandle tbh = c->MakeShape({d.time, d.batch, d.cell});
  TF_RETURN_IF_ERROR(MergeInputs(c, 9, sequence_inputs, tbh));
  if (sequence != nullptr) *sequence = tbh;
  DimensionHandle rows, gates;
  TF_RETURN_IF_ERROR(c->Add(d.input, d.cell, &rows));
  TF_RETURN_IF_ERROR(c->Multiply(d.cell, 4, &gates));
  const ShapeHandle derived[8] = {c->MakeShape({d.time, d.batch, d.input}),
                                  c->Matrix(d.batch, d.cell),
                                  c->Matrix(d.batch, d.cell),
                                  c->Matrix(rows, gates),
                                  c->Vector(d.cell),
                                  c->Vector(d.cell),
                                  c->Vector(d.cell),
                                  c->Vector(gates)};
  for (int k = 0; k < 8; ++k) {
    TF_RETURN_IF_ERROR(c->Merge(c->input(1 + k), derived[k], &results[k]));
  }
  return absl::OkStatus();
}

absl::Status SequenceGradShape(InferenceContext* c) {
  ShapeHandle results[8];
  TF_RETURN_IF_ERROR(SequenceGradResults(c, c->num_inputs() - 9, results));
  for (int k = 0; k < 8; ++k) c->set_output(k, results[k]);
  return absl::OkStatus();
}

// BlockLSTMFullGradGrad: the cotangents of BlockLSTMFullGrad's eight results (inputs 23..30)
// are shaped like them; each result is shaped like the input it is the gradient for (1..22).
absl::Status SequenceGradGradShape(InferenceContext* c) {
  ShapeHandle results[8], tbh;
  TF_RETURN_IF_ERROR(SequenceGradResults(c, 14, results, &tbh));
  for (int k = 0; k < 8; ++k) {
    ShapeHandle merged;
    TF_RETURN_IF_ERROR(c->Merge(c->input(23 + k), results[k], &merged));
    c->set_output(k, merged);
  }
  for (int k = 8; k < 22; ++k) TF_RETURN_IF_ERROR(SetMerged(c, k, 1 + k, tbh));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfLstm>LSTMBlockCell")
    .Input("x: T")
    .Input("cs_prev: T")
    .Input("h_prev: T")
    .Input("w: T")
    .Input("wci: T")
    .Input("wcf: T")
    .Input("wco: T")
    .Input("b: T")
    .Output("i: T")
    .Output("cs: T")
    .Output("f: T")
    .Output("o: T")
    .Output("ci: T")
    .Output("co: T")
    .Output("h: T")
    .Attr("forget_bias: float = 1.0")
    .Attr("cell_clip: float = 3.0")
    .Attr("use_peephole: bool = false")
    .Attr(kTypes)
    .SetShapeFn(CellShape)
    .Doc("One LSTM step, ICFO gate layout; TF's LSTMBlockCell with half/bfloat16/float/double.");

REGISTER_OP("TfLstm>LSTMBlockCellGrad")
    .Input("x: T")
    .Input("cs_prev: T")
    .Input("h_prev: T")
    .Input("w: T")
    .Input("wci: T")
    .Input("wcf: T")
    .Input("wco: T")
    .Input("b: T")
    .Input("i: T")
    .Input("cs: T")
    .Input("f: T")
    .Input("o: T")
    .Input("ci: T")
    .Input("co: T")
    .Input("cs_grad: T")
    .Input("h_grad: T")
    .Output("cs_prev_grad: T")
    .Output("dicfo: T")
    .Output("wci_grad: T")
    .Output("wcf_grad: T")
    .Output("wco_grad: T")
    .Attr("use_peephole: bool")
    .Attr(kTypes)
    .SetShapeFn(CellGradShape)
    .Doc("Element-wise backward of one LSTMBlockCell step (dicfo in ICFO layout).");

// The sequence ops' inputs: seq_len_max and the eight forward inputs (the gradient ops' first).
#define TF_LSTM_SEQUENCE_INPUTS \
  Input("seq_len_max: int64")   \
      .Input("x: T")            \
      .Input("cs_prev: T")      \
      .Input("h_prev: T")       \
      .Input("w: T")            \
      .Input("wci: T")          \
      .Input("wcf: T")          \
      .Input("wco: T")          \
      .Input("b: T")

#define TF_LSTM_REGISTER_SEQUENCE_OP(NAME, ATTRS, DOC) \
  REGISTER_OP(NAME)                                    \
      .TF_LSTM_SEQUENCE_INPUTS                         \
      .Output("i: T")                                  \
      .Output("cs: T")                                 \
      .Output("f: T")                                  \
      .Output("o: T")                                  \
      .Output("ci: T")                                 \
      .Output("co: T")                                 \
      .Output("h: T") ATTRS                            \
      .Attr(kTypes)                                    \
      .SetShapeFn(SequenceShape)                       \
      .Doc(DOC)

TF_LSTM_REGISTER_SEQUENCE_OP("TfLstm>BlockLSTM",
                             .Attr("forget_bias: float = 1.0")
                                 .Attr("cell_clip: float = 3.0")
                                 .Attr("use_peephole: bool = false"),
                             "LSTM over a time-major sequence, ICFO gate layout.");
TF_LSTM_REGISTER_SEQUENCE_OP("TfLstm>BlockLSTMV2",
                             .Attr("cell_clip: float = 0.0").Attr("use_peephole: bool = false"),
                             "LSTM over a time-major sequence, IFCO gate layout, no forget bias.");
#undef TF_LSTM_REGISTER_SEQUENCE_OP

// What every sequence gradient op takes first (seq_len_max, the eight forward inputs, the seven
// saved activations) and the results of the three backward ops (a gradient per forward input).
#define TF_LSTM_SEQUENCE_GRAD_HEAD \
  TF_LSTM_SEQUENCE_INPUTS          \
      .Input("i: T")               \
      .Input("cs: T")              \
      .Input("f: T")               \
      .Input("o: T")               \
      .Input("ci: T")              \
      .Input("co: T")              \
      .Input("h: T")
#define TF_LSTM_SEQUENCE_GRAD_RESULTS \
  Output("x_grad: T")                 \
      .Output("cs_prev_grad: T")      \
      .Output("h_prev_grad: T")       \
      .Output("w_grad: T")            \
      .Output("wci_grad: T")          \
      .Output("wcf_grad: T")          \
      .Output("wco_grad: T")          \
      .Output("b_grad: T")

#define TF_LSTM_REGISTER_SEQUENCE_GRAD_OP(NAME, DOC) \
  REGISTER_OP(NAME)                                  \
      .TF_LSTM_SEQUENCE_GRAD_HEAD                    \
      .Input("cs_grad: T")                           \
      .Input("h_grad: T")                            \
      .TF_LSTM_SEQUENCE_GRAD_RESULTS                 \
      .Attr("use_peephole: bool")                    \
      .Attr(kTypes)                                  \
      .SetShapeFn(SequenceGradShape)                 \
      .Doc(DOC)

TF_LSTM_REGISTER_SEQUENCE_GRAD_OP("TfLstm>BlockLSTMGrad", "Backward of BlockLSTM (ICFO).");
TF_LSTM_REGISTER_SEQUENCE_GRAD_OP("TfLstm>BlockLSTMGradV2", "Backward of BlockLSTMV2 (IFCO).");
#undef TF_LSTM_REGISTER_SEQUENCE_GRAD_OP

// BlockLSTMFullGrad's 23 inputs, which its gradient BlockLSTMFullGradGrad takes first.
#define TF_LSTM_FULL_GRAD_INPUTS \
  TF_LSTM_SEQUENCE_GRAD_HEAD     \
      .Input("i_grad: T")        \
      .Input("cs_grad: T")       \
      .Input("f_grad: T")        \
      .Input("o_grad: T")        \
      .Input("ci_grad: T")       \
      .Input("co_grad: T")       \
      .Input("h_grad: T")

// Not a TF op: what our registered gradients call when a loss uses i, f, o, ci or co (TF's
// gradient drops those; BlockLSTMGrad has no inputs for them). Also the LSTMBlockCell gradient
// (T = 1) in that case.
REGISTER_OP("TfLstm>BlockLSTMFullGrad")
    .TF_LSTM_FULL_GRAD_INPUTS
    .TF_LSTM_SEQUENCE_GRAD_RESULTS
    .Attr("use_peephole: bool")
    .Attr("gate_layout: {'ICFO', 'IFCO'}")
    .Attr(kTypes)
    .SetShapeFn(SequenceGradShape)
    .Doc("Backward of BlockLSTM/V2 w.r.t. all seven outputs (i, cs, f, o, ci, co, h).");

REGISTER_OP("TfLstm>BlockLSTMFullGradGrad")
    .TF_LSTM_FULL_GRAD_INPUTS
    .Input("d_x_grad: T")
    .Input("d_cs_prev_grad: T")
    .Input("d_h_prev_grad: T")
    .Input("d_w_grad: T")
    .Input("d_wci_grad: T")
    .Input("d_wcf_grad: T")
    .Input("d_wco_grad: T")
    .Input("d_b_grad: T")
    .Output("d_x: T")
    .Output("d_cs_prev: T")
    .Output("d_h_prev: T")
    .Output("d_w: T")
    .Output("d_wci: T")
    .Output("d_wcf: T")
    .Output("d_wco: T")
    .Output("d_b: T")
    .Output("d_i: T")
    .Output("d_cs: T")
    .Output("d_f: T")
    .Output("d_o: T")
    .Output("d_ci: T")
    .Output("d_co: T")
    .Output("d_h: T")
    .Output("d_i_grad: T")
    .Output("d_cs_grad: T")
    .Output("d_f_grad: T")
    .Output("d_o_grad: T")
    .Output("d_ci_grad: T")
    .Output("d_co_grad: T")
    .Output("d_h_grad: T")
    .Attr("use_peephole: bool")
    .Attr("gate_layout: {'ICFO', 'IFCO'}")
    .Attr(kTypes)
    .SetShapeFn(SequenceGradGradShape)
    .Doc("Gradient of BlockLSTMFullGrad w.r.t. its 22 float inputs, given d_*_grad, the "
         "gradients w.r.t. its eight outputs (docs/block_lstm.md §7.2).");
#undef TF_LSTM_FULL_GRAD_INPUTS
#undef TF_LSTM_SEQUENCE_GRAD_RESULTS
#undef TF_LSTM_SEQUENCE_GRAD_HEAD
#undef TF_LSTM_SEQUENCE_INPUTS

}  // namespace tf_lstm_ops
