// Shape validation shared by every kernel of both families (the LSTM block ops' own checks are in
// block_lstm/validation.h; rules: docs/validation.md). Every rank is checked before any dim_size()
// is read; every size product is checked for int64 overflow; every message names the argument, the
// expected shape with its meaning, and the shape it got. Where TensorFlow's kernels raise an
// InvalidArgumentError for the same mistake, the message starts with TF's key phrase ("x must be
// 3D", "must be rank 3 but is rank 2", "h_prev.dims(1) != cell_size: 7 vs. 8"), so that code
// matching TF's messages keeps working; our precise text follows.
#ifndef TF_LSTM_OPS_CC_TF_VALIDATION_H_
#define TF_LSTM_OPS_CC_TF_VALIDATION_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/cudnn_rnn_types.h"
#include "cc/tf/device.h"
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

// A gradient input (the cotangent of a forward result) must have the shape of what it is the
// gradient of: `of` says which ("the forward output's shape", "the shape of input_h").
inline absl::Status CheckGradShape(const tensorflow::Tensor& grad, const char* name,
                                   const tensorflow::TensorShape& shape, const char* of) {
  if (grad.shape() == shape) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("Invalid ", name, " shape: ", name,
                                                 " must have ", of, " ", shape.DebugString(),
                                                 " but has shape ", grad.shape().DebugString()));
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

// Zoneout weights of one state (docs/cudnn_rnn.md §4.9) into *slot: the empty vector [0] (not
// zoned), a scalar (one weight for all) or [T, B, units] in the input's layout ([B, T, units]
// batch-major), rank first; anything else is an error naming the input.
inline absl::Status ResolveZoneoutWeights(const tensorflow::Tensor& t, const char* name,
                                          int64_t time, int64_t batch, bool time_major,
                                          int64_t units, RnnZoneout* slot) {
  *slot = RnnZoneout{};
  if (t.dims() == 1 && t.dim_size(0) == 0) return absl::OkStatus();  // not zoned
  if (t.dims() != 0 && t.dims() != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " must be rank 3 (", time_major ? "[max_time, batch_size, num_units]"
                                              : "[batch_size, max_time, num_units]",
        "), a scalar or the empty vector [0] (none) but is rank ", t.dims(), " (shape ",
        t.shape().DebugString(), ")"));
  }
  if (t.dims() == 3) {
    const NamedDim steps{time, "max_time"}, rows{batch, "batch_size"};
    TF_RETURN_IF_ERROR(CheckShape(t, name, {time_major ? steps : rows, time_major ? rows : steps,
                                            {units, "num_units"}}));
  }
  slot->keep = t.tensor_data().data();
  slot->per_element = t.dims() == 3;
  return absl::OkStatus();
}

// Reserve space elements of T holding `bytes`.
inline int64_t ReserveElements(int64_t bytes, int64_t elem) { return (bytes + elem - 1) / elem; }

// A forward's workspace of `bytes` into *workspace: when training, its reserve space output
// number `index` (what the backward reads, T elements); otherwise that output empty ([0]) and a
// scratch tensor that *scratch keeps alive for the call.
template <typename T>
absl::Status ReserveOrScratch(tensorflow::OpKernelContext* ctx, int index, int64_t bytes,
                              bool training, tensorflow::Tensor* scratch, uint8_t** workspace) {
  tensorflow::Tensor* reserve;
  if (training) {
    TF_RETURN_IF_ERROR(ctx->allocate_output(
        index, tensorflow::TensorShape({ReserveElements(bytes, sizeof(T))}), &reserve));
    *workspace = reinterpret_cast<uint8_t*>(reserve->flat<T>().data());
    return absl::OkStatus();
  }
  TF_RETURN_IF_ERROR(ctx->allocate_output(index, tensorflow::TensorShape({0}), &reserve));
  TF_RETURN_IF_ERROR(
      ctx->allocate_temp(tensorflow::DT_UINT8, tensorflow::TensorShape({bytes}), scratch));
  *workspace = scratch->flat<uint8_t>().data();
  return absl::OkStatus();
}

// How a backward checks that a reserve space came from our forward with this configuration
// (RnnReserveHeader, every family's): on the CPU the reserve space is host memory and its whole
// header is compared here; on the GPU it is device memory, so only its exact size is checked here
// and the engine compares the header with `expected` on the device.
template <typename Device, typename T>
struct ReserveCheck {
  static bool Matches(const tensorflow::Tensor& reserve, const RnnReserveHeader& expected) {
    const int64_t reserve_bytes = reserve.NumElements() * static_cast<int64_t>(sizeof(T));
    RnnReserveHeader header{};
    if (reserve.dims() == 1 && reserve_bytes >= static_cast<int64_t>(sizeof(header))) {
      std::memcpy(&header, reserve.flat<T>().data(), sizeof(header));
    }
    // Exactly the forward's size, as on the GPU.
    return reserve.NumElements() == ReserveElements(expected.bytes, sizeof(T)) &&
           header.magic == expected.magic && header.dropout == expected.dropout &&
           header.config_hash == expected.config_hash && header.bytes == expected.bytes;
  }
};

#ifdef TF_LSTM_OPS_WITH_CUDA
template <typename T>
struct ReserveCheck<GpuDevice, T> {
  static bool Matches(const tensorflow::Tensor& reserve, const RnnReserveHeader& expected) {
    return reserve.dims() == 1 &&
           reserve.NumElements() == ReserveElements(expected.bytes, sizeof(T));
  }
};
#endif  // TF_LSTM_OPS_WITH_CUDA

// A shape built from validated sizes (still checked: TensorShape's constructor aborts on overflow).
inline absl::Status MakeShape(std::initializer_list<int64_t> dims,
                                    tensorflow::TensorShape* shape) {
  return tensorflow::TensorShapeUtils::MakeShape(dims.begin(), dims.size(), shape);
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_VALIDATION_H_
