"""Gradients of the LSTM block gradient ops (LSTMBlockCellGrad, BlockLSTMGrad, BlockLSTMGradV2,
BlockLSTMFullGrad): second derivatives, and the JVPs `tf.autodiff.ForwardAccumulator` builds from
them.

A gradient op is a function of the forward inputs, the saved activations (i, cs, f, o, ci, co,
h) and the output gradients; docs/block_lstm.md §6 gives it step by step in terms of the saved
activations alone (no forget bias or clip: they are baked into the activations, and the clip is
straight-through). That backward is written here with TensorFlow ops (a reverse `tf.scan` over
the steps), and each op's gradient is the gradient of that composite w.r.t. every input: the
saved activations included, so the chain continues through the forward op's own registered
gradient (BlockLSTMFullGrad takes gradients for all seven outputs, docs/block_lstm.md §6.5).
Every order works.

Where BlockLSTMFullGradGrad has a kernel (the CPU; the GPU in a CUDA build of the library) the
sequence gradient ops' gradients run it instead (docs/block_lstm.md §7.2: the backward again,
then its adjoint as one forward sweep); the composite serves a GPU without that kernel,
LSTMBlockCellGrad (one step: nothing to fuse) and the fused op's own gradient (third order and
up).
"""

import tensorflow as tf

from tf_lstm_ops._gradients._common import has_kernel_where, in_compute_type, string_attr
from tf_lstm_ops._gradients.block_lstm import _INPUTS, _OUTPUTS as _ACTIVATIONS
from tf_lstm_ops._loader import OP_NAMESPACE, library


def _place(layout, d_i, d_c, d_f, d_o):
    """The four pre-activation gradients on the 4H axis in the op's layout (§1.2)."""
    order = (d_i, d_c, d_f, d_o) if layout == "ICFO" else (d_i, d_f, d_c, d_o)
    return tf.concat(order, axis=-1)


def _cell_backward(use_peephole, wci, wcf, wco, cs_prev, i, cs, f, o, ci, co, dcs, dh,
                   extra=None):
    """§6.1 (+ §6.5 with extra = (i_grad, f_grad, o_grad, ci_grad, co_grad)): the pre-activation
    gradients (δi, δci, δf, δo) and cs_prev's gradient."""
    d_o = o * (1 - o) * dh * co
    d_cs = (1 - co * co) * dh * o + dcs
    if extra is not None:
        i_grad, f_grad, o_grad, ci_grad, co_grad = extra
        d_o += o * (1 - o) * o_grad
        d_cs += (1 - co * co) * co_grad
    if use_peephole:
        d_cs += d_o * wco
    d_ci = (1 - ci * ci) * d_cs * i
    d_f = f * (1 - f) * d_cs * cs_prev
    d_i = i * (1 - i) * d_cs * ci
    if extra is not None:
        d_ci += (1 - ci * ci) * ci_grad
        d_f += f * (1 - f) * f_grad
        d_i += i * (1 - i) * i_grad
    cs_prev_grad = d_cs * f
    if use_peephole:
        cs_prev_grad += d_i * wci + d_f * wcf
    return d_i, d_ci, d_f, d_o, cs_prev_grad


def _peephole_grads(use_peephole, wci, d_i, d_f, d_o, cs_prev, cs, axes):
    if not use_peephole:
        return [tf.zeros_like(wci)] * 3
    return [tf.reduce_sum(d * s, axes) for d, s in ((d_i, cs_prev), (d_f, cs_prev), (d_o, cs))]


def cell_grad(inputs, use_peephole):
    """LSTMBlockCellGrad: (cs_prev_grad, dicfo (ICFO), wci_grad, wcf_grad, wco_grad)."""
    x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad, h_grad = inputs
    d_i, d_ci, d_f, d_o, cs_prev_grad = _cell_backward(use_peephole, wci, wcf, wco, cs_prev, i,
                                                       cs, f, o, ci, co, cs_grad, h_grad)
    return [cs_prev_grad, _place("ICFO", d_i, d_ci, d_f, d_o)] + _peephole_grads(
        use_peephole, wci, d_i, d_f, d_o, cs_prev, cs, 0)


