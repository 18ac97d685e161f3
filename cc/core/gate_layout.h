// Where each LSTM gate lives along the 4H axis of W, b, the pre-activations and dgates.
// Framework-free so CPU kernels, CUDA kernels and tests share the one table.
#ifndef TF_LSTM_OPS_CC_CORE_GATE_LAYOUT_H_
#define TF_LSTM_OPS_CC_CORE_GATE_LAYOUT_H_

#include "cc/core/host_device.h"

namespace tf_lstm_ops {

// ICFO: LSTMBlockCell(Grad), BlockLSTM(Grad).  IFCO: BlockLSTMV2, BlockLSTMGradV2.
// Only the cell-input (c) and forget (f) blocks swap; i is block 0 and o block 3 in both.
enum class GateLayout { kICFO, kIFCO };

struct GateBlocks {
  int i, c, f, o;  // block index (multiply by H for the column offset)
};

TF_LSTM_HOST_DEVICE constexpr GateBlocks BlocksOf(GateLayout layout) {
  return layout == GateLayout::kICFO ? GateBlocks{0, 1, 2, 3} : GateBlocks{0, 2, 1, 3};
}

}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CORE_GATE_LAYOUT_H_
