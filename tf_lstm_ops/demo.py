"""Demo: train a tiny sequence model on BlockLSTMV2 and compare it with tf.raw_ops.

    .venv/bin/python -m tf_lstm_ops.demo [--steps N]

The model reads 24 steps of a noisy sum of two sine waves and predicts the next value. It is
trained with tf_lstm_ops.raw.BlockLSTMV2 and its registered gradient; afterwards the same
forward and backward pass is compared with TensorFlow's own kernels.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_lstm_ops  # noqa: E402

T, B, I, H = 24, 32, 1, 32


def make_batch(rng):
    phase = rng.uniform(0, 2 * np.pi, size=(B, 2))
    freq = rng.uniform(0.2, 0.6, size=(B, 2))
    t = np.arange(T + 1)[:, None, None]
    wave = np.sin(freq * t + phase).sum(-1, keepdims=True) + 0.05 * rng.normal(size=(T + 1, B, 1))
    return wave[:-1].astype(np.float32), wave[-1].astype(np.float32)  # [T,B,1], [B,1]


def lstm_args(x, w, b):
    zeros = tf.zeros([H])
    state = tf.zeros([tf.shape(x)[1], H])
    return dict(seq_len_max=tf.constant(T, tf.int64), x=x, cs_prev=state, h_prev=state, w=w,
                wci=zeros, wcf=zeros, wco=zeros, b=b)  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps (default 150)")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    w = tf.Variable(rng.normal(scale=0.2, size=(I + H, 4 * H)).astype(np.float32), name="w")
    b = tf.Variable(np.zeros(4 * H, np.float32), name="b")
    readout = tf.Variable(rng.normal(scale=0.2, size=(H, 1)).astype(np.float32), name="readout")
    optimizer = tf.keras.optimizers.Adam(0.01)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            h = tf_lstm_ops.raw.BlockLSTMV2(**lstm_args(x, w, b)).h
            loss = tf.reduce_mean(tf.square(h[-1] @ readout - y))
        grads = tape.gradient(loss, [w, b, readout])
        optimizer.apply_gradients(zip(grads, [w, b, readout]))
        return loss

    print("Training a 1-layer LSTM (T=%d, B=%d, H=%d) with tf_lstm_ops.raw.BlockLSTMV2" % (T, B, H))
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = train_step(*make_batch(rng))
        if step == 1 or step % 25 == 0 or step == args.steps:
            print("  step %4d   loss %.4f" % (step, float(loss)))
    print("  %.1f s" % (time.perf_counter() - start))

    # Same inputs through TensorFlow's kernels.
    x, y = make_batch(rng)
    kw = lstm_args(tf.constant(x), w, b)
    ours, theirs = tf_lstm_ops.raw.BlockLSTMV2(**kw), tf.raw_ops.BlockLSTMV2(**kw)
    fwd_err = max(float(tf.reduce_max(tf.abs(a - c))) for a, c in zip(ours, theirs))

    def loss_of(op):
        with tf.GradientTape() as tape:
            out = op(**kw)
            loss = tf.reduce_sum(out.h[-1] @ readout)
        return out, tape.gradient(loss, w)

    out, dw_ours = loss_of(tf_lstm_ops.raw.BlockLSTMV2)
    _, dw_tf_tape = loss_of(tf.raw_ops.BlockLSTMV2)
    h_grad = tf.concat([tf.zeros([T - 1, B, H]), tf.tile(tf.transpose(readout), [B, 1])[None]], 0)
    dw_tf_kernel = tf.raw_ops.BlockLSTMGradV2(
        **kw, i=out.i, cs=out.cs, f=out.f, o=out.o, ci=out.ci, co=out.co, h=out.h,
        cs_grad=tf.zeros_like(out.cs), h_grad=h_grad, use_peephole=False).w_grad  # fmt: skip
    print("\nComparison with TensorFlow %s on the same inputs:" % tf.__version__)
    print("  forward, max |ours - tf.raw_ops.BlockLSTMV2|       %.2e" % fwd_err)
    print("  dL/dw,   max |ours - tf.raw_ops.BlockLSTMGradV2|   %.2e   (TF's correct kernel)"
          % float(tf.reduce_max(tf.abs(dw_ours - dw_tf_kernel))))
    print("  dL/dw,   max |TF tape - tf.raw_ops.BlockLSTMGradV2| %.2e   (TF registers the ICFO"
          " gradient for V2: its tape gradient is wrong)"
          % float(tf.reduce_max(tf.abs(dw_tf_tape - dw_tf_kernel))))


if __name__ == "__main__":
    main()
