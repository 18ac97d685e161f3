"""Bad inputs to the CudnnRNN family are rejected with an InvalidArgumentError that names the
offending argument (docs/validation.md §4, §5), eagerly and inside a tf.function whose input
signature has unknown shapes (so the kernel itself, not a shape function, does the checking);
and empty inputs (T = 0, B = 0, H = 0, I = 0) never crash."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tools.references import cudnn_rnn as R

WHERE = ("plugin", "tf")
MODE = ("eager", "function")
T_, B_, I_, H_ = 3, 2, 3, 4


@pytest.fixture(scope="module", autouse=True)
def plugin():
    import tf_lstm_ops

    tf_lstm_ops.load_library()


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------

def is_tensorish(v):
    return isinstance(v, tf.Tensor) or (isinstance(v, list) and v and
                                        all(isinstance(t, tf.Tensor) for t in v))


def call(fn, kwargs, mode):
    """fn(**kwargs) eagerly, or inside a tf.function whose input signature gives every tensor
    argument an unknown shape."""
    if mode == "eager":
        return fn(**kwargs)
    keys = [k for k, v in kwargs.items() if is_tensorish(v)]
    static = {k: v for k, v in kwargs.items() if k not in keys}
    sig = [tf.nest.map_structure(lambda t: tf.TensorSpec(None, t.dtype), kwargs[k]) for k in keys]

    @tf.function(input_signature=sig)
    def wrapped(*args):
        return fn(**dict(zip(keys, args)), **static)

    return wrapped(*[kwargs[k] for k in keys])


def kernel_message(message):
    """The error text without TF's decorations ({{function_node ...}}, graph-node tracebacks),
    so that only the kernel's own words can name an argument."""
    message = re.sub(r"\{\{[^}]*\}\}", " ", message)
    return "\n".join(line for line in message.splitlines()
                     if not line.strip().startswith(("File ", "Detected at node")))


def names_argument(message, names):
    message = kernel_message(message)
    return any(re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(n), message)
               for n in names)


def expect_invalid(fn, kwargs, mode, names):
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        out = call(fn, kwargs, mode)
        tf.nest.map_structure(lambda t: t.numpy(), out)  # (eager already ran; be explicit)
    msg = str(info.value)
    assert names_argument(msg, names), "message names none of %s: %s" % (names, msg[:500])


def forward_kwargs(cfg, T=T_, B=B_, version=3, time_major=True, dtype="float32", seed=0,
                   **extra):
    inp = R.random_inputs(np.random.default_rng(seed), cfg, T, B, time_major)
    kw = R.tf_forward_inputs(cfg, inp, dtype, None, version, time_major)
    kw.update(R.tf_attrs(cfg, version, time_major))
    kw.update(extra)
    return kw


def forward_name(version):
    return {1: "CudnnRNN", 2: "CudnnRNNV2", 3: "CudnnRNNV3"}[version]


def backprop_name(version):
    return {1: "CudnnRNNBackprop", 2: "CudnnRNNBackpropV2", 3: "CudnnRNNBackpropV3"}[version]


def backprop_kwargs(cfg, version=3, time_major=True, seed=0, **fwd_extra):
    """Valid Backprop kwargs from a real training forward."""
    kw = forward_kwargs(cfg, version=version, time_major=time_major, seed=seed, **fwd_extra)
    out = R.get_op("plugin", forward_name(version))(**kw)
    rng = np.random.default_rng(seed + 1)
    bkw = {k: v for k, v in kw.items() if k not in ("is_training",)}
    bkw.update(output=out.output, output_h=out.output_h, output_c=out.output_c,
               output_backprop=tf.constant(rng.uniform(-1, 1, out.output.shape), tf.float32),
               output_h_backprop=tf.constant(rng.uniform(-1, 1, out.output_h.shape), tf.float32),
               output_c_backprop=tf.constant(rng.uniform(-1, 1, out.output_c.shape), tf.float32),
               reserve_space=out.reserve_space)
    if version >= 2:
        bkw["host_reserved"] = out.host_reserved
    return bkw


def zeros(shape, dtype=tf.float32):
    return tf.zeros(shape, dtype)


