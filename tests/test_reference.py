"""Validates the NumPy reference itself: against finite differences (float64, no clipping) and
against TensorFlow's own raw ops where TF is correct (everything except the BlockLSTMV2 tape
gradient, docs/block_lstm.md §9.1, and i/f/o/ci/co at t >= seq_len_max, which TF leaves
uninitialised)."""

import numpy as np
import pytest
import tensorflow as tf

from tools.references import block_lstm as ref
from conftest import (
    CELL_SHAPE_IDS, CELL_SHAPES, OUTPUTS, SEQ_SHAPE_IDS, SEQ_SHAPES, V1_ATTR_IDS,
    V1_ATTRS, V2_ATTR_IDS, V2_ATTRS, activations_for_grad, assert_close, attrs_for,
    random_params, round_to, tf_inputs, to_numpy, to_tf,
)

# TF 2.21 CPU vs float64 (docs/block_lstm.md §8.6): float32 <= 1e-6; half ~4e-3 fwd, ~1.7e-2 bwd.
TF_TOL = {"float32": dict(fwd=2e-6, bwd=3e-6), "half": dict(fwd=6e-3, bwd=2.5e-2)}


def _loss_fn(fwd, weights, **fixed):
    def loss(**kw):
        out = fwd(**fixed, **kw)
        return sum(float(np.sum(out[k] * weights[k])) for k in weights)
    return loss


# ------------------------------------------------------------------------------------------
# reference backward == finite differences of reference forward
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("T,B,I,H,L", [(3, 2, 3, 2, 3), (4, 1, 2, 3, 2), (2, 3, 1, 2, 0)])
@pytest.mark.parametrize("outputs", ["all", "h", "cs"])
def test_reference_seq_vjp_matches_finite_differences(rng, layout, use_peephole, T, B, I, H, L,
                                                      outputs):
    p = random_params(rng, B, I, H, T=T)
    names = OUTPUTS if outputs == "all" else (outputs,)
    weights = {k: rng.normal(size=(T, B, H)) for k in names}
    eff = dict(forget_bias=0.4, cell_clip=-1.0, use_peephole=use_peephole, layout=layout)
    grads = ref.block_lstm_vjp(L, **p, out_grads=weights, **eff)
    loss = _loss_fn(lambda **kw: ref.block_lstm(L, **kw, **eff), weights)
    for name in p:
        num = ref.numeric_grad(loss, p, name)
        assert_close(grads[name], num, 1e-7, name=name)
    if L == 0:
        for name in p:
            assert np.all(grads[name] == 0)


@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("B,I,H", [(2, 3, 2), (3, 1, 4)])
def test_reference_cell_vjp_matches_finite_differences(rng, layout, use_peephole, B, I, H):
    p = random_params(rng, B, I, H)
    weights = {k: rng.normal(size=(B, H)) for k in OUTPUTS}
    eff = dict(forget_bias=-0.3, cell_clip=100.0, use_peephole=use_peephole, layout=layout)
    grads = ref.lstm_cell_vjp(**p, out_grads=weights, **eff)
    loss = _loss_fn(lambda **kw: ref.lstm_cell(**kw, **eff), weights)
    for name in p:
        assert_close(grads[name], ref.numeric_grad(loss, p, name), 1e-7, name=name)


def test_reference_clipping_is_straight_through(rng):
    """With active clipping the reference gradient is NOT the true derivative: clipping is
    straight-through (docs/block_lstm.md §6.2)."""
    p = random_params(rng, 2, 2, 3)
    p["cs_prev"] = np.full((2, 3), 5.0)  # forces |c| > clip
    eff = dict(forget_bias=3.0, cell_clip=0.5, use_peephole=False, layout="ICFO")
    weights = {"h": np.ones((2, 3))}
    grads = ref.lstm_cell_vjp(**p, out_grads=weights, **eff)
    num = ref.numeric_grad(_loss_fn(lambda **kw: ref.lstm_cell(**kw, **eff), weights), p,
                           "cs_prev")
    assert np.all(np.abs(num) < 1e-8)  # clipped: h does not depend on cs_prev
    assert np.max(np.abs(grads["cs_prev"])) > 1e-3


def test_layout_permutation_is_an_involution(rng):
    a = rng.normal(size=(3, 20))
    assert np.array_equal(ref.icfo_to_ifco(ref.icfo_to_ifco(a)), a)
    assert np.array_equal(ref.icfo_to_ifco(a)[:, 5:10], a[:, 10:15])


# ------------------------------------------------------------------------------------------
# reference == tf.raw_ops (TF is correct for these)
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "half"])
@pytest.mark.parametrize("op,attrs", [("BlockLSTM", a) for a in V1_ATTRS]
                         + [("BlockLSTMV2", a) for a in V2_ATTRS],
                         ids=["V1-" + i for i in V1_ATTR_IDS] + ["V2-" + i for i in V2_ATTR_IDS])
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES[::2], ids=SEQ_SHAPE_IDS[::2])
def test_reference_matches_tf_sequence(rng, dtype, op, attrs, T, B, I, H, L):
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, attrs)
    tf_out = to_numpy(getattr(tf.raw_ops, op)(**tf_inputs(p, dtype, L), **kwargs))
    expect = ref.block_lstm(L, **p, **eff)
    for k in OUTPUTS:
        n = T if k in ("cs", "h") else L
        assert_close(tf_out[k][:n], expect[k][:n], TF_TOL[dtype]["fwd"], name=k)

    grad_op = "BlockLSTMGrad" if op == "BlockLSTM" else "BlockLSTMGradV2"
    acts = activations_for_grad(rng, p, eff, L, dtype)
    cs_grad = round_to(rng.normal(size=(T, B, H)), dtype)
    h_grad = round_to(rng.normal(size=(T, B, H)), dtype)
    inputs = tf_inputs(dict(p, **acts, cs_grad=cs_grad, h_grad=h_grad), dtype, L)
    tf_grads = to_numpy(getattr(tf.raw_ops, grad_op)(**inputs,
                                                     use_peephole=eff["use_peephole"]))
    expect = ref.block_lstm_grad(L, **p, **acts, cs_grad=cs_grad, h_grad=h_grad,
                                 use_peephole=eff["use_peephole"], layout=eff["layout"])
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(tf_grads[k], expect[k], TF_TOL[dtype]["bwd"], name=k)


