"""Registers the gradients of the forward ops, one module per op family: `import tf_lstm_ops`
imports this package once, and TensorFlow keeps each registration for the process.

- block_lstm: BlockLSTM, BlockLSTMV2 and LSTMBlockCell (all through our BlockLSTMFullGrad op);
- cudnn_rnn: CudnnRNN, CudnnRNNV2 and CudnnRNNV3 (through the matching Backprop op).
Both register under our op namespace (TfLstm>); TF's own op names keep TF's gradients.
"""

from tf_lstm_ops._gradients import block_lstm, cudnn_rnn  # noqa: F401  (registering is the import)
