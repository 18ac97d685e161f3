"""A SavedModel whose functions call tf.raw_ops.CudnnRNNV3 (and, through TF's registered
gradient, CudnnRNNBackpropV3) is saved in one process and loaded and run on CPU in a fresh one;
both import tf_lstm_ops for the kernels. Outputs and gradients agree with each other and with the
float64 reference. A fresh process that does not import tf_lstm_ops cannot run it."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tools.references import cudnn_rnn as R

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CFG = R.Cfg("lstm", 2, 3, 2, "bidirectional", num_proj=2)
T, B = 4, 3
LENS = [4, 1, 3]

SAVE = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    import tf_lstm_ops  # registers the CPU kernels of TF's CudnnRNN ops

    d = dict(np.load(sys.argv[1]))
    LD, HR, H = d["input_h"].shape[0], d["input_h"].shape[2], d["input_c"].shape[2]
    ATTRS = dict(rnn_mode="lstm", direction="bidirectional", num_proj=int(HR), time_major=True)
    SIG = [tf.TensorSpec([None, None, d["input"].shape[2]], tf.float64),
           tf.TensorSpec([LD, None, HR], tf.float64),
           tf.TensorSpec([LD, None, H], tf.float64),
           tf.TensorSpec([None], tf.int32)]

    class Model(tf.Module):
        def __init__(self, params):
            super().__init__()
            self.params = tf.Variable(params)

        def _run(self, x, h, c, lens):
            return tf.raw_ops.CudnnRNNV3(input=x, input_h=h, input_c=c, params=self.params,
                                         sequence_lengths=lens, **ATTRS)

        @tf.function(input_signature=SIG)
        def __call__(self, x, h, c, lens):
            out = self._run(x, h, c, lens)
            return {"output": out.output, "output_h": out.output_h, "output_c": out.output_c}

        @tf.function(input_signature=SIG + [tf.TensorSpec([None, None, None], tf.float64)])
        def grads(self, x, h, c, lens, dy):
            with tf.GradientTape() as tape:
                tape.watch([x, h, c])
                loss = tf.reduce_sum(self._run(x, h, c, lens).output * dy)
            dx, dh, dc, dp = tape.gradient(loss, [x, h, c, self.params])
            return {"dx": dx, "dh": dh, "dc": dc, "dparams": dp}

    def run(m):
        args = [tf.constant(d[k]) for k in ("input", "input_h", "input_c")]
        args.append(tf.constant(d["lens"], tf.int32))
        out = {k: v.numpy() for k, v in m(*args).items()}
        out.update({k: v.numpy() for k, v in m.grads(*args, tf.constant(d["dy"])).items()})
        return out

    if sys.argv[3] == "save":
        m = Model(d["params"])
        tf.saved_model.save(m, sys.argv[2])
    else:
        m = tf.saved_model.load(sys.argv[2])
    np.savez(sys.argv[4], **run(m))
""")

LOAD_WITHOUT_PLUGIN = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf

    d = dict(np.load(sys.argv[1]))
    m = tf.saved_model.load(sys.argv[2])
    try:
        m(tf.constant(d["input"]), tf.constant(d["input_h"]), tf.constant(d["input_c"]),
          tf.constant(d["lens"], tf.int32))
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        print("NO KERNEL:", type(e).__name__)
        sys.exit(0)
    print("RAN")
""")


def run_child(script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run([sys.executable, "-c", script] + [str(a) for a in args], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, "child failed (rc %d):\n%s\n%s" % (
        proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cudnn_savedmodel")
    rng = np.random.default_rng(1234)
    inp = R.random_inputs(rng, CFG, T, B)
    dy = R.random_cotangents(rng, CFG, T, B)["dy"]
    data = tmp / "inputs.npz"
    np.savez(data, input=inp["input"], input_h=inp["input_h"], input_c=inp["input_c"],
             params=inp["params"], lens=np.array(LENS, np.int32), dy=dy)
    model_dir = tmp / "model"
    run_child(SAVE, data, model_dir, "save", tmp / "saved_out.npz")
    return dict(inp=inp, dy=dy, data=data, model_dir=model_dir, tmp=tmp,
                saved_out=dict(np.load(tmp / "saved_out.npz")))


def test_saved_model_loads_and_runs_in_fresh_process(saved):
    assert (saved["model_dir"] / "saved_model.pb").exists()
    out_file = saved["tmp"] / "loaded_out.npz"
    run_child(SAVE, saved["data"], saved["model_dir"], "load", out_file)
    loaded = dict(np.load(out_file))
    assert set(loaded) == set(saved["saved_out"])
    for k, v in saved["saved_out"].items():
        np.testing.assert_array_equal(loaded[k], v, err_msg=k)
    # and both agree with the reference
    inp = saved["inp"]
    ref = R.forward(CFG, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                    seq_lengths=LENS)
    for k in ("output", "output_h", "output_c"):
        R.assert_close(loaded[k], ref[k], 1e-10, k)
    zeros = np.zeros_like
    grads = R.backward(CFG, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                       saved["dy"], zeros(inp["input_h"]), zeros(inp["input_c"]),
                       seq_lengths=LENS)
    for k, r in (("dx", "input"), ("dh", "input_h"), ("dc", "input_c"), ("dparams", "params")):
        R.assert_close(loaded[k], grads[r + "_backprop"], 1e-10, k)


def test_saved_model_needs_the_plugin_on_cpu(saved):
    """Without `import tf_lstm_ops` TF has no CPU kernel for CudnnRNNV3: the test above really
    exercises the plugin's kernels."""
    out = run_child(LOAD_WITHOUT_PLUGIN, saved["data"], saved["model_dir"])
    assert "NO KERNEL" in out, out
