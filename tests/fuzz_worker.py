"""A seeded, structured fuzzer for the ops (run by test_fuzz.py, or by hand for long runs):

    python tests/fuzz_worker.py --seed 0 --first 0 --count 100000

Case k of a seed is a pure function of (seed, k): a valid base configuration of one of the ops
in OPS (the gradient ops' inputs come from a real forward), then
one mutation: none, valid-but-odd (zero sizes, empty batch, zero lengths, NaN/Inf values) or
invalid (a wrong rank or size, an out-of-range length or count, an unknown attribute string, a
huge count). Each case runs eagerly or inside tf.function with unknown shapes. The worker prints
"CASE k <description>" before it runs case k and "DONE k <outcome>" after it, so the parent can
name the case that crashed or hung it. Outcomes that pass: a clean InvalidArgumentError that
names one of the op's inputs or attributes (or the shape function's ValueError inside
tf.function) for every invalid case and for an odd one, and finite, run-to-run identical
results for every valid case with finite inputs. Anything else is printed as "FAIL k ..." (an
invalid case accepted, an error naming no argument, another exception type, non-finite or
non-repeatable results)."""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_CUDNN_RESET_RND_GEN_STATE"] = "1"  # dropout masks repeat call to call
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import re  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import op_def_registry  # noqa: E402

import tf_lstm_ops  # noqa: E402
from tf_lstm_ops._loader import library  # noqa: E402
from tools.references import cudnn_rnn as R  # noqa: E402
from tools.references import layer_norm_lstm as LN  # noqa: E402
from tools.references import layer_norm_rnn as LR  # noqa: E402

raw = tf_lstm_ops.raw
PRIVATE = ("CudnnRNNV3Keras", "CudnnRNNBackpropV3Keras", "KerasRNN", "KerasRNNBackprop",
           "LayerNormLSTM", "LayerNormLSTMGrad", "LayerNormRNN",
           "LayerNormRNNGrad")  # ours alone, not in raw
HUGE = 2 ** 40


def block_case(rng, op):
    """A valid call of one LSTM block op: (kwargs, names of the tensors that may be mutated)."""
    T, B, I, H = (int(v) for v in rng.integers(1, 5, 4))
    seq = op.startswith("BlockLSTM")
    x_shape = [T, B, I] if seq else [B, I]
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    kw = dict(x=f(*x_shape), cs_prev=f(B, H), h_prev=f(B, H), w=f(I + H, 4 * H), wci=f(H),
              wcf=f(H), wco=f(H), b=f(4 * H))
    if seq:
        kw["seq_len_max"] = np.int64(rng.integers(0, T + 1))
    return kw, dict(use_peephole=bool(rng.integers(2)))


def cudnn_case(rng, op):
    mode = R.MODES[rng.integers(len(R.MODES))]
    direction = ("unidirectional", "bidirectional")[rng.integers(2)]
    L, H, I = (int(v) for v in rng.integers(1, 4, 3))
    cfg = R.Cfg(mode, L, H, I, direction)
    T, B = (int(v) for v in rng.integers(1, 4, 2))
    inp = R.random_inputs(rng, cfg, T, B)
    kw = dict(input=inp["input"].astype(np.float32), input_h=inp["input_h"].astype(np.float32),
              input_c=(inp["input_c"].astype(np.float32) if cfg.is_lstm
                       else np.zeros([], np.float32)),
              params=inp["params"].astype(np.float32))
    attrs = dict(rnn_mode=mode, direction=direction)
    if op == "CudnnRNNV3":
        kw["sequence_lengths"] = rng.integers(0, T + 1, B).astype(np.int32)
        attrs["is_training"] = bool(rng.integers(2))
        attrs["dropout"] = float(rng.choice([0.0, 0.5]))
    if op == "CudnnRNNParamsToCanonical":
        kw = dict(num_layers=np.int32(L), num_units=np.int32(H), input_size=np.int32(I),
                  params=kw["params"])
        attrs["num_params"] = len(R.canonical_shapes(cfg)[0])
    if op == "CudnnRNNParamsSize":
        kw = dict(num_layers=np.int32(L), num_units=np.int32(H), input_size=np.int32(I))
        attrs.update(T=tf.float32, S=tf.int64)
    return kw, attrs


