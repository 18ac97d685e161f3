"""Bad inputs (docs/validation.md §3) raise InvalidArgumentError naming the argument, eagerly
and inside tf.function; valid empty inputs give correctly shaped results."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tools.references import block_lstm as ref
from conftest import (
    CELL_INPUTS, OUTPUTS, assert_close, message_names, random_params, tf_inputs, to_numpy,
)

T, B, I, H, L = 3, 2, 3, 4, 2

GRAD_INPUTS = OUTPUTS + ("cs_grad", "h_grad")  # activations + incoming grads of the seq grads
# BlockLSTMFullGrad (our registered gradients' op) also takes the gradients w.r.t. i, f, o, ci, co
FULL_GRAD_INPUTS = GRAD_INPUTS + ("i_grad", "f_grad", "o_grad", "ci_grad", "co_grad")
CELL_GRAD_EXTRA = ("i", "cs", "f", "o", "ci", "co", "cs_grad", "h_grad")
# BlockLSTMFullGradGrad (the gradient of BlockLSTMFullGrad) takes FullGrad's inputs and the
# gradients w.r.t. its eight results, shaped like them
COTANGENT_SHAPES = dict(d_x_grad=[T, B, I], d_cs_prev_grad=[B, H], d_h_prev_grad=[B, H],
                        d_w_grad=[I + H, 4 * H], d_wci_grad=[H], d_wcf_grad=[H], d_wco_grad=[H],
                        d_b_grad=[4 * H])
SEQ_GRAD = ("BlockLSTMGrad", "BlockLSTMGradV2", "BlockLSTMFullGrad", "BlockLSTMFullGradGrad")
LIBRARY_ONLY = ("BlockLSTMFullGrad", "BlockLSTMFullGradGrad")  # not tf.raw_ops names
OPS = ("LSTMBlockCell", "LSTMBlockCellGrad", "BlockLSTM", "BlockLSTMV2") + SEQ_GRAD
SEQ = ("BlockLSTM", "BlockLSTMV2") + SEQ_GRAD
GRAD = ("LSTMBlockCellGrad",) + SEQ_GRAD


def grad_inputs_of(op):
    """The [T, B, H] inputs of a sequence grad op beyond the forward's."""
    return FULL_GRAD_INPUTS if op in LIBRARY_ONLY else GRAD_INPUTS


def valid_shapes(op):
    s = dict(cs_prev=[B, H], h_prev=[B, H], w=[I + H, 4 * H], wci=[H], wcf=[H], wco=[H],
             b=[4 * H])
    if op in SEQ:
        s["x"] = [T, B, I]
        s["seq_len_max"] = []
    else:
        s["x"] = [B, I]
    if op == "LSTMBlockCellGrad":
        s.update({k: [B, H] for k in CELL_GRAD_EXTRA})
    if op in SEQ_GRAD:
        s.update({k: [T, B, H] for k in grad_inputs_of(op)})
    if op == "BlockLSTMFullGradGrad":
        s.update(COTANGENT_SHAPES)
    return s


def make_inputs(op, shapes, seq_len_max=L):
    rng = np.random.default_rng(0)
    out = {}
    for k, shape in shapes.items():
        if k == "seq_len_max":
            out[k] = tf.constant(np.full(shape, seq_len_max), tf.int64)
        else:
            out[k] = tf.constant(rng.uniform(-1, 1, shape), tf.float32)
    return out


def args_of(op):
    return list(valid_shapes(op))


# ------------------------------------------------------------------------------------------
# the bad cases: (op, case id, shape overrides, seq_len_max, use_peephole, acceptable names)
# ------------------------------------------------------------------------------------------

