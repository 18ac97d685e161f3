"""The framework-free GPU engine of the LSTM block ops (cc/block_lstm/gpu_engine.h) without a GPU.

The self-test module (tools/gpu_selftest, built with nvcc by build.py; no TensorFlow, no Bazel) runs
the engine with HostBackend: the same element-wise functors, step order, GEMM transposes and scratch
carving as on the device, executed on the CPU. Every op is compared with the float64 reference
(tools/references/block_lstm.py) at the CPU kernels' tolerances, for every storage type, through
tools/gpu_selftest/block_lstm_checks.py, the checks a GPU self-test runs with backend "cuda".
Skipped only when nvcc is missing.
"""


import numpy as np
import pytest

from tools.gpu_selftest import block_lstm_checks as checks  # noqa: E402  (repo on sys.path)

DTYPES = checks.DTYPES
SHAPES = checks.SEQ_SHAPES
SHAPE_IDS = ["T%dB%dI%dH%dL%d" % s for s in SHAPES]


@pytest.fixture
def module(selftest_module):
    """conftest.py's session-wide self-test module (skips without nvcc)."""
    return selftest_module


@pytest.fixture
def host():
    return checks.HostAlloc()


def configs_for(shape):
    return [checks.config(*shape, *attrs) for attrs in checks.ATTRS]


def assert_no_problems(results):
    """results: [(cfg, (errors, problems))]; fails listing every problem with its config."""
    lines = ["%s: %s" % (checks.config_id(cfg), p) for cfg, (_, problems) in results
             for p in problems]
    assert not lines, "\n".join(lines)