def keras_case(rng, op):
    """CudnnRNNV3Keras (or, from a real forward, its Backprop): mostly a model Keras describes
    (one layer, one direction) with its operand masks and zoneout weights, each present or not;
    Keras' activations; GRU resetting before or after. KerasRNN (and its Backprop): always such
    a model, on Keras' kernel, recurrent_kernel and bias (one or two rows)."""
    mode = R.MODES[rng.integers(len(R.MODES))]
    keras_weights = op.startswith("KerasRNN")
    keras_shaped = keras_weights or rng.integers(4) > 0
    L, D = (1, "unidirectional") if keras_shaped else (2, "bidirectional")
    H, I, T, B = (int(v) for v in rng.integers(1, 4, 4))
    acts = tuple(R.ACTIVATIONS)
    attrs = dict(rnn_mode=mode, direction=D, activation=acts[rng.integers(len(acts))],
                 recurrent_activation=(acts[rng.integers(len(acts))]
                                       if mode in ("lstm", "gru") else ""),
                 reset_after=mode != "gru" or bool(rng.integers(2)))
    cfg = R.Cfg(mode, L, H, I, D)
    inp = R.random_inputs(rng, cfg, T, B)
    G, none = cfg.G, np.zeros([0], np.float32)
    kw = dict(input=inp["input"].astype(np.float32), input_h=inp["input_h"].astype(np.float32),
              input_c=(inp["input_c"].astype(np.float32) if cfg.is_lstm
                       else np.zeros([], np.float32)),
              params=inp["params"].astype(np.float32),
              sequence_lengths=rng.integers(0, T + 1, B).astype(np.int32),
              input_masks=none, recurrent_masks=none, zoneout_h_weights=none,
              zoneout_c_weights=none)
    for name, width in (("input_masks", I), ("recurrent_masks", H)):
        if keras_shaped and rng.integers(2):
            kw[name] = ((rng.uniform(size=(G, B, width)) > 0.3) / 0.7).astype(np.float32)
    for name in ("zoneout_h_weights", "zoneout_c_weights")[:2 if cfg.is_lstm else 1]:
        if keras_shaped and rng.integers(2):  # per element (time-major) or one scalar
            kw[name] = (np.float32(0.9) if rng.integers(2)
                        else (rng.uniform(size=(T, B, H)) > 0.1).astype(np.float32))
    if keras_weights:
        del attrs["direction"], kw["params"]
        f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
        kw.update(kernel=f(I, G * H), recurrent_kernel=f(H, G * H),
                  bias=f(G * H) if rng.integers(2) else f(2, G * H))
    if op in ("CudnnRNNV3Keras", "KerasRNN"):
        attrs["is_training"] = bool(rng.integers(2))
        return kw, attrs
    out = library.op("KerasRNN" if keras_weights else "CudnnRNNV3Keras")(**kw, **attrs)
    f = lambda a: rng.uniform(-1, 1, np.shape(a)).astype(np.float32)  # noqa: E731
    kw.update(output=out.output.numpy(), output_h=out.output_h.numpy(),
              output_c=out.output_c.numpy(), output_backprop=f(out.output),
              output_h_backprop=f(out.output_h), output_c_backprop=f(out.output_c),
              reserve_space=out.reserve_space.numpy(), host_reserved=out.host_reserved.numpy())
    return kw, attrs