def bad_cases():
    cases = []
    for op in OPS:
        shapes = valid_shapes(op)
        seq = op in SEQ
        peepholes = (False, True)
        # rank errors, every input, both directions
        for arg, shape in shapes.items():
            if arg == "seq_len_max":
                for bad in ([1], [1, 1]):
                    cases.append((op, "seq_len_max-shape%s" % bad, {arg: bad}, L, True, (arg,)))
                continue
            for bad in ([1] + shape, shape[1:]):
                for pp in peepholes:
                    cases.append((op, "%s-rank%d-pp%s" % (arg, len(bad), pp), {arg: bad}, L, pp,
                                  (arg,)))
        # seq_len_max out of range
        if seq:
            for bad_l in (-1, T + 1, 1 << 40):
                cases.append((op, "seq_len_max=%d" % bad_l, {}, bad_l, False, ("seq_len_max",)))
        # batch mismatches (B comes from x)
        for arg in ("cs_prev", "h_prev"):
            cases.append((op, "%s-batch" % arg, {arg: [B + 1, H]}, L, True, (arg,)))
        batch_args = tuple(k for k, v in shapes.items() if k != "x" and len(v) >= 2
                           and v[-2] == B)
        cases.append((op, "x-batch", {"x": ([T] if seq else []) + [B + 1, I]}, L, True,
                      ("x",) + batch_args))
        # input size mismatch (I comes from x, must equal w.dim0 - H)
        cases.append((op, "x-input", {"x": ([T] if seq else []) + [B, I + 1]}, L, True,
                      ("x", "w")))
        cases.append((op, "w-rows", {"w": [I + H + 1, 4 * H]}, L, True, ("w",)))
        cases.append((op, "w-rows-short", {"w": [I + H - 1, 4 * H]}, L, True, ("w",)))
        # unit mismatches
        cases.append((op, "h_prev-units", {"h_prev": [B, H + 1]}, L, True, ("h_prev",)))
        for n in (4 * H + 4, 4 * H - 1, 4 * H + 2):
            cases.append((op, "b-len%d" % n, {"b": [n]}, L, True, ("b",)))
        if op in GRAD and op != "LSTMBlockCellGrad":
            # H comes from w.dim1 / 4 (docs/block_lstm.md §2.3): cs_prev is checked against it
            cases.append((op, "cs_prev-units", {"cs_prev": [B, H + 1]}, L, True, ("cs_prev",)))
            for n in (4 * H + 1, 4 * H + 2, 4 * H - 1):
                cases.append((op, "w-cols%d" % n, {"w": [I + H, n]}, L, True, ("w",)))
            cases.append((op, "w-cols+4", {"w": [I + H, 4 * H + 4]}, L, True, tuple(shapes)))
        else:
            # H comes from cs_prev.dim1; a different cs_prev is reported on whichever disagrees
            cases.append((op, "cs_prev-units", {"cs_prev": [B, H + 1]}, L, True,
                          ("cs_prev", "h_prev", "w", "b")))
            for n in (4 * H + 4, 4 * H - 1, 4 * H + 1):
                cases.append((op, "w-cols%d" % n, {"w": [I + H, n]}, L, True, ("w",)))
        # peephole lengths: always for the sequence ops, with use_peephole for the cell ops
        for arg in ("wci", "wcf", "wco"):
            for n in (H + 1, H - 1, 0):
                for pp in (peepholes if seq else (True,)):
                    cases.append((op, "%s-len%d-pp%s" % (arg, n, pp), {arg: [n]}, L, pp, (arg,)))
        # activations / incoming grads of the grad ops
        if op == "LSTMBlockCellGrad":
            for arg in CELL_GRAD_EXTRA:
                cases.append((op, arg + "-batch", {arg: [B + 1, H]}, L, True, (arg,)))
                cases.append((op, arg + "-units", {arg: [B, H + 1]}, L, True, (arg,)))
                cases.append((op, arg + "-batch-short", {arg: [B - 1, H]}, L, True, (arg,)))
        if op in SEQ_GRAD:
            for arg in grad_inputs_of(op):
                cases.append((op, arg + "-steps-L=T", {arg: [T - 1, B, H]}, T, True, (arg,)))
                cases.append((op, arg + "-steps<L", {arg: [L - 1, B, H]}, L, True, (arg,)))
                cases.append((op, arg + "-batch", {arg: [T, B + 1, H]}, L, True, (arg,)))
                cases.append((op, arg + "-batch-short", {arg: [T, B - 1, H]}, L, True, (arg,)))
                cases.append((op, arg + "-units", {arg: [T, B, H + 1]}, L, False, (arg,)))
                cases.append((op, arg + "-units-short", {arg: [T, B, H - 1]}, L, False, (arg,)))
        if op == "BlockLSTMFullGradGrad":
            for arg, shape in COTANGENT_SHAPES.items():
                for axis in range(len(shape)):
                    for delta in (1, -1):
                        bad = list(shape)
                        bad[axis] += delta
                        cases.append((op, "%s-dim%d%+d" % (arg, axis, delta), {arg: bad}, L,
                                      delta > 0, (arg,)))
    return cases


