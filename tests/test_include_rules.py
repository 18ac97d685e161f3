"""The layering of docs/architecture.md, checked on every tracked source: what each folder may
include (C++) or import (Python). Only cc/tf/, the TensorFlow binding, includes tensorflow/
(or absl/, xla/, tsl/, its dependencies); the core includes nothing outside the core; an engine
includes its runtime and the core, never the binding; the tools and the Python package never
reach into tests/.
"""

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
FRAMEWORK = ("tensorflow/", "absl/", "xla/", "tsl/", "google/")
EIGEN = ("Eigen/", "unsupported/Eigen/")
CUDA = re.compile(r"^(cuda[\w.]*\.h|cooperative_groups\.h|library_types\.h)$")


def tracked(*patterns):
    out = subprocess.run(["git", "ls-files", "--"] + list(patterns), cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return sorted(out.split())


def includes(path):
    with open(os.path.join(ROOT, path)) as f:
        return INCLUDE.findall(f.read())


def is_standard(header):
    """A C++ standard library header (<vector>, <cstdint>, ...): a bare name, no extension."""
    return re.fullmatch(r"[a-z_]+", header) is not None


# folder -> (quoted prefixes it may include, extra <...> headers it may include)
RULES = {
    "cc/core/": (("cc/core/",), ()),
    "cc/cpu/": (("cc/core/", "cc/cpu/") + EIGEN, EIGEN + ("immintrin.h",)),
    "cc/gpu/": (("cc/core/", "cc/gpu/"), (CUDA, "dlfcn.h")),
    "cc/block_lstm/": (("cc/core/", "cc/cpu/", "cc/gpu/", "cc/block_lstm/") + EIGEN, (CUDA,)),
    "cc/cudnn_rnn/": (("cc/core/", "cc/cpu/", "cc/gpu/", "cc/cudnn_rnn/") + EIGEN, (CUDA,)),
    "cc/layer_norm_lstm/": (("cc/core/", "cc/cpu/", "cc/gpu/", "cc/layer_norm_lstm/") + EIGEN,
                            (CUDA,)),
    "cc/layer_norm_rnn/": (("cc/core/", "cc/cpu/", "cc/gpu/", "cc/layer_norm_rnn/") + EIGEN,
                           (CUDA,)),
    "tools/gpu_selftest/": (("cc/core/", "cc/gpu/", "cc/block_lstm/", "cc/cudnn_rnn/",
                             "cc/layer_norm_lstm/", "cc/layer_norm_rnn/", "tools/gpu_selftest/"),
                            (CUDA, "pybind11/")),
    "tests/framework_free/": (("cc/core/", "cc/block_lstm/cpu_engine.h",
                               "cc/cudnn_rnn/cpu_engine.h"), ()),
}
CPP_FILES = tracked("cc", "tools", "tests")
CPP_FILES = [p for p in CPP_FILES if p.endswith((".h", ".cc", ".cuh"))]


def allowed_angle(header, extra):
    if is_standard(header):
        return True
    for rule in extra:
        if hasattr(rule, "match"):
            if rule.match(header):
                return True
        elif header == rule or (rule.endswith("/") and header.startswith(rule)):
            return True
    return False


def test_every_cpp_source_has_a_rule():
    # A new folder must say what it may include: cc/tf/ is the one folder with no limits.
    unruled = [p for p in CPP_FILES
               if not p.startswith("cc/tf/") and not any(p.startswith(f) for f in RULES)]
    assert not unruled, unruled


@pytest.mark.parametrize("path", [p for p in CPP_FILES if not p.startswith("cc/tf/")])
def test_includes_follow_the_layers(path):
    folder = next(f for f in RULES if path.startswith(f))
    quoted_ok, angle_ok = RULES[folder]
    wrong = []
    for kind, header in includes(path):
        if kind == '"':
            if header.startswith(FRAMEWORK) or header.startswith("cc/tf/"):
                wrong.append(header + " (only cc/tf/ may include the framework or the binding)")
            elif not header.startswith(quoted_ok):
                wrong.append(header)
        elif not allowed_angle(header, angle_ok):
            wrong.append("<%s>" % header)
    assert not wrong, "%s includes %s" % (path, wrong)


@pytest.mark.parametrize("family", ["block_lstm", "cudnn_rnn", "layer_norm_lstm",
                                    "layer_norm_rnn"])
def test_cpu_and_gpu_engines_stay_apart(family):
    # The CPU engine builds without CUDA, the GPU engine without the CPU runtime.
    for path in tracked("cc/%s" % family):
        headers = [h for _, h in includes(path)]
        if os.path.basename(path).startswith("cpu_"):
            assert not [h for h in headers if h.startswith("cc/gpu/") or CUDA.match(h)], path
        elif path.endswith((".cuh", ".cu.cc")) or "gpu" in os.path.basename(path):
            assert not [h for h in headers if h.startswith("cc/cpu/")], path


def test_quoted_includes_resolve_in_the_repository():
    missing = []
    for path in CPP_FILES:
        for kind, header in includes(path):
            if kind == '"' and header.startswith(("cc/", "tools/", "tests/")):
                if not os.path.exists(os.path.join(ROOT, header)):
                    missing.append("%s: %s" % (path, header))
    assert not missing, missing


def test_only_the_binding_includes_the_framework():
    # The same rule from the other side, over every C++ file of the repository.
    outside = [p for p in CPP_FILES if not p.startswith("cc/tf/")
               and any(h.startswith(FRAMEWORK) for _, h in includes(p))]
    assert not outside, outside
    inside = [p for p in CPP_FILES if p.startswith("cc/tf/")
              and any(h.startswith("tensorflow/") for _, h in includes(p))]
    assert inside, "the binding includes TensorFlow: the scan above must see that"


# ------------------------------------------------------------------------------------------------
# Python
# ------------------------------------------------------------------------------------------------

def imported_modules(path, module_level_only=False):
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in (tree.body if module_level_only else ast.walk(tree)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def top_level(names):
    return {n.split(".")[0] for n in names}


@pytest.mark.parametrize("folder", ["tf_lstm_ops", "tools"])
def test_package_and_tools_never_import_the_tests(folder):
    for path in tracked(folder):
        if path.endswith(".py"):
            mods = top_level(imported_modules(path))
            assert not mods & {"tests", "conftest"}, path
            if folder == "tf_lstm_ops":
                assert "tools" not in mods, path


def test_references_import_with_numpy_only():
    # The GPU machine has neither TensorFlow nor the op library: the oracle must import there
    # (the TensorFlow glue of cudnn_rnn.py imports TensorFlow inside its functions).
    allowed = set(sys.stdlib_module_names) | {"numpy", "tools"}
    for path in tracked("tools/references"):
        if path.endswith(".py"):
            mods = top_level(imported_modules(path, module_level_only=True))
            assert mods <= allowed, (path, mods - allowed)
