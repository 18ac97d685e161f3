"""The LayerNorm GRU / SimpleRNN GPU engine (cc/layer_norm_rnn/gpu_engine.h) without a GPU: the
self-test module built with nvcc (tools/gpu_selftest/build.py) runs the engine on its HostBackend
(the same engine code, the CUDA calls executed on the CPU; every block of a row kernel runs its
threads in alternating order, so a race between them shows) and
tools/gpu_selftest/layer_norm_rnn_checks.py compares it with the float64 reference
(tools/references/layer_norm_rnn.py) in every dtype. Here also, in float64: its gradients against
the CPU op's (TfLstm>LayerNormRNNGrad), the reserve space against the CPU op's (the same size,
header and values; each device's backward reads the other's), and the scratch-size queries. (The
reference against the CPU op: tests/test_layer_norm_rnn.py.)"""

import dataclasses

import numpy as np
import pytest

from tools.gpu_selftest import layer_norm_rnn_checks as C  # (pytest.ini: the repo on sys.path)

CASES = C.engine_cases()


@pytest.fixture
def engine(selftest_module):
    """(module, allocator): the engine on the host backend with NumPy buffers (conftest.py's
    session-wide self-test module: skips without nvcc)."""
    return selftest_module, C.NumpyAllocator()


@pytest.fixture
def mod(engine):
    return engine[0]


# ------------------------------------------------------------------------------------------------
# against the float64 reference (forward and backward), every dtype
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_engine_equals_the_reference(engine, rng, case, dtype):
    C.check_case(*engine, case, dtype, rng)


def test_cases_cover_the_grid():
    seen = {(c.cell, c.time_major, c.lengths is None) for c in CASES}
    assert seen == {(cell, tm, full) for cell in ("gru", "simple_rnn") for tm in (True, False)
                    for full in (True, False)}
    for cell in ("gru", "simple_rnn"):
        mine = [c for c in CASES if c.cell == cell]
        assert any(c.recurrent_mask for c in mine)
        assert any(c.zoneout_h == C.PER_ELEMENT for c in mine)
        assert any(isinstance(c.zoneout_h, float) for c in mine)
        assert any(c.activation != "tanh" for c in mine)
    assert any(c.recurrent_activation != "sigmoid" for c in CASES if c.cell == "gru")
    assert all(0 in c.lengths and c.time in c.lengths for c in CASES
               if c.lengths is not None and c.batch > 2)
    # rows wider than a block has threads, up to the widest block (several sums per group)
    assert max(3 * c.num_units for c in CASES if c.cell == "gru") > 256 * 4


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", C.empty_cases(), ids=[c.name for c in C.empty_cases()])
def test_empty_dimensions(engine, rng, case, dtype):
    C.check_empty(*engine, case, dtype, rng)


HEADER_CASES = C.header_cases()


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", HEADER_CASES, ids=[c.name for c in HEADER_CASES])
def test_reserve_header_mismatch_gives_nan(engine, rng, case, dtype):
    C.check_header_mismatch(*engine, case, dtype, rng)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", HEADER_CASES, ids=[c.name for c in HEADER_CASES])
def test_deterministic(engine, rng, case, dtype):
    C.check_deterministic(*engine, case, dtype, rng)


# ------------------------------------------------------------------------------------------------
# the scratch-size queries
# ------------------------------------------------------------------------------------------------

def test_scratch_sizes(mod):
    """The host backend reserves no cuBLAS workspace, the CUDA one 32 MiB more (the carving is
    otherwise the same); sizes are 256-byte multiples and grow with the run and its options.
    (Every run of the tests checks that the engine stays inside the size: run_forward and
    run_backward's guard zone.)"""
    for cell in ("gru", "simple_rnn"):
        base = C.Case(cell, lengths=C.VARLEN)
        kw = base.model_kwargs()
        longer = dataclasses.replace(base, time=9, lengths=None).model_kwargs()
        for dtype in C.DTYPES:
            for which in ("forward", "backward"):
                size = getattr(mod, "lnr_%s_scratch_bytes" % which)
                host = size("host", dtype, **kw)
                assert host > 0 and host % 256 == 0
                assert size("cuda", dtype, **kw) - host == 32 << 20, (cell, dtype, which)
                assert size("host", dtype, **longer) > host, (cell, dtype, which)
            fwd, bwd = mod.lnr_forward_scratch_bytes, mod.lnr_backward_scratch_bytes
            # the mask makes each step's GEMM operand a copy (the backward masks as it reads)
            assert fwd("host", dtype, **kw, recurrent_mask=1) > fwd("host", dtype, **kw)
            # the GRU's inference keeps the cell's values in scratch, training in the reserve
            # space; the SimpleRNN keeps none
            inference = fwd("host", dtype, **dict(kw, training=False))
            assert (inference > fwd("host", dtype, **kw)) == (cell == "gru")
            if dtype in ("float32", "float64"):  # (16-bit runs stage zoneout's one weight too)
                # the direct term of dL/dh_{t-1}: the GRU's blend always, the SimpleRNN's with
                # zoneout only
                zoned = bwd("host", dtype, **kw, zoneout_h=1, zoneout_h_per_element=False)
                assert (zoned > bwd("host", dtype, **kw)) == (cell == "simple_rnn")


def test_workspace_bytes(mod):
    """Training keeps per (t, b) row h and 2 r, the GRU's 4H cell values and two 3H x̂, the
    SimpleRNN's one H x̂; inference h alone."""
    rows, H = 10, 6
    for cell, per_row in (("gru", 11 * H + 2), ("simple_rnn", 2 * H + 2)):
        case = C.Case(cell, time=5, batch=2, num_units=H)
        for dtype in C.DTYPES:
            acc = np.dtype(C.ACC[dtype]).itemsize
            assert mod.lnr_workspace_bytes(dtype, **case.model_kwargs()) == \
                C.HEADER_BYTES + rows * per_row * acc
            assert mod.lnr_workspace_bytes(dtype, **case.model_kwargs(training=False)) == \
                C.HEADER_BYTES + rows * H * acc