BAD_CASES = bad_cases()
BAD_IDS = ["%s-%s" % (c[0], c[1]) for c in BAD_CASES]


def call(raw, op, inputs, use_peephole):
    if op in LIBRARY_ONLY:  # not tf.raw_ops names, so not in raw: the library's own ops
        from tf_lstm_ops._loader import library

        return library.op(op)(**inputs, use_peephole=use_peephole, gate_layout="IFCO")
    return getattr(raw, op)(**inputs, use_peephole=use_peephole)


def kernel_message(err):
    """The kernel's own message, without TF's decorations (function/node names, [Op:...],
    graph-mode node info and Python tracebacks), which could contain argument-like words."""
    msg = err.message
    for marker in ("\n\t [[", "\n\nDetected at node", "\n\t[[", "Detected at node"):
        msg = msg.split(marker)[0]
    msg = re.sub(r"\{\{[^}]*\}\}", " ", msg)
    msg = re.sub(r"\[Op:[^\]]*\].*$", " ", msg, flags=re.S)
    return msg


def check_message(err, names):
    msg = kernel_message(err)
    assert message_names(msg, names), "message does not name any of %s: %r" % (names, msg)


@pytest.mark.parametrize("op,case,overrides,seq_len_max,use_peephole,names", BAD_CASES,
                         ids=BAD_IDS)
@pytest.mark.parametrize("mode", ["eager", "function", "function_static"])
def test_bad_input_is_invalid_argument(raw, op, case, overrides, seq_len_max, use_peephole,
                                       names, mode):
    shapes = dict(valid_shapes(op), **overrides)
    inputs = make_inputs(op, shapes, seq_len_max)
    if mode == "eager":
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            call(raw, op, inputs, use_peephole)
        check_message(info.value, names)
    elif mode == "function":
        # unknown ranks: nothing can be caught at trace time, the kernel must reject it
        order = args_of(op)
        specs = [tf.TensorSpec(None, inputs[k].dtype) for k in order]
        fn = tf.function(lambda *xs: call(raw, op, dict(zip(order, xs)), use_peephole),
                         input_signature=specs)
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            fn(*[inputs[k] for k in order])
        check_message(info.value, names)
    else:
        # static shapes: the shape function may reject it at trace time instead
        fn = tf.function(lambda: call(raw, op, inputs, use_peephole))
        with pytest.raises((ValueError, tf.errors.InvalidArgumentError)) as info:
            fn()
        if isinstance(info.value, tf.errors.InvalidArgumentError):
            check_message(info.value, names)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("use_peephole", [False, True])
def test_valid_base_inputs_are_accepted(raw, op, use_peephole):
    """The unmodified inputs of the cases above are valid (so each case tests one defect)."""
    for seq_len_max in ((L, T) if op in SEQ else (L,)):
        out = call(raw, op, make_inputs(op, valid_shapes(op), seq_len_max), use_peephole)
        for v in out:
            assert np.all(np.isfinite(v.numpy()))


def test_bad_case_ids_are_unique():
    assert len(set(BAD_IDS)) == len(BAD_IDS)