LSTM = R.Cfg("lstm", 1, H_, I_)
LSTM_BI2 = R.Cfg("lstm", 2, H_, I_, "bidirectional")
LSTM_PROJ = R.Cfg("lstm", 1, H_, I_, num_proj=2)
GRU = R.Cfg("gru", 1, H_, I_)


def psize(cfg):
    return R.cfg_params_size(cfg)


# ----------------------------------------------------------------------------------------------
# forward ops
# ----------------------------------------------------------------------------------------------

def _forward_cases():
    c = []

    def case(name, names, cfg=LSTM, versions=(1, 2, 3), **fkw):
        def build(version, cfg=cfg, fkw=fkw):
            kw = forward_kwargs(cfg, version=version, **{k: v for k, v in fkw.items()
                                                         if k in ("time_major",)})
            for k, v in fkw.items():
                if k != "time_major":
                    kw[k] = v(kw) if callable(v) else v
            return kw
        for v in versions:
            c.append(("%s-v%d" % (name, v), v, build, names))

    case("input_rank2", ("input",), input=lambda kw: kw["input"][0])
    case("input_rank4", ("input",), input=lambda kw: kw["input"][None])
    case("input_h_rank2", ("input_h",), input_h=lambda kw: kw["input_h"][0])
    case("input_h_rank4", ("input_h",), input_h=lambda kw: kw["input_h"][None])
    case("input_h_dim0_not_multiple_of_D", ("input_h",), cfg=LSTM_BI2,
         input_h=zeros([3, B_, H_]), input_c=zeros([3, B_, H_]))
    case("input_h_zero_layers", ("input_h", "num_layers"),
         input_h=zeros([0, B_, H_]), input_c=zeros([0, B_, H_]))
    case("input_h_batch_mismatch", ("input_h",),
         input_h=zeros([1, B_ + 1, H_]), input_c=zeros([1, B_ + 1, H_]))
    case("input_h_batch_mismatch_batch_major", ("input_h",), versions=(3,), time_major=False,
         input_h=zeros([B_ + 1, 1, H_]), input_c=zeros([B_ + 1, 1, H_]))
    case("input_h_units_mismatch_params", ("params", "input_h"),
         input_h=zeros([1, B_, H_ + 1]), input_c=zeros([1, B_, H_ + 1]))
    case("input_c_shape_ne_input_h", ("input_c",), input_c=zeros([1, B_, H_ + 1]))
    case("input_c_batch_ne_input_h", ("input_c",), input_c=zeros([1, B_ + 1, H_]))
    case("input_c_rank2", ("input_c",), input_c=zeros([B_, H_]))
    case("input_c_scalar_for_lstm", ("input_c",), input_c=zeros([]))
    case("params_too_short", ("params",), params=lambda kw: kw["params"][:-1])
    # (a longer params buffer is accepted, as by TF's GPU kernels: test_tf_compat.py)
    case("params_rank2", ("params",), params=lambda kw: kw["params"][None])
    case("params_of_a_gru_for_lstm", ("params",), params=zeros([psize(GRU)]))
    case("params_of_proj_without_proj", ("params",), params=zeros([psize(LSTM_PROJ)]))
    # projection
    case("proj_input_h_ne_num_proj", ("input_h", "num_proj"), cfg=LSTM_PROJ, versions=(3,),
         input_h=zeros([1, B_, 3]))
    case("proj_input_c_batch_mismatch", ("input_c",), cfg=LSTM_PROJ, versions=(3,),
         input_c=zeros([1, B_ + 1, H_]))
    # (num_proj == num_units is no projection, as in TF: test_tf_compat.py)
    case("num_proj_gt_num_units", ("num_proj",), versions=(3,), num_proj=H_ + 1,
         input_h=zeros([1, B_, H_ + 1]), params=zeros([psize(LSTM)]))
    case("num_proj_with_gru", ("num_proj",), cfg=GRU, versions=(3,), num_proj=2,
         input_h=zeros([1, B_, 2]))
    case("num_proj_with_rnn_tanh", ("num_proj",), cfg=R.Cfg("rnn_tanh", 1, H_, I_),
         versions=(3,), num_proj=2, input_h=zeros([1, B_, 2]))
    case("skip_input_with_proj", ("num_proj", "input_mode", "skip_input"), cfg=LSTM_PROJ,
         versions=(3,), input_mode="skip_input")
    case("auto_select_with_proj", ("num_proj", "input_mode", "auto_select"),
         cfg=R.Cfg("lstm", 1, H_, 2, num_proj=2), versions=(3,), input_mode="auto_select")
    case("skip_input_with_I_ne_H", ("input_mode", "skip_input", "input_size", "input"),
         input_mode="skip_input", params=zeros([psize(R.Cfg("lstm", 1, H_, H_,
                                                             input_mode="skip_input"))]))
    # sequence lengths
    case("seq_len_too_few", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant([T_] * (B_ - 1), tf.int32))
    case("seq_len_too_many", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant([T_] * (B_ + 1), tf.int32))
    case("seq_len_negative", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant([T_, -1], tf.int32))
    case("seq_len_above_T", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant([T_ + 1, 1], tf.int32))
    case("seq_len_rank2", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant([[T_], [T_]], tf.int32))
    case("seq_len_scalar", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant(T_, tf.int32))
    case("seq_len_above_T_batch_major", ("sequence_lengths",), versions=(3,), time_major=False,
         sequence_lengths=tf.constant([1, T_ + 1], tf.int32))
    return c


