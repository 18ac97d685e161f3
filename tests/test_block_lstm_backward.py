"""Grad ops (raw.LSTMBlockCellGrad, raw.BlockLSTMGrad, raw.BlockLSTMGradV2) against the float64
reference and against tf.raw_ops (whose grad ops are correct, docs/block_lstm.md §9.1)."""

import numpy as np
import pytest
import tensorflow as tf

from tools.references import block_lstm as ref
from conftest import (
    CELL_SHAPE_IDS, CELL_SHAPES, OUTPUTS, SEQ_SHAPE_IDS, SEQ_SHAPES, activations_for_grad,
    assert_close, f32, random_params, round_to, tf_inputs, to_numpy, to_tf,
)

REF_TOL = {"float64": 1e-10, "float32": 1e-5, "half": 1e-2, "bfloat16": 3e-2}
TF_TOL = {"float32": 1e-5, "half": 2e-2}

GRAD_OPS = {"ICFO": "BlockLSTMGrad", "IFCO": "BlockLSTMGradV2"}
# (use_peephole, forget_bias, cell_clip) used to generate the forward activations
FWD_CONFIGS = [(False, 1.0, 3.0), (True, 0.0, 0.0), (True, 0.5, 0.6), (False, -0.5, 0.8)]
FWD_IDS = ["pp%s-fb%s-clip%s" % c for c in FWD_CONFIGS]


def seq_case(rng, T, B, I, H, L, dtype, layout, use_peephole, forget_bias, cell_clip,
             garbage=True):
    """Inputs for a sequence grad op (float64 values already rounded to dtype)."""
    p = random_params(rng, B, I, H, dtype, T=T)
    eff = dict(forget_bias=forget_bias, cell_clip=cell_clip, use_peephole=use_peephole,
               layout=layout)
    acts = activations_for_grad(rng, p, eff, L, dtype, garbage=garbage)
    grads = dict(cs_grad=round_to(rng.normal(size=(T, B, H)), dtype),
                 h_grad=round_to(rng.normal(size=(T, B, H)), dtype))
    return dict(p, **acts, **grads)


def ref_seq_grad(case, L, use_peephole, layout):
    return ref.block_lstm_grad(L, **case, use_peephole=use_peephole, layout=layout)


def run_seq_grad(module, layout, case, dtype, L, use_peephole):
    return to_numpy(getattr(module, GRAD_OPS[layout])(**tf_inputs(case, dtype, L),
                                                     use_peephole=use_peephole))


# ------------------------------------------------------------------------------------------
# BlockLSTMGrad / BlockLSTMGradV2
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("cfg", FWD_CONFIGS, ids=FWD_IDS)
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES, ids=SEQ_SHAPE_IDS)
def test_sequence_grad_vs_reference(raw, rng, dtype, layout, cfg, T, B, I, H, L):
    use_peephole = cfg[0]
    case = seq_case(rng, T, B, I, H, L, dtype, layout, *cfg)
    out = run_seq_grad(raw, layout, case, dtype, L, use_peephole)
    expect = ref_seq_grad(case, L, use_peephole, layout)
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)
    assert np.all(out["x_grad"][L:] == 0)


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("cfg", FWD_CONFIGS[1:3], ids=FWD_IDS[1:3])
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES, ids=SEQ_SHAPE_IDS)
def test_sequence_grad_low_precision_vs_reference(raw, rng, dtype, layout, cfg, T, B, I, H, L):
    use_peephole = cfg[0]
    case = seq_case(rng, T, B, I, H, L, dtype, layout, *cfg)
    out = run_seq_grad(raw, layout, case, dtype, L, use_peephole)
    expect = ref_seq_grad(case, L, use_peephole, layout)
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)
    assert np.all(out["x_grad"][L:] == 0)


