// The checks only the LSTM block kernels make: their eight shared inputs and seq_len_max
// (docs/validation.md §3), on the shared checks of cc/tf/validation.h.
#ifndef TF_LSTM_OPS_CC_TF_BLOCK_LSTM_VALIDATION_H_
#define TF_LSTM_OPS_CC_TF_BLOCK_LSTM_VALIDATION_H_

#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "cc/core/block_lstm_types.h"
#include "cc/tf/validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_lstm_ops {

// The eight inputs every LSTM block op shares.
struct CommonInputs {
  const tensorflow::Tensor *x, *cs_prev, *h_prev, *w, *wci, *wcf, *wco, *b;

  absl::Status Fetch(tensorflow::OpKernelContext* ctx) {
    TF_RETURN_IF_ERROR(ctx->input("x", &x));
    TF_RETURN_IF_ERROR(ctx->input("cs_prev", &cs_prev));
    TF_RETURN_IF_ERROR(ctx->input("h_prev", &h_prev));
    TF_RETURN_IF_ERROR(ctx->input("w", &w));
    TF_RETURN_IF_ERROR(ctx->input("wci", &wci));
    TF_RETURN_IF_ERROR(ctx->input("wcf", &wcf));
    TF_RETURN_IF_ERROR(ctx->input("wco", &wco));
    return ctx->input("b", &b);
  }

  template <typename T>
  LstmInputs<T> Pointers() const {
    return {x->flat<T>().data(),   cs_prev->flat<T>().data(), h_prev->flat<T>().data(),
            w->flat<T>().data(),   wci->flat<T>().data(),     wcf->flat<T>().data(),
            wco->flat<T>().data(), b->flat<T>().data()};
  }
};

enum class CellSizeFrom { kCsPrev, kW };

// Validates the common inputs: x is [T, B, I] (sequence) or [B, I] (cell); cs_prev and h_prev
// [B, H]; w [I + H, 4H]; b [4H]; wci/wcf/wco rank 1, and [H] when `check_peephole_len`. H comes
// from cs_prev (forward and cell ops, as in TF) or from w (sequence gradient ops, as in TF).
inline absl::Status ValidateCommon(const CommonInputs& in, bool sequence,
                                         CellSizeFrom cell_from, bool check_peephole_len,
                                         LstmDims* dims) {
  const int x_rank = sequence ? 3 : 2;
  TF_RETURN_IF_ERROR(CheckRank(*in.x, "x", x_rank));
  TF_RETURN_IF_ERROR(CheckRank(*in.cs_prev, "cs_prev", 2));
  TF_RETURN_IF_ERROR(CheckRank(*in.h_prev, "h_prev", 2));
  TF_RETURN_IF_ERROR(CheckRank(*in.w, "w", 2));
  TF_RETURN_IF_ERROR(CheckRank(*in.wci, "wci", 1));
  TF_RETURN_IF_ERROR(CheckRank(*in.wcf, "wcf", 1));
  TF_RETURN_IF_ERROR(CheckRank(*in.wco, "wco", 1));
  TF_RETURN_IF_ERROR(CheckRank(*in.b, "b", 1));

  dims->time = sequence ? in.x->dim_size(0) : 1;
  dims->batch = in.x->dim_size(x_rank - 2);
  dims->input = in.x->dim_size(x_rank - 1);
  if (cell_from == CellSizeFrom::kCsPrev) {
    dims->cell = in.cs_prev->dim_size(1);
  } else {
    const int64_t columns = in.w->dim_size(1);
    if (columns % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("w must have 4 * cell_size columns (a multiple of 4) but has shape ",
                       in.w->shape().DebugString()));
    }
    dims->cell = columns / 4;
  }
  const int64_t B = dims->batch, I = dims->input, H = dims->cell;
  int64_t gates, rows, unused;
  TF_RETURN_IF_ERROR(CheckedProduct({4, H}, "cell_size * 4", &gates));
  if (I > INT64_MAX - H) {
    return absl::InvalidArgumentError(
        absl::StrCat("input_size + cell_size overflows int64: ", I, " + ", H));
  }
  rows = I + H;
  TF_RETURN_IF_ERROR(CheckedProduct({dims->time, B, gates}, "time * batch_size * 4 * cell_size",
                                    &unused));
  TF_RETURN_IF_ERROR(CheckedProduct({rows, gates}, "w size", &unused));

  TF_RETURN_IF_ERROR(CheckShape(*in.cs_prev, "cs_prev", {{B, "batch_size"}, {H, "cell_size"}}));
  TF_RETURN_IF_ERROR(CheckShape(*in.h_prev, "h_prev", {{B, "batch_size"}, {H, "cell_size"}}));
  TF_RETURN_IF_ERROR(CheckShape(
      *in.w, "w", {{rows, "input_size + cell_size"}, {gates, "cell_size * 4"}}));
  TF_RETURN_IF_ERROR(CheckShape(*in.b, "b", {{gates, "cell_size * 4"}}));
  if (check_peephole_len) {
    TF_RETURN_IF_ERROR(CheckShape(*in.wci, "wci", {{H, "cell_size"}}));
    TF_RETURN_IF_ERROR(CheckShape(*in.wcf, "wcf", {{H, "cell_size"}}));
    TF_RETURN_IF_ERROR(CheckShape(*in.wco, "wco", {{H, "cell_size"}}));
  }
  return absl::OkStatus();
}

// seq_len_max must be an int64 scalar in [0, T].
inline absl::Status ValidateSeqLenMax(const tensorflow::Tensor& t, int64_t time,
                                            int64_t* seq_len_max) {
  if (t.dims() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq_len_max must be rank 0 but is rank ", t.dims(), ": seq_len_max must be a scalar but "
        "has shape ", t.shape().DebugString()));
  }
  *seq_len_max = t.scalar<int64_t>()();
  if (*seq_len_max < 0 || *seq_len_max > time) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len_max must be between 0 and the time dimension of x (", time,
                     ") but is ", *seq_len_max));
  }
  return absl::OkStatus();
}

// What every sequence gradient op (BlockLSTMGrad(V2), BlockLSTMFullGrad, BlockLSTMFullGradGrad)
// checks first: the common inputs with H from w, seq_len_max, then the saved activations and the
// output gradients, all [T, B, H] (i_grad .. co_grad too when `all_output_grads`).
inline absl::Status ValidateSequenceGrad(tensorflow::OpKernelContext* ctx, bool all_output_grads,
                                         CommonInputs* in, LstmDims* dims,
                                         int64_t* seq_len_max) {
  TF_RETURN_IF_ERROR(in->Fetch(ctx));
  TF_RETURN_IF_ERROR(ValidateCommon(*in, /*sequence=*/true, CellSizeFrom::kW,
                                    /*check_peephole_len=*/true, dims));
  TF_RETURN_IF_ERROR(ValidateSeqLenMax(ctx->input(0), dims->time, seq_len_max));
  const NamedDim T{dims->time, "time"}, B{dims->batch, "batch_size"}, H{dims->cell, "cell_size"};
  TF_RETURN_IF_ERROR(ValidateSameShape(
      ctx, {"i", "cs", "f", "o", "ci", "co", "h", "cs_grad", "h_grad"}, {T, B, H}));
  if (!all_output_grads) return absl::OkStatus();
  return ValidateSameShape(ctx, {"i_grad", "f_grad", "o_grad", "ci_grad", "co_grad"}, {T, B, H});
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_BLOCK_LSTM_VALIDATION_H_
