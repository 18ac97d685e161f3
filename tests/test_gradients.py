"""Registered gradients of raw.LSTMBlockCell / raw.BlockLSTM / raw.BlockLSTMV2: GradientTape
against the reference's true gradient (all seven outputs, straight-through clip), against TF
where TF is right, and tf.test.compute_gradient (finite differences) in float64."""

import numpy as np
import pytest
import tensorflow as tf

from tools.references import block_lstm as ref
from conftest import (
    CELL_INPUTS, OUTPUTS, SEQ_SHAPE_IDS, SEQ_SHAPES, V1_ATTR_IDS, V1_ATTRS, V2_ATTR_IDS,
    V2_ATTRS, assert_close, attrs_for, random_params, tf_inputs, to_tf,
)

TAPE_TOL = {"float64": 1e-10, "float32": 1e-5, "half": 2e-2, "bfloat16": 6e-2}

SEQ_OPS = [("BlockLSTM", a) for a in V1_ATTRS] + [("BlockLSTMV2", a) for a in V2_ATTRS]
SEQ_OP_IDS = ["V1-" + i for i in V1_ATTR_IDS] + ["V2-" + i for i in V2_ATTR_IDS]


def tape_grads(fn, inputs, weights, dtype, names=CELL_INPUTS):
    """Gradients of sum_k <weights[k], fn(**inputs).k> w.r.t. inputs[names] (float64 numpy)."""
    with tf.GradientTape() as tape:
        tape.watch([inputs[k] for k in names])
        out = fn(**inputs)
        loss = tf.add_n([tf.reduce_sum(tf.cast(getattr(out, k), tf.float64) * weights[k])
                         for k in weights])
    grads = tape.gradient(loss, {k: inputs[k] for k in names})
    return {k: None if g is None else g.numpy().astype(np.float64) for k, g in grads.items()}


def ref_vjp(op, p, weights, eff, L=None):
    if op == "LSTMBlockCell":
        return ref.lstm_cell_vjp(**p, out_grads=weights, **eff)
    return ref.block_lstm_vjp(L, **p, out_grads=weights, **eff)


def out_shape(op, T, B, H):
    return (B, H) if op == "LSTMBlockCell" else (T, B, H)


# ------------------------------------------------------------------------------------------
# tape vs reference
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op,attrs", SEQ_OPS, ids=SEQ_OP_IDS)
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES[::2], ids=SEQ_SHAPE_IDS[::2])
def test_tape_all_outputs_vs_reference(raw, rng, dtype, op, attrs, T, B, I, H, L):
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, attrs)
    weights = {k: rng.normal(size=(T, B, H)) for k in OUTPUTS}
    fn = lambda **kw: getattr(raw, op)(**kw, **kwargs)  # noqa: E731
    grads = tape_grads(fn, tf_inputs(p, dtype, L), weights, dtype)
    expect = ref_vjp(op, p, weights, eff, L)
    for k in CELL_INPUTS:
        assert_close(grads[k], expect[k], TAPE_TOL[dtype], name=k)


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("op,attrs", [SEQ_OPS[1], SEQ_OPS[3], SEQ_OPS[7], SEQ_OPS[9]],
                         ids=[SEQ_OP_IDS[1], SEQ_OP_IDS[3], SEQ_OP_IDS[7], SEQ_OP_IDS[9]])
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES[1::3], ids=SEQ_SHAPE_IDS[1::3])
def test_tape_low_precision_vs_reference(raw, rng, dtype, op, attrs, T, B, I, H, L):
    """Only the rounding of the forward activations (fed to the backward) and of the results
    separates these from the float64 gradient."""
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, attrs)
    weights = {k: rng.normal(size=(T, B, H)) for k in OUTPUTS}
    fn = lambda **kw: getattr(raw, op)(**kw, **kwargs)  # noqa: E731
    grads = tape_grads(fn, tf_inputs(p, dtype, L), weights, dtype)
    expect = ref_vjp(op, p, weights, eff, L)
    for k in CELL_INPUTS:
        assert_close(grads[k], expect[k], TAPE_TOL[dtype], name=k)


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("op", ["LSTMBlockCell", "BlockLSTM", "BlockLSTMV2"])
@pytest.mark.parametrize("use_peephole", [False, True])
def test_tape_each_output_alone(raw, rng, output, op, use_peephole):
    """The gradient through every single output is propagated (TF drops i, f, o, ci, co)."""
    T, B, I, H, L = 4, 3, 2, 4, 3
    p = random_params(rng, B, I, H, "float32", T=None if op == "LSTMBlockCell" else T)
    kwargs, eff = attrs_for(op, dict(use_peephole=use_peephole, cell_clip=0.9))
    weights = {output: rng.normal(size=out_shape(op, T, B, H))}
    fn = lambda **kw: getattr(raw, op)(**kw, **kwargs)  # noqa: E731
    inputs = tf_inputs(p, "float32", None if op == "LSTMBlockCell" else L)
    grads = tape_grads(fn, inputs, weights, "float32")
    expect = ref_vjp(op, p, weights, eff, L)
    for k in CELL_INPUTS:
        assert_close(grads[k], expect[k], 1e-5, name=k)
    assert np.max(np.abs(grads["w"])) > 1e-3  # every output depends on w


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
@pytest.mark.parametrize("L", [0, 2, 5])
def test_tape_gradient_of_outputs_past_seq_len_max_is_zero(raw, rng, op, L):
    T, B, I, H = 5, 2, 3, 4
    p = random_params(rng, B, I, H, "float32", T=T)
    weights = {}
    for k in OUTPUTS:
        weights[k] = rng.normal(size=(T, B, H))
        weights[k][:L] = 0
    fn = lambda **kw: getattr(raw, op)(**kw, use_peephole=True)  # noqa: E731
    grads = tape_grads(fn, tf_inputs(p, "float32", L), weights, "float32")
    for k in CELL_INPUTS:
        assert grads[k] is not None and grads[k].shape == p[k].shape
        assert np.all(grads[k] == 0), k


