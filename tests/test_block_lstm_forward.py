"""Forward ops (raw.LSTMBlockCell, raw.BlockLSTM, raw.BlockLSTMV2) against the float64 reference
and against tf.raw_ops."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tools.references import block_lstm as ref
from conftest import (
    CELL_SHAPE_IDS, CELL_SHAPES, GATE_OUTPUTS, OUTPUTS, SEQ_SHAPE_IDS, SEQ_SHAPES, V1_ATTR_IDS,
    V1_ATTRS, V2_ATTR_IDS, V2_ATTRS, assert_close, attrs_for, random_params, tf_inputs, to_numpy,
)

# max |ours - float64 reference| / max(1, |reference|)
REF_TOL = {"float64": 1e-10, "float32": 1e-5, "half": 3e-3, "bfloat16": 3e-2}
# max |ours - tf.raw_ops| (TF half rounds after every op: ~3.5e-3 from float64 on its own)
TF_TOL = {"float32": 1e-5, "half": 6e-3}

SEQ_OPS = [("BlockLSTM", a) for a in V1_ATTRS] + [("BlockLSTMV2", a) for a in V2_ATTRS]
SEQ_OP_IDS = ["V1-" + i for i in V1_ATTR_IDS] + ["V2-" + i for i in V2_ATTR_IDS]


def run_seq(raw, op, p, dtype, L, kwargs):
    return to_numpy(getattr(raw, op)(**tf_inputs(p, dtype, L), **kwargs))


def check_zero_tail(out, L):
    """All seven outputs are exactly zero for t >= seq_len_max (deliberate difference from TF)."""
    for k in OUTPUTS:
        tail = out[k][L:]
        assert np.all(tail == 0), "%s[t >= %d] not zero: max %g" % (k, L, np.max(np.abs(tail)))


# ------------------------------------------------------------------------------------------
# sequence ops
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op,attrs", SEQ_OPS, ids=SEQ_OP_IDS)
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES, ids=SEQ_SHAPE_IDS)
def test_sequence_vs_reference(raw, rng, dtype, op, attrs, T, B, I, H, L):
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, attrs)
    out = run_seq(raw, op, p, dtype, L, kwargs)
    expect = ref.block_lstm(L, **p, **eff)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)
    check_zero_tail(out, L)


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("op,attrs", SEQ_OPS[::2], ids=SEQ_OP_IDS[::2])
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES, ids=SEQ_SHAPE_IDS)
def test_sequence_low_precision_vs_reference(raw, rng, dtype, op, attrs, T, B, I, H, L):
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, attrs)
    out = run_seq(raw, op, p, dtype, L, kwargs)
    expect = ref.block_lstm(L, **p, **eff)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)
    check_zero_tail(out, L)


@pytest.mark.parametrize("dtype", ["float32", "half"])
@pytest.mark.parametrize("op,attrs", SEQ_OPS, ids=SEQ_OP_IDS)
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES, ids=SEQ_SHAPE_IDS)
def test_sequence_vs_tf(raw, rng, dtype, op, attrs, T, B, I, H, L):
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, _ = attrs_for(op, attrs)
    out = run_seq(raw, op, p, dtype, L, kwargs)
    tf_out = to_numpy(getattr(tf.raw_ops, op)(**tf_inputs(p, dtype, L), **kwargs))
    for k in OUTPUTS:
        n = L if k in GATE_OUTPUTS else T  # TF's i,f,o,ci,co at t >= L are garbage
        assert_close(out[k][:n], tf_out[k][:n], TF_TOL[dtype], name=k)
    check_zero_tail(out, L)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_every_seq_len_max(raw, rng, op):
    T, B, I, H = 6, 3, 4, 5
    p = random_params(rng, B, I, H, "float32", T=T)
    kwargs, eff = attrs_for(op, dict(use_peephole=True, cell_clip=0.9))
    for L in range(T + 1):
        out = run_seq(raw, op, p, "float32", L, kwargs)
        expect = ref.block_lstm(L, **p, **eff)
        for k in OUTPUTS:
            assert_close(out[k], expect[k], 1e-5, name="L=%d %s" % (L, k))
        check_zero_tail(out, L)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_prefix_independent_of_later_steps(raw, rng, op):
    """Steps t < L depend only on x[:t+1]; changing x[t >= L] changes nothing."""
    T, B, I, H, L = 6, 2, 3, 4, 4
    p = random_params(rng, B, I, H, "float32", T=T)
    out = run_seq(raw, op, p, "float32", L, {})
    q = dict(p, x=p["x"].copy())
    q["x"][L:] = rng.uniform(-5, 5, q["x"][L:].shape)
    out2 = run_seq(raw, op, q, "float32", L, {})
    for k in OUTPUTS:
        np.testing.assert_array_equal(out[k], out2[k], err_msg=k)


@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES[::3], ids=SEQ_SHAPE_IDS[::3])
@pytest.mark.parametrize("use_peephole", [False, True])
def test_v2_is_v1_with_permuted_weights_and_zero_forget_bias(raw, rng, T, B, I, H, L,
                                                             use_peephole):
    p = random_params(rng, B, I, H, "float32", T=T)
    v2 = run_seq(raw, "BlockLSTMV2", p, "float32", L,
                 dict(use_peephole=use_peephole, cell_clip=0.7))
    q = dict(p, w=ref.icfo_to_ifco(p["w"]), b=ref.icfo_to_ifco(p["b"]))
    v1 = run_seq(raw, "BlockLSTM", q, "float32", L,
                 dict(use_peephole=use_peephole, cell_clip=0.7, forget_bias=0.0))
    for k in OUTPUTS:
        assert_close(v2[k], v1[k], 1e-6, name=k)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
@pytest.mark.parametrize("dtype", ["float32", "half"])
def test_sequence_equals_loop_of_cells(raw, rng, op, dtype):
    """BlockLSTM is exactly a loop of LSTMBlockCell (docs/block_lstm.md §5); V2 via the layout
    permutation."""
    T, B, I, H, L = 5, 3, 4, 6, 4
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, dict(use_peephole=True, cell_clip=0.8))
    seq = run_seq(raw, op, p, dtype, L, kwargs)
    w, b = p["w"], p["b"]
    if op == "BlockLSTMV2":
        w, b = ref.icfo_to_ifco(w), ref.icfo_to_ifco(b)
    inputs = tf_inputs(dict(p, w=w, b=b), dtype)
    c, h = inputs["cs_prev"], inputs["h_prev"]
    tol = 2e-6 if dtype == "float32" else 4e-3
    for t in range(L):
        step = raw.LSTMBlockCell(x=inputs["x"][t], cs_prev=c, h_prev=h, w=inputs["w"],
                                 wci=inputs["wci"], wcf=inputs["wcf"], wco=inputs["wco"],
                                 b=inputs["b"], forget_bias=eff["forget_bias"], cell_clip=0.8,
                                 use_peephole=True)
        for k in OUTPUTS:
            assert_close(getattr(step, k).numpy().astype(np.float64), seq[k][t], tol,
                         name="t=%d %s" % (t, k))
        c, h = step.cs, step.h


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
@pytest.mark.parametrize("T,B,I,H,L", [(4, 3, 2, 5, 3), (2, 2, 3, 4, 2)])
def test_sequence_eager_or_function(raw, rng, eager_or_function, op, T, B, I, H, L):
    p = random_params(rng, B, I, H, "float32", T=T)
    kwargs, eff = attrs_for(op, dict(use_peephole=True, cell_clip=0.6))
    out = eager_or_function(getattr(raw, op), **tf_inputs(p, "float32", L), **kwargs)
    expect = ref.block_lstm(L, **p, **eff)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], 1e-5, name=k)
    check_zero_tail(out, L)


def test_sequence_in_function_with_dynamic_seq_len_max(raw, rng):
    """One traced function, several seq_len_max values fed at run time."""
    T, B, I, H = 5, 2, 3, 4
    p = random_params(rng, B, I, H, "float32", T=T)
    inputs = tf_inputs(p, "float32")
    fn = tf.function(lambda L: raw.BlockLSTM(seq_len_max=L, **inputs).h)
    for L in (5, 0, 3, 1):
        h = fn(tf.constant(L, tf.int64)).numpy().astype(np.float64)
        assert_close(h, ref.block_lstm(L, **p)["h"], 1e-5, name="L=%d h" % L)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "half"])
def test_unused_peepholes_are_not_read(raw, rng, op, dtype):
    """use_peephole=False: NaN/Inf in wci/wcf/wco have no effect (docs/block_lstm.md §4.3)."""
    T, B, I, H, L = 4, 2, 3, 5, 3
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, dict(use_peephole=False))
    q = dict(p, wci=np.full(H, np.nan), wcf=np.full(H, np.inf), wco=np.full(H, -np.inf))
    out = run_seq(raw, op, q, dtype, L, kwargs)
    expect = ref.block_lstm(L, **p, **eff)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
@pytest.mark.parametrize("cell_clip", [0.0, -2.0, math.nan])
def test_nonpositive_or_nan_clip_means_no_clipping(raw, rng, op, cell_clip):
    T, B, I, H, L = 3, 2, 3, 4, 3
    p = random_params(rng, B, I, H, "float32", T=T)
    p["cs_prev"] = p["cs_prev"] * 10  # |cs| well above any small clip
    kwargs, eff = attrs_for(op, dict(cell_clip=cell_clip))
    out = run_seq(raw, op, p, "float32", L, kwargs)
    expect = ref.block_lstm(L, **p, **dict(eff, cell_clip=-1.0))
    assert np.max(np.abs(expect["cs"])) > 3
    for k in OUTPUTS:
        assert_close(out[k], expect[k], 1e-5, name=k)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_clipping_is_applied_and_carried(raw, rng, op):
    T, B, I, H, L = 4, 3, 2, 4, 4
    p = random_params(rng, B, I, H, "float32", T=T)
    p["cs_prev"] = p["cs_prev"] * 4  # initial state is not clipped, the first step's cs is
    kwargs, eff = attrs_for(op, dict(cell_clip=0.25, use_peephole=True))
    out = run_seq(raw, op, p, "float32", L, kwargs)
    assert np.max(np.abs(out["cs"])) <= np.float32(0.25)
    assert np.sum(np.abs(out["cs"]) == np.float32(0.25)) > 0
    expect = ref.block_lstm(L, **p, **eff)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], 1e-5, name=k)


@pytest.mark.parametrize("forget_bias", [0.0, 1.0, -2.5, 4.0])
def test_forget_bias_only_inside_sigmoid(raw, rng, forget_bias):
    T, B, I, H, L = 3, 2, 2, 3, 3
    p = random_params(rng, B, I, H, "float32", T=T)
    out = run_seq(raw, "BlockLSTM", p, "float32", L, dict(forget_bias=forget_bias))
    expect = ref.block_lstm(L, **p, forget_bias=forget_bias)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], 1e-5, name=k)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_extreme_values_do_not_crash(raw, rng, op):
    T, B, I, H, L = 3, 2, 2, 3, 3
    p = random_params(rng, B, I, H, "float32", T=T)
    p["x"] = p["x"] * 1e30
    p["x"][0, 0, 0] = np.inf
    p["x"][1, 1, 1] = np.nan
    out = run_seq(raw, op, p, "float32", L, dict(use_peephole=True, cell_clip=1.0))
    for k in OUTPUTS:
        assert out[k].shape == (T, B, H)


# ------------------------------------------------------------------------------------------
# LSTMBlockCell
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "half", "bfloat16"])
@pytest.mark.parametrize("attrs", V1_ATTRS, ids=V1_ATTR_IDS)
@pytest.mark.parametrize("B,I,H", CELL_SHAPES, ids=CELL_SHAPE_IDS)
def test_cell_vs_reference(raw, rng, dtype, attrs, B, I, H):
    p = random_params(rng, B, I, H, dtype)
    kwargs, eff = attrs_for("LSTMBlockCell", attrs)
    out = to_numpy(raw.LSTMBlockCell(**tf_inputs(p, dtype), **kwargs))
    expect = ref.lstm_cell(**p, **eff)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)


@pytest.mark.parametrize("dtype", ["float32", "half"])
@pytest.mark.parametrize("attrs", V1_ATTRS, ids=V1_ATTR_IDS)
@pytest.mark.parametrize("B,I,H", CELL_SHAPES, ids=CELL_SHAPE_IDS)
def test_cell_vs_tf(raw, rng, dtype, attrs, B, I, H):
    p = random_params(rng, B, I, H, dtype)
    kwargs, _ = attrs_for("LSTMBlockCell", attrs)
    out = to_numpy(raw.LSTMBlockCell(**tf_inputs(p, dtype), **kwargs))
    tf_out = to_numpy(tf.raw_ops.LSTMBlockCell(**tf_inputs(p, dtype), **kwargs))
    for k in OUTPUTS:
        assert_close(out[k], tf_out[k], TF_TOL[dtype], name=k)


@pytest.mark.parametrize("B,I,H", [(3, 2, 5), (2, 4, 4)])
def test_cell_eager_or_function(raw, rng, eager_or_function, B, I, H):
    p = random_params(rng, B, I, H, "float32")
    out = eager_or_function(raw.LSTMBlockCell, **tf_inputs(p, "float32"), use_peephole=True,
                            cell_clip=0.5, forget_bias=0.2)
    expect = ref.lstm_cell(**p, use_peephole=True, cell_clip=0.5, forget_bias=0.2)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], 1e-5, name=k)


@pytest.mark.parametrize("dtype", ["float32", "half"])
def test_cell_unused_peepholes_are_not_read(raw, rng, dtype):
    B, I, H = 3, 2, 4
    p = random_params(rng, B, I, H, dtype)
    q = dict(p, wci=np.full(H, np.nan), wcf=np.full(H, np.inf), wco=np.full(H, np.nan))
    out = to_numpy(raw.LSTMBlockCell(**tf_inputs(q, dtype), use_peephole=False))
    expect = ref.lstm_cell(**p, use_peephole=False)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)


def test_cell_does_not_modify_inputs(raw, rng):
    """TF may forward h_prev/cs_prev buffers into outputs (docs/block_lstm.md §9.1); ours must not
    alias."""
    p = random_params(rng, 2, 3, 4, "float32")
    inputs = tf_inputs(p, "float32")
    before = {k: v.numpy().copy() for k, v in inputs.items()}
    for _ in range(2):
        raw.LSTMBlockCell(**inputs, use_peephole=True)
    for k, v in inputs.items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)


# ------------------------------------------------------------------------------------------
# half / bfloat16: element-wise math in float32, each output rounded once
# ------------------------------------------------------------------------------------------

def half_ulp(values, dtype):
    """Spacing of `dtype` at each value (the gap to the next representable magnitude)."""
    mant = {"half": 10, "bfloat16": 7}[dtype]
    min_exp = {"half": -14, "bfloat16": -126}[dtype]
    e = np.floor(np.log2(np.maximum(np.abs(values), 2.0 ** min_exp)))
    return 2.0 ** (e - mant)


def assert_rounded_once(actual, exact, dtype, name, ulps=0.5):
    """|actual - exact| <= ulps * ulp + 1e-6 (float32 arithmetic slack)."""
    err = np.abs(actual - exact)
    bound = ulps * half_ulp(exact, dtype) * (1 + 1e-9) + 1e-6
    bad = err > bound
    assert not np.any(bad), "%s: %d values off by more than %.2f ulp, worst %.3g ulp" % (
        name, np.sum(bad), ulps, np.max(err / half_ulp(exact, dtype)))


# cell_clip is rounded to the op's dtype, forget_bias is not (docs/block_lstm.md §4.4, §4.5); use
# values exactly representable in half and bfloat16 so that the conversion cannot matter here.
EXACT_V1_ATTRS = [
    dict(use_peephole=None, cell_clip=None, forget_bias=None),
    dict(use_peephole=True, cell_clip=0.75, forget_bias=-0.625),
    dict(use_peephole=False, cell_clip=0.5, forget_bias=0.3125),
    dict(use_peephole=True, cell_clip=-1.0, forget_bias=2.0),
]
EXACT_V2_ATTRS = [
    dict(use_peephole=None, cell_clip=None),
    dict(use_peephole=True, cell_clip=0.625),
    dict(use_peephole=False, cell_clip=0.5),
]
EXACT_OPS = [("BlockLSTM", a) for a in EXACT_V1_ATTRS] + [("BlockLSTMV2", a)
                                                           for a in EXACT_V2_ATTRS]

# h = o * co may be formed from the already rounded o and co (as TF does): up to 1.5 ulp.
ROUNDED_ULPS = dict(i=0.5, cs=0.5, f=0.5, o=0.5, ci=0.5, co=0.5, h=1.5)


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("attrs", EXACT_V1_ATTRS)
@pytest.mark.parametrize("B,I,H", CELL_SHAPES, ids=CELL_SHAPE_IDS)
def test_cell_low_precision_is_rounded_once(raw, rng, dtype, attrs, B, I, H):
    """TF rounds after every operation (many ulp off, docs/block_lstm.md §8.6); ours computes in
    float32 and rounds each output once."""
    p = random_params(rng, B, I, H, dtype)
    kwargs, eff = attrs_for("LSTMBlockCell", attrs)
    out = to_numpy(raw.LSTMBlockCell(**tf_inputs(p, dtype), **kwargs))
    expect = ref.lstm_cell(**p, **eff)
    for k in OUTPUTS:
        assert_rounded_once(out[k], expect[k], dtype, k, ROUNDED_ULPS[k])


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("op,attrs", EXACT_OPS)
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES[::2], ids=SEQ_SHAPE_IDS[::2])
def test_sequence_first_step_low_precision_is_rounded_once(raw, rng, dtype, op, attrs, T, B, I,
                                                          H, L):
    p = random_params(rng, B, I, H, dtype, T=T)
    kwargs, eff = attrs_for(op, attrs)
    out = run_seq(raw, op, p, dtype, L, kwargs)
    expect = ref.block_lstm(min(L, 1), **p, **eff)
    for k in OUTPUTS:
        assert_rounded_once(out[k][:1], expect[k][:1], dtype, k, ROUNDED_ULPS[k])