# Batches large enough for several chunks of steps in the backward's sweep (about 512 rows
# each): 100 x 5-step chunks, with I = 33 (bf16 packs Wxᵀ in two whole 16-column panels and a
# partial one); 257 rows (odd: the bf16 dot product's last k pair is half) per one-step chunk,
# and H = 17 not a multiple of the 16-column panels.
@pytest.mark.parametrize("dtype", ["float32", "float64", "half", "bfloat16"])
@pytest.mark.parametrize("T,B,I,H,L", [(7, 100, 33, 20, 6), (3, 257, 5, 17, 3)])
def test_sequence_grad_several_chunks_vs_reference(raw, rng, dtype, T, B, I, H, L):
    case = seq_case(rng, T, B, I, H, L, dtype, "IFCO", True, 0.0, 0.6)
    out = run_seq_grad(raw, "IFCO", case, dtype, L, True)
    expect = ref_seq_grad(case, L, True, "IFCO")
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)


@pytest.mark.parametrize("dtype", ["float32", "half"])
@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("cfg", FWD_CONFIGS, ids=FWD_IDS)
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES, ids=SEQ_SHAPE_IDS)
def test_sequence_grad_vs_tf(raw, rng, dtype, layout, cfg, T, B, I, H, L):
    use_peephole = cfg[0]
    case = seq_case(rng, T, B, I, H, L, dtype, layout, *cfg)
    out = run_seq_grad(raw, layout, case, dtype, L, use_peephole)
    tf_out = run_seq_grad(tf.raw_ops, layout, case, dtype, L, use_peephole)
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(out[k], tf_out[k], TF_TOL[dtype], name=k)


@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "half"])
def test_sequence_grad_ignores_steps_past_seq_len_max(raw, rng, layout, use_peephole, dtype):
    """Activations and cs_grad/h_grad at t >= L are never read (docs/block_lstm.md §6.4): TF's
    forward leaves NaN-able garbage there, so NaN must not leak into any gradient."""
    T, B, I, H, L = 6, 3, 2, 4, 3
    case = seq_case(rng, T, B, I, H, L, dtype, layout, use_peephole, 1.0, 0.0, garbage=False)
    clean = run_seq_grad(raw, layout, case, dtype, L, use_peephole)
    dirty = dict(case)
    for k in OUTPUTS + ("cs_grad", "h_grad"):
        dirty[k] = case[k].copy()
        dirty[k][L:] = np.nan
    out = run_seq_grad(raw, layout, dirty, dtype, L, use_peephole)
    for k in ref.SEQ_GRAD_NAMES:
        np.testing.assert_array_equal(out[k], clean[k], err_msg=k)
    assert np.all(out["x_grad"][L:] == 0)


@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
def test_sequence_grad_does_not_read_last_h(raw, rng, layout):
    """h[L-1] is never read by the backward pass (docs/block_lstm.md §6.4)."""
    T, B, I, H, L = 4, 2, 3, 3, 4
    case = seq_case(rng, T, B, I, H, L, "float32", layout, True, 1.0, 0.0)
    clean = run_seq_grad(raw, layout, case, "float32", L, True)
    case["h"] = case["h"].copy()
    case["h"][L - 1] = np.nan
    out = run_seq_grad(raw, layout, case, "float32", L, True)
    for k in ref.SEQ_GRAD_NAMES:
        np.testing.assert_array_equal(out[k], clean[k], err_msg=k)