@pytest.mark.parametrize("op,attrs", [SEQ_OPS[3], SEQ_OPS[8]], ids=[SEQ_OP_IDS[3], SEQ_OP_IDS[8]])
def test_tape_in_function(raw, rng, eager_or_function, op, attrs):
    T, B, I, H, L = 4, 3, 2, 5, 3
    p = random_params(rng, B, I, H, "float32", T=T)
    kwargs, eff = attrs_for(op, attrs)
    weights = {k: rng.normal(size=(T, B, H)) for k in OUTPUTS}

    def grads_fn(**inputs):
        with tf.GradientTape() as tape:
            tape.watch([inputs[k] for k in CELL_INPUTS])
            out = getattr(raw, op)(**inputs, **kwargs)
            loss = tf.add_n([tf.reduce_sum(getattr(out, k) * to_tf(weights[k], "float32"))
                             for k in OUTPUTS])
        return tape.gradient(loss, {k: inputs[k] for k in CELL_INPUTS})

    grads = eager_or_function(grads_fn, **tf_inputs(p, "float32", L))
    expect = ref_vjp(op, p, weights, eff, L)
    for k in CELL_INPUTS:
        assert_close(grads[k], expect[k], 1e-5, name=k)


# ------------------------------------------------------------------------------------------
# against TF where TF is right; TF's bugs are fixed
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("loss_on", ["h", "cs", "cs+h"])
@pytest.mark.parametrize("attrs", V1_ATTRS, ids=V1_ATTR_IDS)
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES[::3], ids=SEQ_SHAPE_IDS[::3])
def test_tape_v1_h_cs_losses_vs_tf(raw, rng, loss_on, attrs, T, B, I, H, L):
    p = random_params(rng, B, I, H, "float32", T=T)
    kwargs, eff = attrs_for("BlockLSTM", attrs)
    weights = {k: rng.normal(size=(T, B, H)) for k in loss_on.split("+")}
    ours = tape_grads(lambda **kw: raw.BlockLSTM(**kw, **kwargs), tf_inputs(p, "float32", L),
                      weights, "float32")
    theirs = tape_grads(lambda **kw: tf.raw_ops.BlockLSTM(**kw, **kwargs),
                        tf_inputs(p, "float32", L), weights, "float32")
    expect = ref_vjp("BlockLSTM", p, weights, eff, L)
    for k in CELL_INPUTS:
        assert_close(ours[k], theirs[k], 1e-5, name="vs tf " + k)
        assert_close(ours[k], expect[k], 1e-5, name="vs ref " + k)


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("T,B,I,H,L", [(4, 2, 3, 4, 4), (5, 3, 2, 5, 3), (1, 2, 2, 3, 1)])
def test_tape_v2_uses_ifco_gradient(raw, rng, use_peephole, T, B, I, H, L):
    """TF's tape gradient of BlockLSTMV2 applies the ICFO gradient (docs/block_lstm.md §9.1); ours
    is the true IFCO gradient, equal to the reference and to TF's own (correct) BlockLSTMGradV2."""
    p = random_params(rng, B, I, H, "float32", T=T)
    weights = {"h": rng.normal(size=(T, B, H)), "cs": rng.normal(size=(T, B, H))}
    eff = dict(forget_bias=0.0, cell_clip=0.0, use_peephole=use_peephole, layout="IFCO")
    inputs = tf_inputs(p, "float32", L)
    ours = tape_grads(lambda **kw: raw.BlockLSTMV2(**kw, use_peephole=use_peephole), inputs,
                      weights, "float32")
    expect = ref_vjp("BlockLSTMV2", p, weights, eff, L)
    fwd = tf.raw_ops.BlockLSTMV2(**inputs, use_peephole=use_peephole)
    tf_grad_op = tf.raw_ops.BlockLSTMGradV2(
        **inputs, **fwd._asdict(), cs_grad=to_tf(weights["cs"], "float32"),
        h_grad=to_tf(weights["h"], "float32"), use_peephole=use_peephole)
    for k in CELL_INPUTS:
        assert_close(ours[k], expect[k], 1e-5, name="vs ref " + k)
        assert_close(ours[k], getattr(tf_grad_op, k + "_grad").numpy(), 1e-5,
                     name="vs BlockLSTMGradV2 " + k)
    # the check is sensitive: the ICFO gradient on this IFCO forward is far from the truth
    acts = ref.block_lstm(L, **p, **eff)
    wrong = ref.block_lstm_grad(L, **p, **acts, cs_grad=weights["cs"], h_grad=weights["h"],
                                use_peephole=use_peephole, layout="ICFO")
    assert np.max(np.abs(wrong["w_grad"] - expect["w"])) > 1e-2
    assert np.max(np.abs(ours["w"] - wrong["w_grad"])) > 1e-2


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("B,I,H", [(3, 2, 5), (1, 1, 1), (4, 6, 3)])
@pytest.mark.parametrize("losses", ["all", "h"])
def test_tape_cell_equals_block_lstm_with_one_step(raw, rng, use_peephole, B, I, H, losses):
    p = random_params(rng, B, I, H, "float32")
    names = OUTPUTS if losses == "all" else ("h",)
    weights = {k: rng.normal(size=(B, H)) for k in names}
    attrs = dict(use_peephole=use_peephole, cell_clip=0.8, forget_bias=0.4)
    cell = tape_grads(lambda **kw: raw.LSTMBlockCell(**kw, **attrs), tf_inputs(p, "float32"),
                      weights, "float32")
    q = dict(p, x=p["x"][None])
    block = tape_grads(lambda **kw: raw.BlockLSTM(**kw, **attrs), tf_inputs(q, "float32", 1),
                       {k: v[None] for k, v in weights.items()}, "float32")
    block["x"] = block["x"][0]
    _, eff = attrs_for("LSTMBlockCell", attrs)
    expect = ref_vjp("LSTMBlockCell", p, weights, eff)
    for k in CELL_INPUTS:
        assert_close(cell[k], block[k], 1e-6, name="vs BlockLSTM " + k)
        assert_close(cell[k], expect[k], 1e-5, name="vs ref " + k)