FORWARD_CASES = _forward_cases()


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", FORWARD_CASES, ids=[c[0] for c in FORWARD_CASES])
def test_forward_rejects(case, where, mode):
    _, version, build, names = case
    expect_invalid(R.get_op(where, forward_name(version)), build(version), mode, names)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_valid_baseline_runs(version):
    """The unmodified inputs of the cases above are valid (so each case tests one defect)."""
    for cfg in (LSTM, LSTM_BI2, LSTM_PROJ, GRU):
        if cfg.proj and version < 3:
            continue
        for mode in MODE:
            call(R.get_op("plugin", forward_name(version)), forward_kwargs(cfg, version=version),
                 mode)
            call(R.get_op("plugin", backprop_name(version)),
                 backprop_kwargs(cfg, version=version), mode)
    call(R.get_op("plugin", "CudnnRNNV3"), forward_kwargs(LSTM, time_major=False), "function")


# ----------------------------------------------------------------------------------------------
# Backprop ops
# ----------------------------------------------------------------------------------------------

def _backprop_cases():
    c = []

    def case(name, names, cfg=LSTM, versions=(1, 2, 3), **changes):
        for v in versions:
            c.append(("%s-v%d" % (name, v), v, cfg, changes, names))

    def reshaped(key, fn):
        return {key: lambda kw: fn(kw[key])}

    drop_t = lambda t: t[:-1]  # noqa: E731
    case("output_shape", ("output",), **reshaped("output", drop_t))
    case("output_h_shape", ("output_h",), **reshaped("output_h", lambda t: t[:, :-1]))
    case("output_c_shape", ("output_c",), **reshaped("output_c", lambda t: t[:, :-1]))
    case("output_backprop_shape", ("output_backprop",), **reshaped("output_backprop", drop_t))
    case("output_backprop_width", ("output_backprop",),
         **reshaped("output_backprop", lambda t: t[..., :-1]))
    case("output_h_backprop_shape", ("output_h_backprop",),
         **reshaped("output_h_backprop", lambda t: t[..., :-1]))
    # an empty dimension where the forward's has size
    case("output_backprop_empty", ("output_backprop",),
         **reshaped("output_backprop", lambda t: t[:, :0]))
    case("output_h_backprop_empty", ("output_h_backprop",),
         **reshaped("output_h_backprop", lambda t: t[:, :0]))
    case("output_c_backprop_shape", ("output_c_backprop",),
         **reshaped("output_c_backprop", lambda t: t[:, :-1]))
    case("output_c_backprop_rank", ("output_c_backprop",),
         **reshaped("output_c_backprop", lambda t: t[0]))
    case("input_rank2", ("input",), **reshaped("input", lambda t: t[0]))
    case("input_h_rank2", ("input_h",), **reshaped("input_h", lambda t: t[0]))
    case("input_c_shape", ("input_c",), **reshaped("input_c", lambda t: t[..., :-1]))
    case("params_size", ("params",), **reshaped("params", lambda t: t[:-1]))
    case("reserve_space_truncated", ("reserve_space",), **reshaped("reserve_space", drop_t))
    case("reserve_space_rank2", ("reserve_space",),
         **reshaped("reserve_space", lambda t: t[None]))
    case("reserve_space_inference_dummy", ("reserve_space",), reserve_space="dummy")
    case("reserve_space_zeros", ("reserve_space",),
         **reshaped("reserve_space", lambda t: tf.zeros_like(t)))
    case("reserve_space_other_batch", ("reserve_space",), reserve_space="other_batch")
    case("reserve_space_other_mode", ("reserve_space",), reserve_space="other_mode")
    case("seq_len_above_T", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant([T_ + 1, 1], tf.int32))
    case("seq_len_too_few", ("sequence_lengths",), versions=(3,),
         sequence_lengths=tf.constant([T_], tf.int32))
    case("seq_len_differs_from_forward", ("reserve_space", "sequence_lengths"), versions=(3,),
         sequence_lengths=tf.constant([1, 2], tf.int32))
    case("gru_output_h_backprop_shape", ("output_h_backprop",), cfg=GRU,
         **reshaped("output_h_backprop", lambda t: t[:, :-1]))
    case("proj_output_h_shape", ("output_h",), cfg=LSTM_PROJ, versions=(3,),
         **reshaped("output_h", lambda t: tf.concat([t, t[..., :1]], -1)))
    case("num_proj_with_gru", ("num_proj",), cfg=GRU, versions=(3,), num_proj=2)
    return c