def layer_norm_case(rng, op):
    """LayerNormLSTM or LayerNormRNN (or, from a real forward, its Grad): the LSTM's presets, the
    GRU and SimpleRNN cells with Keras' activations, lengths, and the recurrent mask and
    per-element zoneout weights each present or not."""
    lstm = op.startswith("LayerNormLSTM")
    T, B, I, H = (int(v) for v in rng.integers(1, 4, 4))
    f = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    none = np.zeros([0], np.float32)
    if lstm:
        w = LN.random_weights(rng, I, H)
        attrs, zoneout = dict(norm=("addons", "paper")[rng.integers(2)]), (
            "zoneout_h_weights", "zoneout_c_weights")
        kw = dict(input=f(B, T, I), input_h=f(B, H), input_c=f(B, H))
    else:
        cell = LR.CELLS[rng.integers(len(LR.CELLS))]
        w = LR.random_weights(rng, cell, I, H)
        acts = tuple(R.ACTIVATIONS)
        attrs, zoneout = dict(cell=cell, activation=acts[rng.integers(len(acts))]), (
            "zoneout_weights",)
        if cell == "gru":
            attrs["recurrent_activation"] = acts[rng.integers(len(acts))]
        kw = dict(input=f(B, T, I), input_h=f(B, H), gamma_h=none)
    kw.update({k: v.astype(np.float32) for k, v in w.items()})
    kw.update(sequence_lengths=rng.integers(0, T + 1, B).astype(np.int32),
              recurrent_mask=(none if rng.integers(2)
                              else ((rng.uniform(size=(B, H)) > 0.3) / 0.7).astype(np.float32)))
    for name in zoneout:
        kw[name] = none if rng.integers(2) else (rng.uniform(size=(B, T, H)) > 0.1).astype(
            np.float32)
    if not op.endswith("Grad"):
        attrs["is_training"] = bool(rng.integers(2))
        return kw, attrs
    out = library.op(op[:-len("Grad")])(**kw, **attrs)
    kw.update(output_backprop=f(*out.output.shape), output_h_backprop=f(B, H),
              reserve_space=out.reserve_space.numpy())
    if lstm:
        kw["output_c_backprop"] = f(B, H)
    return kw, attrs


def grad_case(rng, op):
    """A gradient op's valid call: a real forward of its forward op, then its outputs and random
    incoming gradients."""
    f = lambda a: rng.uniform(-1, 1, np.shape(a)).astype(np.float32)  # noqa: E731
    if op.startswith("CudnnRNNBackprop"):
        kw, attrs = cudnn_case(rng, "CudnnRNNV3")
        attrs["is_training"] = True
        out = raw.CudnnRNNV3(**kw, **attrs)
        del attrs["is_training"]
        kw.update(output=out.output.numpy(), output_h=out.output_h.numpy(),
                  output_c=out.output_c.numpy(), output_backprop=f(out.output),
                  output_h_backprop=f(out.output_h), output_c_backprop=f(out.output_c),
                  reserve_space=out.reserve_space.numpy(), host_reserved=out.host_reserved.numpy())
        return kw, attrs
    forward = {"LSTMBlockCellGrad": "LSTMBlockCell", "BlockLSTMGrad": "BlockLSTM",
               "BlockLSTMGradV2": "BlockLSTMV2"}[op]
    kw, attrs = block_case(rng, forward)
    out = getattr(raw, forward)(**kw, **attrs)
    names = ("i", "cs", "f", "o", "ci", "co") + (("h",) if forward != "LSTMBlockCell" else ())
    kw.update({n: getattr(out, n).numpy() for n in names})
    kw.update(cs_grad=f(out.cs), h_grad=f(out.h))
    if forward == "LSTMBlockCell":
        kw.pop("h", None)
    return kw, attrs


OPS = {"LSTMBlockCell": block_case, "BlockLSTM": block_case, "BlockLSTMV2": block_case,
       "LSTMBlockCellGrad": grad_case, "BlockLSTMGrad": grad_case, "BlockLSTMGradV2": grad_case,
       "CudnnRNN": cudnn_case, "CudnnRNNV3": cudnn_case, "CudnnRNNBackpropV3": grad_case,
       "CudnnRNNParamsSize": cudnn_case, "CudnnRNNParamsToCanonical": cudnn_case,
       "CudnnRNNV3Keras": keras_case, "CudnnRNNBackpropV3Keras": keras_case,
       "KerasRNN": keras_case, "KerasRNNBackprop": keras_case,
       "LayerNormLSTM": layer_norm_case, "LayerNormLSTMGrad": layer_norm_case,
       "LayerNormRNN": layer_norm_case, "LayerNormRNNGrad": layer_norm_case}