@pytest.mark.parametrize("dtype", ["float32", "float64", "half"])
@pytest.mark.parametrize("attrs", V1_ATTRS, ids=V1_ATTR_IDS)
def test_tape_cell_vs_reference(raw, rng, dtype, attrs):
    """TF 2.x registers no gradient for LSTMBlockCell; ours is the true one."""
    B, I, H = 3, 4, 5
    p = random_params(rng, B, I, H, dtype)
    kwargs, eff = attrs_for("LSTMBlockCell", attrs)
    weights = {k: rng.normal(size=(B, H)) for k in OUTPUTS}
    grads = tape_grads(lambda **kw: raw.LSTMBlockCell(**kw, **kwargs), tf_inputs(p, dtype),
                       weights, dtype)
    expect = ref_vjp("LSTMBlockCell", p, weights, eff)
    for k in CELL_INPUTS:
        assert_close(grads[k], expect[k], TAPE_TOL[dtype], name=k)


def test_tape_chained_cells_vs_sequence(raw, rng):
    """Gradients flow correctly through cs/h of chained cells (a cell-based RNN)."""
    T, B, I, H = 3, 2, 3, 4
    p = random_params(rng, B, I, H, "float64", T=T)
    weights = {k: rng.normal(size=(T, B, H)) for k in OUTPUTS}
    inputs = tf_inputs(p, "float64")
    with tf.GradientTape() as tape:
        tape.watch(list(inputs.values()))
        c, h, loss = inputs["cs_prev"], inputs["h_prev"], 0.0
        for t in range(T):
            out = raw.LSTMBlockCell(x=inputs["x"][t], cs_prev=c, h_prev=h, w=inputs["w"],
                                    wci=inputs["wci"], wcf=inputs["wcf"], wco=inputs["wco"],
                                    b=inputs["b"], use_peephole=True, cell_clip=-1.0)
            loss += tf.add_n([tf.reduce_sum(getattr(out, k) * weights[k][t]) for k in OUTPUTS])
            c, h = out.cs, out.h
    grads = tape.gradient(loss, inputs)
    expect = ref.block_lstm_vjp(T, **p, out_grads=weights, use_peephole=True, cell_clip=-1.0)
    for k in CELL_INPUTS:
        assert_close(grads[k].numpy(), expect[k], 1e-10, name=k)


