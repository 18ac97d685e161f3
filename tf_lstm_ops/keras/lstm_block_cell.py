"""``LSTMBlockCell``: the ``LSTMBlockCell`` op (one fused LSTM step) as a cell for
``keras.layers.RNN``, with ``forget_bias``, ``cell_clip``, peepholes and TF's LSTMBlockCell weight
layout.
"""

import keras
import tensorflow as tf

from tf_lstm_ops._loader import library
from tf_lstm_ops.keras._common import _Keras3Only, _as_input, _check_backend, _read, _register


@_register
class LSTMBlockCell(_Keras3Only, keras.layers.Layer):
    """The ``LSTMBlockCell`` op (one fused LSTM step) as a cell for ``keras.layers.RNN``.

    Args:
      units: cell size H.
      forget_bias: added to the forget gate's pre-activation (default 1, like TF's LSTMBlockCell).
      cell_clip: clip the cell state to [-cell_clip, cell_clip]; None (default) = no clipping.
      use_peephole: diagonal peephole connections (weights ``w_i_diag``, ``w_f_diag``,
        ``w_o_diag`` [H]).
      kernel_initializer, bias_initializer, peephole_initializer, kernel_regularizer,
      bias_regularizer, kernel_constraint, bias_constraint: as for Keras layers.

    Weights (TF's LSTMBlockCell layout): ``kernel [I + H, 4H]`` (rows [0, I) multiply x, the rest
    h), ``bias [4H]``, gate blocks in ICFO order (input, cell input, forget, output). States are
    ``[h, c]`` (Keras' LSTMCell order); the output is h.
    """

    def __init__(
        self,
        units,
        forget_bias=1.0,
        cell_clip=None,
        use_peephole=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        peephole_initializer="glorot_uniform",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        _check_backend("LSTMBlockCell")
        super().__init__(**kwargs)
        if int(units) <= 0:
            raise ValueError("tf_lstm_ops.keras.LSTMBlockCell: units must be positive, got %r"
                             % (units,))
        self.units = int(units)
        self.forget_bias = float(forget_bias)
        self.cell_clip = None if cell_clip is None else float(cell_clip)
        self.use_peephole = bool(use_peephole)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.peephole_initializer = keras.initializers.get(peephole_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.state_size = [self.units, self.units]
        self.output_size = self.units
        self.supports_jit = False

    def build(self, input_shape):
        H = self.units
        self.kernel = self.add_weight(
            shape=(input_shape[-1] + H, 4 * H), name="kernel",
            initializer=self.kernel_initializer, regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            shape=(4 * H,), name="bias", initializer=self.bias_initializer,
            regularizer=self.bias_regularizer, constraint=self.bias_constraint,
        )
        if self.use_peephole:
            self.w_i_diag, self.w_f_diag, self.w_o_diag = (
                self.add_weight(shape=(H,), name=name, initializer=self.peephole_initializer)
                for name in ("w_i_diag", "w_f_diag", "w_o_diag")
            )

    def call(self, inputs, states, training=False):
        x = _as_input(inputs, self)
        dtype = x.dtype
        h_prev, c_prev = (tf.cast(s, dtype) for s in states[:2])
        if self.use_peephole:
            peepholes = [_read(w, dtype) for w in (self.w_i_diag, self.w_f_diag, self.w_o_diag)]
        else:
            peepholes = [tf.zeros([self.units], dtype)] * 3
        out = library.op("LSTMBlockCell")(
            x=x, cs_prev=c_prev, h_prev=h_prev, w=_read(self.kernel, dtype),
            wci=peepholes[0], wcf=peepholes[1], wco=peepholes[2], b=_read(self.bias, dtype),
            forget_bias=self.forget_bias,
            cell_clip=self.cell_clip if self.cell_clip is not None else -1.0,
            use_peephole=self.use_peephole,
        )
        return out.h, [out.h, out.cs]

    def get_initial_state(self, batch_size=None):
        return [tf.zeros(tf.stack([batch_size, self.units]), self.compute_dtype)
                for _ in range(2)]

    def get_config(self):
        config = {
            "units": self.units,
            "forget_bias": self.forget_bias,
            "cell_clip": self.cell_clip,
            "use_peephole": self.use_peephole,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "peephole_initializer": keras.initializers.serialize(self.peephole_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
        }
        return {**super().get_config(), **config}