@pytest.mark.parametrize("dtype", ["float32", "half"])
@pytest.mark.parametrize("attrs", V1_ATTRS, ids=V1_ATTR_IDS)
@pytest.mark.parametrize("B,I,H", CELL_SHAPES[::2], ids=CELL_SHAPE_IDS[::2])
def test_reference_matches_tf_cell(rng, dtype, attrs, B, I, H):
    p = random_params(rng, B, I, H, dtype)
    kwargs, eff = attrs_for("LSTMBlockCell", attrs)
    tf_out = to_numpy(tf.raw_ops.LSTMBlockCell(**tf_inputs(p, dtype), **kwargs))
    expect = ref.lstm_cell(**p, **eff)
    for k in OUTPUTS:
        assert_close(tf_out[k], expect[k], TF_TOL[dtype]["fwd"], name=k)

    acts = {k: round_to(v, dtype) for k, v in expect.items() if k != "h"}
    cs_grad = round_to(rng.normal(size=(B, H)), dtype)
    h_grad = round_to(rng.normal(size=(B, H)), dtype)
    inputs = tf_inputs(dict(p, **acts, cs_grad=cs_grad, h_grad=h_grad), dtype)
    tf_grads = to_numpy(tf.raw_ops.LSTMBlockCellGrad(**inputs, use_peephole=eff["use_peephole"]))
    expect = ref.lstm_cell_grad(p["cs_prev"], **acts, cs_grad=cs_grad, h_grad=h_grad,
                                wci=p["wci"], wcf=p["wcf"], wco=p["wco"],
                                use_peephole=eff["use_peephole"])
    for k in ref.CELL_GRAD_NAMES:
        assert_close(tf_grads[k], expect[k], TF_TOL[dtype]["bwd"], name=k)


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("T,B,I,H,L", [(4, 2, 3, 5, 4), (5, 3, 2, 4, 2), (3, 2, 2, 3, 0)])
@pytest.mark.parametrize("loss_on", ["h", "cs", "cs+h"])
def test_reference_matches_tf_tape_v1(rng, use_peephole, T, B, I, H, L, loss_on):
    """TF's BlockLSTM (V1) tape gradient is right for losses on cs and h
    (docs/block_lstm.md §9.1)."""
    p = random_params(rng, B, I, H, "float32", T=T)
    names = loss_on.split("+")
    weights = {k: rng.normal(size=(T, B, H)) for k in names}
    inputs = tf_inputs(p, "float32", L)
    with tf.GradientTape() as tape:
        tape.watch([inputs[k] for k in p])
        out = tf.raw_ops.BlockLSTM(**inputs, use_peephole=use_peephole, cell_clip=0.7)
        loss = tf.add_n([tf.reduce_sum(getattr(out, k) * to_tf(weights[k], "float32"))
                         for k in names])
    grads = tape.gradient(loss, {k: inputs[k] for k in p})
    expect = ref.block_lstm_vjp(L, **p, out_grads=weights, forget_bias=1.0, cell_clip=0.7,
                                use_peephole=use_peephole, layout="ICFO")
    for k in p:
        assert_close(grads[k], expect[k], 5e-6, name=k)


def test_tf_v2_tape_gradient_is_wrong_in_tf(rng):
    """Documents docs/block_lstm.md §9.1 (TF bug) so that the plugin tests are known to be sensitive
    to it: TF's tape gradient of BlockLSTMV2 equals the ICFO gradient applied to the IFCO forward
    and differs from the true gradient."""
    T, B, I, H, L = 4, 2, 3, 4, 4
    p = random_params(rng, B, I, H, "float32", T=T)
    weights = {"h": rng.normal(size=(T, B, H))}
    inputs = tf_inputs(p, "float32", L)
    with tf.GradientTape() as tape:
        tape.watch(inputs["w"])
        out = tf.raw_ops.BlockLSTMV2(**inputs)
        loss = tf.reduce_sum(out.h * to_tf(weights["h"], "float32"))
    tf_w_grad = tape.gradient(loss, inputs["w"]).numpy()
    true = ref.block_lstm_vjp(L, **p, out_grads=weights, forget_bias=0.0, cell_clip=0.0,
                              layout="IFCO")
    assert np.max(np.abs(tf_w_grad - true["w"])) > 1e-2
    acts = ref.block_lstm(L, **p, forget_bias=0.0, cell_clip=0.0, layout="IFCO")
    wrong = ref.block_lstm_grad(L, **p, **acts, cs_grad=np.zeros((T, B, H)), h_grad=weights["h"],
                                use_peephole=False, layout="ICFO")
    assert_close(tf_w_grad, wrong["w_grad"], 5e-6)


@pytest.mark.parametrize("L", [0, 1, 3, 5])
def test_reference_gates_zero_past_seq_len_max(rng, L):
    p = random_params(rng, 2, 3, 4, T=5)
    out = ref.block_lstm(L, **p)
    for k in OUTPUTS:
        assert np.all(out[k][L:] == 0)
        assert np.all(out[k][:L] != 0)
