"""``to_stock_keras(model)``: the same model built from stock ``keras.layers`` with identical
weights, for exporters that need no custom op at inference (``tf.lite.TFLiteConverter`` turns it
into builtin TFLite ops; TF Serving or TF.js without the plugin).

``LSTM``, ``GRU``, ``SimpleRNN`` (also inside ``Bidirectional``) become their Keras classes with the
same config and weights, and ``keras.layers.RNN`` of our ``LSTMCell`` / ``GRUCell`` /
``SimpleRNNCell`` an RNN of Keras' cell; zoned ones have no twin (Keras has no zoneout). ``CudnnLSTM`` / ``CudnnGRU`` / ``CudnnRNN`` become stacked Keras layers
(``Bidirectional`` for bidirectional ones, ``Dropout`` between layers, masked steps output zero),
the canonical weights converted (docs/cudnn_rnn.md §6.5). What has no stock twin is a
``ValueError`` naming the layer and the reason: a projection LSTM (``num_proj``), ``return_state``
or ``time_major`` on a CudnnRNN layer, and ``LSTMBlockCell`` (peepholes, cell clipping and
TensorFlow's forget-bias gate have no Keras cell).
"""

import keras
import numpy as np

from tf_lstm_ops.keras.cells import GRUCell, LSTMCell, SimpleRNNCell
from tf_lstm_ops.keras.cudnn_rnn import CudnnRNN
from tf_lstm_ops.keras.drop_in import GRU, LSTM, SimpleRNN
from tf_lstm_ops.keras.lstm_block_cell import LSTMBlockCell

_DROP_INS = (LSTM, GRU, SimpleRNN)
_DROP_IN_CELLS = (LSTMCell, GRUCell, SimpleRNNCell)


def _no_twin(layer, reason):
    return ValueError("tf_lstm_ops.keras.to_stock_keras: layer %r (%s) has no stock Keras twin: %s"
                      % (layer.name, type(layer).__name__, reason))


def _stock_drop_in(layer):
    """A drop-in layer's (or cell's) Keras class with its config (its weights are set after
    cloning)."""
    zoneout = layer._zoneout_config()
    if zoneout:
        raise _no_twin(layer, "%s: Keras' layers have no zoneout" % ", ".join(
            "%s=%g" % item for item in zoneout.items()))
    return layer._keras_class.from_config(layer.get_config())


def _stock_layers_of(layer):
    """The stacked Keras layers equal to a CudnnRNN layer, unbuilt, and a function that sets their
    weights from the layer's canonical weights once they are built."""
    if layer.num_proj:
        raise _no_twin(layer, "num_proj=%d: Keras has no projection LSTM" % layer.num_proj)
    if layer.return_state:
        raise _no_twin(layer, "return_state=True: the final states of every layer and direction")
    if layer.time_major:
        raise _no_twin(layer, "time_major=True: Keras' layers are batch-major")
    H, L, D = layer.units, layer.num_layers, layer.num_dirs
    mode = layer.rnn_mode
    rnns, stack = [], []
    for index in range(L):
        last = index == L - 1
        sequences = layer.return_sequences or not last
        # cuDNN's outputs are zero at masked steps; its final output is the last valid step's
        # (Keras' zero_output_for_mask would zero that too for a padded example).
        kw = dict(return_sequences=sequences, zero_output_for_mask=sequences)
        if mode == "lstm":
            make = lambda: keras.layers.LSTM(H, **kw)  # noqa: E731
        elif mode == "gru":
            make = lambda: keras.layers.GRU(H, reset_after=True, **kw)  # noqa: E731
        else:
            make = lambda: keras.layers.SimpleRNN(H, activation=mode[4:], **kw)  # noqa: E731
        if index > 0 and layer.dropout:
            stack.append(keras.layers.Dropout(layer.dropout))  # cuDNN drops layer inputs 1..L-1
        rnn = keras.layers.Bidirectional(make()) if D == 2 else make()
        rnns.append(rnn)
        stack.append(rnn)

    def set_weights():
        weights, biases = layer.get_canonical_weights()
        G = len(weights) // (L * D) // 2
        per_pseudo = []
        for p in range(L * D):
            w = weights[2 * G * p: 2 * G * p + G]          # W_g [H, in]
            r = weights[2 * G * p + G: 2 * G * (p + 1)]    # R_g [H, H]
            b_w = biases[2 * G * p: 2 * G * p + G]         # b_Wg [H]
            b_r = biases[2 * G * p + G: 2 * G * (p + 1)]   # b_Rg [H]
            per_pseudo.append(_keras_weights(mode, w, r, b_w, b_r))
        for index, rnn in enumerate(rnns):
            rnn.set_weights(sum(per_pseudo[index * D:(index + 1) * D], []))

    return stack, set_weights