@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("use_peephole", [False, True])
def test_sequence_grad_seq_len_max_zero_is_all_zero(raw, rng, layout, use_peephole):
    T, B, I, H = 4, 3, 2, 5
    case = seq_case(rng, T, B, I, H, 0, "float32", layout, use_peephole, 1.0, 0.0)
    out = run_seq_grad(raw, layout, case, "float32", 0, use_peephole)
    for k in ref.SEQ_GRAD_NAMES:
        assert out[k].shape == case[k[:-5]].shape
        assert np.all(out[k] == 0), k


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("T,B,I,H,L", SEQ_SHAPES[1::3], ids=SEQ_SHAPE_IDS[1::3])
def test_grad_v2_is_grad_v1_with_permuted_columns(raw, rng, use_peephole, T, B, I, H, L):
    case = seq_case(rng, T, B, I, H, L, "float32", "IFCO", use_peephole, 0.0, 0.0)
    v2 = run_seq_grad(raw, "IFCO", case, "float32", L, use_peephole)
    v1_case = dict(case, w=ref.icfo_to_ifco(case["w"]), b=ref.icfo_to_ifco(case["b"]))
    v1 = run_seq_grad(raw, "ICFO", v1_case, "float32", L, use_peephole)
    for k in ("w_grad", "b_grad"):
        v1[k] = ref.icfo_to_ifco(v1[k])
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(v2[k], v1[k], 1e-6, name=k)


@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("dtype", ["float32", "half"])
def test_sequence_grad_unused_peepholes_are_not_read(raw, rng, layout, dtype):
    T, B, I, H, L = 4, 2, 3, 4, 3
    case = seq_case(rng, T, B, I, H, L, dtype, layout, False, 1.0, 0.0)
    expect = ref_seq_grad(case, L, False, layout)
    case.update(wci=np.full(H, np.nan), wcf=np.full(H, np.inf), wco=np.full(H, np.nan))
    out = run_seq_grad(raw, layout, case, dtype, L, False)
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)
    for k in ("wci_grad", "wcf_grad", "wco_grad"):
        assert np.all(out[k] == 0)


@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
def test_sequence_grad_does_not_modify_inputs(raw, rng, eager_or_function, layout):
    """The grad ops may keep the gate gradients in place of i, f, ci, o only when TF hands those
    buffers over (nothing else holds them); a caller's tensors, eager or passed into a
    tf.function, must come back unchanged, and a second call must give the same gradients."""
    T, B, I, H, L = 5, 3, 20, 8, 5  # L·I >= 8H: the in-place path would stage in x_grad
    case = seq_case(rng, T, B, I, H, L, "float32", layout, True, 0.5, 0.7)
    inputs = tf_inputs(case, "float32", L)
    before = {k: v.numpy().copy() for k, v in inputs.items()}
    op = getattr(raw, GRAD_OPS[layout])
    first = eager_or_function(op, **inputs, use_peephole=True)
    second = eager_or_function(op, **inputs, use_peephole=True)
    for k, v in inputs.items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    for k in first:
        np.testing.assert_array_equal(first[k], second[k], err_msg=k)


@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
def test_sequence_grad_eager_or_function(raw, rng, eager_or_function, layout):
    T, B, I, H, L = 5, 3, 2, 4, 4
    case = seq_case(rng, T, B, I, H, L, "float32", layout, True, 0.5, 0.7)
    out = eager_or_function(getattr(raw, GRAD_OPS[layout]), **tf_inputs(case, "float32", L),
                            use_peephole=True)
    expect = ref_seq_grad(case, L, True, layout)
    for k in ref.SEQ_GRAD_NAMES:
        assert_close(out[k], expect[k], 1e-5, name=k)


# ------------------------------------------------------------------------------------------
# LSTMBlockCellGrad
# ------------------------------------------------------------------------------------------

def cell_case(rng, B, I, H, dtype, use_peephole, forget_bias=1.0, cell_clip=3.0):
    p = random_params(rng, B, I, H, dtype)
    acts = ref.lstm_cell(**p, forget_bias=forget_bias, cell_clip=cell_clip,
                         use_peephole=use_peephole)
    acts = {k: round_to(v, dtype) for k, v in acts.items() if k != "h"}
    return dict(p, **acts, cs_grad=round_to(rng.normal(size=(B, H)), dtype),
                h_grad=round_to(rng.normal(size=(B, H)), dtype))


def ref_cell_grad(case, use_peephole):
    args = {k: case[k] for k in ("cs_prev", "i", "cs", "f", "o", "ci", "co", "cs_grad",
                                 "h_grad", "wci", "wcf", "wco")}
    return ref.lstm_cell_grad(**args, use_peephole=use_peephole)


