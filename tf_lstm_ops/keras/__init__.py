"""Keras 3 layers on the tf_lstm_ops fused kernels (TensorFlow backend only).

    import keras
    import tf_lstm_ops.keras as tlk

    model = keras.Sequential([
        keras.Input((None, 16)),
        keras.layers.Masking(),
        tlk.LSTM(64, return_sequences=True),        # drop-in for keras.layers.LSTM
        keras.layers.Bidirectional(tlk.GRU(32)),    # drop-in for keras.layers.GRU
    ])

Layers, one module per group (import them from here):

- ``LSTM``, ``GRU``, ``SimpleRNN`` (module ``drop_in``): drop-in replacements for
  ``keras.layers.LSTM``, ``keras.layers.GRU`` and ``keras.layers.SimpleRNN``. They subclass
  Keras' layers and keep Keras' cell, so they have the same constructor arguments and defaults,
  the same weight variables (``kernel``, ``recurrent_kernel``, ``bias``; GRU bias ``[2, 3H]``,
  ``[3H]`` with ``reset_after=False``), the same ``get_config`` and the same saved-weights
  structure: ``ours.set_weights(theirs.get_weights())`` and
  ``ours.load_weights("keras_model.weights.h5")`` work. Every call runs one fused op
  (``TfLstm>KerasRNN``, on the weights as Keras stores them, with Keras' cell options: the fused
  activations, ``recurrent_dropout``, ``GRU(reset_after=False)``) forward and backward on the
  sequence instead of Keras' per-step loop; a call the kernel cannot serve (activations outside
  the fused set of tanh, sigmoid, relu, hard_sigmoid, linear, elu, softsign, silu/swish and gelu,
  ``use_cudnn=False``, ``unroll=True``, XLA compilation) runs the Keras class's own
  implementation, with a warning. Masks of any pattern run the fused op. Results, including the
  outputs at masked steps, equal Keras'. Ours alone: zoneout (``zoneout_h`` / ``zoneout_c``,
  ``zoneout``; docs/keras_layers.md §7).
- ``CudnnRNN`` (and ``CudnnLSTM``, ``CudnnGRU``; module ``cudnn_rnn``): the CudnnRNN op family as
  one multi-layer layer (``num_layers``, ``bidirectional``, ``dropout`` between layers,
  ``num_proj`` for LSTM) with an opaque ``params`` weight in cuDNN's canonical packing and
  ``get_canonical_weights`` / ``set_canonical_weights``; ``params_size`` gives the length of
  ``params``.
- ``LSTMCell``, ``GRUCell``, ``SimpleRNNCell`` (module ``cells``): drop-ins for Keras' cells
  whose step is one fused op, with zoneout: for loops that step a cell themselves.
- ``LayerNormLSTM``, ``LayerNormLSTMCell`` (module ``layer_norm``): the LayerNorm LSTM (TF Addons'
  cell or Ba et al.'s / haste's) on one fused op, with zoneout (docs/layer_norm_lstm.md);
  ``LayerNormGRU``, ``LayerNormGRUCell`` (haste's LayerNorm GRU) and ``LayerNormSimpleRNN``,
  ``LayerNormSimpleRNNCell`` (TF Addons' LayerNorm SimpleRNN), likewise (docs/keras_layers.md
  §9); ``haste_weights`` and ``haste_gru_weights`` convert haste's weights.
- ``LSTMBlockCell`` (module ``lstm_block_cell``): the ``LSTMBlockCell`` op as a cell for
  ``keras.layers.RNN`` (``forget_bias``, ``cell_clip``, peepholes).
- ``to_stock_keras(model)`` (module ``export``): the same model of stock Keras layers with
  identical weights, for TFLite and other exporters that cannot run custom ops.

Every layer sets ``supports_jit = False`` (custom ops have no XLA kernel; Keras would otherwise
jit-compile the model on GPU hosts; under XLA the drop-ins run Keras' loop), computes in the dtype policy's compute dtype (``float32``,
``mixed_float16``, ``mixed_bfloat16``; the kernels accumulate in float32), is registered with
``keras.saving.register_keras_serializable(package="tf_lstm_ops")`` and round-trips through
``.keras`` files (``import tf_lstm_ops.keras`` before ``keras.saving.load_model``) and
``tf.saved_model.save`` (``import tf_lstm_ops`` before ``tf.saved_model.load``: the graphs contain
the plugin's ``TfLstm>`` ops).

What the modules share (registration, the backend check, reading weights and inputs) is in
``_common``.
"""

from tf_lstm_ops.keras.cells import GRUCell, LSTMCell, SimpleRNNCell
from tf_lstm_ops.keras.cudnn_rnn import CudnnGRU, CudnnLSTM, CudnnRNN, params_size
from tf_lstm_ops.keras.drop_in import GRU, LSTM, SimpleRNN
from tf_lstm_ops.keras.export import to_stock_keras
from tf_lstm_ops.keras.layer_norm import (
    LayerNormGRU,
    LayerNormGRUCell,
    LayerNormLSTM,
    LayerNormLSTMCell,
    LayerNormSimpleRNN,
    LayerNormSimpleRNNCell,
    haste_gru_weights,
    haste_weights,
)
from tf_lstm_ops.keras.lstm_block_cell import LSTMBlockCell

__all__ = [
    "LSTM",
    "GRU",
    "SimpleRNN",
    "LSTMCell",
    "GRUCell",
    "SimpleRNNCell",
    "CudnnRNN",
    "CudnnLSTM",
    "CudnnGRU",
    "LayerNormLSTM",
    "LayerNormLSTMCell",
    "haste_weights",
    "LayerNormGRU",
    "LayerNormGRUCell",
    "LayerNormSimpleRNN",
    "LayerNormSimpleRNNCell",
    "haste_gru_weights",
    "LSTMBlockCell",
    "params_size",
    "to_stock_keras",
]

# Each public name keeps the module path it had before the layers were split into modules: the
# path help() and repr() print, and the "module" Keras records in saved .keras configs.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