# ------------------------------------------------------------------------------------------
# finite differences (float64, no active clipping)
# ------------------------------------------------------------------------------------------

FD_SEQ_CASES = [
    # op, (T, B, I, H, L), use_peephole, cell_clip
    ("BlockLSTM", (3, 2, 3, 2, 3), False, -1.0),
    ("BlockLSTM", (3, 2, 3, 2, 2), True, 0.0),
    ("BlockLSTM", (3, 2, 2, 2, 0), True, -1.0),
    ("BlockLSTM", (2, 1, 1, 2, 1), False, 100.0),
    ("BlockLSTMV2", (3, 2, 3, 2, 3), True, 0.0),
    ("BlockLSTMV2", (3, 1, 2, 2, 2), False, 0.0),
    ("BlockLSTMV2", (3, 2, 2, 1, 0), False, -1.0),
    ("BlockLSTMV2", (2, 2, 3, 2, 1), True, 100.0),
]


def _fd_check(fn, inputs, names, tol=1e-6):
    """tf.test.compute_gradient of the scalar fn(*tensors); max |theoretical - numeric|."""
    theoretical, numerical = tf.test.compute_gradient(fn, [inputs[k] for k in names],
                                                      delta=1e-5)
    for name, th, nu in zip(names, theoretical, numerical):
        assert th.shape == nu.shape
        err = np.max(np.abs(th - nu)) if th.size else 0.0
        assert err <= tol, "%s: |theoretical - numeric| = %.3g" % (name, err)


def _scalar_loss(op, kwargs, weights, seq_len_max=None):
    def loss(*xs):
        args = dict(zip(CELL_INPUTS, xs))
        if seq_len_max is not None:
            args["seq_len_max"] = tf.constant(seq_len_max, tf.int64)
        out = op(**args, **kwargs)
        return tf.add_n([tf.reduce_sum(getattr(out, k) * weights[k]) for k in weights])
    return loss


@pytest.mark.parametrize("losses", ["all", "h"])
@pytest.mark.parametrize("op,shape,use_peephole,cell_clip", FD_SEQ_CASES,
                         ids=["%s-T%dB%dI%dH%dL%d-pp%s-clip%s" % (c[0], *c[1], c[2], c[3])
                              for c in FD_SEQ_CASES])
def test_compute_gradient_sequence(raw, rng, losses, op, shape, use_peephole, cell_clip):
    T, B, I, H, L = shape
    p = random_params(rng, B, I, H, "float64", T=T)
    kwargs, eff = attrs_for(op, dict(use_peephole=use_peephole, cell_clip=cell_clip,
                                     forget_bias=0.6))
    assert cell_clip <= 0 or np.max(np.abs(ref.block_lstm(L, **p, **eff)["cs"])) < cell_clip
    names = OUTPUTS if losses == "all" else ("h",)
    weights = {k: tf.constant(rng.normal(size=(T, B, H))) for k in names}
    _fd_check(_scalar_loss(getattr(raw, op), kwargs, weights, L), tf_inputs(p, "float64"),
              CELL_INPUTS)


@pytest.mark.parametrize("losses", ["all", "h"])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("B,I,H,cell_clip", [(2, 3, 2, -1.0), (1, 2, 2, 0.0), (2, 1, 1, 100.0)])
def test_compute_gradient_cell(raw, rng, losses, use_peephole, B, I, H, cell_clip):
    p = random_params(rng, B, I, H, "float64")
    kwargs = dict(use_peephole=use_peephole, cell_clip=cell_clip, forget_bias=-0.5)
    names = OUTPUTS if losses == "all" else ("h",)
    weights = {k: tf.constant(rng.normal(size=(B, H))) for k in names}
    _fd_check(_scalar_loss(raw.LSTMBlockCell, kwargs, weights), tf_inputs(p, "float64"),
              CELL_INPUTS)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_compute_gradient_vector_output(raw, rng, op):
    """Full Jacobian (one backward pass per output element) of the concatenated outputs."""
    T, B, I, H, L = 2, 2, 2, 2, 2
    p = random_params(rng, B, I, H, "float64", T=T)

    def fn(*xs):
        out = getattr(raw, op)(seq_len_max=tf.constant(L, tf.int64),
                               **dict(zip(CELL_INPUTS, xs)), use_peephole=True, cell_clip=-1.0)
        return tf.concat([tf.reshape(getattr(out, k), [-1]) for k in OUTPUTS], 0)

    _fd_check(fn, tf_inputs(p, "float64"), CELL_INPUTS)
