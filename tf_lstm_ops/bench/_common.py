"""Helpers the benchmark's modules share: the one-element read-back that makes sure a TF result
was computed, tf.function without AutoGraph, and the first line of an error message for notes."""


def _force(values):
    """A float32 scalar that depends on every tensor in values (one element of each): reading it
    back makes sure every producing op ran, without a reduction's cost."""
    import tensorflow as tf

    return tf.add_n([tf.cast(tf.reshape(v, [-1])[0], tf.float32) for v in values])


def _function(fn):
    """tf.function for the raw-op callables; they need no AutoGraph conversion (the loops are
    explicit tf.while_loops). Keras calls keep tf.function's defaults."""
    import tensorflow as tf

    return tf.function(fn, autograph=False)


def _first_line(error):
    text = str(error).strip().splitlines()
    return text[0][:200] if text else type(error).__name__
