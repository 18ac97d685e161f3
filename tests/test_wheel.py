"""The wheel, as a user who never cloned the repository gets it.

Builds the wheel from the checkout's library (tools/build_wheel.py, no Bazel), checks its tags
against the library's symbol versions read by objdump (independently of tools/wheel_tags.py's own
ELF reader), then installs it into a fresh venv, first alone (the import must name the pip
commands that bring TensorFlow), then with its [cpu] extra, and from a directory outside the
repository runs a BlockLSTMV2 forward and gradient against TensorFlow's own kernels, a
tf_lstm_ops.keras.LSTM fit step, and the README's Install example. About 45 s on 2 cores, most of
it pip installing tensorflow-cpu (from pip's index or cache) into the venv.
"""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tools import build_wheel, wheel_tags

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY_DIR = os.path.join(REPO_ROOT, "bazel-bin", "tf_lstm_ops")
LIBRARY = os.path.join(LIBRARY_DIR, "_lstm_ops.so")
README = os.path.join(REPO_ROOT, "README.md")

pytestmark = pytest.mark.skipif(
    not os.path.isfile(LIBRARY) or not os.path.isfile(os.path.join(LIBRARY_DIR, "_build_info.py")),
    reason="no library in bazel-bin/tf_lstm_ops to pack (./configure.sh --skip-demo builds it)")

# Variables that would let the fresh venv see the checkout or another library.
LEAKY_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "TF_LSTM_OPS_LIBRARY",
             "TF_LSTM_OPS_SKIP_VERSION_CHECK", "PYTHONSTARTUP")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel.build(str(tmp_path_factory.mktemp("dist")), LIBRARY_DIR)