def _keras_weights(mode, w, r, b_w, b_r):
    """One pseudo-layer's canonical matrices and biases (cuDNN gate order) as the weights of the
    Keras layer: kernel [in, G*H], recurrent_kernel [H, G*H], bias."""
    if mode == "gru":
        order = [1, 0, 2]  # cuDNN r, z, h -> Keras z, r, h
        w, r, b_w, b_r = ([a[g] for g in order] for a in (w, r, b_w, b_r))
        bias = np.stack([np.concatenate(b_w), np.concatenate(b_r)])  # [2, 3H]: input, recurrent
    else:  # LSTM gates i, f, c, o in both; one bias in Keras (the two add up)
        bias = np.concatenate([bw + br for bw, br in zip(b_w, b_r)])
    kernel = np.concatenate([m.T for m in w], axis=1)
    recurrent = np.concatenate([m.T for m in r], axis=1)
    return [kernel, recurrent, bias]


def _convert(layer):
    """(stock layers replacing `layer`, in call order; a function that sets their weights once
    they are built)."""
    if not isinstance(layer, keras.layers.Layer):  # an op of the functional graph (no weights)
        return [layer], lambda: None
    if isinstance(layer, _DROP_INS):
        twin = _stock_drop_in(layer)
    elif isinstance(layer, keras.layers.Bidirectional) and isinstance(layer.forward_layer,
                                                                      _DROP_INS):
        config = layer.get_config()
        config.pop("layer"), config.pop("backward_layer", None)
        twin = keras.layers.Bidirectional(_stock_drop_in(layer.forward_layer),
                                          backward_layer=_stock_drop_in(layer.backward_layer),
                                          **config)
    elif isinstance(layer, CudnnRNN):
        return _stock_layers_of(layer)
    elif isinstance(getattr(layer, "cell", None), _DROP_IN_CELLS):
        config = layer.get_config()
        config.pop("cell")
        twin = keras.layers.RNN(_stock_drop_in(layer.cell), **config)
    elif isinstance(getattr(layer, "cell", None), LSTMBlockCell):
        raise _no_twin(layer, "LSTMBlockCell's forget bias, peepholes and cell clipping have no "
                              "Keras cell")
    else:
        twin = layer.__class__.from_config(layer.get_config())
    return [twin], lambda: twin.set_weights(layer.get_weights())


def to_stock_keras(model):
    """The same model with every tf_lstm_ops layer replaced by stock Keras layers holding the
    same weights (see the module doc); other layers are cloned with their weights. Its outputs
    equal the original's up to float rounding; it runs without ``import tf_lstm_ops``. Takes a
    built Sequential or functional model."""
    setters = []
    if isinstance(model, keras.Sequential):
        layers = []
        for layer in model.layers:
            stock, set_weights = _convert(layer)
            layers += stock
            setters.append(set_weights)
        stock_model = keras.Sequential([keras.Input(batch_shape=model.inputs[0].shape)] + layers,
                                       name=model.name)
    else:
        stacks = {}  # id of a placeholder layer -> the stacked layers it stands for

        def clone(layer):
            stock, set_weights = _convert(layer)
            setters.append(set_weights)
            if len(stock) == 1:
                return stock[0]
            placeholder = keras.layers.Identity(name=layer.name)
            stacks[id(placeholder)] = stock
            return placeholder

        def call(layer, *args, **kwargs):
            # A stack is called layer by layer in the new graph, so that a mask flows through it
            # (a Sequential inside a functional model would drop the mask).
            if id(layer) not in stacks:
                return layer(*args, **kwargs)
            outputs = args[0]
            for stacked in stacks[id(layer)]:
                outputs = stacked(outputs)
            return outputs

        stock_model = keras.models.clone_model(model, clone_function=clone, call_function=call)
    for set_weights in setters:
        set_weights()
    return stock_model