VALID, ODD, INVALID = "valid", "odd", "invalid"


def mutate(rng, kw, attrs):
    """One mutation: (kind, description, kwargs, attrs)."""
    kw, attrs = dict(kw), dict(attrs)
    tensors = [k for k, v in kw.items() if np.ndim(v) > 0]
    scalars = [k for k, v in kw.items() if np.ndim(v) == 0]
    choice = rng.integers(10)
    if choice == 0 or not (tensors or scalars):
        return VALID, "none", kw, attrs
    if not tensors:  # (the params-size op: only its scalars to mutate)
        choice = 5
    name = tensors[rng.integers(len(tensors))] if tensors else None
    v = kw.get(name)
    if choice == 1:  # a rank too many or too few
        kw[name] = v[None] if rng.integers(2) or v.ndim == 1 else v[0]
        # (KerasRNN's bias [2, G*H] loses its b_W row as [G*H]: still a valid bias)
        kind = ODD if name == "bias" and v.ndim == 2 else INVALID
        return kind, "rank of %s" % name, kw, attrs
    if choice == 2:  # one dimension one too long (a mismatch, or a longer T: valid)
        axis = int(rng.integers(v.ndim))
        pad = [(0, 0)] * v.ndim
        pad[axis] = (0, 1)
        kw[name] = np.pad(v, pad)
        return ODD, "dim %d of %s + 1" % (axis, name), kw, attrs
    if choice == 3:  # a dimension made 0 (an empty batch, T, I or H: valid or a clean error)
        axis = int(rng.integers(v.ndim))
        kw[name] = np.take(v, [], axis=axis)
        return ODD, "dim %d of %s = 0" % (axis, name), kw, attrs
    if choice == 4:  # NaN / Inf values: no crash, a result or an error
        v = v.copy()
        if v.dtype.kind == "f" and v.size:
            v.flat[rng.integers(v.size)] = (np.nan, np.inf, -np.inf)[rng.integers(3)]
        kw[name] = v
        return ODD, "non-finite value in %s" % name, kw, attrs
    if choice == 5 and scalars:  # a count or length scalar out of range
        s = scalars[rng.integers(len(scalars))]
        kw[s] = np.asarray((-1, HUGE, 2 ** 31 - 1)[rng.integers(3)]).astype(np.asarray(kw[s]).dtype)
        return ODD, "%s = %s" % (s, kw[s]), kw, attrs
    if choice == 6 and "sequence_lengths" in kw:
        lengths = kw["sequence_lengths"].copy()
        lengths[rng.integers(lengths.size)] = (-1, 10 ** 6)[rng.integers(2)]
        kw["sequence_lengths"] = lengths
        return INVALID, "sequence_lengths out of [0, T]", kw, attrs
    keys = [k for k in ("rnn_mode", "direction", "activation", "recurrent_activation", "norm",
                        "cell") if k in attrs]
    if choice == 7 and keys:
        key = keys[rng.integers(len(keys))]
        attrs[key] = "bogus"
        return INVALID, "%s = 'bogus'" % key, kw, attrs
    if choice == 8 and "reserve_space" in kw:
        kw["reserve_space"] = kw["reserve_space"][:-1]
        return INVALID, "reserve_space one short", kw, attrs
    if choice == 8 and "params" in kw and kw["params"].size > 0:
        kw["params"] = kw["params"][:-1]
        return INVALID, "params one short", kw, attrs
    if choice == 9 and "dropout" in attrs:
        attrs["dropout"] = (-0.5, 1.5, float("nan"))[rng.integers(3)]
        return INVALID, "dropout = %s" % attrs["dropout"], kw, attrs
    if choice == 9 and "is_training" in attrs and "rnn_mode" not in attrs:  # (a LayerNorm op)
        attrs["epsilon"] = (0.0, -1e-3, float("nan"), float("inf"))[rng.integers(4)]
        return INVALID, "epsilon = %s" % attrs["epsilon"], kw, attrs
    return VALID, "none", kw, attrs