CELL_CONFIGS = [(False, 1.0, 3.0), (True, 1.0, 3.0), (True, -0.4, 0.5), (False, 0.0, 0.0),
                (True, 2.0, -1.0)]
CELL_IDS = ["pp%s-fb%s-clip%s" % c for c in CELL_CONFIGS]


@pytest.mark.parametrize("dtype", ["float32", "float64", "half", "bfloat16"])
@pytest.mark.parametrize("cfg", CELL_CONFIGS, ids=CELL_IDS)
@pytest.mark.parametrize("B,I,H", CELL_SHAPES, ids=CELL_SHAPE_IDS)
def test_cell_grad_vs_reference(raw, rng, dtype, cfg, B, I, H):
    case = cell_case(rng, B, I, H, dtype, *cfg)
    out = to_numpy(raw.LSTMBlockCellGrad(**tf_inputs(case, dtype), use_peephole=cfg[0]))
    expect = ref_cell_grad(case, cfg[0])
    for k in ref.CELL_GRAD_NAMES:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)


@pytest.mark.parametrize("dtype", ["float32", "half"])
@pytest.mark.parametrize("cfg", CELL_CONFIGS, ids=CELL_IDS)
@pytest.mark.parametrize("B,I,H", CELL_SHAPES, ids=CELL_SHAPE_IDS)
def test_cell_grad_vs_tf(raw, rng, dtype, cfg, B, I, H):
    case = cell_case(rng, B, I, H, dtype, *cfg)
    out = to_numpy(raw.LSTMBlockCellGrad(**tf_inputs(case, dtype), use_peephole=cfg[0]))
    tf_out = to_numpy(tf.raw_ops.LSTMBlockCellGrad(**tf_inputs(case, dtype),
                                                   use_peephole=cfg[0]))
    for k in ref.CELL_GRAD_NAMES:
        assert_close(out[k], tf_out[k], TF_TOL[dtype], name=k)


@pytest.mark.parametrize("use_peephole", [False, True])
@pytest.mark.parametrize("B,I,H", [(3, 2, 5), (1, 4, 2)])
def test_cell_grad_composes_to_block_grad_with_one_step(raw, rng, use_peephole, B, I, H):
    """LSTMBlockCellGrad + the docs/block_lstm.md §6.3 matmuls == BlockLSTMGrad with T = 1."""
    case = cell_case(rng, B, I, H, "float32", use_peephole, 1.0, 0.0)
    cell = to_numpy(raw.LSTMBlockCellGrad(**tf_inputs(case, "float32"),
                                          use_peephole=use_peephole))
    composed = ref.cell_input_grads(case["x"], case["h_prev"], case["w"], cell["dicfo"])
    seq_case_ = {k: v[None] if k in ("x", "i", "cs", "f", "o", "ci", "co", "cs_grad", "h_grad")
                 else v for k, v in case.items()}
    seq_case_["h"] = np.zeros((1, B, H))  # h[L-1] is never read
    block = run_seq_grad(raw, "ICFO", seq_case_, "float32", 1, use_peephole)
    assert_close(cell["cs_prev_grad"], block["cs_prev_grad"], 1e-6, name="cs_prev_grad")
    for k in ("wci_grad", "wcf_grad", "wco_grad"):
        assert_close(cell[k], block[k], 1e-6, name=k)
    assert_close(composed["x_grad"], block["x_grad"][0], 1e-6, name="x_grad")
    for k in ("h_prev_grad", "w_grad", "b_grad"):
        assert_close(composed[k], block[k], 1e-6, name=k)


