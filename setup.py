"""The wheel of tf_lstm_ops, packaging the library Bazel built (a checkout only: no sdist).

    ./configure.sh --skip-demo --wheel        # configure, build, then this: dist/*.whl
    .venv/bin/python tools/build_wheel.py     # the wheel alone, from the library already built

gives `tf_lstm_ops-<version>+tf<TF minor>.<cpu|cuXYZ>-py3-none-manylinux_2_NN_x86_64.whl`:
py3-none because the library does not link libpython, manylinux_2_NN read off the library's
symbol versions, the local version label naming the TensorFlow minor it loads into and whether
it has GPU kernels (tools/wheel_tags.py says how). Plain `pip wheel .` / `pip install .` from a
built checkout give the same wheel.

TensorFlow is not a hard requirement (a `tensorflow` pin would pull the GPU wheel into a
`tensorflow-cpu` environment): the extras `[cpu]` (tensorflow-cpu) and `[and-cuda]`
(tensorflow[and-cuda]) pin the minor the library was built against; the library loads into no
other (the loader checks, and without TensorFlow the import names both commands).

No sdist: building needs Bazel 4.2.3, a C++ compiler and ./configure.sh's venv, which pip's build
from an sdist cannot provide; `setup.py sdist` refuses, saying so.
"""

import os
import re
import shutil
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
from tools import wheel_tags  # noqa: E402  (standard library only)

LIBRARY_DIR = os.environ.get("TF_LSTM_OPS_WHEEL_LIBRARY_DIR") or os.path.join(
    ROOT, "bazel-bin", "tf_lstm_ops")
LIBRARY = os.path.join(LIBRARY_DIR, "_lstm_ops.so")
BUILT = ("_lstm_ops.so", "_build_info.py")
NOT_BUILT = (
    "%s is missing. tf_lstm_ops is installed from its wheel (pip install \"tf_lstm_ops[cpu]\"), "
    "or built from a git checkout: ./configure.sh --skip-demo --wheel (README: Building from "
    "source)." % LIBRARY)


def base_version():
    with open(os.path.join(ROOT, "tf_lstm_ops", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def build_info():
    """The built library's _build_info.py, or None where nothing is built yet (then only
    commands that need no library work: egg_info, clean, --help)."""
    if not os.path.isfile(LIBRARY):
        return None
    return wheel_tags.read_build_info(LIBRARY_DIR)


INFO = build_info()
TF_MINOR = wheel_tags.tf_minor(INFO) if INFO else None
VERSION = base_version() + ("+" + wheel_tags.local_label(INFO) if INFO else "")


class BuildPyWithLibrary(build_py):
    """Copies the Bazel-built library and its build info into the package, into a clean
    build/lib (a module removed from the source must not live on in the wheel)."""

    def run(self):
        if INFO is None:
            raise SystemExit(NOT_BUILT)
        shutil.rmtree(os.path.join(self.build_lib, "tf_lstm_ops"), ignore_errors=True)
        super().run()
        for name in BUILT:
            target = os.path.join(self.build_lib, "tf_lstm_ops", name)
            shutil.copyfile(os.path.join(LIBRARY_DIR, name), target)
            os.chmod(target, 0o755 if name.endswith(".so") else 0o644)


class BdistWheelManylinux(bdist_wheel):
    """py3-none-manylinux_2_NN_x86_64, NN from the library's symbol versions."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False  # the package carries a compiled library

    def get_tag(self):
        if INFO is None:
            raise SystemExit(NOT_BUILT)
        if wheel_tags.links_libpython(LIBRARY):
            raise SystemExit("%s links libpython: a py3-none wheel would be wrong" % LIBRARY)
        try:
            wheel_tags.check_build_info(LIBRARY, INFO)  # the version's label tells the truth
            return "py3", "none", wheel_tags.platform_tag(LIBRARY)
        except wheel_tags.UnsupportedLibrary as e:
            raise SystemExit("cannot tag the wheel: %s" % e)


class NoSdist(sdist):
    def run(self):
        raise SystemExit(
            "tf_lstm_ops has no source distribution: building it needs Bazel, a C++ compiler "
            "and ./configure.sh, which a pip build from an sdist cannot provide. Install the "
            "wheel (pip install \"tf_lstm_ops[cpu]\"), or build from a git checkout: "
            "./configure.sh --skip-demo --wheel.")


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: the package carries a compiled library
        return True


def extras():
    if TF_MINOR is None:
        return {}
    pin = "==%s.*" % TF_MINOR
    return {
        "cpu": ["tensorflow-cpu" + pin],
        "and-cuda": ["tensorflow[and-cuda]" + pin],
    }


# An isolated build directory (tools/build_wheel.py sets it): nothing written into the checkout.
OPTIONS = {}
if os.environ.get("TF_LSTM_OPS_WHEEL_BUILD_DIR"):
    build_dir = os.environ["TF_LSTM_OPS_WHEEL_BUILD_DIR"]
    os.makedirs(build_dir, exist_ok=True)
    OPTIONS = {"build": {"build_base": os.path.join(build_dir, "build")},
               "egg_info": {"egg_base": build_dir}}

setup(
    name="tf_lstm_ops",
    version=VERSION,
    description="Fast, correct LSTM kernels for TensorFlow as a custom-op plugin",
    long_description=(
        "Compiled LSTM and CudnnRNN kernels for TensorFlow %s: %s. Install with "
        "`pip install \"tf_lstm_ops[cpu]\"` (tensorflow-cpu) or "
        "`pip install \"tf_lstm_ops[and-cuda]\"` (tensorflow with NVIDIA's CUDA wheels)."
        % (TF_MINOR, wheel_tags.describe(INFO)) if INFO else ""),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tf_lstm_ops", "tf_lstm_ops.*"]),  # with its subpackages
    python_requires=">=3.10",
    install_requires=["numpy>=1.26"],
    extras_require=extras(),
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: C++",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": BdistWheelManylinux,
              "sdist": NoSdist},
    distclass=BinaryDistribution,
    options=OPTIONS,
    zip_safe=False,
)