BACKPROP_CASES = _backprop_cases()


def build_backprop(version, cfg, changes):
    kw = backprop_kwargs(cfg, version=version)
    for k, v in changes.items():
        if k == "reserve_space" and v == "dummy":
            kw[k] = R.get_op("plugin", forward_name(version))(
                **forward_kwargs(cfg, version=version, is_training=False)).reserve_space
        elif k == "reserve_space" and v == "other_batch":
            kw[k] = R.get_op("plugin", forward_name(version))(
                **forward_kwargs(cfg, B=B_ + 1, version=version)).reserve_space
        elif k == "reserve_space" and v == "other_mode":
            other = R.Cfg("gru" if cfg.is_lstm else "lstm", cfg.L, cfg.H, cfg.I, cfg.direction)
            kw[k] = R.get_op("plugin", forward_name(version))(
                **forward_kwargs(other, version=version)).reserve_space
        else:
            kw[k] = v(kw) if callable(v) else v
    return kw


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", BACKPROP_CASES, ids=[c[0] for c in BACKPROP_CASES])
def test_backprop_rejects(case, where, mode):
    _, version, cfg, changes, names = case
    expect_invalid(R.get_op(where, backprop_name(version)), build_backprop(version, cfg, changes),
                   mode, names)


# ----------------------------------------------------------------------------------------------
# CudnnRNNDropoutKept (ours alone: the forward's dropout masks, for second derivatives): V3's
# inputs and the reserve space, checked as Backprop checks them
# ----------------------------------------------------------------------------------------------

DROPOUT_KEPT_ARGS = ("input", "input_h", "input_c", "params", "sequence_lengths", "reserve_space",
                     "rnn_mode", "input_mode", "direction", "dropout", "seed", "seed2",
                     "num_proj", "time_major")
DROPOUT_KEPT_CASES = [c for c in BACKPROP_CASES
                      if c[1] == 3 and set(c[3]) <= set(DROPOUT_KEPT_ARGS)]
assert len(DROPOUT_KEPT_CASES) >= 10  # Backprop's cases that apply: inputs and reserve space


def dropout_kept(**kwargs):
    from tf_lstm_ops._loader import library

    return library.op("CudnnRNNDropoutKept")(**kwargs)