def sequence_grad(seq_len_max, inputs, activations, grads, use_peephole, layout):
    """§6.4 + §6.5: (x_grad, cs_prev_grad, h_prev_grad, w_grad, wci_grad, wcf_grad, wco_grad,
    b_grad). grads: the seven output gradients in _ACTIVATIONS' order (i_grad ... h_grad)."""
    x, cs_prev, h_prev, w, wci, wcf, wco, b = inputs
    i, cs, f, o, ci, co, h = activations
    i_grad, cs_grad, f_grad, o_grad, ci_grad, co_grad, h_grad = grads
    steps = tf.shape(x)[0]
    width = x.shape[2] if x.shape[2] is not None else tf.shape(x)[2]  # static when known, so
    # the scan's carries keep one shape
    valid = tf.range(steps, dtype=tf.int64) < seq_len_max
    # the state each step starts from (sliced after the concat, so that T = 0 gives none)
    cs_before = tf.concat([cs_prev[None], cs], 0)[:-1]
    h_before = tf.concat([h_prev[None], h], 0)[:-1]

    def step(carry, elems):
        carry_c, carry_h, _, _ = carry
        valid_t, cp, *per_step = elems
        i_t, cs_t, f_t, o_t, ci_t, co_t, i_g, cs_g, f_g, o_g, ci_g, co_g, h_g = per_step
        d_i, d_ci, d_f, d_o, cs_prev_grad = _cell_backward(
            use_peephole, wci, wcf, wco, cp, i_t, cs_t, f_t, o_t, ci_t, co_t, carry_c + cs_g,
            carry_h + h_g, (i_g, f_g, o_g, ci_g, co_g))
        gates = _place(layout, d_i, d_ci, d_f, d_o)
        xh_grad = tf.matmul(gates, w, transpose_b=True)
        # steps at or past seq_len_max contribute nothing and pass no gradient
        gates = tf.where(valid_t, gates, tf.zeros_like(gates))
        return (tf.where(valid_t, cs_prev_grad, carry_c), tf.where(valid_t, xh_grad[:, width:],
                                                                   carry_h),
                gates, tf.where(valid_t, xh_grad[:, :width], tf.zeros_like(xh_grad[:, :width])))

    zeros, batch = tf.zeros_like(cs_prev), tf.shape(x)[1]
    init = (zeros, zeros, tf.zeros([batch, tf.shape(w)[1]], x.dtype),
            tf.zeros([batch, width], x.dtype))
    carry_c, carry_h, gates, x_grad = tf.scan(
        step, (valid, cs_before, i, cs, f, o, ci, co, i_grad, cs_grad, f_grad, o_grad, ci_grad,
               co_grad, h_grad), initializer=init, reverse=True)
    w_grad = tf.einsum("tbk,tbg->kg", tf.concat([x, h_before], -1), gates)
    b_grad = tf.reduce_sum(gates, [0, 1])
    d_i, d_c, d_f, d_o = _split(layout, gates)
    # δi, δf, δo from the gate gradients (zero past seq_len_max, as `gates`)
    peepholes = _peephole_grads(use_peephole, wci, d_i, d_f, d_o, cs_before, cs, [0, 1])
    return [x_grad, _first(carry_c, cs_prev), _first(carry_h, h_prev), w_grad] + peepholes + [
        b_grad]


def _split(layout, gates):
    a, b, c, d = tf.split(gates, 4, axis=-1)
    return (a, b, c, d) if layout == "ICFO" else (a, c, b, d)  # (δi, δci, δf, δo)


def _first(carries, like):
    """The carry after the last processed step (t = 0), zeros when there are no steps."""
    return tf.concat([carries, tf.zeros_like(like)[None]], 0)[0]


def _grad_of(op, grads, composite):
    """The gradient of op = composite(op.inputs) w.r.t. every floating input."""
    inputs = list(op.inputs)
    floating = [k for k, t in enumerate(inputs) if t.dtype.is_floating]
    upstream = [tf.zeros_like(out) if g is None else g for g, out in zip(grads, op.outputs)]
    with tf.GradientTape() as tape:
        tape.watch([inputs[k] for k in floating])
        outputs = in_compute_type(composite, inputs)
    result = tape.gradient(outputs, [inputs[k] for k in floating], output_gradients=upstream,
                           unconnected_gradients=tf.UnconnectedGradients.ZERO)
    full = [None] * len(inputs)
    for k, g in zip(floating, result):
        full[k] = g
    return full


