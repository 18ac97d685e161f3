"""Builds and checks the wheel of the op library already built in bazel-bin (./configure.sh
--wheel runs it after the build).

    .venv/bin/python tools/build_wheel.py [--dist-dir dist] [--library-dir bazel-bin/tf_lstm_ops]

Runs `pip wheel --no-build-isolation --no-deps` on the checkout with a throw-away build directory
(nothing is written into the checkout but the wheel), then checks what came out: the file name's
tags against the library's symbol versions (tools/wheel_tags.py), the version's TensorFlow label
against the library's _build_info.py, the library in the wheel byte for byte, the metadata's
TensorFlow pins, and that nothing but the package is in it. Prints the wheel's path and size.
"""

import argparse
import email.parser
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from tools import wheel_tags  # noqa: E402

PACKAGE = "tf_lstm_ops"


def expected_version(info):
    import re

    with open(os.path.join(ROOT, PACKAGE, "__init__.py")) as f:
        base = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    return "%s+%s" % (base, wheel_tags.local_label(info))


def expected_name(library_dir):
    info = wheel_tags.read_build_info(library_dir)
    wheel_tags.check_build_info(os.path.join(library_dir, "_lstm_ops.so"), info)
    tag = wheel_tags.platform_tag(os.path.join(library_dir, "_lstm_ops.so"))
    return "%s-%s-py3-none-%s.whl" % (PACKAGE, expected_version(info), tag)


def check_wheel(path, library_dir):
    """Raises AssertionError naming the first thing wrong with the wheel at `path` for the
    library in `library_dir`; returns its metadata (an email.message.Message)."""
    library = os.path.join(library_dir, "_lstm_ops.so")
    info = wheel_tags.read_build_info(library_dir)
    name = os.path.basename(path)
    expected = expected_name(library_dir)
    assert name == expected, "wheel %s, expected %s" % (name, expected)
    dist_info = "%s-%s.dist-info" % (PACKAGE, expected_version(info))
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        stray = [n for n in names if not n.startswith((PACKAGE + "/", dist_info + "/"))]
        assert not stray, "files outside the package in the wheel: %s" % stray
        for built in ("_lstm_ops.so", "_build_info.py"):
            with open(os.path.join(library_dir, built), "rb") as f:
                assert wheel.read("%s/%s" % (PACKAGE, built)) == f.read(), (
                    "%s in the wheel differs from %s" % (built, library_dir))
        wheel_file = wheel.read(dist_info + "/WHEEL").decode()
        metadata = email.parser.Parser().parsestr(wheel.read(dist_info + "/METADATA").decode())
    tag = "py3-none-" + wheel_tags.platform_tag(library)
    assert "Root-Is-Purelib: false" in wheel_file, wheel_file
    assert ("Tag: %s\n" % tag) in wheel_file, "WHEEL: %s, expected Tag: %s" % (wheel_file, tag)
    assert metadata["Requires-Python"] == ">=3.10", metadata["Requires-Python"]
    requires = set(metadata.get_all("Requires-Dist"))
    pin = "==%s.*" % wheel_tags.tf_minor(info)
    for requirement in ('tensorflow-cpu%s; extra == "cpu"' % pin,
                        'tensorflow[and-cuda]%s; extra == "and-cuda"' % pin):
        assert requirement in requires, "Requires-Dist %s lacks %s" % (
            sorted(requires), requirement)
    assert not [r for r in requires if r.startswith("tensorflow") and "extra ==" not in r], (
        "TensorFlow must be an extra, not a hard requirement: %s" % sorted(requires))
    return metadata


def build(dist_dir, library_dir, python=sys.executable, quiet=True):
    """Builds the wheel into dist_dir and checks it; returns its path."""
    library = os.path.join(library_dir, "_lstm_ops.so")
    if not os.path.isfile(library):
        raise SystemExit("build_wheel: %s is missing: run ./configure.sh --skip-demo (add "
                         "--no-cuda for a CPU-only library) first" % library)
    try:
        name = expected_name(library_dir)  # fails early on a library no manylinux tag fits
    except wheel_tags.UnsupportedLibrary as e:
        raise SystemExit("build_wheel: %s" % e)
    os.makedirs(dist_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tf_lstm_ops_wheel_") as scratch:
        env = dict(os.environ, TF_LSTM_OPS_WHEEL_BUILD_DIR=os.path.join(scratch, "build"),
                   TF_LSTM_OPS_WHEEL_LIBRARY_DIR=os.path.abspath(library_dir))
        out = os.path.join(scratch, "dist")
        command = [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                   "--disable-pip-version-check", "--no-cache-dir", ROOT, "-w", out]
        if subprocess.run(command + (["-q"] if quiet else []), env=env).returncode != 0:
            raise SystemExit("build_wheel: %s failed (its output is above)" % " ".join(command))
        built = os.listdir(out)
        assert built == [name], "pip wheel wrote %s, expected [%r]" % (built, name)
        check_wheel(os.path.join(out, name), library_dir)
        target = os.path.join(dist_dir, name)
        shutil.move(os.path.join(out, name), target)
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist-dir", default=os.path.join(ROOT, "dist"))
    parser.add_argument("--library-dir", default=os.path.join(ROOT, "bazel-bin", PACKAGE),
                        help="where _lstm_ops.so and _build_info.py are [bazel-bin/tf_lstm_ops]")
    args = parser.parse_args(argv)
    path = build(args.dist_dir, args.library_dir)
    info = wheel_tags.read_build_info(args.library_dir)
    _, why = wheel_tags.manylinux_floor(os.path.join(args.library_dir, "_lstm_ops.so"))
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    print("built %s (%.1f MB)" % (shown, os.path.getsize(path) / 1e6))
    print("  platform from the library's symbol versions: %s" % "; ".join(why))
    print("  %s" % wheel_tags.describe(info))
    print("  install: pip install \"%s[cpu]\"  (or [and-cuda]: tensorflow[and-cuda]==%s.*)"
          % (path, wheel_tags.tf_minor(info)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
