"""Platform wheel of tf_lstm_ops, packaging the library Bazel built.

    ./configure.sh --skip-demo
    .venv/bin/pip wheel --no-build-isolation --no-deps . -w dist/

TensorFlow is not a hard requirement (a `tensorflow` pin would pull the GPU wheel into a
`tensorflow-cpu` environment): pick the extra, `tf_lstm_ops[tensorflow-cpu]` or
`tf_lstm_ops[tensorflow]`. The library only loads into the TensorFlow major.minor it was built
against (the loader checks).
"""

import os
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILT = ("_lstm_ops.so", "_build_info.py")


class BuildPyWithLibrary(build_py):
    """Copies the Bazel-built library and its build info into the package."""

    def run(self):
        super().run()
        for name in BUILT:
            source = os.path.join(ROOT, "bazel-bin", "tf_lstm_ops", name)
            if not os.path.isfile(source):
                raise SystemExit("%s is missing: run ./configure.sh first" % source)
            target = os.path.join(self.build_lib, "tf_lstm_ops", name)
            shutil.copyfile(source, target)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: the package carries a compiled library
        return True


setup(
    name="tf_lstm_ops",
    version="0.1.0",
    description="Fast, correct LSTM kernels for TensorFlow as a custom-op plugin",
    packages=find_packages(include=["tf_lstm_ops", "tf_lstm_ops.*"]),  # with its subpackages
    python_requires=">=3.11",
    install_requires=["numpy>=1.26"],
    extras_require={
        "tensorflow": ["tensorflow>=2.21,<2.22"],
        "tensorflow-cpu": ["tensorflow-cpu>=2.21,<2.22"],
    },
    cmdclass={"build_py": BuildPyWithLibrary},
    distclass=BinaryDistribution,
    zip_safe=False,
)