def objdump_versions(path):
    """(needed sonames, {soname: {version names}}) as objdump -p prints them."""
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed: the independent symbol check needs it")
    text = subprocess.run([objdump, "-p", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"^\s+NEEDED\s+(\S+)$", text, re.M)
    versions, current = {}, None
    for line in text[text.index("Version References:"):].splitlines()[1:]:
        match = re.match(r"\s+required from (\S+):$", line)
        if match:
            current = versions.setdefault(match.group(1), set())
        elif current is not None and line.strip():
            current.add(line.split()[-1])
    return needed, versions


def test_wheel_tags_match_the_library_symbol_versions(wheel):
    name = os.path.basename(wheel)
    match = re.fullmatch(r"tf_lstm_ops-([^-]+)-py3-none-manylinux_2_(\d+)_x86_64\.whl", name)
    assert match, name
    version, tag_glibc = match.group(1), (2, int(match.group(2)))

    # The version names the TensorFlow minor and the CUDA build (or its absence) honestly.
    info = wheel_tags.read_build_info(LIBRARY_DIR)
    minor = ".".join(info["TF_VERSION"].split(".")[:2])
    cuda = info["CUDA_VERSION"]
    label = "cu" + "".join(cuda.split(".")[:2]) if cuda else "cpu"
    assert version.endswith("+tf%s.%s" % (minor, label)), version

    needed, versions = objdump_versions(LIBRARY)
    assert not [n for n in needed if n.startswith("libpython")], needed  # py3-none is honest
    allowed = wheel_tags.SYSTEM_LIBRARIES | {"libtensorflow_framework.so.2"}
    assert set(needed) <= allowed, "outside manylinux and TF: %s" % (set(needed) - allowed)
    # tools/wheel_tags.py's reader sees what objdump sees.
    elf = wheel_tags.read_elf(LIBRARY)
    assert elf.needed == needed
    assert {k: set(v) for k, v in elf.versions.items()} == versions
    assert wheel_tags.has_gpu_code(LIBRARY) == bool(cuda)  # the label's cpu / cuXYZ is true

    def newest(prefix):
        found = [tuple(int(p) for p in v[len(prefix) + 1:].split("."))
                 for names in versions.values() for v in names if v.startswith(prefix + "_")]
        return max(found) if found else None

    # The tag is the floor, not just any glibc: GLIBC_2.x needs 2.x, and libstdc++'s GLIBCXX
    # version needs the oldest manylinux reference system that ships it.
    floor = newest("GLIBC")[:2]
    glibcxx = newest("GLIBCXX")
    if glibcxx is not None:
        floor = max(floor, min(p[0] for p in wheel_tags.POLICIES if glibcxx <= p[1]))
    assert tag_glibc == floor, "tag manylinux_2_%d, the library needs glibc 2.%d" % (
        tag_glibc[1], floor[1])


def test_version_label_names_the_tensorflow_minor_and_the_cuda_build():
    assert wheel_tags.local_label({"TF_VERSION": "2.21.0", "CUDA_VERSION": ""}) == "tf2.21.cpu"
    assert wheel_tags.local_label({"TF_VERSION": "2.20.1", "CUDA_VERSION": "12.8"}) == (
        "tf2.20.cu128")
    assert "driver >= 580" in wheel_tags.describe(
        {"TF_VERSION": "2.21.0", "CUDA_VERSION": "13.0", "CUDA_COMPUTE_CAPABILITIES": ("80",)})


def test_a_build_info_that_contradicts_the_library_is_refused(tmp_path):
    shutil.copy(LIBRARY, tmp_path / "_lstm_ops.so")
    with open(os.path.join(LIBRARY_DIR, "_build_info.py")) as f:
        info = f.read()
    flipped = "13.0" if not wheel_tags.has_gpu_code(LIBRARY) else ""
    (tmp_path / "_build_info.py").write_text(
        re.sub(r'CUDA_VERSION = "[^"]*"', 'CUDA_VERSION = "%s"' % flipped, info))
    with pytest.raises(SystemExit, match="GPU code but its _build_info.py says"):
        build_wheel.build(str(tmp_path / "dist"), str(tmp_path))


def test_setup_py_refuses_to_make_an_sdist():
    out = subprocess.run([sys.executable, "setup.py", "-q", "sdist"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "no source distribution" in out.stderr and "./configure.sh" in out.stderr, out.stderr


CHECKS = r'''
import os, sys
import numpy as np
import tensorflow as tf
import keras
import tf_lstm_ops
import tf_lstm_ops.keras as tlk
from tf_lstm_ops import _loader

site = os.path.realpath(sys.argv[1])
library = _loader.find_library()
assert os.path.realpath(tf_lstm_ops.__file__).startswith(site), tf_lstm_ops.__file__
assert os.path.realpath(library).startswith(site), library
assert _loader.checkout_root(library) is None

T, B, I, H = 5, 3, 4, 6
rng = np.random.default_rng(0)
c = lambda *shape: tf.constant(rng.uniform(-0.5, 0.5, shape).astype(np.float32))
args = dict(seq_len_max=tf.constant(T, tf.int64), x=c(T, B, I), cs_prev=c(B, H), h_prev=c(B, H),
            w=c(I + H, 4 * H), wci=c(H), wcf=c(H), wco=c(H), b=c(4 * H), cell_clip=0.0,
            use_peephole=True)
forward = tf_lstm_ops.raw.BlockLSTMV2(**args)
tf_forward = tf.raw_ops.BlockLSTMV2(**args)
for name in ("h", "cs", "i", "f", "o", "ci", "co"):
    np.testing.assert_allclose(getattr(forward, name).numpy(), getattr(tf_forward, name).numpy(),
                               rtol=1e-5, atol=1e-6, err_msg=name)

# Our registered gradient against TensorFlow's BlockLSTMGradV2 kernel called directly (TF's own
# tape gradient of BlockLSTMV2 is wrong: it runs the ICFO BlockLSTMGrad on IFCO gates).
wrt = ["x", "w", "b", "wci"]
with tf.GradientTape() as tape:
    tape.watch([args[k] for k in wrt])
    out = tf_lstm_ops.raw.BlockLSTMV2(**args)
    loss = tf.reduce_sum(out.h * out.h) + tf.reduce_sum(out.cs)
ours = dict(zip(wrt, tape.gradient(loss, [args[k] for k in wrt])))
theirs = tf.raw_ops.BlockLSTMGradV2(
    **{k: v for k, v in args.items() if k != "cell_clip"}, **tf_forward._asdict(),
    cs_grad=tf.ones_like(tf_forward.cs), h_grad=2 * tf_forward.h)
for k in wrt:
    np.testing.assert_allclose(ours[k].numpy(), getattr(theirs, k + "_grad").numpy(),
                               rtol=1e-4, atol=1e-5, err_msg=k)

model = keras.Sequential([keras.Input((T, I)), tlk.LSTM(8), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
before = [w.copy() for w in model.layers[0].get_weights()]
history = model.fit(rng.normal(size=(8, T, I)).astype(np.float32),
                    rng.normal(size=(8, 1)).astype(np.float32), epochs=1, batch_size=8, verbose=0)
assert np.isfinite(history.history["loss"][0]), history.history
assert all(np.any(a != b) for a, b in zip(before, model.layers[0].get_weights()))
print("wheel OK: TensorFlow", tf.__version__, "Keras", keras.__version__, "library", library)
'''


def readme_install_example():
    """The first ```python block of README.md's "## Install" section."""
    with open(README) as f:
        readme = f.read()
    section = re.search(r"^## Install\b.*?(?=^## )", readme, re.M | re.S)
    assert section, "README.md has no '## Install' section"
    block = re.search(r"^```python\n(.*?)^```", section.group(0), re.M | re.S)
    assert block, "README.md's Install section has no python example"
    return block.group(1)


def test_fresh_venv_installs_the_wheel_with_its_extra_and_runs_it(wheel, tmp_path):
    started = time.monotonic()
    example = readme_install_example()  # before the slow part: fails at once without one
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_ENV}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    outside = tmp_path / "elsewhere"  # not the repository: nothing of the checkout is importable
    outside.mkdir()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=120)
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, env=env).stdout.strip()

    def pip(*args, timeout=300):
        subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *args],
                       check=True, env=env, cwd=str(outside), timeout=timeout)

    def run(code, *args):
        return subprocess.run([python, "-c", code, *args], capture_output=True, text=True,
                              env=env, cwd=str(outside), timeout=300)

    # The plain install: no TensorFlow, and an import that says which pip command brings it.
    pip(wheel)
    out = run("import tf_lstm_ops")
    assert out.returncode != 0
    assert 'pip install "tf_lstm_ops[cpu]"' in out.stderr, out.stderr
    assert 'pip install "tf_lstm_ops[and-cuda]"' in out.stderr, out.stderr
    assert "tensorflow-cpu==%s.*" % wheel_tags.tf_minor(wheel_tags.read_build_info(LIBRARY_DIR)) \
        in out.stderr, out.stderr
    assert "configure.sh" not in out.stderr, out.stderr  # a wheel user has no checkout

    # The first command the message names: pip takes the installed wheel's extra, resolves the
    # pinned TensorFlow and the rest.
    pip("tf_lstm_ops[cpu]")
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    out = run(CHECKS, site)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "wheel OK" in out.stdout, out.stdout
    out = run(example)
    assert out.returncode == 0, "README's Install example failed:\n" + out.stdout + out.stderr
    print("fresh venv, install and checks: %.0f s" % (time.monotonic() - started))
