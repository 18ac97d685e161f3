// The checks only the CudnnRNN family's Keras weight conversions make (docs/validation.md §5),
// shared by their shape functions (op_defs.cc) and kernels (kernels.cc).
#ifndef TF_LSTM_OPS_CC_TF_CUDNN_RNN_VALIDATION_H_
#define TF_LSTM_OPS_CC_TF_CUDNN_RNN_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cc/core/cudnn_rnn_layout.h"

namespace tf_lstm_ops {

// The params size of Keras' weights for (mode, input_size, num_units), or an InvalidArgument
// when it overflows int64.
inline absl::Status KerasParamsSize(RnnMode mode, int64_t input_size, int64_t num_units,
                                    int64_t* size) {
  *size = CheckedParamsSize(KerasModel(mode, input_size, num_units));
  if (*size >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the params size of input_size ", input_size,
                                                 " and num_units ", num_units,
                                                 " overflows int64"));
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_TF_CUDNN_RNN_VALIDATION_H_
