"""Demo: a character-level language model trained with the tf_lstm_ops.keras layers.

    .venv/bin/python -m tf_lstm_ops.demo [--layer lstm|gru] [--epochs N] [--time-budget SECONDS]
                                         [--text FILE] ...

Trains Embedding -> tf_lstm_ops.keras.LSTM (or GRU) -> Dense with model.fit on a text corpus
for at most the time budget, shows the loss falling, samples text from the trained model, and
times training steps of the same model (same weights) built with keras.layers.LSTM (or GRU).

The default corpus ships with Python itself, so the demo runs offline: the Python reference
manual's topic texts that `help()` shows (the standard library's pydoc_data/topics.py), or, where
a distribution strips that module, a few standard-library source files. --text uses your own
UTF-8 text file instead.
"""

import argparse
import math
import os
import sys
import time

_START = time.perf_counter()  # the demo's runtime includes importing TensorFlow

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

_FALLBACK_MODULES = ("textwrap.py", "argparse.py", "string.py", "shlex.py", "fnmatch.py")


def default_corpus(max_chars):
    """(name, text) of the built-in corpus: the Python documentation topics of this interpreter's
    standard library, else a few standard-library modules' source."""
    try:
        from pydoc_data import topics

        text = "\n\n".join(topics.topics[key].strip() for key in sorted(topics.topics))
        name = "the Python %d.%d reference manual topics (pydoc_data/topics.py)" % (
            sys.version_info[:2])
    except ImportError:  # pragma: no cover (distributions that strip pydoc_data)
        stdlib = os.path.dirname(os.__file__)
        parts = []
        for module in _FALLBACK_MODULES:
            with open(os.path.join(stdlib, module), encoding="utf-8") as f:
                parts.append(f.read())
        text = "\n\n".join(parts)
        name = "standard-library sources (%s)" % ", ".join(_FALLBACK_MODULES)
    return name, text[:max_chars]


def load_text(path, max_chars):
    if path is None:
        return default_corpus(max_chars)
    with open(path, encoding="utf-8", errors="replace") as f:
        return path, f.read(max_chars)


def build_model(module, kind, vocab_size, args, **layer_kw):
    import keras

    layer_cls = getattr(module, kind.upper())
    inputs = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(vocab_size, args.embedding)(inputs)
    h = layer_cls(args.units, return_sequences=True, **layer_kw)(h)
    model = keras.Model(inputs, keras.layers.Dense(vocab_size)(h))
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def make_dataset(ids, seq_len, batch_size, seed):
    """Endless shuffled batches of (input, next character) windows of seq_len characters."""
    windows = tf.data.Dataset.from_tensor_slices(ids).batch(seq_len + 1, drop_remainder=True)
    windows = windows.map(lambda w: (w[:-1], w[1:]))
    return (windows.shuffle(10000, seed=seed).repeat()
            .batch(batch_size, drop_remainder=True).prefetch(2))


def sample(model, prompt_ids, length, temperature, rng):
    """Generates `length` characters after prompt_ids: a copy of the model's recurrent layer with
    return_state=True reads the prompt once, then steps one character at a time from its
    states."""
    import keras

    embedding = next(l for l in model.layers if isinstance(l, keras.layers.Embedding))
    dense = next(l for l in model.layers if isinstance(l, keras.layers.Dense))
    rnn = next(l for l in model.layers if isinstance(l, keras.layers.RNN))
    stepper = type(rnn).from_config(dict(rnn.get_config(), name="sampler",
                                         return_sequences=False, return_state=True))
    stepper.build((1, None, embedding.output_dim))
    stepper.set_weights(rnn.get_weights())
    n_states = len(stepper.state_size)

    @tf.function(input_signature=[tf.TensorSpec([1, None], tf.int32),
                                  [tf.TensorSpec([1, rnn.units], tf.float32)] * n_states])
    def step(ids, states):
        output, *new_states = stepper(embedding(ids), initial_state=list(states))
        return dense(output)[0], new_states

    logits, states = step(tf.constant([list(prompt_ids)], tf.int32),
                          [tf.zeros([1, rnn.units])] * n_states)
    out = []
    for _ in range(length):
        z = logits.numpy().astype(np.float64) / temperature
        p = np.exp(z - z.max())
        nxt = int(rng.choice(len(p), p=p / p.sum()))
        out.append(nxt)
        logits, states = step(tf.constant([[nxt]], tf.int32), states)
    return out