def dropout_kept_kwargs(backprop_kw):
    return {k: v for k, v in backprop_kw.items() if k in DROPOUT_KEPT_ARGS}


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("case", DROPOUT_KEPT_CASES, ids=[c[0] for c in DROPOUT_KEPT_CASES])
def test_dropout_kept_rejects(case, mode):
    _, version, cfg, changes, names = case
    kw = dropout_kept_kwargs(build_backprop(version, cfg, changes))
    expect_invalid(dropout_kept, kw, mode, names)


@pytest.mark.parametrize("mode", MODE)
def test_dropout_kept_needs_the_forwards_dropout_rate(mode):
    kw = dropout_kept_kwargs(backprop_kwargs(LSTM_BI2, dropout=0.5, seed=0))
    expect_invalid(dropout_kept, dict(kw, dropout=0.25), mode, ("reserve_space",))
    expect_invalid(dropout_kept, dict(kw, dropout=0.0), mode, ("reserve_space",))


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("cfg,dropout", [(LSTM, 0.5), (LSTM_BI2, 0.0), (LSTM_BI2, 1.0)],
                         ids=["one-layer", "no-dropout", "all-dropped"])
def test_dropout_kept_without_masks_or_all_dropped(cfg, dropout, mode):
    """One layer: no layer input to drop ([0, T, B, D*Hr]); dropout 0: every element kept;
    dropout 1: none."""
    kw = dropout_kept_kwargs(backprop_kwargs(cfg, dropout=dropout))
    kept = call(dropout_kept, kw, mode).numpy()
    assert kept.shape == (cfg.L - 1, T_, B_, cfg.D * H_)
    assert kept.all() if dropout < 1 else not kept.any()


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("sizes", [dict(T=0), dict(B=0), dict(T=0, B=0)], ids=["T0", "B0", "T0B0"])
def test_dropout_kept_with_empty_time_or_batch(sizes, mode):
    kw = forward_kwargs(LSTM_BI2, dropout=0.5, **sizes)
    out = R.get_op("plugin", "CudnnRNNV3")(**kw)
    kw = dropout_kept_kwargs(dict(kw, reserve_space=out.reserve_space))
    kept = call(dropout_kept, kw, mode)
    assert kept.shape == (1, sizes.get("T", T_), sizes.get("B", B_), 2 * H_)


# ----------------------------------------------------------------------------------------------
# empty shapes: a clean InvalidArgumentError or a well-defined empty result, never a crash
# ----------------------------------------------------------------------------------------------

EMPTY = [("T0", dict(T=0)), ("B0", dict(B=0)), ("T0B0", dict(T=0, B=0))]


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("rnn_mode", ["lstm", "gru"])
@pytest.mark.parametrize("name,sizes", EMPTY, ids=[e[0] for e in EMPTY])
def test_empty_time_or_batch(name, sizes, rnn_mode, time_major, mode):
    cfg = R.Cfg(rnn_mode, 2, H_, I_, "bidirectional")
    T, B = sizes.get("T", T_), sizes.get("B", B_)
    kw = forward_kwargs(cfg, T=T, B=B, time_major=time_major)
    try:
        out = call(R.get_op("plugin", "CudnnRNNV3"), kw, mode)
    except tf.errors.InvalidArgumentError:
        return  # a clean error is acceptable
    y_shape = [T, B, 2 * H_] if time_major else [B, T, 2 * H_]
    assert out.output.shape == y_shape
    assert out.output_h.shape == kw["input_h"].shape
    if T == 0:  # nothing processed: final state = initial state
        np.testing.assert_array_equal(out.output_h.numpy(), kw["input_h"].numpy())
        if cfg.is_lstm:
            np.testing.assert_array_equal(out.output_c.numpy(), kw["input_c"].numpy())
    bkw = {k: v for k, v in kw.items() if k != "is_training"}
    dh = tf.ones_like(out.output_h)
    dc = tf.ones_like(out.output_c)
    bkw.update(output=out.output, output_h=out.output_h, output_c=out.output_c,
               output_backprop=tf.ones_like(out.output), output_h_backprop=dh,
               output_c_backprop=dc, reserve_space=out.reserve_space,
               host_reserved=out.host_reserved)
    try:
        g = call(R.get_op("plugin", "CudnnRNNBackpropV3"), bkw, mode)
    except tf.errors.InvalidArgumentError:
        return
    assert g.input_backprop.shape == kw["input"].shape
    assert g.input_h_backprop.shape == kw["input_h"].shape
    assert g.params_backprop.shape == kw["params"].shape
    assert np.all(np.isfinite(g.params_backprop.numpy()))
    if T == 0:
        np.testing.assert_array_equal(g.input_h_backprop.numpy(), dh.numpy())
        np.testing.assert_array_equal(g.params_backprop.numpy(), 0 * kw["params"].numpy())


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("what", ["H0", "I0"])
def test_zero_units_or_zero_input_size(what, mode):
    """H = 0 or I = 0: a clean error, or results that agree with the reference."""
    cfg = R.Cfg("lstm", 1, 0 if what == "H0" else H_, 0 if what == "I0" else I_)
    inp = R.random_inputs(np.random.default_rng(0), cfg, T_, B_)
    kw = R.tf_forward_inputs(cfg, inp, "float64")
    kw.update(R.tf_attrs(cfg))
    try:
        out = call(R.get_op("plugin", "CudnnRNNV3"), kw, mode)
    except tf.errors.InvalidArgumentError:
        return
    ref = R.forward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"])
    for k in ("output", "output_h", "output_c"):
        R.assert_close(getattr(out, k), ref[k], 1e-10, k)


