"""Repository rule exposing the installed TensorFlow's headers and framework library.

Asks the interpreter in PYTHON_BIN_PATH for tf.sysconfig once and symlinks what it names: no
header copying, no network. Generates:
  :tf_header_lib            headers + the -D flags TF was built with (ABI, Eigen alignment)
  :eigen                    only the Eigen headers TF ships, with the same -D flags (for the
                            framework-free engines and CPU runtime: no TensorFlow header there)
  :libtensorflow_framework  the framework shared library to link against
  :py_toolchain             a Python toolchain for that interpreter (Bazel 4 otherwise wants `python`)
  build_defs.bzl            TF_VERSION, TF_CXX11_ABI_FLAG, TF_COMPILE_DEFINES
"""

_PROBE = """
import json, tensorflow as tf
print(json.dumps({
    "version": tf.__version__,
    "include": tf.sysconfig.get_include(),
    "lib": tf.sysconfig.get_lib(),
    "compile_flags": tf.sysconfig.get_compile_flags(),
    "link_flags": tf.sysconfig.get_link_flags(),
    "abi": int(tf.sysconfig.CXX11_ABI_FLAG),
}))
"""

def _fail(msg):
    fail("\n[tf_configure] " + msg + "\nRun ./configure.sh first (it writes .tf_configure.bazelrc).\n")

def _tf_configure_impl(rctx):
    python = rctx.os.environ.get("PYTHON_BIN_PATH", "")
    if not python:
        _fail("PYTHON_BIN_PATH is not set.")
    result = rctx.execute([python, "-c", _PROBE], environment = {"TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.return_code != 0:
        _fail("'%s' cannot import tensorflow:\n%s" % (python, result.stderr))
    info = json.decode(result.stdout.strip().splitlines()[-1])

    defines = [f[2:] for f in info["compile_flags"] if f.startswith("-D")]
    lib_name = "libtensorflow_framework.so.2"
    for flag in info["link_flags"]:
        if flag.startswith("-l:"):
            lib_name = flag[3:]

    rctx.symlink(info["include"], "include")
    rctx.symlink(info["lib"] + "/" + lib_name, lib_name)

    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

cc_library(
    name = "tf_header_lib",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    defines = {defines},
)

cc_library(
    name = "eigen",
    hdrs = glob(["include/Eigen/**", "include/unsupported/**"]),
    includes = ["include"],
    defines = {defines},
)

cc_library(
    name = "libtensorflow_framework",
    srcs = ["{lib}"],
)

py_runtime(
    name = "py3_runtime",
    interpreter_path = "{python}",
    python_version = "PY3",
    stub_shebang = "#!{python}",
)

py_runtime_pair(name = "py_runtime_pair", py3_runtime = ":py3_runtime")

toolchain(
    name = "py_toolchain",
    toolchain = ":py_runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(defines = repr(defines), lib = lib_name, python = python))

    rctx.file("build_defs.bzl", """
TF_VERSION = "{version}"
TF_CXX11_ABI_FLAG = {abi}
TF_COMPILE_DEFINES = {defines}
""".format(version = info["version"], abi = info["abi"], defines = repr(defines)))

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = ["PYTHON_BIN_PATH", "TF_VERSION_FOUND"],  # re-run when TF changes
    local = True,
)