def time_train_steps(models, x, y, steps):
    """Median seconds per train_on_batch step of each model, their steps interleaved (on a
    shared, noisy machine a burst of other work then hits both, not whichever ran second)."""
    for model in models:
        model.train_on_batch(x, y)  # trace + warm up
        model.train_on_batch(x, y)
    times = [[] for _ in models]
    for _ in range(steps):
        for model, samples in zip(models, times):
            start = time.perf_counter()
            model.train_on_batch(x, y)
            samples.append(time.perf_counter() - start)
    return [float(np.median(samples)) for samples in times]


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m tf_lstm_ops.demo",
        description="Train a character-level language model with tf_lstm_ops.keras layers "
        "(model.fit, bounded by a time budget), sample text from it, and compare its training "
        "speed with the same model on keras.layers.",
    )
    parser.add_argument("--layer", choices=("lstm", "gru"), default="lstm",
                        help="recurrent layer: tf_lstm_ops.keras.LSTM or GRU (default lstm)")
    parser.add_argument("--epochs", type=int, default=30,
                        help="maximum number of epochs of --steps-per-epoch steps (default 30; "
                        "the time budget usually ends training first)")
    parser.add_argument("--time-budget", type=float, default=80.0, metavar="SECONDS",
                        help="wall-clock budget for model.fit in seconds: training stops at the "
                        "end of the last epoch that fits in it, at the latest after the step "
                        "that exceeds it (default 80: about two minutes for the whole demo on "
                        "2 cores)")
    parser.add_argument("--text", metavar="FILE",
                        help="train on this UTF-8 text file instead of the built-in corpus")
    parser.add_argument("--max-chars", type=int, default=500_000,
                        help="use at most this many characters of the text (default 500000)")
    parser.add_argument("--steps-per-epoch", type=int, default=50,
                        help="training steps per epoch (default 50)")
    parser.add_argument("--units", type=int, default=128, help="recurrent units (default 128)")
    parser.add_argument("--embedding", type=int, default=48,
                        help="character embedding size (default 48)")
    parser.add_argument("--seq-len", type=int, default=64,
                        help="characters per training window (default 64)")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    parser.add_argument("--learning-rate", type=float, default=4e-3,
                        help="Adam learning rate (default 0.004)")
    parser.add_argument("--sample-chars", type=int, default=300,
                        help="characters to generate after training (default 300)")
    parser.add_argument("--temperature", type=float, default=0.6,
                        help="sampling temperature (default 0.6)")
    parser.add_argument("--compare-steps", type=int, default=20,
                        help="timed training steps per implementation in the speed comparison, "
                        "interleaved (default 20; 0 skips the comparison)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    for name in ("epochs", "steps_per_epoch", "units", "embedding", "seq_len", "batch_size"):
        if getattr(args, name) <= 0:
            parser.error("--%s must be positive" % name.replace("_", "-"))
    if args.time_budget <= 0 or args.temperature <= 0:
        parser.error("--time-budget and --temperature must be positive")
    return args


def main(argv=None):
    demo_start = _START if argv is None else time.perf_counter()
    args = parse_args(argv)
    import keras

    import tf_lstm_ops.keras as tlk

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    corpus_name, text = load_text(args.text, args.max_chars)
    if len(text) < 4 * (args.seq_len + 1):
        sys.exit("the text has %d characters: too short for --seq-len %d" % (len(text),
                                                                             args.seq_len))
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = np.array([index[c] for c in text], np.int32)
    split = int(len(ids) * 0.95)
    train_ids, held_out = ids[:split], ids[split:]
    if len(held_out) < 2 * (args.seq_len + 1):
        train_ids, held_out = ids, ids[-2 * (args.seq_len + 1) - 1:]
    n_eval = max(1, min(16, len(held_out) // (args.seq_len + 1) - 1))
    starts = np.linspace(0, len(held_out) - args.seq_len - 2, n_eval).astype(int)
    eval_x = np.stack([held_out[s:s + args.seq_len] for s in starts])
    eval_y = np.stack([held_out[s + 1:s + args.seq_len + 1] for s in starts])

    kind = args.layer
    print("Corpus: %s: %d characters, %d distinct" % (corpus_name, len(text), len(chars)))
    print("Model: Embedding(%d) -> tf_lstm_ops.keras.%s(%d) -> Dense(%d); windows of %d "
          "characters, batch %d" % (args.embedding, kind.upper(), args.units, len(chars),
                                    args.seq_len, args.batch_size))
    model = build_model(tlk, kind, len(chars), args)
    untrained = model.evaluate(eval_x, eval_y, verbose=0)
    print("Held-out loss before training: %.3f (ln %d = %.3f: a uniform guess)"
          % (untrained, len(chars), math.log(len(chars))))

    budget = args.time_budget

    class TimeBudget(keras.callbacks.Callback):
        """Stops at the end of an epoch when the next one would not fit in the budget (and,
        at the latest, after the step that exceeds it)."""

        def on_train_begin(self, logs=None):
            self.start = self.epoch_start = time.perf_counter()
            self.steps = 0
            self.stopped = False

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch_start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if time.perf_counter() - self.start > budget:
                self.model.stop_training = self.stopped = True

        def on_epoch_end(self, epoch, logs=None):
            now = time.perf_counter()
            if now - self.start + (now - self.epoch_start) > budget:
                self.model.stop_training = self.stopped = True

    timer = TimeBudget()
    print("\nTraining with model.fit for at most %d epochs of %d steps or %.0f s:"
          % (args.epochs, args.steps_per_epoch, budget))
    history = model.fit(
        make_dataset(train_ids, args.seq_len, args.batch_size, args.seed),
        epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=[timer],
        shuffle=False, verbose=1 if sys.stdout.isatty() else 2,
    )
    elapsed = time.perf_counter() - timer.start
    losses = history.history["loss"]
    print("%s after %d steps in %.0f s (%.0f ms/step including the first step's tracing)"
          % ("Stopped by the time budget" if timer.stopped else "Done", timer.steps, elapsed,
             1000 * elapsed / max(timer.steps, 1)))
    print("Training loss by epoch: %s" % " ".join("%.3f" % v for v in losses))
    trained = model.evaluate(eval_x, eval_y, verbose=0)
    print("Held-out loss: %.3f before training -> %.3f after" % (untrained, trained))

    prompt = held_out[-args.seq_len:] if len(held_out) >= args.seq_len else eval_x[0]
    generated = sample(model, prompt, args.sample_chars, args.temperature, rng)
    prompt_text = "".join(chars[i] for i in prompt)
    print("\nSample (temperature %.2f), after the held-out prompt ...%r:" % (
        args.temperature, prompt_text[-40:]))
    print("-" * 72)
    print("".join(chars[i] for i in generated))
    print("-" * 72)

    if args.compare_steps > 0:
        reference = build_model(keras.layers, kind, len(chars), args)
        reference.set_weights(model.get_weights())
        x, y = next(iter(make_dataset(train_ids, args.seq_len, args.batch_size, args.seed + 1)))
        x, y = x.numpy(), y.numpy()
        ours_loss = model.evaluate(x, y, verbose=0)
        ref_loss = reference.evaluate(x, y, verbose=0)
        print("\nSame weights, one batch: loss %.6f (tf_lstm_ops.keras.%s) vs %.6f "
              "(keras.layers.%s)" % (ours_loss, kind.upper(), ref_loss,
                                     kind.upper()))
        ours_s, ref_s = time_train_steps([model, reference], x, y, args.compare_steps)
        print("Training speed (batch %d x %d characters, median of %d interleaved steps each, "
              "TF %s, %d CPU threads available):" % (args.batch_size, args.seq_len,
                                                     args.compare_steps,
                                       tf.__version__, os.cpu_count() or 0))
        print("  tf_lstm_ops.keras.%-5s %8.1f ms/step  %6.2f steps/s" % (
            kind.upper(), 1000 * ours_s, 1 / ours_s))
        print("  keras.layers.%-10s %8.1f ms/step  %6.2f steps/s" % (
            kind.upper(), 1000 * ref_s, 1 / ref_s))
        faster = ref_s / ours_s
        print("  tf_lstm_ops is %.2fx %s than keras.layers.%s here" % (
            faster if faster >= 1 else 1 / faster, "faster" if faster >= 1 else "slower",
            kind.upper()))
    print("\nDemo finished: %.0f s since tf_lstm_ops.demo started."
          % (time.perf_counter() - demo_start))


if __name__ == "__main__":
    main()