# ----------------------------------------------------------------------------------------------
# params ops
# ----------------------------------------------------------------------------------------------

def _params_cases():
    c = []
    i32 = lambda v: tf.constant(v, tf.int32)  # noqa: E731
    base = dict(num_layers=i32(1), num_units=i32(H_), input_size=i32(I_))
    nw, nb = 8, 8  # lstm, 1 layer, unidirectional

    def size_kw(**kw):
        d = dict(base, T=tf.float32, S=tf.int32)
        d.update(kw)
        return d

    def p2c_kw(version, **kw):
        d = dict(base, params=zeros([psize(LSTM)]))
        if version == 1:
            d["num_params"] = nw
        else:
            d.update(num_params_weights=nw, num_params_biases=nb)
        d.update(kw)
        return d

    def c2p_kw(version, cfg=LSTM, **kw):
        wshapes, bshapes = R.canonical_shapes(cfg)
        d = dict(num_layers=i32(cfg.L), num_units=i32(cfg.H), input_size=i32(cfg.I),
                 weights=[zeros(s) for s in wshapes], biases=[zeros(s) for s in bshapes],
                 rnn_mode=cfg.rnn_mode, input_mode=cfg.input_mode, direction=cfg.direction)
        if version == 2:
            d["num_proj"] = cfg.num_proj
        d.update(kw)
        return d

    P2C = {1: "CudnnRNNParamsToCanonical", 2: "CudnnRNNParamsToCanonicalV2"}
    C2P = {1: "CudnnRNNCanonicalToParams", 2: "CudnnRNNCanonicalToParamsV2"}

    # ParamsSize
    for arg in ("num_layers", "num_units", "input_size"):
        c.append(("size-%s-not-scalar" % arg, "CudnnRNNParamsSize",
                  size_kw(**{arg: i32([1])}), (arg,)))
    c.append(("size-num_layers-0", "CudnnRNNParamsSize", size_kw(num_layers=i32(0)),
              ("num_layers",)))
    c.append(("size-num_layers-negative", "CudnnRNNParamsSize", size_kw(num_layers=i32(-2)),
              ("num_layers",)))
    c.append(("size-num_units-0", "CudnnRNNParamsSize", size_kw(num_units=i32(0)),
              ("num_units",)))
    c.append(("size-input_size-negative", "CudnnRNNParamsSize", size_kw(input_size=i32(-1)),
              ("input_size",)))
    c.append(("size-num_proj-gru", "CudnnRNNParamsSize", size_kw(rnn_mode="gru", num_proj=2),
              ("num_proj",)))
    c.append(("size-num_proj-gt-num_units", "CudnnRNNParamsSize", size_kw(num_proj=H_ + 1),
              ("num_proj",)))
    c.append(("size-skip-with-proj", "CudnnRNNParamsSize",
              size_kw(input_size=i32(H_), input_mode="skip_input", num_proj=2),
              ("num_proj", "input_mode", "skip_input")))
    # ParamsToCanonical(V2)
    for v in (1, 2):
        op = P2C[v]
        for arg in ("num_layers", "num_units", "input_size"):
            c.append(("p2c%d-%s-not-scalar" % (v, arg), op, p2c_kw(v, **{arg: i32([1])}),
                      (arg,)))
        c.append(("p2c%d-num_layers-0" % v, op, p2c_kw(v, num_layers=i32(0)), ("num_layers",)))
        c.append(("p2c%d-params-short" % v, op, p2c_kw(v, params=zeros([psize(LSTM) - 1])),
                  ("params",)))
        c.append(("p2c%d-params-rank2" % v, op, p2c_kw(v, params=zeros([1, psize(LSTM)])),
                  ("params",)))
    c.append(("p2c1-num_params-wrong", P2C[1], p2c_kw(1, num_params=6), ("num_params",)))
    c.append(("p2c2-num_params_weights-wrong", P2C[2], p2c_kw(2, num_params_weights=6),
              ("num_params_weights",)))
    c.append(("p2c2-num_params_biases-wrong", P2C[2], p2c_kw(2, num_params_biases=6),
              ("num_params_biases",)))
    c.append(("p2c2-proj-even-weights", P2C[2],
              p2c_kw(2, num_proj=2, params=zeros([psize(LSTM_PROJ)])), ("num_params_weights",)))
    c.append(("p2c2-num_proj-gru", P2C[2],
              p2c_kw(2, rnn_mode="gru", num_proj=2, num_params_weights=7, num_params_biases=6),
              ("num_proj",)))
    # CanonicalToParams(V2)
    for v in (1, 2):
        op = C2P[v]
        c.append(("c2p%d-num_layers-not-scalar" % v, op, c2p_kw(v, num_layers=i32([1])),
                  ("num_layers",)))
        c.append(("c2p%d-num_units-0" % v, op, c2p_kw(v, num_units=i32(0)), ("num_units",)))
        good = c2p_kw(v)
        c.append(("c2p%d-too-few-weights" % v, op, dict(good, weights=good["weights"][:-2],
                                                        biases=good["biases"][:-2]),
                  ("num_params", "num_params_weights", "weights")))
        c.append(("c2p%d-weight-size" % v, op,
                  dict(good, weights=[zeros([H_, I_ + 1])] + good["weights"][1:]), ("weights",)))
        # (any shape with the canonical element count is accepted, as by TF: test_tf_compat.py)
        c.append(("c2p%d-recurrent-weight-size" % v, op,
                  dict(good, weights=good["weights"][:4] + [zeros([H_, H_ - 1])] +
                       good["weights"][5:]), ("weights",)))
        c.append(("c2p%d-weight-rank1-size" % v, op,
                  dict(good, weights=[zeros([H_ * I_ - 1])] + good["weights"][1:]), ("weights",)))
        c.append(("c2p%d-bias-size" % v, op,
                  dict(good, biases=good["biases"][:-1] + [zeros([H_ + 1])]), ("biases",)))
        c.append(("c2p%d-bias-rank2-size" % v, op,
                  dict(good, biases=good["biases"][:-1] + [zeros([2, H_])]), ("biases",)))
        skip = R.Cfg("lstm", 1, H_, H_, input_mode="skip_input")
        sgood = c2p_kw(v, skip)
        c.append(("c2p%d-skip-nonempty-layer0-W" % v, op,
                  dict(sgood, weights=[zeros([H_, H_])] + sgood["weights"][1:]), ("weights",)))
    proj_good = c2p_kw(2, LSTM_PROJ)
    c.append(("c2p2-proj-missing-projection", C2P[2],
              dict(proj_good, weights=proj_good["weights"][:-1]),
              ("num_params_weights", "weights", "num_params")))
    c.append(("c2p2-proj-wrong-projection-shape", C2P[2],
              dict(proj_good, weights=proj_good["weights"][:-1] + [zeros([2, H_ + 1])]),
              ("weights",)))
    c.append(("c2p2-num_proj-gt-num_units", C2P[2], c2p_kw(2, num_proj=H_ + 1), ("num_proj",)))
    return c


