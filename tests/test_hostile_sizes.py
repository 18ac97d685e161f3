"""Hostile counts and sizes for the CudnnRNN family: every check that attributes, shapes and list
lengths allow comes before any allocation or loop, layer bookkeeping is O(L) and sizes are closed
forms, so an invalid request is an immediate InvalidArgumentError naming an argument, never a
hang or an allocator stall. Also: a reserve space is accepted only from a forward with the same
meaning (every fact in its header) and exactly its size, and host_reserved must be what the
forward wrote. The long-running cases run in a child process with a time limit, so a hang fails
with the case's name instead of stalling the suite."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tools.references import cudnn_rnn as R

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)

# Each case: a child script that must finish (well) within the limit and print OK. The limit is
# generous for a loaded 2-core machine: before these fixes each case ran for minutes to hours.
CHILD_LIMIT_S = 60
_PRELUDE = textwrap.dedent("""
    import numpy as np, tensorflow as tf, tf_lstm_ops
    i32 = lambda v: tf.constant(v, tf.int32)
    def invalid(fn, *names):
        try:
            fn()
        except tf.errors.InvalidArgumentError as e:
            msg = str(e)
            assert any(n in msg for n in names), msg[:400]
            return
        raise AssertionError("accepted")
""")

SLOW_CASES = {
    # A valid zero-width model with 2^20 layers: O(L) work, not O(L^2).
    "zero_width_2e20_layers": """
        for op in (tf_lstm_ops.raw.CudnnRNNV3, tf.raw_ops.CudnnRNNV3):
            out = op(input=tf.zeros([2, 1, 1]), input_h=tf.zeros([2**20, 1, 0]),
                     input_c=tf.zeros([2**20, 1, 0]), params=tf.zeros([0]),
                     sequence_lengths=tf.constant([2], tf.int32), is_training=False)
            assert out.output.shape == (2, 1, 0)
    """,
    # The same model with 2^38 layers: outputs without elements need no work at all, whatever
    # the layer count (forward, inference and training; backprop; the dropout masks' report).
    "zero_width_2e38_layers": """
        from tf_lstm_ops._loader import library
        h = tf.zeros([2**38, 1, 0])
        for mode in ("lstm", "gru", "rnn_tanh"):
            c = h if mode == "lstm" else tf.zeros([0])
            args = dict(input=tf.ones([3, 1, 2]), input_h=h, input_c=c, params=tf.zeros([0]),
                        sequence_lengths=i32([3]), rnn_mode=mode, dropout=0.5, seed=1, seed2=2)
            out = tf_lstm_ops.raw.CudnnRNNV3(is_training=False, **args)
            assert out.output.shape == (3, 1, 0) and out.output_h.shape == h.shape
            out = tf_lstm_ops.raw.CudnnRNNV3(is_training=True, **args)
            grads = library.op("CudnnRNNBackpropV3")(
                output=out.output, output_h=out.output_h, output_c=out.output_c,
                output_backprop=out.output, output_h_backprop=h, output_c_backprop=c,
                reserve_space=out.reserve_space, host_reserved=out.host_reserved, **args)
            assert grads.input_backprop.shape == (3, 1, 2)
            assert not np.any(grads.input_backprop.numpy())
            kept = library.op("CudnnRNNDropoutKept")(reserve_space=out.reserve_space, **{
                k: v for k, v in args.items() if k not in ("dropout", "seed", "seed2")},
                dropout=0.5, seed=1, seed2=2)
            assert kept.shape == (2**38 - 1, 3, 1, 0)
    """,
    # An invalid params length with an empty batch and 2^60 layers: the size is a closed form.
    "params_check_2e60_layers": """
        invalid(lambda: tf_lstm_ops.raw.CudnnRNNV3(
            input=tf.zeros([2, 0, 3]), input_h=tf.zeros([2**60, 0, 4]),
            input_c=tf.zeros([2**60, 0, 4]), params=tf.zeros([5]),
            sequence_lengths=tf.zeros([0], tf.int32)), "params", "num_layers")
    """,
    "params_to_canonical_2e20_layers": """
        invalid(lambda: tf_lstm_ops.raw.CudnnRNNParamsToCanonical(
            num_layers=i32(2**20), num_units=i32(4), input_size=i32(3), params=tf.zeros([8]),
            num_params=8), "num_params")
    """,
    "canonical_to_params_short_list_2e20_layers": """
        invalid(lambda: tf_lstm_ops.raw.CudnnRNNCanonicalToParams(
            num_layers=i32(2**20), num_units=i32(4), input_size=i32(3),
            weights=[tf.zeros([16, 3])] * 8, biases=[tf.zeros([16])] * 8), "num_params")
    """,
    "params_size_2e31_layers": """
        out = tf_lstm_ops.raw.CudnnRNNParamsSize(num_layers=i32(2**31 - 1), num_units=i32(4),
                                                input_size=i32(3), T=tf.float32, S=tf.int64)
        assert int(out[0]) == 4 * 4 * 7 + 32 + (2**31 - 2) * (4 * 4 * 8 + 32), int(out[0])
        invalid(lambda: tf_lstm_ops.raw.CudnnRNNParamsSize(
            num_layers=i32(2**31 - 1), num_units=i32(4), input_size=i32(3), T=tf.float32,
            S=tf.int32), "params_size")
    """,
    # Small tensors for a huge model: the count check comes before the 17.6 TB output.
    "canonical_to_params_huge_units": """
        invalid(lambda: tf_lstm_ops.raw.CudnnRNNCanonicalToParams(
            num_layers=i32(1), num_units=i32(2**20), input_size=i32(2**20),
            weights=[tf.zeros([2, 2])] * 8, biases=[tf.zeros([2])] * 8), "weights")
    """,
    # The gradient of the block backward with 2^40 steps of an empty batch: nothing to run.
    "full_grad_grad_2e40_steps_empty_batch": """
        from tf_lstm_ops._loader import library
        T, I, H = 2**40, 3, 4
        seq = tf.zeros([T, 0, H])
        args = dict(x=tf.zeros([T, 0, I]), cs_prev=tf.zeros([0, H]), h_prev=tf.zeros([0, H]),
                    w=tf.zeros([I + H, 4 * H]), wci=tf.zeros([H]), wcf=tf.zeros([H]),
                    wco=tf.zeros([H]), b=tf.zeros([4 * H]),
                    d_x_grad=tf.zeros([T, 0, I]), d_cs_prev_grad=tf.zeros([0, H]),
                    d_h_prev_grad=tf.zeros([0, H]), d_w_grad=tf.zeros([I + H, 4 * H]),
                    d_wci_grad=tf.zeros([H]), d_wcf_grad=tf.zeros([H]), d_wco_grad=tf.zeros([H]),
                    d_b_grad=tf.zeros([4 * H]))
        for name in ("i", "cs", "f", "o", "ci", "co", "h"):
            args[name] = args[name + "_grad"] = seq
        out = library.op("BlockLSTMFullGradGrad")(
            seq_len_max=tf.constant(T, tf.int64), use_peephole=True, gate_layout="IFCO", **args)
        assert out.d_x.shape == (T, 0, I) and not np.any(out.d_w.numpy())
        invalid(lambda: library.op("BlockLSTMFullGradGrad")(
            seq_len_max=tf.constant(T + 1, tf.int64), use_peephole=True, gate_layout="IFCO",
            **args), "seq_len_max")
    """,
    "params_size_overflow_names_arguments": """
        invalid(lambda: tf_lstm_ops.raw.CudnnRNNParamsSize(
            num_layers=i32(2**31 - 1), num_units=i32(2**31 - 1), input_size=i32(2**31 - 1),
            T=tf.float32, S=tf.int64), "num_layers", "num_units")
    """,
}


@pytest.mark.parametrize("case", sorted(SLOW_CASES))
def test_bounded_work_before_validation(case):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO, TESTS] + [p for p in (env.get("PYTHONPATH"),) if p])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    script = _PRELUDE + textwrap.dedent(SLOW_CASES[case]) + "\nprint('OK')\n"
    try:
        proc = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=CHILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail("%s: still running after %d s" % (case, CHILD_LIMIT_S))
    assert proc.returncode == 0 and proc.stdout.split()[-1:] == ["OK"], (
        "%s: rc %d\n%s\n%s" % (case, proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:]))


# ----------------------------------------------------------------------------------------------
# The reserve space: every fact that changes its meaning is in its header
# ----------------------------------------------------------------------------------------------

def _train(cfg, T, B, time_major=True, lengths=None, **attrs):
    inp = R.random_inputs(np.random.default_rng(0), cfg, T, B, time_major)
    kw = R.tf_forward_inputs(cfg, inp, "float32", lengths, 3, time_major)
    all_attrs = dict(R.tf_attrs(cfg, 3, time_major), is_training=True, **attrs)
    return kw, R.get_op("plugin", "CudnnRNNV3")(**kw, **all_attrs)


def _backprop(cfg, kw, out, reserve, time_major=True, host_reserved=None, **attrs):
    replace = {} if host_reserved is None else {"host_reserved": host_reserved}
    return R.get_op("plugin", "CudnnRNNBackpropV3")(
        **R.backprop_inputs(kw, out, reserve_space=reserve, **replace),
        **R.tf_attrs(cfg, 3, time_major), **attrs)


def _dropout_kept(cfg, kw, reserve, time_major=True, **attrs):
    """CudnnRNNDropoutKept (the forward's masks, for second derivatives): V3's inputs and the
    reserve space, checked as Backprop checks it."""
    from tf_lstm_ops._loader import library

    return library.op("CudnnRNNDropoutKept")(
        reserve_space=reserve, **{k: kw[k] for k in ("input", "input_h", "input_c", "params",
                                                      "sequence_lengths")},
        **R.tf_attrs(cfg, 3, time_major), **attrs)


LSTM2 = R.Cfg("lstm", 2, 4, 4)

# (name, forward config, backprop config): the two differ in one fact, with reserve spaces of
# the same size wherever the fact allows, so only the header can tell them apart.
RESERVE_FACTS = [
    ("time_major", dict(cfg=R.Cfg("gru", 1, 4, 3), T=3, B=3, time_major=True),
     dict(time_major=False)),
    ("batch_vs_time", dict(cfg=LSTM2, T=2, B=3), dict(T=3, B=2)),
    ("sequence_lengths", dict(cfg=LSTM2, T=3, B=2, lengths=[3, 1]), dict(lengths=[2, 2])),
    ("dropout", dict(cfg=LSTM2, T=3, B=2, dropout=0.3), dict(dropout=0.5)),
    ("input_mode", dict(cfg=LSTM2, T=3, B=2), dict(cfg=R.Cfg("lstm", 2, 4, 4,
                                                             input_mode="skip_input"))),
    ("rnn_mode", dict(cfg=R.Cfg("rnn_tanh", 1, 4, 3), T=3, B=2),
     dict(cfg=R.Cfg("rnn_relu", 1, 4, 3))),
    ("direction", dict(cfg=R.Cfg("rnn_tanh", 2, 4, 3), T=3, B=2),
     dict(cfg=R.Cfg("rnn_tanh", 1, 4, 3, "bidirectional"))),
    ("num_proj", dict(cfg=R.Cfg("lstm", 1, 4, 3, num_proj=2), T=3, B=2),
     dict(cfg=R.Cfg("lstm", 1, 4, 3, num_proj=3))),
    ("num_units", dict(cfg=R.Cfg("gru", 1, 4, 3), T=3, B=2), dict(cfg=R.Cfg("gru", 1, 5, 3))),
    ("input_size", dict(cfg=R.Cfg("gru", 2, 4, 3), T=3, B=2), dict(cfg=R.Cfg("gru", 2, 4, 5))),
]


@pytest.mark.parametrize("fact,forward,backward", RESERVE_FACTS,
                         ids=[f[0] for f in RESERVE_FACTS])
def test_reserve_space_of_another_configuration_is_rejected(fact, forward, backward):
    fwd = dict(forward)
    cfg, T, B = fwd.pop("cfg"), fwd.pop("T"), fwd.pop("B")
    time_major, lengths = fwd.pop("time_major", True), fwd.pop("lengths", None)
    _, out = _train(cfg, T, B, time_major, lengths, **fwd)
    bwd_args = dict(cfg=cfg, T=T, B=B, time_major=time_major, lengths=lengths, **fwd)
    bwd_args.update(backward)
    bcfg = bwd_args.pop("cfg")
    bkw, bout = _train(bcfg, bwd_args.pop("T"), bwd_args.pop("B"), bwd_args["time_major"],
                       bwd_args.pop("lengths"), **{k: v for k, v in bwd_args.items()
                                                   if k != "time_major"})
    # The backprop's own forward would be accepted: only the reserve space is foreign.
    _backprop(bcfg, bkw, bout, bout.reserve_space, **bwd_args)
    _dropout_kept(bcfg, bkw, bout.reserve_space, **bwd_args)
    with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
        _backprop(bcfg, bkw, bout, out.reserve_space, **bwd_args)
    with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
        _dropout_kept(bcfg, bkw, out.reserve_space, **bwd_args)


def test_reserve_space_must_have_exactly_the_forwards_size():
    kw, out = _train(LSTM2, 3, 2)
    _backprop(LSTM2, kw, out, out.reserve_space)
    longer = tf.concat([out.reserve_space, tf.zeros([1])], 0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
        _backprop(LSTM2, kw, out, longer)


@pytest.mark.parametrize("shape", [[], [1], [3], [2, 1]])
def test_host_reserved_must_be_what_the_forward_wrote(shape):
    kw, out = _train(LSTM2, 3, 2)
    if shape == []:  # V3 writes a scalar: that one is accepted
        _backprop(LSTM2, kw, out, out.reserve_space, host_reserved=tf.zeros(shape, tf.int8))
        return
    with pytest.raises(tf.errors.InvalidArgumentError, match="host_reserved"):
        _backprop(LSTM2, kw, out, out.reserve_space, host_reserved=tf.zeros(shape, tf.int8))
