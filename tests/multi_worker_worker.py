"""Run in subprocesses by test_multi_worker.py: one worker of a MultiWorkerMirroredStrategy
cluster on 127.0.0.1, or (index "single") the same training in one process on the global batch.

usage: python multi_worker_worker.py INDEX|single ADDRESS0 ADDRESS1 OUT.json
    ADDRESSk is worker k's HOST:PORT (a bare PORT means 127.0.0.1:PORT), the same list on every
    machine; INDEX is this process's position in it.
    trains a small model of tf_lstm_ops.keras layers for two epochs with a custom training loop
    (Keras 3's model.fit does not run under MultiWorkerMirroredStrategy: it fails for Keras' own
    layers too) and writes the final weights, the losses and the number of replicas to OUT.json.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
index, addresses, out_path = sys.argv[1], sys.argv[2:4], sys.argv[4]
if index != "single":
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [a if ":" in a else "127.0.0.1:" + a for a in addresses]},
        "task": {"type": "worker", "index": int(index)},
    })

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
import tf_lstm_ops.keras as tlk  # noqa: E402

T, I, GLOBAL_BATCH = 6, 3, 8


def build():
    inputs = keras.Input((T, I))
    h = keras.layers.Masking()(inputs)
    h = tlk.LSTM(5, return_sequences=True)(h)
    h = keras.layers.Bidirectional(tlk.GRU(4, return_sequences=True))(h)
    h = tlk.SimpleRNN(4)(h)
    return keras.Model(inputs, keras.layers.Dense(1)(h))


rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (32, T, I)).astype(np.float32) + 2.0
lengths = rng.integers(1, T + 1, 32)
x[np.arange(T)[None, :] >= lengths[:, None]] = 0.0  # right-padded, masked by Masking
y = rng.uniform(-1, 1, (32, 1)).astype(np.float32)

if index == "single":
    strategy = tf.distribute.get_strategy()
else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = build()
    optimizer = keras.optimizers.SGD(0.2)
weights_rng = np.random.default_rng(1)  # the same initial weights in every process
model.set_weights([weights_rng.uniform(-0.5, 0.5, w.shape).astype(np.float32)
                   for w in model.get_weights()])
# Every worker reads the whole data set; the strategy shards each global batch of 8 between the
# workers, the loss is the mean over the global batch, and the optimizer all-reduces (sums) the
# gradients: each update equals one process's on the global batch.
data = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))


@tf.function
def train_step(batch):
    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model(xb, training=True) - yb)) / GLOBAL_BATCH
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = strategy.run(replica_step, args=batch)
    return strategy.reduce("SUM", losses, axis=None)


losses = []
for _ in range(2):  # epochs
    epoch = [float(train_step(batch)) for batch in data]
    losses.append(float(np.mean(epoch)))
history = {"loss": losses}
with open(out_path, "w") as f:
    json.dump(dict(replicas=strategy.num_replicas_in_sync, loss=history["loss"],
                   weights=[w.tolist() for w in model.get_weights()]), f)
