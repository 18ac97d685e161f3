"""raw.* are drop-in replacements for tf.raw_ops.*: same Python signature, same output names, same
dtypes out as in, and static shape inference at least as precise as TF's (docs/block_lstm.md §3)."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

from conftest import DTYPES

OPS = ("LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMGrad", "BlockLSTMV2",
       "BlockLSTMGradV2")
SEQ = ("BlockLSTM", "BlockLSTMGrad", "BlockLSTMV2", "BlockLSTMGradV2")
GRAD = ("LSTMBlockCellGrad", "BlockLSTMGrad", "BlockLSTMGradV2")
ACTS = ("i", "cs", "f", "o", "ci", "co", "h")
T, B, I, H = 3, 2, 5, 4


def input_shapes(op):
    """Valid static shapes of every tensor input, in op-def order."""
    seq = op in SEQ
    s = {}
    if seq:
        s["seq_len_max"] = []
    s.update(x=[T, B, I] if seq else [B, I], cs_prev=[B, H], h_prev=[B, H], w=[I + H, 4 * H],
             wci=[H], wcf=[H], wco=[H], b=[4 * H])
    if op == "LSTMBlockCellGrad":
        s.update({k: [B, H] for k in ("i", "cs", "f", "o", "ci", "co", "cs_grad", "h_grad")})
    if op in ("BlockLSTMGrad", "BlockLSTMGradV2"):
        s.update({k: [T, B, H] for k in ACTS + ("cs_grad", "h_grad")})
    return s


def attrs(op):
    return dict(use_peephole=True) if op in GRAD else {}


def make_inputs(op, dtype=tf.float32):
    rng = np.random.default_rng(0)
    out = {}
    for k, shape in input_shapes(op).items():
        if k == "seq_len_max":
            out[k] = tf.constant(T - 1, tf.int64)
        else:
            out[k] = tf.cast(tf.constant(rng.uniform(-1, 1, shape)), dtype)
    return out


@pytest.mark.parametrize("op", OPS)
def test_signature_matches_tf(raw, op):
    ours = inspect.signature(getattr(raw, op))
    theirs = inspect.signature(getattr(tf.raw_ops, op))
    assert ours == theirs, "%s: %s != %s" % (op, ours, theirs)
    # and explicitly: keyword-only use works with tf.raw_ops' argument names and defaults
    assert list(ours.parameters) == list(theirs.parameters)
    for name, param in theirs.parameters.items():
        assert ours.parameters[name].default == param.default, name


def test_raw_module_lists_the_six_block_ops():
    import tf_lstm_ops

    assert set(OPS) <= set(tf_lstm_ops.raw.__all__)  # test_loader checks the whole list


@pytest.mark.parametrize("op", OPS)
def test_output_fields_match_tf(raw, op):
    ours = getattr(raw, op)(**make_inputs(op), **attrs(op))
    theirs = getattr(tf.raw_ops, op)(**make_inputs(op), **attrs(op))
    assert type(ours)._fields == type(theirs)._fields
    for name in type(theirs)._fields:
        assert getattr(ours, name).shape == getattr(theirs, name).shape, name


@pytest.mark.parametrize("op", OPS)
def test_positional_arguments_are_rejected_like_tf(raw, op):
    args = list(make_inputs(op).values())
    with pytest.raises(TypeError):
        getattr(tf.raw_ops, op)(*args)
    with pytest.raises(TypeError):
        getattr(raw, op)(*args)


@pytest.mark.parametrize("dtype", ["half", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("op", OPS)
def test_output_dtype_is_input_dtype(raw, op, dtype):
    out = getattr(raw, op)(**make_inputs(op, DTYPES[dtype]), **attrs(op))
    for name in out._fields:
        assert getattr(out, name).dtype == DTYPES[dtype], name


def test_v2_has_no_forget_bias(raw):
    with pytest.raises(TypeError):
        raw.BlockLSTMV2(**make_inputs("BlockLSTMV2"), forget_bias=1.0)


# ------------------------------------------------------------------------------------------
# shape inference
# ------------------------------------------------------------------------------------------

def traced_shapes(fn, op, specs):
    """Static output shapes (list of lists / None for unknown rank) of fn traced on specs."""
    names = list(input_shapes(op))
    kw = attrs(op)
    cf = tf.function(lambda *xs: fn(**dict(zip(names, xs)), **kw)).get_concrete_function(
        *[specs[k] for k in names])
    return [None if t.shape.rank is None else t.shape.as_list()
            for t in tf.nest.flatten(cf.structured_outputs)]


def spec_variants(op):
    """Several input signatures with partially known shapes."""
    full = input_shapes(op)

    def make(rule):
        specs = {}
        for k, shape in full.items():
            dtype = tf.int64 if k == "seq_len_max" else tf.float32
            specs[k] = tf.TensorSpec(rule(k, shape), dtype)
        return specs

    rng = np.random.default_rng(7)
    variants = {
        "static": make(lambda k, s: s),
        "all-dims-unknown": make(lambda k, s: [None] * len(s)),
        "all-ranks-unknown": make(lambda k, s: None),
        "only-x": make(lambda k, s: s if k == "x" else [None] * len(s)),
        "only-b": make(lambda k, s: s if k == "b" else [None] * len(s)),
        "only-w": make(lambda k, s: s if k == "w" else [None] * len(s)),
        "only-cs_prev": make(lambda k, s: s if k == "cs_prev" else [None] * len(s)),
        "only-h_prev": make(lambda k, s: s if k == "h_prev" else [None] * len(s)),
        "only-wci": make(lambda k, s: s if k == "wci" else [None] * len(s)),
        "x-and-b": make(lambda k, s: s if k in ("x", "b") else None),
    }
    for n in range(6):
        variants["random%d" % n] = make(
            lambda k, s: [d if rng.random() < 0.5 else None for d in s])
    return variants


SHAPE_CASES = [(op, v) for op in OPS for v in spec_variants(op)]


@pytest.mark.parametrize("op,variant", SHAPE_CASES, ids=["%s-%s" % c for c in SHAPE_CASES])
def test_shape_inference_at_least_as_precise_as_tf(raw, op, variant):
    specs = spec_variants(op)[variant]
    theirs = traced_shapes(getattr(tf.raw_ops, op), op, specs)
    ours = traced_shapes(getattr(raw, op), op, specs)
    assert len(ours) == len(theirs)
    for n, (o, t) in enumerate(zip(ours, theirs)):
        if t is None:
            continue
        assert o is not None and len(o) == len(t), "output %d: %s vs TF %s" % (n, o, t)
        for d, (od, td) in enumerate(zip(o, t)):
            assert td is None or od == td, "output %d: %s vs TF %s" % (n, o, t)
    # whatever is known must be right
    true = [list(v.shape) for v in getattr(raw, op)(**make_inputs(op), **attrs(op))]
    for n, (o, t) in enumerate(zip(ours, true)):
        if o is not None:
            assert len(o) == len(t) and all(od is None or od == td for od, td in zip(o, t)), (
                "output %d: inferred %s, actual %s" % (n, o, t))


def _seq_specs(x, b, cs=(None, None)):
    specs = {k: tf.TensorSpec(s, tf.float32) for k, s in dict(
        x=x, cs_prev=list(cs), h_prev=[None, None], w=[None, None], wci=[None], wcf=[None],
        wco=[None], b=b).items()}
    specs["seq_len_max"] = tf.TensorSpec([], tf.int64)
    return specs


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_sequence_units_from_b(raw, op):
    shapes = traced_shapes(getattr(raw, op), op, _seq_specs([None, None, 5], [16]))
    assert shapes == [[None, None, 4]] * 7
    shapes = traced_shapes(getattr(raw, op), op, _seq_specs([7, 3, 5], [None]))
    for s in shapes:
        assert s[:2] == [7, 3] and s[2] in (None,)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_sequence_units_from_cs_prev_when_b_unknown(raw, op):
    """H may also come from cs_prev; if it is inferred it must be right."""
    shapes = traced_shapes(getattr(raw, op), op, _seq_specs([None, 2, 5], [None], cs=(2, 6)))
    for s in shapes:
        assert s[:2] == [None, 2] and s[2] in (None, 6)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_sequence_b_not_multiple_of_4_fails_at_trace_time(raw, op):
    with pytest.raises(ValueError):
        traced_shapes(getattr(raw, op), op, _seq_specs([None, None, 5], [15]))
    with pytest.raises(ValueError):  # TF too
        traced_shapes(getattr(tf.raw_ops, op), op, _seq_specs([None, None, 5], [15]))


def _cell_specs(x, cs, b=(None,)):
    return {k: tf.TensorSpec(list(s), tf.float32) for k, s in dict(
        x=x, cs_prev=cs, h_prev=[None, None], w=[None, None], wci=[None], wcf=[None],
        wco=[None], b=b).items()}


def test_cell_outputs_batch_from_x_units_from_cs_prev(raw):
    shapes = traced_shapes(raw.LSTMBlockCell, "LSTMBlockCell", _cell_specs([3, None], [None, 6]))
    assert shapes == [[3, 6]] * 7
    shapes = traced_shapes(raw.LSTMBlockCell, "LSTMBlockCell",
                           _cell_specs([None, 5], [None, None], b=[24]))
    for s in shapes:  # H may come from b (24 / 4); if it does it must be 6
        assert len(s) == 2 and s[1] in (None, 6)


def test_cell_grad_outputs(raw):
    specs = {k: tf.TensorSpec([None] * len(s), tf.float32)
             for k, s in input_shapes("LSTMBlockCellGrad").items()}
    specs["x"] = tf.TensorSpec([3, None], tf.float32)
    specs["cs_prev"] = tf.TensorSpec([None, 5], tf.float32)
    shapes = traced_shapes(raw.LSTMBlockCellGrad, "LSTMBlockCellGrad", specs)
    assert shapes[0] == [3, 5] and shapes[1] == [3, 20]
    assert shapes[2:] == [[5]] * 3


RANK_ERRORS = [
    ("LSTMBlockCell", "x", [2, 3, 4]),
    ("LSTMBlockCell", "cs_prev", [2]),
    ("BlockLSTM", "x", [2, 3]),
    ("BlockLSTMV2", "b", [4, 4]),
    ("BlockLSTMGrad", "cs_prev", [2, 4, 1]),
    ("BlockLSTMGradV2", "w", [9]),
    ("LSTMBlockCellGrad", "x", [2]),
]


@pytest.mark.parametrize("op,arg,shape", RANK_ERRORS, ids=["%s-%s" % c[:2] for c in RANK_ERRORS])
def test_rank_errors_tf_catches_at_trace_time_are_caught_too(raw, op, arg, shape):
    specs = {k: tf.TensorSpec(None, tf.int64 if k == "seq_len_max" else tf.float32)
             for k in input_shapes(op)}
    specs[arg] = tf.TensorSpec(shape, tf.float32)
    with pytest.raises(ValueError):
        traced_shapes(getattr(tf.raw_ops, op), op, specs)
    with pytest.raises(ValueError):
        traced_shapes(getattr(raw, op), op, specs)