def make_case(seed, k):
    rng = np.random.default_rng([seed, k])
    op = sorted(OPS)[rng.integers(len(OPS))]
    kw, attrs = OPS[op](rng, op)
    kind, what, kw, attrs = mutate(rng, kw, attrs)
    mode = ("eager", "function")[rng.integers(2)]
    return op, kind, what, kw, attrs, mode


def run(op, kw, attrs, mode):
    fn = library.op(op) if op in PRIVATE else getattr(raw, op)
    tensors = {k: tf.constant(v) for k, v in kw.items()}
    if mode == "eager":
        out = fn(**tensors, **attrs)
    else:
        specs = {k: tf.TensorSpec([None] * t.shape.rank, t.dtype) for k, t in tensors.items()}
        traced = tf.function(lambda **a: fn(**a, **attrs), input_signature=None)
        concrete = traced.get_concrete_function(**specs)
        out = concrete(**tensors)
    names = getattr(out, "_fields", None) or ["output_%d" % i for i in range(len(
        tf.nest.flatten(out)))]
    return dict(zip(names, (t.numpy() for t in tf.nest.flatten(out))))


# Opaque outputs: bytes of our own format (a header of magic and hash bits), not numbers.
OPAQUE = ("reserve_space",)


def names_an_argument(op, message):
    """Whether a kernel's message names one of the op's inputs or attributes (or the model
    sizes the CudnnRNN ops derive from them, which the messages also name)."""
    op_def = op_def_registry.get("TfLstm>" + op)
    names = {a.name for a in op_def.input_arg} | {a.name for a in op_def.attr}
    names |= {"num_layers", "num_units", "input_size", "batch_size", "cell_size", "max_time"}
    return any(re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(n), message)
               for n in names)


def check(seed, k):
    op, kind, what, kw, attrs, mode = make_case(seed, k)
    desc = "%s %s %s (%s)" % (op, mode, what, kind)
    print("CASE %d %s" % (k, desc), flush=True)
    finite_inputs = all(np.all(np.isfinite(v)) for v in kw.values()
                        if np.asarray(v).dtype.kind == "f")
    try:
        first = run(op, kw, attrs, mode)
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
        if kind == VALID or (isinstance(e, TypeError) and "bogus" not in what):
            print("FAIL %d %s: %s %s" % (k, desc, type(e).__name__, str(e)[:300]), flush=True)
        elif (isinstance(e, tf.errors.InvalidArgumentError)
              and not names_an_argument(op, e.message)):
            print("FAIL %d %s: names no argument: %s" % (k, desc, e.message[:300]), flush=True)
        print("DONE %d error" % k, flush=True)
        return
    except Exception as e:  # noqa: BLE001  (any other kind is a finding)
        print("FAIL %d %s: %s %s" % (k, desc, type(e).__name__, str(e)[:300]), flush=True)
        print("DONE %d failed" % k, flush=True)
        return
    if kind == INVALID:
        print("FAIL %d %s: accepted" % (k, desc), flush=True)
    elif finite_inputs:
        second = run(op, kw, attrs, mode)
        for name, a in first.items():
            if name not in OPAQUE and a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                print("FAIL %d %s: non-finite %s from finite inputs" % (k, desc, name), flush=True)
            if a.tobytes() != second[name].tobytes():  # (bit for bit: NaN payloads too)
                print("FAIL %d %s: %s differs run to run" % (k, desc, name), flush=True)
    print("DONE %d ok" % k, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    for k in range(args.first, args.first + args.count):
        check(args.seed, k)
    print("END", flush=True)


if __name__ == "__main__":
    main()