@pytest.mark.parametrize("op", ["LSTMBlockCell", "LSTMBlockCellGrad"])
def test_cell_peephole_lengths_unchecked_without_peephole_is_not_a_crash(raw, op):
    """use_peephole=False with odd-length wci: either accepted or a clean error."""
    inputs = make_inputs(op, dict(valid_shapes(op), wci=[H + 3]))
    try:
        out = call(raw, op, inputs, False)
    except tf.errors.InvalidArgumentError as e:
        check_message(e, ("wci",))
    else:
        for v in out[:2]:
            assert v.shape[0] == B


# ------------------------------------------------------------------------------------------
# empty inputs
# ------------------------------------------------------------------------------------------

EMPTY_SEQ = [(0, 2, 3, 4, 0), (3, 0, 3, 4, 2), (3, 2, 0, 4, 3), (3, 2, 0, 4, 1),
             (4, 2, 3, 4, 0), (0, 0, 0, 4, 0), (1, 0, 0, 2, 1)]
EMPTY_IDS = ["T%dB%dI%dH%dL%d" % s for s in EMPTY_SEQ]


@pytest.mark.parametrize("op,layout", [("BlockLSTM", "ICFO"), ("BlockLSTMV2", "IFCO")])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("T_,B_,I_,H_,L_", EMPTY_SEQ, ids=EMPTY_IDS)
def test_empty_sequence_forward(raw, rng, eager_or_function, op, layout, use_peephole, T_, B_,
                                I_, H_, L_):
    p = random_params(rng, B_, I_, H_, "float32", T=T_)
    out = eager_or_function(getattr(raw, op), **tf_inputs(p, "float32", L_),
                            use_peephole=use_peephole)
    expect = ref.block_lstm(L_, **p, use_peephole=use_peephole, layout=layout,
                            forget_bias=1.0 if op == "BlockLSTM" else 0.0,
                            cell_clip=3.0 if op == "BlockLSTM" else 0.0)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], 1e-5, name=k)
        assert np.all(out[k][L_:] == 0)


@pytest.mark.parametrize("op,layout", [("BlockLSTMGrad", "ICFO"), ("BlockLSTMGradV2", "IFCO")])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("T_,B_,I_,H_,L_", EMPTY_SEQ, ids=EMPTY_IDS)
def test_empty_sequence_grad(raw, rng, eager_or_function, op, layout, use_peephole, T_, B_, I_,
                             H_, L_):
    p = random_params(rng, B_, I_, H_, "float32", T=T_)
    eff = dict(forget_bias=0.0, cell_clip=0.0, use_peephole=use_peephole, layout=layout)
    acts = ref.block_lstm(L_, **p, **eff)
    acts = {k: v.astype(np.float32).astype(np.float64) for k, v in acts.items()}
    case = dict(p, **acts, cs_grad=rng.normal(size=(T_, B_, H_)),
                h_grad=rng.normal(size=(T_, B_, H_)))
    case = {k: v.astype(np.float32).astype(np.float64) for k, v in case.items()}
    out = eager_or_function(getattr(raw, op), **tf_inputs(case, "float32", L_),
                            use_peephole=use_peephole)
    expect = ref.block_lstm_grad(L_, **case, use_peephole=use_peephole, layout=layout)
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(out[k], expect[k], 1e-5, name=k)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2", "BlockLSTMGrad", "BlockLSTMGradV2"])
def test_sequence_zero_units_is_clean(raw, op):
    """H = 0: an empty result or a clean InvalidArgumentError, never a crash."""
    shapes = valid_shapes(op)
    for k, s in shapes.items():
        if k in ("cs_prev", "h_prev", "wci", "wcf", "wco") or k in GRAD_INPUTS:
            shapes[k] = s[:-1] + [0]
    shapes["w"] = [I, 0]
    shapes["b"] = [0]
    inputs = make_inputs(op, shapes)
    try:
        out = call(raw, op, inputs, True)
    except tf.errors.InvalidArgumentError:
        return
    for name, v in zip(out._fields, out):
        assert v.numpy().size == 0 or np.all(v.numpy() == 0), name