@pytest.mark.parametrize("dtype", ["float32", "half"])
def test_cell_grad_unused_peepholes_are_not_read(raw, rng, dtype):
    B, I, H = 3, 2, 4
    case = cell_case(rng, B, I, H, dtype, False)
    expect = ref_cell_grad(case, False)
    case.update(wci=np.full(H, np.nan), wcf=np.full(H, np.inf), wco=np.full(H, np.nan))
    out = to_numpy(raw.LSTMBlockCellGrad(**tf_inputs(case, dtype), use_peephole=False))
    for k in ref.CELL_GRAD_NAMES:
        assert_close(out[k], expect[k], REF_TOL[dtype], name=k)
    for k in ("wci_grad", "wcf_grad", "wco_grad"):
        assert np.all(out[k] == 0)


def test_cell_grad_eager_or_function(raw, rng, eager_or_function):
    case = cell_case(rng, 3, 2, 5, "float32", True, 1.0, 0.6)
    out = eager_or_function(raw.LSTMBlockCellGrad, **tf_inputs(case, "float32"),
                            use_peephole=True)
    expect = ref_cell_grad(case, True)
    for k in ref.CELL_GRAD_NAMES:
        assert_close(out[k], expect[k], 1e-5, name=k)


def test_cell_grad_does_not_modify_inputs(raw, rng):
    """TF may write cs_prev_grad into cs_grad and wc*_grad into wc* (docs/block_lstm.md §9.1); ours
    must not."""
    case = cell_case(rng, 2, 3, 4, "float32", True)
    inputs = tf_inputs(case, "float32")
    before = {k: v.numpy().copy() for k, v in inputs.items()}
    first = to_numpy(raw.LSTMBlockCellGrad(**inputs, use_peephole=True))
    second = to_numpy(raw.LSTMBlockCellGrad(**inputs, use_peephole=True))
    for k, v in inputs.items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    for k in first:
        np.testing.assert_array_equal(first[k], second[k], err_msg=k)


# ------------------------------------------------------------------------------------------
# In place: the grad op inside a graph with the forward
# ------------------------------------------------------------------------------------------

# (T, B, I, H, L, use_peephole), chosen for the scratch the in-place backward finds: the per-step
# dgates staging fits in x_grad when L·I >= 8H (rows 1 and 3: 3 exactly at the bound), the packed
# Whᵀ fits in w_grad unless I is small beside H's padding (rows 2 and 5); L < T (row 4), L = 1.
IN_PLACE_SHAPES = [(6, 3, 20, 8, 5, True), (5, 2, 1, 37, 5, False), (4, 1, 40, 20, 4, True),
                   (7, 4, 9, 16, 3, False), (3, 2, 5, 70, 1, True)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["ICFO", "IFCO"])