def test_bad_arguments_are_value_errors(mod):
    kw = C.Case().model_kwargs()
    for change, what in ((dict(cell="lstm"), "cell"), (dict(activation="swish"), "activation"),
                         (dict(recurrent_activation="x"), "recurrent_activation"),
                         (dict(epsilon=0.0), "epsilon"), (dict(lengths=[1, 2]), "lengths"),
                         (dict(lengths=[1, 2, 9]), "lengths"), (dict(num_units=-1), "sizes")):
        with pytest.raises(ValueError, match=what):
            mod.lnr_forward_scratch_bytes("host", "float32", **dict(kw, **change))
    with pytest.raises(ValueError, match="backend"):
        mod.lnr_forward_scratch_bytes("tpu", "float32", **kw)
    with pytest.raises(ValueError, match="five"):
        mod.lnr_forward("host", "float32", 0, **kw, input=0, input_h=0, weights=[0] * 4,
                        output=0, output_h=0, workspace=0, scratch=0)


# ------------------------------------------------------------------------------------------------
# against the CPU op (TfLstm>LayerNormRNN, LayerNormRNNGrad), float64
# ------------------------------------------------------------------------------------------------

TF_CASES = [c for c in CASES if c.num_units <= 4]


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf
    import tf_lstm_ops

    tf_lstm_ops.load_library()
    return tf


def _op(name):
    from tf_lstm_ops._loader import library

    return library.op(name)


def _tf_args(tf, case, inp):
    def t(v):
        return tf.constant(np.asarray(v, np.float64))

    lengths = case.lengths if case.lengths is not None else [case.time] * case.batch
    return dict({k: t(inp.get(k, np.zeros([0])))
                 for k in C.INPUT_NAMES + C.BINDING_WEIGHTS + ("recurrent_mask",)},
                zoneout_weights=t(inp.get("zoneout_h", np.zeros([0]))),
                sequence_lengths=tf.constant(lengths, tf.int32), cell=case.cell,
                activation=case.activation, recurrent_activation=case.recurrent_activation,
                epsilon=C.EPS, time_major=case.time_major)


def _tf_grads(tf, case, args, cot, reserve):
    out = _op("LayerNormRNNGrad")(**args, output_backprop=tf.constant(cot["dy"]),
                                  output_h_backprop=tf.constant(cot["dh"]),
                                  reserve_space=reserve)
    grads = dict(zip(C.INPUT_NAMES + C.BINDING_WEIGHTS, (v.numpy() for v in out)))
    return {k: grads[k] for k in C.grad_names(case.cell)}


@pytest.mark.parametrize("case", TF_CASES, ids=[c.name for c in TF_CASES])
def test_gradients_equal_the_cpu_ops(engine, rng, tf, case):
    """The engine's gradients against the CPU op's (the two sum in different orders)."""
    mod, alloc = engine
    inp, cot = C.make_inputs(rng, case, "float64")
    args = _tf_args(tf, case, inp)
    theirs = _tf_grads(tf, case, args, cot, _op("LayerNormRNN")(**args, is_training=True)[2])
    ours = C.run_forward(mod, alloc, case, "float64", inp)
    grads = C.run_backward(mod, alloc, case, "float64", inp, cot, ours["workspace_buffer"])
    for k in C.grad_names(case.cell):
        C.assert_close(grads[k], theirs[k], 1e-12, k)


RESERVE_CASES = [c for c in TF_CASES if c.lengths is not None]


@pytest.mark.parametrize("case", RESERVE_CASES, ids=[c.name for c in RESERVE_CASES])
def test_reserve_space_is_the_cpu_ops(engine, rng, tf, case):
    """The CPU OpKernel's reserve space and the engine's workspace: the same size (whole elements
    of T), the same header to the byte, the same values to rounding (the same layout); the
    engine's backward on the CPU op's reserve space gives the CPU op's gradients, and the CPU
    op's backward on the engine's gives them too."""
    mod, alloc = engine
    inp, cot = C.make_inputs(rng, case, "float64")
    args = _tf_args(tf, case, inp)
    fwd = _op("LayerNormRNN")(**args, is_training=True)
    reserve = np.frombuffer(fwd[2].numpy().tobytes(), np.uint8)
    ours = C.run_forward(mod, alloc, case, "float64", inp)
    n = len(ours["workspace"])
    assert len(reserve) == (n + 7) // 8 * 8
    assert reserve[:C.HEADER_BYTES].tobytes() == ours["workspace"][:C.HEADER_BYTES].tobytes()
    C.assert_close(C.workspace_values("float64", ours["workspace"]),
                   C.workspace_values("float64", reserve[:n]), 1e-12, "reserve space")

    theirs = _tf_grads(tf, case, args, cot, fwd[2])
    cpu_reserve = alloc.empty_bytes(len(reserve))
    alloc.write_bytes(cpu_reserve, 0, reserve.tobytes())
    across = C.run_backward(mod, alloc, case, "float64", inp, cot, cpu_reserve)
    padded = np.concatenate([ours["workspace"], np.zeros(len(reserve) - n, np.uint8)])
    back = _tf_grads(tf, case, args, cot, tf.constant(np.frombuffer(padded.tobytes(), np.float64)))
    for k in C.grad_names(case.cell):
        C.assert_close(across[k], theirs[k], 1e-12, "engine on the CPU reserve: " + k)
        C.assert_close(back[k], theirs[k], 1e-12, "CPU op on the engine's reserve: " + k)