# ------------------------------------------------------------------------------------------
# against the float64 reference, every dtype, layout and attribute set
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_forward(module, host, dtype, shape):
    assert_no_problems([(cfg, checks.check_forward(module, host, dtype, cfg))
                        for cfg in configs_for(shape)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_backward_grad(module, host, dtype, shape):
    """BlockLSTMFullGradGrad: the projection of its results against central differences of the
    reference backward, and its exact zeros."""
    assert_no_problems([(cfg, checks.check_backward_grad(module, host, dtype, cfg))
                        for cfg in configs_for(shape)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_backward(module, host, dtype, shape):
    """BlockLSTMGrad / BlockLSTMGradV2: gradients w.r.t. cs and h only."""
    assert_no_problems([(cfg, checks.check_backward(module, host, dtype, cfg))
                        for cfg in configs_for(shape)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_full_backward(module, host, dtype, shape):
    """BlockLSTMFullGrad: also gradients w.r.t. i, f, o, ci, co."""
    assert_no_problems([(cfg, checks.check_backward(module, host, dtype, cfg, full=True))
                        for cfg in configs_for(shape)])


CELL_SHAPES = sorted({(B, I, H) for _, B, I, H, _ in SHAPES})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,I,H", CELL_SHAPES, ids=["B%dI%dH%d" % s for s in CELL_SHAPES])
def test_cell_backward(module, host, dtype, B, I, H):
    """LSTMBlockCellGrad (both layouts: the engine takes any)."""
    assert_no_problems([(cfg, checks.check_cell_backward(module, host, dtype, cfg))
                        for cfg in configs_for((1, B, I, H, 1))])


@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_every_seq_len_max(module, host, dtype):
    T, B, I, H = 6, 3, 4, 5
    assert_no_problems([(cfg, fn(module, host, dtype, cfg))
                        for L in range(T + 1)
                        for cfg in [checks.config(T, B, I, H, L, "IFCO", 0.0, 0.9, True)]
                        for fn in (checks.check_forward, checks.check_backward)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_deterministic(module, host, dtype):
    assert_no_problems([(cfg, checks.check_deterministic(module, host, dtype, cfg))
                        for cfg in [checks.config(5, 3, 4, 6, 4, "ICFO", 1.0, 0.6, True),
                                    checks.config(3, 20, 2, 3, 3, "IFCO", 0.0, 0.0, True)]])


# ------------------------------------------------------------------------------------------
# half / bfloat16: computed in float32, each output rounded once (as the CPU kernels)
# ------------------------------------------------------------------------------------------

def ulp(values, dtype):
    mant = {"half": 10, "bfloat16": 7}[dtype]
    min_exp = {"half": -14, "bfloat16": -126}[dtype]
    e = np.floor(np.log2(np.maximum(np.abs(values), 2.0 ** min_exp)))
    return 2.0 ** (e - mant)


# h = o * co from the rounded o and co may be 1.5 ulp off (tests/test_block_lstm_forward.py).
ROUNDED_ULPS = dict(i=0.5, cs=0.5, f=0.5, o=0.5, ci=0.5, co=0.5, h=1.5)


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("layout,use_peephole,cell_clip,forget_bias",
                         [("ICFO", False, 3.0, 1.0), ("ICFO", True, 0.75, -0.625),
                          ("IFCO", True, 0.5, 0.0), ("IFCO", False, 0.0, 0.0)])
def test_low_precision_first_step_rounded_once(module, host, dtype, layout, use_peephole,
                                               cell_clip, forget_bias):
    rng = np.random.default_rng(checks.seed_for("once", dtype, layout, use_peephole))
    for T, B, I, H in [(1, 3, 2, 5), (2, 5, 7, 8), (1, 8, 8, 16)]:
        cfg = checks.config(T, B, I, H, T, layout, forget_bias, cell_clip, use_peephole)
        p = checks.random_inputs(rng, B, I, H, dtype, T=T)
        out = checks.run_forward(module, host, dtype, p, cfg)
        expect = checks.ref.block_lstm(1, **p, **checks.reference_attrs(cfg, dtype))
        for k in checks.OUTPUTS:
            exact = expect[k][:1]
            err = np.abs(out[k][:1] - exact)
            bound = ROUNDED_ULPS[k] * ulp(exact, dtype) * (1 + 1e-9) + 1e-6
            assert np.all(err <= bound), "%s %s: %.3g ulp" % (
                checks.config_id(cfg), k, np.max(err / ulp(exact, dtype)))


def test_bfloat16_bits_round_to_nearest_even():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(1)
    values = np.concatenate([
        rng.normal(size=2000) * 10.0 ** rng.integers(-30, 30, 2000),
        [0.0, -0.0, 1.0, 1.00390625, 1.01171875, -1.00390625, np.inf, -np.inf, 3.4e38, 1e-42],
    ]).astype(np.float32)
    expect = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(checks.float32_to_bfloat16_bits(values), expect)
    np.testing.assert_array_equal(
        checks.bfloat16_bits_to_float32(expect), expect.view(ml_dtypes.bfloat16).astype(np.float32))
    assert np.isnan(checks.round_to(np.nan, "bfloat16"))


# ------------------------------------------------------------------------------------------
# scratch sizes, errors
# ------------------------------------------------------------------------------------------

BLAS_WORKSPACE = 32 << 20  # CudaBackend::kBlasWorkspaceBytes


@pytest.mark.parametrize("dtype", DTYPES)
def test_scratch_sizes(module, dtype):
    fwd = module.lstm_forward_scratch_bytes
    bwd = module.lstm_backward_scratch_bytes
    cell = module.lstm_cell_backward_scratch_bytes
    for T, B, I, H, L in SHAPES:
        runs = L > 0 and B > 0 and H > 0
        for pp in (False, True):
            host_f = fwd("host", dtype, T, B, I, H, "ICFO", 1.0, 3.0, pp, L)
            host_b = bwd("host", dtype, T, B, I, H, "IFCO", pp, L)
            assert host_f % 256 == 0 and host_b % 256 == 0
            assert (host_f > 0) == runs and (host_b > 0) == runs
            # The device reserves cuBLAS's workspace on top, only when GEMMs run.
            assert fwd("cuda", dtype, T, B, I, H, "ICFO", 1.0, 3.0, pp, L) - host_f == (
                BLAS_WORKSPACE if runs else 0)
            assert bwd("cuda", dtype, T, B, I, H, "IFCO", pp, L) - host_b == (
                BLAS_WORKSPACE if runs else 0)
            # The cell gradient has no GEMM; scratch only for the peephole reduction.
            c = cell("cuda", dtype, B, I, H, "ICFO", pp)
            assert c == cell("host", dtype, B, I, H, "ICFO", pp)
            assert (c > 0) == (pp and B > 0 and H > 0)
        # Peepholes add the reduction's partial sums.
        if runs:
            assert bwd("host", dtype, T, B, I, H, "ICFO", True, L) > bwd(
                "host", dtype, T, B, I, H, "ICFO", False, L)


def test_cuda_backend_without_gpu_is_a_clean_error(module):
    if module.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present: the GPU self-test covers this backend")
    T, B, I, H = 2, 2, 3, 4
    with pytest.raises(RuntimeError, match="LstmForward failed"):
        module.lstm_forward("cuda", "float32", 0, T, B, I, H, "ICFO", 1.0, 3.0, False, T,
                            *([0] * 15), scratch=0)
    with pytest.raises(RuntimeError, match="LstmBackward failed"):
        module.lstm_backward("cuda", "half", 0, T, B, I, H, "IFCO", True, T, *([0] * 17),
                             *([0] * 8), scratch=0)
    with pytest.raises(RuntimeError, match="LstmCellBackward failed"):
        module.lstm_cell_backward("cuda", "bfloat16", 0, B, I, H, "ICFO", True, *([0] * 21),
                                  scratch=0)
    with pytest.raises(RuntimeError):
        module.initialize()


def test_bad_arguments_are_value_errors(module):
    fwd = module.lstm_forward_scratch_bytes
    with pytest.raises(ValueError, match="backend"):
        fwd("gpu", "float32", 2, 2, 3, 4, "ICFO", 1.0, 3.0, False, 2)
    with pytest.raises(ValueError, match="dtype"):
        fwd("host", "int32", 2, 2, 3, 4, "ICFO", 1.0, 3.0, False, 2)
    with pytest.raises(ValueError, match="layout"):
        fwd("host", "float32", 2, 2, 3, 4, "CIFO", 1.0, 3.0, False, 2)
    with pytest.raises(ValueError, match="seq_len_max"):
        fwd("host", "float32", 2, 2, 3, 4, "ICFO", 1.0, 3.0, False, 3)
    with pytest.raises(ValueError, match="non-negative"):
        module.lstm_backward_scratch_bytes("host", "float32", 2, -1, 3, 4, "ICFO", False, 0)
    with pytest.raises(ValueError, match="backend"):
        module.lstm_cell_backward_scratch_bytes("", "half", 2, 3, 4, "ICFO", True)
    # The calls themselves check before touching any buffer.
    with pytest.raises(ValueError, match="backend"):
        module.lstm_forward("tpu", "float32", 0, 2, 2, 3, 4, "ICFO", 1.0, 3.0, False, 2,
                            *([0] * 15), scratch=0)
    with pytest.raises(ValueError, match="dtype"):
        module.lstm_backward("host", "float16", 0, 2, 2, 3, 4, "ICFO", False, 2, *([0] * 25),
                             scratch=0)
    with pytest.raises(ValueError, match="seq_len_max"):
        module.lstm_backward("host", "float32", 0, 2, 2, 3, 4, "ICFO", False, -1,
                             *([0] * 25), scratch=0)
    with pytest.raises(ValueError, match="layout"):
        module.lstm_cell_backward("host", "float32", 0, 2, 3, 4, "icfo", False, *([0] * 21),
                                  scratch=0)


@pytest.mark.parametrize("cfg", [checks.config(5, 3, 4, 6, 4, "IFCO", 0.0, 0.0, True),
                                 checks.config(4, 2, 3, 5, 4, "ICFO", 1.0, 0.0, False),
                                 checks.config(6, 4, 2, 3, 2, "ICFO", 0.0, 0.0, True)],
                         ids=checks.config_id)
def test_backward_grad_equals_the_cpu_kernel(module, host, cfg):
    """The engine's BlockLSTMFullGradGrad element by element against the CPU kernel's (float64),
    which tests/test_second_order.py checks against the differentiated composite."""
    import tensorflow as tf

    from tf_lstm_ops._loader import library

    rng = np.random.default_rng(3)
    case = checks.backward_case(rng, cfg, "float64", full=True)
    cot = {k: rng.normal(size=np.shape(v)) for k, v in zip(
        checks.SEQ_GRADS, (case[k] for k in checks.INPUTS))}
    ours = checks.run_backward_grad(module, host, "float64", case, cot, cfg)
    with tf.device("/CPU:0"):  # not a GPU kernel, where a CUDA build has a GPU to use
        kernel = library.op("BlockLSTMFullGradGrad")(
            seq_len_max=tf.constant(cfg["L"], tf.int64),
            **{k: tf.constant(case[k]) for k in checks.FULL_GRAD_INPUTS},
            **{"d_" + k: tf.constant(cot[k]) for k in checks.SEQ_GRADS},
            use_peephole=cfg["use_peephole"], gate_layout=cfg["layout"])
    for name, value in zip(checks.FULL_GRAD_INPUTS, kernel):
        np.testing.assert_allclose(ours[name], value.numpy(), rtol=1e-11, atol=1e-11,
                                   err_msg=name)
