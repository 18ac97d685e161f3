"""The Pythonic wrappers tf_lstm_ops.block_lstm / lstm_block_cell against the raw ops."""

import numpy as np
import pytest
import tensorflow as tf

import tf_lstm_ops

T, B, I, H = 4, 3, 2, 5


def icfo_to_ifco(a):
    """Swap the c and f gate blocks along the last axis (its own inverse)."""
    i, c, f, o = np.split(a, 4, axis=-1)
    return np.concatenate([i, f, c, o], axis=-1)


@pytest.fixture
def weights():
    rng = np.random.default_rng(7)
    return dict(
        x=rng.normal(size=(T, B, I)).astype(np.float32),
        w=(0.5 * rng.normal(size=(I + H, 4 * H))).astype(np.float32),
        b=rng.normal(size=4 * H).astype(np.float32),
        peepholes=tuple(rng.normal(size=H).astype(np.float32) for _ in range(3)),
        cs_prev=rng.normal(size=(B, H)).astype(np.float32),
        h_prev=rng.normal(size=(B, H)).astype(np.float32),
    )


def raw_block_lstm_v1(p, seq_len_max, forget_bias, cell_clip, peephole):
    wci, wcf, wco = p["peepholes"] if peephole else [np.zeros(H, np.float32)] * 3
    return tf_lstm_ops.raw.BlockLSTM(
        seq_len_max=np.int64(seq_len_max), x=p["x"], cs_prev=p["cs_prev"], h_prev=p["h_prev"],
        w=p["w"], wci=wci, wcf=wcf, wco=wco, b=p["b"], forget_bias=forget_bias,
        cell_clip=cell_clip, use_peephole=peephole,
    )  # fmt: skip


@pytest.mark.parametrize("peephole", [False, True])
@pytest.mark.parametrize("forget_bias, cell_clip", [(0.0, 0.0), (1.0, 0.0), (0.7, 0.9)])
def test_block_lstm_both_layouts_match_raw_v1(weights, peephole, forget_bias, cell_clip):
    expected = raw_block_lstm_v1(weights, 3, forget_bias, cell_clip, peephole)
    common = dict(
        cs_prev=weights["cs_prev"], h_prev=weights["h_prev"], seq_len_max=3,
        peepholes=weights["peepholes"] if peephole else None, forget_bias=forget_bias,
        cell_clip=cell_clip,
    )  # fmt: skip
    icfo = tf_lstm_ops.block_lstm(weights["x"], weights["w"], weights["b"], gate_layout="icfo", **common)
    ifco = tf_lstm_ops.block_lstm(
        weights["x"], icfo_to_ifco(weights["w"]), icfo_to_ifco(weights["b"]), gate_layout="IFCO",
        **common,
    )  # fmt: skip
    for name in tf_lstm_ops.LSTMOutputs._fields:
        want = getattr(expected, name).numpy()
        np.testing.assert_array_equal(getattr(icfo, name).numpy(), want, err_msg=name)
        # V2 adds forget_bias to b first: one rounding apart from V1's (g + b) + forget_bias.
        np.testing.assert_allclose(getattr(ifco, name).numpy(), want, atol=2e-6, err_msg=name)


def test_block_lstm_defaults_zero_state_all_steps_no_clip(weights):
    out = tf_lstm_ops.block_lstm(weights["x"], weights["w"], weights["b"], gate_layout="ICFO")
    zeros = np.zeros((B, H), np.float32)
    expected = tf_lstm_ops.raw.BlockLSTM(
        seq_len_max=np.int64(T), x=weights["x"], cs_prev=zeros, h_prev=zeros, w=weights["w"],
        wci=zeros[0], wcf=zeros[0], wco=zeros[0], b=weights["b"], forget_bias=0.0, cell_clip=0.0,
    )  # fmt: skip
    np.testing.assert_array_equal(out.h.numpy(), expected.h.numpy())
    assert out.h.shape == (T, B, H)


def test_lstm_block_cell_matches_raw(weights):
    x = weights["x"][0]
    out = tf_lstm_ops.lstm_block_cell(
        x, weights["cs_prev"], weights["h_prev"], weights["w"], weights["b"],
        peepholes=weights["peepholes"], forget_bias=0.5, cell_clip=0.8,
    )  # fmt: skip
    wci, wcf, wco = weights["peepholes"]
    expected = tf_lstm_ops.raw.LSTMBlockCell(
        x=x, cs_prev=weights["cs_prev"], h_prev=weights["h_prev"], w=weights["w"], wci=wci,
        wcf=wcf, wco=wco, b=weights["b"], forget_bias=0.5, cell_clip=0.8, use_peephole=True,
    )  # fmt: skip
    for got, want in zip(out, expected):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_unknown_gate_layout_is_a_value_error(weights):
    with pytest.raises(ValueError, match="gate_layout"):
        tf_lstm_ops.block_lstm(weights["x"], weights["w"], weights["b"], gate_layout="IOFC")
