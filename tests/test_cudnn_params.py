"""CudnnRNNParamsSize, ParamsToCanonical(V2) and CanonicalToParams(V2) on CPU, through
tf_lstm_ops.raw.* and tf.raw_ops.*, against the reference layout (docs/cudnn_rnn.md §6)."""


import numpy as np
import pytest
import tensorflow as tf

from tools.references import cudnn_rnn as R

MODES = R.MODES
DIRS = ("unidirectional", "bidirectional")
WHERE = ("plugin", "tf")


def _cases():
    cases = []
    for mode in MODES:
        for direction in DIRS:
            for L in (1, 2, 3):
                for variant in (("plain", "proj", "skip", "auto_skip", "auto_linear")
                                if mode == "lstm" else ("plain", "skip", "auto_skip")):
                    cases.append((mode, direction, L, variant))
    return cases


CASES = _cases()
CASE_IDS = ["%s-%s-L%d-%s" % (c[0], c[1][:3], c[2], c[3]) for c in CASES]


def make_cfg(mode, direction, L, variant, H=4):
    input_mode = {"skip": "skip_input", "auto_skip": "auto_select",
                  "auto_linear": "auto_select"}.get(variant, "linear_input")
    I = H if variant in ("skip", "auto_skip") else 3
    return R.Cfg(mode, L, H, I, direction, input_mode, 2 if variant == "proj" else 0)


def scalars(cfg):
    return dict(num_layers=tf.constant(cfg.L), num_units=tf.constant(cfg.H),
                input_size=tf.constant(cfg.I))


def attrs(cfg, v2=True, **extra):
    a = dict(rnn_mode=cfg.rnn_mode, input_mode=cfg.input_mode, direction=cfg.direction)
    if v2:
        a["num_proj"] = cfg.num_proj
    a.update(extra)
    return a


def counts(cfg):
    wshapes, bshapes = R.canonical_shapes(cfg)
    return len(wshapes), len(bshapes)


def to_canonical(where, cfg, params, dtype, version):
    nw, nb = counts(cfg)
    if version == 1:
        return R.get_op(where, "CudnnRNNParamsToCanonical")(
            **scalars(cfg), params=R.to_tf(params, dtype), num_params=nw, **attrs(cfg, False))
    return R.get_op(where, "CudnnRNNParamsToCanonicalV2")(
        **scalars(cfg), params=R.to_tf(params, dtype), num_params_weights=nw,
        num_params_biases=nb, **attrs(cfg))


def to_params(where, cfg, weights, biases, dtype, version):
    ws = [R.to_tf(w, dtype) for w in weights]
    bs = [R.to_tf(b, dtype) for b in biases]
    name = "CudnnRNNCanonicalToParams" + ("" if version == 1 else "V2")
    return R.get_op(where, name)(**scalars(cfg), weights=ws, biases=bs,
                                 **attrs(cfg, version == 2))


# ----------------------------------------------------------------------------------------------
# ParamsSize
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("S", [tf.int32, tf.int64], ids=["int32", "int64"])
def test_params_size_spec_examples(where, S):
    op = R.get_op(where, "CudnnRNNParamsSize")
    out = op(num_layers=1, num_units=2, input_size=3, T=tf.float32, S=S)
    assert out.dtype == S and out.shape == (1,) and out.numpy().tolist() == [56]
    out = op(num_layers=2, num_units=4, input_size=3, T=tf.float32, S=S, rnn_mode="gru",
             direction="bidirectional")
    assert out.numpy().tolist() == [552]


@pytest.mark.parametrize("mode,direction,L,variant", CASES, ids=CASE_IDS)
def test_params_size_matches_formula(mode, direction, L, variant):
    cfg = make_cfg(mode, direction, L, variant)
    expected = R.cfg_params_size(cfg)
    for where in WHERE:
        for S in (tf.int32, tf.int64):
            for T in ("half", "bfloat16", "float32", "float64"):
                out = R.get_op(where, "CudnnRNNParamsSize")(
                    **scalars(cfg), T=R.tf_dtype(T), S=S, **attrs(cfg))
                assert out.dtype == S and out.shape == (1,), (where, S, T)
                assert int(out.numpy()[0]) == expected, (where, S, T)
    # dropout and seeds change nothing
    out = R.get_op("plugin", "CudnnRNNParamsSize")(**scalars(cfg), T=tf.float32, S=tf.int32,
                                                   **attrs(cfg, dropout=0.5, seed=3, seed2=4))
    assert int(out.numpy()[0]) == expected


def test_params_size_large_is_exact_in_int64():
    """A size beyond int32 range in int64 (only arithmetic: nothing is allocated)."""
    cfg = R.Cfg("lstm", 4, 8192, 8192, "bidirectional")
    expected = R.cfg_params_size(cfg)
    assert expected > 2 ** 31
    out = R.get_op("plugin", "CudnnRNNParamsSize")(**scalars(cfg), T=tf.float32, S=tf.int64,
                                                   **attrs(cfg))
    assert int(out.numpy()[0]) == expected


