"""Pythonic wrappers over the raw ops, with defaults a model usually wants."""

import collections

import tensorflow as tf

from tf_lstm_ops._loader import library

LSTMOutputs = collections.namedtuple("LSTMOutputs", ["i", "cs", "f", "o", "ci", "co", "h"])
LSTMOutputs.__doc__ = """Saved activations of an LSTM run: input gate i, cell state cs (after
clipping), forget gate f, output gate o, cell input ci = tanh(c-gate), co = tanh(cs), and the
hidden state h. Each is [T, B, H] for sequences, [B, H] for one cell step."""

_LAYOUTS = ("ICFO", "IFCO")


def _peephole_args(peepholes, cell_size, dtype):
    if peepholes is None:
        zeros = tf.zeros([cell_size], dtype)
        return dict(wci=zeros, wcf=zeros, wco=zeros, use_peephole=False)
    wci, wcf, wco = (tf.convert_to_tensor(p, dtype) for p in peepholes)
    return dict(wci=wci, wcf=wcf, wco=wco, use_peephole=True)


def _initial_state(state, batch_size, cell_size, dtype):
    if state is None:
        return tf.zeros(tf.stack([batch_size, cell_size]), dtype)
    return tf.convert_to_tensor(state, dtype)


def block_lstm(
    x,
    w,
    b,
    cs_prev=None,
    h_prev=None,
    peepholes=None,
    seq_len_max=None,
    gate_layout="IFCO",
    forget_bias=0.0,
    cell_clip=0.0,
    name=None,
):
    """Runs an LSTM over a time-major sequence in one fused op.

    Args:
      x: [T, B, I] inputs (half, bfloat16, float32 or float64).
      w: [I + H, 4H] fused weights; rows [0, I) multiply x, rows [I, I + H) multiply h.
      b: [4H] fused bias.
      cs_prev, h_prev: [B, H] initial cell and hidden state (zeros when None).
      peepholes: None, or (wci, wcf, wco), each [H]: diagonal peephole weights.
      seq_len_max: steps to run (int, default T); outputs past it are zero.
      gate_layout: order of the gate blocks along the 4H axis of w, b:
        "IFCO" (input, forget, cell input, output; BlockLSTMV2, cuDNN-like) or
        "ICFO" (input, cell input, forget, output; BlockLSTM / LSTMBlockCell).
      forget_bias: added to the forget gate's pre-activation.
      cell_clip: clip the cell state to [-cell_clip, cell_clip] when > 0 (default: no clipping;
        the gradient through the clip is straight-through, as in TF).
    Returns:
      LSTMOutputs, each [T, B, H].
    """
    layout = gate_layout.upper()
    if layout not in _LAYOUTS:
        raise ValueError("gate_layout must be one of %s, got %r" % (_LAYOUTS, gate_layout))
    with tf.name_scope(name or "block_lstm"):
        x = tf.convert_to_tensor(x)
        w = tf.convert_to_tensor(w, x.dtype)
        b = tf.convert_to_tensor(b, x.dtype)
        shape = tf.shape(x, out_type=tf.int64)
        cell_size = tf.shape(b, out_type=tf.int64)[0] // 4
        if seq_len_max is None:
            seq_len_max = shape[0]
        args = dict(
            seq_len_max=tf.cast(seq_len_max, tf.int64),
            x=x,
            cs_prev=_initial_state(cs_prev, shape[1], cell_size, x.dtype),
            h_prev=_initial_state(h_prev, shape[1], cell_size, x.dtype),
            w=w,
            cell_clip=float(cell_clip),
            **_peephole_args(peepholes, cell_size, x.dtype),
        )
        if layout == "ICFO":
            outputs = library.op("BlockLSTM")(b=b, forget_bias=float(forget_bias), **args)
        else:
            if forget_bias:
                # V2 has no forget bias attr: adding it to the f block of b is the same sum.
                f_block = tf.one_hot(1, 4, on_value=float(forget_bias), dtype=x.dtype)
                b = b + tf.repeat(f_block, tf.cast(cell_size, tf.int32))
            outputs = library.op("BlockLSTMV2")(b=b, **args)
        return LSTMOutputs(*outputs)


def lstm_block_cell(
    x, cs_prev, h_prev, w, b, peepholes=None, forget_bias=1.0, cell_clip=0.0, name=None
):
    """One LSTM step (ICFO gate layout: input, cell input, forget, output).

    Args:
      x: [B, I]; cs_prev, h_prev: [B, H]; w: [I + H, 4H]; b: [4H] (ICFO blocks).
      peepholes: None, or (wci, wcf, wco), each [H].
      forget_bias: added to the forget gate's pre-activation (default 1, like TF).
      cell_clip: clip the cell state to [-cell_clip, cell_clip] when > 0 (default: none).
    Returns:
      LSTMOutputs, each [B, H].
    """
    with tf.name_scope(name or "lstm_block_cell"):
        x = tf.convert_to_tensor(x)
        cs_prev = tf.convert_to_tensor(cs_prev, x.dtype)
        cell_size = tf.shape(cs_prev)[1]
        outputs = library.op("LSTMBlockCell")(
            x=x,
            cs_prev=cs_prev,
            h_prev=tf.convert_to_tensor(h_prev, x.dtype),
            w=tf.convert_to_tensor(w, x.dtype),
            b=tf.convert_to_tensor(b, x.dtype),
            forget_bias=float(forget_bias),
            cell_clip=float(cell_clip),
            **_peephole_args(peepholes, cell_size, x.dtype),
        )
        return LSTMOutputs(*outputs)