@tf.RegisterGradient(OP_NAMESPACE + "LSTMBlockCellGrad")
def _lstm_block_cell_grad_grad(op, *grads):
    return _grad_of(op, grads, lambda t: cell_grad(t, op.get_attr("use_peephole")))


# BlockLSTMFullGrad's float inputs; its results are the gradients of the first eight (_INPUTS)
_FULL_GRAD_INPUTS = _INPUTS + _ACTIVATIONS + tuple(name + "_grad" for name in _ACTIVATIONS)


def _fused_sequence_grad_grad(op, grads, layout, full):
    """The fused sweep (docs/block_lstm.md §7.2): BlockLSTMFullGradGrad's gradients w.r.t. every
    input; BlockLSTMGrad(V2) run it with zero i, f, o, ci, co gradients."""
    inputs = list(op.inputs)
    if not full:  # (..., cs_grad, h_grad) -> the seven output gradients
        zero = tf.zeros_like(inputs[16])
        inputs = inputs[:16] + [zero, inputs[16], zero, zero, zero, zero, inputs[17]]
    args = dict(zip(_FULL_GRAD_INPUTS, inputs[1:]))
    for name, grad, out in zip(_INPUTS, grads, op.outputs):
        args["d_" + name + "_grad"] = tf.zeros_like(out) if grad is None else grad
    result = library.op("BlockLSTMFullGradGrad")(
        seq_len_max=inputs[0], use_peephole=op.get_attr("use_peephole"), gate_layout=layout,
        **args)
    result = [None] + list(result)  # no gradient for the int64 seq_len_max
    return result if full else result[:16] + [result[17], result[22]]


def _sequence_grad_grad(op, grads, layout, full):
    if has_kernel_where("BlockLSTMFullGradGrad", op):  # CPU; GPU in a CUDA build
        return _fused_sequence_grad_grad(op, grads, layout, full)

    def composite(t):
        # inputs: seq_len_max, the 8 forward inputs, the 7 activations, then the output
        # gradients (all seven for BlockLSTMFullGrad, cs_grad and h_grad otherwise)
        seq_len_max, inputs, activations = t[0], t[1:9], t[9:16]
        if full:
            out_grads = t[16:23]
        else:
            zero = tf.zeros_like(t[16])
            out_grads = [zero, t[16], zero, zero, zero, zero, t[17]]
        return sequence_grad(seq_len_max, inputs, activations, out_grads,
                             op.get_attr("use_peephole"), layout)
    return _grad_of(op, grads, composite)


@tf.RegisterGradient(OP_NAMESPACE + "BlockLSTMGrad")
def _block_lstm_grad_grad(op, *grads):
    return _sequence_grad_grad(op, grads, "ICFO", full=False)


@tf.RegisterGradient(OP_NAMESPACE + "BlockLSTMGradV2")
def _block_lstm_grad_v2_grad(op, *grads):
    return _sequence_grad_grad(op, grads, "IFCO", full=False)


@tf.RegisterGradient(OP_NAMESPACE + "BlockLSTMFullGrad")
def _block_lstm_full_grad_grad(op, *grads):
    return _sequence_grad_grad(op, grads, string_attr(op, "gate_layout"), full=True)


@tf.RegisterGradient(OP_NAMESPACE + "BlockLSTMFullGradGrad")
def _block_lstm_full_grad_grad_grad(op, *grads):
    """Third and higher orders: the fused op equals the composite's gradient (a VJP of
    sequence_grad), so its gradient is that VJP's gradient: slower, but exact."""
    layout, use_peephole = string_attr(op, "gate_layout"), op.get_attr("use_peephole")

    def composite(t):
        seq_len_max, primals, cotangents = t[0], list(t[1:23]), t[23:31]
        with tf.GradientTape() as tape:
            tape.watch(primals)
            out = sequence_grad(seq_len_max, primals[:8], primals[8:15], primals[15:22],
                                use_peephole, layout)
        return tape.gradient(out, primals, output_gradients=list(cotangents),
                             unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return _grad_of(op, grads, composite)
