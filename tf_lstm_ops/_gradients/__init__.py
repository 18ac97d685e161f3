"""Registers the gradients of the forward ops, one module per op family: `import tf_lstm_ops`
imports this package once, and TensorFlow keeps each registration for the process.

- block_lstm: BlockLSTM, BlockLSTMV2 and LSTMBlockCell (all through our BlockLSTMFullGrad op);
- block_lstm_composite: their gradient ops (second derivatives, JVPs);
- cudnn_rnn: CudnnRNN, CudnnRNNV2 and CudnnRNNV3 (through the matching Backprop op), and the
  Keras weight conversions;
- cudnn_rnn_composite: the CudnnRNNBackprop ops (second derivatives, JVPs), also under TF's own
  names, for which TF registers none;
- layer_norm_lstm: LayerNormLSTM (through LayerNormLSTMGrad) and LayerNormLSTMGrad (its
  composite);
- layer_norm_rnn: LayerNormRNN (the LayerNorm GRU and SimpleRNN, through LayerNormRNNGrad) and
  LayerNormRNNGrad (its composite).
Forward ops register under our op namespace (TfLstm>); TF's own forward op names keep TF's
gradients.
"""

from tf_lstm_ops._gradients import (  # noqa: F401  (registering is the import)
    block_lstm,
    block_lstm_composite,
    cudnn_rnn,
    cudnn_rnn_composite,
    layer_norm_lstm,
    layer_norm_rnn,
)