PARAMS_CASES = _params_cases()


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("case", PARAMS_CASES, ids=[c[0] for c in PARAMS_CASES])
def test_params_ops_reject(case, where, mode):
    _, op, kwargs, names = case
    expect_invalid(R.get_op(where, op), kwargs, mode, names)


def test_params_ops_valid_baselines():
    i32 = lambda v: tf.constant(v, tf.int32)  # noqa: E731
    base = dict(num_layers=i32(1), num_units=i32(H_), input_size=i32(I_))
    for mode in MODE:
        out = call(R.get_op("plugin", "CudnnRNNParamsSize"),
                   dict(base, T=tf.float32, S=tf.int32), mode)
        assert int(out.numpy()[0]) == psize(LSTM)
        out = call(R.get_op("plugin", "CudnnRNNParamsToCanonicalV2"),
                   dict(base, params=zeros([psize(LSTM_PROJ)]), num_params_weights=9,
                        num_params_biases=8, num_proj=2), mode)
        assert out.weights[-1].shape == (2, H_)


# ---- KerasToCudnnParams / CudnnParamsToKeras (the Keras layers' weight conversions) ------------

def keras_to_params(kernel, recurrent_kernel, bias):
    from tf_lstm_ops._loader import library

    return library.op("KerasToCudnnParams")(kernel=kernel, recurrent_kernel=recurrent_kernel,
                                           bias=bias, rnn_mode="lstm")