@pytest.mark.parametrize("use_peephole", [False, True])
def test_cell_zero_input_size(raw, rng, use_peephole):
    """I = 0 is a valid cell input (x is [B, 0], w is [H, 4H])."""
    p = random_params(rng, 3, 0, 4, "float32")
    out = to_numpy(raw.LSTMBlockCell(**tf_inputs(p, "float32"), use_peephole=use_peephole))
    expect = ref.lstm_cell(**p, use_peephole=use_peephole)
    for k in OUTPUTS:
        assert_close(out[k], expect[k], 1e-5, name=k)


@pytest.mark.parametrize("op", ["LSTMBlockCell", "LSTMBlockCellGrad"])
@pytest.mark.parametrize("B_,H_", [(0, 4), (2, 0), (0, 0)])
def test_cell_empty_batch_or_units_is_clean(raw, op, B_, H_):
    """B = 0 or H = 0: TF rejects it (cs_prev empty); either a clean error or an empty result."""
    shapes = valid_shapes(op)
    for k, s in shapes.items():
        if s == [B, H]:
            shapes[k] = [B_, H_]
    shapes.update(x=[B_, I], w=[I + H_, 4 * H_], wci=[H_], wcf=[H_], wco=[H_], b=[4 * H_])
    inputs = make_inputs(op, shapes)
    try:
        out = call(raw, op, inputs, True)
    except tf.errors.InvalidArgumentError:
        return
    expected = ({k: [B_, H_] for k in OUTPUTS} if op == "LSTMBlockCell" else
                dict(cs_prev_grad=[B_, H_], dicfo=[B_, 4 * H_], wci_grad=[H_], wcf_grad=[H_],
                     wco_grad=[H_]))
    for name, v in zip(out._fields, out):
        assert list(v.shape) == expected[name], name
        assert np.all(v.numpy() == 0), name


@pytest.mark.parametrize("use_peephole", [False, True])
def test_cell_grad_zero_input_size(raw, rng, use_peephole):
    p = random_params(rng, 3, 0, 4, "float32")
    acts = ref.lstm_cell(**p, use_peephole=use_peephole)
    case = dict(p, **{k: v for k, v in acts.items() if k != "h"},
                cs_grad=rng.normal(size=(3, 4)), h_grad=rng.normal(size=(3, 4)))
    case = {k: v.astype(np.float32).astype(np.float64) for k, v in case.items()}
    out = to_numpy(raw.LSTMBlockCellGrad(**tf_inputs(case, "float32"),
                                         use_peephole=use_peephole))
    expect = ref.lstm_cell_grad(case["cs_prev"], *[case[k] for k in CELL_GRAD_EXTRA],
                                case["wci"], case["wcf"], case["wco"], use_peephole)
    for k in ref.CELL_GRAD_NAMES:
        assert_close(out[k], expect[k], 1e-5, name=k)


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_empty_sequence_tape_gradient(raw, rng, op):
    """Gradients through an empty run (T = 0 / L = 0) are zeros of the input shapes."""
    for (T_, B_, I_, H_, L_) in [(0, 2, 3, 4, 0), (3, 2, 3, 4, 0), (2, 0, 3, 4, 2)]:
        p = random_params(rng, B_, I_, H_, "float32", T=T_)
        inputs = tf_inputs(p, "float32", L_)
        with tf.GradientTape() as tape:
            tape.watch([inputs[k] for k in CELL_INPUTS])
            out = getattr(raw, op)(**inputs, use_peephole=True)
            loss = tf.add_n([tf.reduce_sum(getattr(out, k)) for k in OUTPUTS])
        grads = tape.gradient(loss, {k: inputs[k] for k in CELL_INPUTS})
        for k in CELL_INPUTS:
            assert grads[k] is not None and tuple(grads[k].shape) == p[k].shape, k
            assert np.all(grads[k].numpy() == 0), k