# ----------------------------------------------------------------------------------------------
# ParamsToCanonical(V2) / CanonicalToParams(V2)
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,direction,L,variant", CASES, ids=CASE_IDS)
def test_params_to_canonical_and_back(rng, mode, direction, L, variant):
    cfg = make_cfg(mode, direction, L, variant)
    params = rng.uniform(-1, 1, R.cfg_params_size(cfg))
    ref_w, ref_b = R.params_to_canonical(cfg, params)
    versions = (2,) if cfg.proj else (1, 2)
    for where in WHERE:
        for version in versions:
            for dtype in ("float64", "float32"):
                p = R.round_to(params, dtype)
                rw, rb = R.params_to_canonical(cfg, p)
                out = to_canonical(where, cfg, p, dtype, version)
                assert type(out)._fields == ("weights", "biases")
                assert len(out.weights) == len(rw) and len(out.biases) == len(rb)
                for k, (got, exp) in enumerate(zip(out.weights, rw)):
                    assert got.dtype == R.tf_dtype(dtype)
                    assert tuple(got.shape) == exp.shape, ("weight", k, got.shape, exp.shape)
                    np.testing.assert_array_equal(got.numpy().astype(np.float64), exp)
                for k, (got, exp) in enumerate(zip(out.biases, rb)):
                    assert tuple(got.shape) == exp.shape, ("bias", k)
                    np.testing.assert_array_equal(got.numpy().astype(np.float64), exp)
                # round trip, bit-exact
                back = to_params(where, cfg, out.weights, out.biases, dtype, version)
                assert back.dtype == R.tf_dtype(dtype) and back.shape == (p.size,)
                np.testing.assert_array_equal(back.numpy().astype(np.float64), p)
    assert [w.shape for w in ref_w] == R.canonical_shapes(cfg)[0]


@pytest.mark.parametrize("mode,direction,L,variant", CASES[::3], ids=CASE_IDS[::3])
def test_canonical_to_params_matches_reference(rng, mode, direction, L, variant):
    cfg = make_cfg(mode, direction, L, variant)
    weights, biases = R.random_canonical(rng, cfg)
    expected = R.canonical_to_params(cfg, weights, biases)
    for where in WHERE:
        for version in ((2,) if cfg.proj else (1, 2)):
            got = to_params(where, cfg, weights, biases, "float64", version)
            np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("where", WHERE)
def test_round_trip_low_precision(rng, dtype, where):
    for cfg in (R.Cfg("lstm", 2, 4, 3, "bidirectional", num_proj=2),
                R.Cfg("gru", 2, 3, 3, "unidirectional", "skip_input")):
        p = R.round_to(rng.uniform(-1, 1, R.cfg_params_size(cfg)), dtype)
        out = to_canonical(where, cfg, p, dtype, 2)
        rw, _ = R.params_to_canonical(cfg, p)
        for got, exp in zip(out.weights, rw):
            assert got.dtype == R.tf_dtype(dtype)
            np.testing.assert_array_equal(got.numpy().astype(np.float64), exp)
        back = to_params(where, cfg, out.weights, out.biases, dtype, 2)
        np.testing.assert_array_equal(back.numpy().astype(np.float64), p)


@pytest.mark.parametrize("where", WHERE)
def test_v2_without_projection_uses_its_own_counts(rng, where):
    """TF's V2 kernel overwrites its counts with the V1 attr when num_proj == 0 (always fails);
    ours uses num_params_weights / num_params_biases (docs/cudnn_rnn.md §6.4)."""
    cfg = R.Cfg("gru", 2, 3, 2, "bidirectional")
    params = rng.uniform(-1, 1, R.cfg_params_size(cfg))
    out = to_canonical(where, cfg, params, "float64", 2)
    assert len(out.weights) == 24 and len(out.biases) == 24


def test_skip_input_layer0_weights_are_empty(rng):
    cfg = R.Cfg("lstm", 2, 3, 3, "bidirectional", "skip_input")
    params = rng.uniform(-1, 1, R.cfg_params_size(cfg))
    out = to_canonical("plugin", cfg, params, "float64", 1)
    shapes = [tuple(w.shape) for w in out.weights]
    # pseudo-layers 0 and 1 (layer 0): W_0..W_3 are [H, 0]; R are [H, H]
    for p in (0, 1):
        assert shapes[8 * p:8 * p + 4] == [(3, 0)] * 4
        assert shapes[8 * p + 4:8 * p + 8] == [(3, 3)] * 4
    assert shapes[16:20] == [(3, 6)] * 4  # layer 1 sees both directions


def test_canonical_params_drive_the_forward_op(rng):
    """params built by CanonicalToParams from known matrices give the reference's outputs."""
    cfg = R.Cfg("lstm", 2, 3, 2, "bidirectional", num_proj=2)
    weights, biases = R.random_canonical(rng, cfg)
    params = to_params("tf", cfg, weights, biases, "float64", 2)
    inp = R.random_inputs(rng, cfg, 3, 2)
    inp["params"] = params.numpy()
    out = R.get_op("tf", "CudnnRNNV3")(**R.tf_forward_inputs(cfg, inp, "float64"),
                                       **R.tf_attrs(cfg))
    ref = R.forward(cfg, inp["input"], inp["input_h"], inp["input_c"],
                    R.canonical_to_params(cfg, weights, biases))
    for k in ("output", "output_h", "output_c"):
        R.assert_close(getattr(out, k), ref[k], 1e-12, k)
