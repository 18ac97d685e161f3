// Shape validation shared by every LSTM block kernel. Every rank is checked before any dim_size()
// is read; every size product is checked for int64 overflow; every message names the argument,
// the expected shape with its meaning, and the shape it got. Where TensorFlow's kernels raise an
// InvalidArgumentError for the same mistake, the message starts with TF's key phrase ("x must be
// 3D", "must be rank 3 but is rank 2", "h_prev.dims(1) != cell_size: 7 vs. 8"), so that code
// matching TF's messages keeps working; our precise text follows.
#ifndef TF_LSTM_OPS_CC_TF_VALIDATION_H_
#define TF_LSTM_OPS_CC_TF_VALIDATION_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/tf/block_lstm/functor.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tensorflow/core/util/overflow.h"

namespace tf_lstm_ops {

// One expected dimension and what it means ("batch_size", ...), for messages.
struct NamedDim {
  int64_t size;
  const char* meaning;
};

// `tf_phrase`: TF's own message for this mistake, when it is not "<name> must be <rank>D".
inline absl::Status CheckRank(const tensorflow::Tensor& t, const char* name, int rank,
                              const char* tf_phrase = nullptr) {
  if (t.dims() == rank) return absl::OkStatus();
  const std::string phrase =
      tf_phrase != nullptr ? tf_phrase : absl::StrCat(name, " must be ", rank, "D");
  const char* joint = !phrase.empty() && phrase.back() == '.' ? " " : ": ";
  return absl::InvalidArgumentError(absl::StrCat(phrase, joint, name, " must be rank ", rank,
                                                 " but is rank ", t.dims(), " (shape ",
                                                 t.shape().DebugString(), ")"));
}

inline absl::Status CheckShape(const tensorflow::Tensor& t, const char* name,
                                     std::initializer_list<NamedDim> dims) {
  const bool rank_ok = t.dims() == static_cast<int>(dims.size());
  bool ok = rank_ok;
  int k = 0;
  std::string tf_phrase;  // TF's "<name>.dims(k) != <meaning>: <got> vs. <expected>"
  for (const NamedDim& d : dims) {
    if (ok && t.dim_size(k) != d.size) {
      ok = false;
      const bool state = std::string(name) == "cs_prev" || std::string(name) == "h_prev";
      tf_phrase = absl::StrCat(name, state ? ".dims(" : ".dim_size(", k, ") != ", d.meaning,
                               ": ", t.dim_size(k), " vs. ", d.size, ": ");
    }
    ++k;
  }
  if (ok) return absl::OkStatus();
  std::string meaning, sizes;
  for (const NamedDim& d : dims) {
    absl::StrAppend(&meaning, meaning.empty() ? "" : ", ", d.meaning);
    absl::StrAppend(&sizes, sizes.empty() ? "" : ", ", d.size);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(rank_ok ? tf_phrase : absl::StrCat(name, " must be rank ", dims.size(), ": "),
                   name, " must have shape [", meaning, "] = [", sizes, "] but has shape ",
                   t.shape().DebugString()));
}

// a * b, or an InvalidArgument naming `what` when it overflows int64.
inline absl::Status CheckedProduct(std::initializer_list<int64_t> factors, const char* what,
                                         int64_t* out) {
  int64_t product = 1;
  for (int64_t f : factors) {
    product = tensorflow::MultiplyWithoutOverflow(product, f);
    if (product < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " overflows int64: ", absl::StrJoin(factors, " * ")));
    }
  }
  *out = product;
  return absl::OkStatus();
}

// An input by its op-def name (names are our own op defs' constants, so lookup cannot fail).
inline const tensorflow::Tensor& NamedInput(tensorflow::OpKernelContext* ctx, const char* name) {
  const tensorflow::Tensor* t = nullptr;
  TF_CHECK_OK(ctx->input(name, &t));
  return *t;
}

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

// Each named input must have exactly `dims` ([T, B, H] activations and gradients).
inline absl::Status ValidateSameShape(tensorflow::OpKernelContext* ctx,
                                            std::initializer_list<const char*> names,
                                            std::initializer_list<NamedDim> dims) {
  for (const char* name : names) {
    const tensorflow::Tensor* t;
    TF_RETURN_IF_ERROR(ctx->input(name, &t));
    TF_RETURN_IF_ERROR(CheckShape(*t, name, dims));
  }
  return absl::OkStatus();
}

// A shape built from validated sizes (still checked: TensorShape's constructor aborts on overflow).
inline absl::Status MakeShape(std::initializer_list<int64_t> dims,
                                    tensorflow::TensorShape* shape) {
  return tensorflow::TensorShapeUtils::MakeShape(dims.begin(), dims.size(), shape);
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_VALIDATION_H_