@pytest.mark.parametrize("T,B,I,H,L,use_peephole", IN_PLACE_SHAPES)
def test_sequence_grad_in_place_inside_a_function(raw, rng, dtype, layout, T, B, I, H, L,
                                                  use_peephole):
    """Inside a tf.function where the grad op is the only consumer of the forward's i, f, ci, o,
    TensorFlow hands them over and the gate gradients are stored in their place (no
    sequence-sized scratch): same gradients. When the function also returns o, nothing may be
    overwritten: o comes back as the forward computed it, and the gradients are the same."""
    from tf_lstm_ops._loader import in_place_backward_runs

    p = random_params(rng, B, I, H, dtype, T=T)
    cs_grad, h_grad = (round_to(rng.normal(size=(T, B, H)), dtype) for _ in range(2))
    forward = getattr(raw, "BlockLSTM" if layout == "ICFO" else "BlockLSTMV2")
    attrs = dict(cell_clip=0.7, use_peephole=use_peephole)
    if layout == "ICFO":
        attrs["forget_bias"] = 0.5
    inputs = tf_inputs(p, dtype, L)
    out_grads = dict(cs_grad=to_tf(cs_grad, dtype), h_grad=to_tf(h_grad, dtype))

    def fwd_and_grad(also_return_o):
        out = forward(**inputs, **attrs)
        grads = getattr(raw, GRAD_OPS[layout])(**inputs, **{k: getattr(out, k) for k in OUTPUTS},
                                               **out_grads, use_peephole=use_peephole)
        return grads, (out.o if also_return_o else None)

    runs = in_place_backward_runs()
    with tf.device("/CPU:0"):  # the counter counts the CPU kernel's runs
        in_place, _ = tf.function(lambda: fwd_and_grad(False), autograph=False)()
        assert in_place_backward_runs() == runs + 1
        copied, o = tf.function(lambda: fwd_and_grad(True), autograph=False)()
        assert in_place_backward_runs() == runs + 1
    np.testing.assert_array_equal(o.numpy(), forward(**inputs, **attrs).o.numpy())

    fwd_ref = ref.block_lstm(L, **p, forget_bias=attrs.get("forget_bias", 0.0),
                             cell_clip=f32(0.7), use_peephole=use_peephole, layout=layout)
    expect = ref.block_lstm_grad(L, **p, **{k: fwd_ref[k] for k in OUTPUTS}, cs_grad=cs_grad,
                                 h_grad=h_grad, use_peephole=use_peephole, layout=layout)
    for got in (to_numpy(in_place), to_numpy(copied)):
        for k in ref.SEQ_GRAD_NAMES:
            assert_close(got[k], expect[k], REF_TOL[dtype], name=k)
        assert np.all(got["x_grad"][L:] == 0)


@pytest.mark.parametrize("bad", [None, "seq_len_max", "h_grad-batch", "cs_grad-rank", "w-rows"])
def test_bad_input_beside_in_graph_activations_is_invalid_argument(raw, rng, bad):
    """Where TF would hand the grad op its i, f, ci, o (produced by the forward in the same
    tf.function), a bad companion input is still an InvalidArgumentError raised before anything
    is taken over or written. (bad=None: the same function with good inputs runs in place.)"""
    from tf_lstm_ops._loader import in_place_backward_runs

    T, B, I, H, L = 4, 3, 5, 6, 4
    inputs = tf_inputs(random_params(rng, B, I, H, "float32", T=T), "float32", L)
    grads = dict(cs_grad=tf.zeros([T, B, H]), h_grad=tf.ones([T, B, H]))
    grad_inputs = dict(inputs)
    if bad == "seq_len_max":
        grad_inputs["seq_len_max"] = tf.constant(T + 1, tf.int64)
    elif bad == "h_grad-batch":
        grads["h_grad"] = tf.ones([T, B + 1, H])
    elif bad == "cs_grad-rank":
        grads["cs_grad"] = tf.zeros([T * B, H])
    elif bad == "w-rows":
        grad_inputs["w"] = tf.zeros([I + H + 1, 4 * H])
    # Unknown shapes at trace time, so the kernel, not the shape function, sees the defect.
    names = sorted(grads) + ["seq_len_max", "w"]
    specs = [tf.TensorSpec(None, tf.int64 if n == "seq_len_max" else tf.float32) for n in names]

    @tf.function(input_signature=specs, autograph=False)
    def fwd_and_grad(*args):
        given = dict(zip(names, args))
        out = raw.BlockLSTMV2(**inputs, cell_clip=0.0, use_peephole=False)
        return raw.BlockLSTMGradV2(**dict(grad_inputs, seq_len_max=given["seq_len_max"],
                                          w=given["w"]),
                                   **{k: getattr(out, k) for k in OUTPUTS},
                                   cs_grad=given["cs_grad"], h_grad=given["h_grad"],
                                   use_peephole=False)

    runs = in_place_backward_runs()
    args = [dict(grads, **grad_inputs)[n] for n in names]
    with tf.device("/CPU:0"):
        if bad is None:
            fwd_and_grad(*args)
            assert in_place_backward_runs() == runs + 1
            return
        with pytest.raises(tf.errors.InvalidArgumentError):
            fwd_and_grad(*args)
    assert in_place_backward_runs() == runs