def params_to_keras(params, **attrs):
    from tf_lstm_ops._loader import library

    return library.op("CudnnParamsToKeras")(params=params, rnn_mode="lstm", **attrs)


BAD_KERAS_WEIGHTS = [  # LSTM, I = 3, H = 2: kernel [3, 8], recurrent_kernel [2, 8], bias [8]
    ("kernel", (3, 8, 1), (2, 8), (8,)),
    ("recurrent_kernel", (3, 8), (2,), (8,)),
    ("recurrent_kernel", (3, 8), (2, 7), (8,)),
    ("kernel", (3, 6), (2, 8), (8,)),
    ("bias", (3, 8), (2, 8), (2, 2, 8)),
    ("bias", (3, 8), (2, 8), ()),
    ("bias", (3, 8), (2, 8), (6,)),
    ("bias", (3, 8), (2, 8), (3, 8)),
]


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("bad,kernel,recurrent_kernel,bias", BAD_KERAS_WEIGHTS)
def test_keras_to_params_names_the_bad_weight(mode, bad, kernel, recurrent_kernel, bias):
    expect_invalid(keras_to_params, dict(kernel=tf.zeros(kernel),
                                         recurrent_kernel=tf.zeros(recurrent_kernel),
                                         bias=tf.zeros(bias)), mode, [bad])


@pytest.mark.parametrize("mode", MODE)
@pytest.mark.parametrize("shape", [(55,), (57,), (0,), (2, 28)])
def test_params_to_keras_needs_the_exact_params_size(mode, shape):
    # LSTM, I = 3, H = 2: 8 * (3 + 2) + 2 * 8 = 56 elements
    expect_invalid(params_to_keras, dict(params=tf.zeros(shape), input_size=3, num_units=2),
                   mode, ["params"])


@pytest.mark.parametrize("attrs,message", [
    (dict(input_size=3, num_units=2, bias_rows=3), "bias_rows must be 1 or 2"),
    (dict(input_size=3, num_units=2, bias_rows=0), "bias_rows must be 1 or 2"),
    (dict(input_size=2 ** 62, num_units=2 ** 40), "overflows int64"),
    (dict(input_size=-1, num_units=2), "input_size"),
])
def test_params_to_keras_rejects_bad_attrs(attrs, message):
    # eagerly the kernel's constructor, in a graph the shape function: either names the attr
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        params_to_keras(tf.zeros([56]), **attrs)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match=message):
        tf.function(lambda: params_to_keras(tf.zeros([56]), **attrs))()
