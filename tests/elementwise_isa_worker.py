"""Run in a subprocess by test_cpu_elementwise_isa.py: the CPU build is picked once per process
(TF_LSTM_OPS_CPU_ISA caps it), so each build runs in a process of its own.

usage: python elementwise_isa_worker.py OUT.npz [ISA]
    prints "ISA <name>", saves every result below to OUT.npz, then prints "DONE <n results>".
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if len(sys.argv) > 2:
    os.environ["TF_LSTM_OPS_CPU_ISA"] = sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(2)

import keras  # noqa: E402

import tf_lstm_ops  # noqa: E402
import tf_lstm_ops.keras as tlk  # noqa: E402
from tf_lstm_ops._loader import cpu_isa  # noqa: E402

print("ISA %s" % cpu_isa(), flush=True)
# B >= 4 rows, so that every product runs the register tiles, whose sums are the same in every
# build with FMA (B <= 3 reads weights as dot products, whose lanes depend on the vector width).
T, B, I, H = 6, 4, 33, 70  # two unit slices (one per thread), each two or more 16-lane vectors
rng = np.random.default_rng(7)
results = {}


def keep(name, values):
    for k, v in enumerate(values):
        results["%s/%d" % (name, k)] = tf.cast(v, tf.float64).numpy()


for dtype in (tf.float32, tf.float64, tf.float16):
    x = tf.cast(rng.standard_normal((T, B, I)), dtype)
    w = tf.cast(rng.standard_normal((I + H, 4 * H)) * 0.3, dtype)
    b = tf.cast(rng.standard_normal(4 * H) * 0.1, dtype)
    h0 = tf.cast(rng.standard_normal((B, H)) * 0.1, dtype)
    c0 = tf.cast(rng.standard_normal((B, H)), dtype)
    wc = tf.cast(rng.standard_normal(H) * 0.1, dtype)
    for peephole in (False, True):
        for clip in (0.0, 0.5):
            with tf.GradientTape() as tape:
                tape.watch([x, w, b, h0, c0])
                out = tf_lstm_ops.raw.BlockLSTMV2(
                    seq_len_max=tf.constant(T, tf.int64), x=x, cs_prev=c0, h_prev=h0, w=w,
                    wci=wc, wcf=wc, wco=wc, b=b, cell_clip=clip, use_peephole=peephole)
                loss = (tf.reduce_sum(tf.cast(out.h, tf.float64) ** 2)
                        + tf.reduce_sum(tf.cast(out.cs, tf.float64)))
            keep("block_lstm/%s/peephole=%s/clip=%g" % (dtype.name, peephole, clip),
                 list(out) + tape.gradient(loss, [x, w, b, h0, c0]))

# The Keras layers run the CudnnRNN engine (KerasRNN): every cell kind, Keras' activations, and
# a mask (held states); the LayerNorm layers their own engines.
mask = np.ones((B, T), bool)
mask[1, 4:] = False
mask[3, :2] = False
layers = {
    "lstm": lambda: tlk.LSTM(H, return_sequences=True),
    "lstm_relu_hard_sigmoid": lambda: tlk.LSTM(H, return_sequences=True, activation="relu",
                                               recurrent_activation="hard_sigmoid"),
    "gru": lambda: tlk.GRU(H, return_sequences=True),
    "gru_reset_before": lambda: tlk.GRU(H, return_sequences=True, reset_after=False),
    "gru_elu": lambda: tlk.GRU(H, return_sequences=True, activation="elu"),
    "simple_rnn": lambda: tlk.SimpleRNN(H, return_sequences=True),
    # the LayerNorm engines: norms (sums in a fixed order) and cells
    "layer_norm_lstm": lambda: tlk.LayerNormLSTM(H, return_sequences=True),
    "layer_norm_lstm_paper": lambda: tlk.LayerNormLSTM(H, norm="paper", return_sequences=True),
    "layer_norm_gru": lambda: tlk.LayerNormGRU(H, return_sequences=True),
    "layer_norm_simple_rnn": lambda: tlk.LayerNormSimpleRNN(H, return_sequences=True),
}
for name, make in layers.items():
    keras.utils.set_random_seed(3)
    layer = make()
    x = tf.constant(rng.standard_normal((B, T, I)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, mask=tf.constant(mask))
        loss = tf.reduce_sum(y ** 2)
    keep("keras/" + name, [y] + tape.gradient(loss, [x] + layer.trainable_weights))

np.savez(sys.argv[1], **results)
print("DONE %d" % len(results), flush=True)
