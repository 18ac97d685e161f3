"""The honest wheel tags and version of a built op library: what setup.py stamps on the wheel.

    python tools/wheel_tags.py [bazel-bin/tf_lstm_ops/_lstm_ops.so]   # prints what it found

Platform: `manylinux_2_NN_x86_64`, NN read off the library itself. The library is an x86-64 ELF
whose only dependencies are glibc (libc, libm, ld-linux), libstdc++, libgcc_s and TensorFlow's
libtensorflow_framework.so.2 (which the `tensorflow` / `tensorflow-cpu` wheel brings, so it is
excluded as `auditwheel repair --exclude libtensorflow_framework.so.2` would). Each symbol it
takes from those libraries carries a version (GLIBC_2.34, GLIBCXX_3.4.29, CXXABI_1.3.9, GCC_3.0);
the floor is the oldest glibc (manylinux_2_NN) that provides every one of them:
GLIBC_2.x needs glibc 2.x, and the libstdc++ / libgcc versions are mapped to the glibc of the
policy that allows them (auditwheel's manylinux-policy.json, x86_64: GLIBCXX_3.4.24 is allowed from
manylinux_2_27 on, 3.4.28 from 2_31, 3.4.29 (GCC 11's libstdc++, AlmaLinux 9) from 2_34, 3.4.30
from 2_35, ...). The result equals the tag `auditwheel repair --exclude
libtensorflow_framework.so.2` gives. A dependency outside that list, or a version newer than any
policy knows, is an error, not a guess.

Python: `py3-none`: the library does not link libpython (checked: no DT_NEEDED libpython) and the
package is pure Python otherwise, so one wheel serves every CPython that TensorFlow supports.

Version: the package's version plus a local label naming what the library was built for, read
from the _build_info.py Bazel wrote next to it: `+tf2.21.cpu` (CPU kernels only) or
`+tf2.21.cu130` (CPU and GPU kernels, CUDA 13.0), so the file name says which TensorFlow minor
the wheel loads into and whether it carries GPU code.

Standard library only (setup.py imports it); the ELF parsing is the few structures needed:
section headers, the dynamic section (DT_NEEDED) and .gnu.version_r (the versions required).
"""

import collections
import os
import re
import struct
import sys

MACHINE = "x86_64"
EM_X86_64 = 62

# Libraries every manylinux system provides (auditwheel's lib_whitelist, the ones a C++ library
# may plausibly need), and TensorFlow's, which the TensorFlow wheel provides.
SYSTEM_LIBRARIES = frozenset(
    ["libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libstdc++.so.6",
     "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libz.so.1", "libatomic.so.1", "libresolv.so.2",
     "libutil.so.1", "libanl.so.1"]
)  # fmt: skip
TENSORFLOW_LIBRARIES = frozenset(["libtensorflow_framework.so.2"])

# x86_64 manylinux policies: the newest version of each versioned library namespace the policy
# allows, from auditwheel 6.8.2's src/auditwheel/policy/manylinux-policy.json (x86_64; each list
# there is every version up to these). Oldest first.
POLICIES = (
    # glibc,   GLIBCXX,      CXXABI,     GCC (libgcc_s)
    ((2, 17), (3, 4, 19), (1, 3, 7), (4, 8, 0)),  # manylinux2014 (CentOS 7, GCC 4.8)
    ((2, 24), (3, 4, 22), (1, 3, 10), (4, 8, 0)),
    ((2, 26), (3, 4, 22), (1, 3, 10), (4, 8, 0)),
    ((2, 27), (3, 4, 24), (1, 3, 11), (7, 0, 0)),
    ((2, 28), (3, 4, 24), (1, 3, 11), (7, 0, 0)),  # AlmaLinux 8
    ((2, 31), (3, 4, 28), (1, 3, 12), (7, 0, 0)),
    ((2, 34), (3, 4, 29), (1, 3, 13), (7, 0, 0)),  # AlmaLinux 9 (GCC 11's libstdc++)
    ((2, 35), (3, 4, 30), (1, 3, 13), (12, 0, 0)),
    ((2, 36), (3, 4, 30), (1, 3, 13), (12, 0, 0)),
    ((2, 37), (3, 4, 30), (1, 3, 13), (12, 0, 0)),
    ((2, 38), (3, 4, 30), (1, 3, 13), (12, 0, 0)),
    ((2, 39), (3, 4, 33), (1, 3, 15), (14, 0, 0)),
    ((2, 40), (3, 4, 33), (1, 3, 15), (14, 0, 0)),
    ((2, 41), (3, 4, 33), (1, 3, 15), (14, 0, 0)),
)
_NAMESPACES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")


class UnsupportedLibrary(Exception):
    """The library cannot be described by a manylinux tag (wrong machine, foreign dependency,
    a symbol version newer than any known policy)."""


# ------------------------------------------------------------------------------------------
# ELF
# ------------------------------------------------------------------------------------------

SHT_DYNAMIC = 6
SHT_GNU_VERNEED = 0x6FFFFFFE
DT_NEEDED = 1


ElfInfo = collections.namedtuple("ElfInfo", "machine needed versions sections")


def read_elf(path):
    """ElfInfo(e_machine, needed sonames, {soname: [required version names]}, section names) of
    a 64-bit little-endian ELF shared library."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise UnsupportedLibrary("%s is not an ELF file" % path)
    if data[4] != 2 or data[5] != 1:
        raise UnsupportedLibrary("%s is not a 64-bit little-endian ELF file" % path)
    (e_machine,) = struct.unpack_from("<H", data, 18)
    (e_shoff,) = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    (e_shstrndx,) = struct.unpack_from("<H", data, 0x3E)
    sections, section_names = [], []
    for i in range(e_shnum):
        name, sh_type, _flags, _addr, offset, size, link, info, _align, entsize = (
            struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize))
        sections.append((sh_type, offset, size, link, info, entsize))
        section_names.append(name)

    def string(section_index, offset):
        base = sections[section_index][1] + offset
        return data[base:data.index(b"\0", base)].decode()

    needed, versions = [], {}
    for sh_type, offset, size, link, info, entsize in sections:
        if sh_type == SHT_DYNAMIC:
            for pos in range(offset, offset + size, entsize or 16):
                tag, value = struct.unpack_from("<qQ", data, pos)
                if tag == 0:  # DT_NULL
                    break
                if tag == DT_NEEDED:
                    needed.append(string(link, value))
        elif sh_type == SHT_GNU_VERNEED:
            pos = offset
            for _ in range(info):  # sh_info: the number of Verneed entries
                _version, count, file_name, aux, next_entry = struct.unpack_from(
                    "<HHIII", data, pos)
                names = versions.setdefault(string(link, file_name), [])
                apos = pos + aux
                for _ in range(count):
                    _hash, _flags, _other, name, next_aux = struct.unpack_from("<IHHII", data, apos)
                    names.append(string(link, name))
                    apos += next_aux
                pos += next_entry
    names = [string(e_shstrndx, n) for n in section_names]
    return ElfInfo(e_machine, needed, versions, names)


# ------------------------------------------------------------------------------------------
# the manylinux floor
# ------------------------------------------------------------------------------------------

def _parse(version):
    return tuple(int(part) for part in version.split("."))


def required_versions(versions):
    """{namespace: newest version required} over GLIBC, GLIBCXX, CXXABI, GCC, from read_elf's
    version map; other version names (e.g. a private TF_... one) are ignored."""
    newest = {}
    for names in versions.values():
        for name in names:
            match = re.fullmatch(r"(GLIBC|GLIBCXX|CXXABI|GCC)_([0-9.]+)", name)
            if match:
                namespace, version = match.group(1), _parse(match.group(2))
                newest[namespace] = max(newest.get(namespace, version), version)
    return newest


def manylinux_floor(path):
    """((2, NN), why): the oldest glibc (as a manylinux_2_NN policy) that provides everything the
    library needs, and one line per namespace saying which version required what."""
    e_machine, needed, versions, _ = read_elf(path)
    if e_machine != EM_X86_64:
        raise UnsupportedLibrary("%s is not an x86-64 library (e_machine %d)" % (path, e_machine))
    foreign = [n for n in needed if n not in SYSTEM_LIBRARIES | TENSORFLOW_LIBRARIES]
    if foreign:
        raise UnsupportedLibrary(
            "%s needs %s, which neither a manylinux system nor the TensorFlow wheel provides"
            % (path, ", ".join(foreign)))
    newest = required_versions(versions)
    floor, why = (2, 17), []
    for namespace in _NAMESPACES:
        if namespace not in newest:
            continue
        column = _NAMESPACES.index(namespace)
        fits = [p[0] for p in POLICIES if newest[namespace] <= p[column]]
        if not fits:
            raise UnsupportedLibrary(
                "%s needs %s_%s, newer than any manylinux policy known here (up to manylinux_%d_%d)"
                % ((path, namespace, _dotted(newest[namespace])) + POLICIES[-1][0]))
        # GLIBC_2.x needs glibc 2.x exactly (manylinux_2_x is defined by it); the others need
        # the glibc of the oldest reference system whose libstdc++ / libgcc_s has them.
        glibc = newest["GLIBC"][:2] if namespace == "GLIBC" else fits[0]
        why.append("%s_%s -> glibc %s" % (namespace, _dotted(newest[namespace]), _dotted(glibc)))
        floor = max(floor, glibc)
    return floor, why


def _dotted(version):
    return ".".join(str(v) for v in version)


def platform_tag(path):
    """'manylinux_2_NN_x86_64' for the library at `path`."""
    (major, minor), _ = manylinux_floor(path)
    return "manylinux_%d_%d_%s" % (major, minor, MACHINE)


def links_libpython(path):
    return any(n.startswith("libpython") for n in read_elf(path).needed)


def has_gpu_code(path):
    """Whether the library carries CUDA device code (nvcc's .nv_fatbin section)."""
    return ".nv_fatbin" in read_elf(path).sections


def check_build_info(path, info):
    """Raises UnsupportedLibrary when _build_info.py's CUDA_VERSION (what the label will say)
    disagrees with the library's contents (a stale or foreign _build_info.py)."""
    cuda = bool(info.get("CUDA_VERSION", ""))
    if cuda != has_gpu_code(path):
        raise UnsupportedLibrary(
            "%s %s GPU code but its _build_info.py says CUDA_VERSION = %r: rebuild both with "
            "./configure.sh" % (path, "has" if has_gpu_code(path) else "has no",
                                info.get("CUDA_VERSION", "")))


# ------------------------------------------------------------------------------------------
# the version
# ------------------------------------------------------------------------------------------

def read_build_info(library_dir):
    """The _build_info.py next to the library, as a dict of its assignments."""
    path = os.path.join(library_dir, "_build_info.py")
    if not os.path.isfile(path):
        raise UnsupportedLibrary("%s is missing: run ./configure.sh --skip-demo first" % path)
    namespace = {}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), namespace)  # noqa: S102 (our own generated file)
    return {k: v for k, v in namespace.items() if k.isupper()}


def tf_minor(info):
    """'2.21' from TF_VERSION '2.21.0'."""
    return ".".join(info["TF_VERSION"].split(".")[:2])


def local_label(info):
    """'tf2.21.cpu', or 'tf2.21.cu130' for a library with GPU kernels built by CUDA 13.0."""
    cuda = info.get("CUDA_VERSION", "")
    accel = "cu" + "".join(cuda.split(".")[:2]) if cuda else "cpu"
    return "tf%s.%s" % (tf_minor(info), accel)


# The NVIDIA driver a CUDA major's static runtime needs (CUDA minor-version compatibility: any
# driver of the major's first release runs code built by a later minor of that major).
MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}


def describe(info):
    """One line for humans and the wheel's metadata: what the library's kernels need."""
    cuda = info.get("CUDA_VERSION", "")
    if not cuda:
        return "CPU kernels only (TensorFlow %s)" % info["TF_VERSION"]
    caps = ", ".join("sm_%s" % c for c in info.get("CUDA_COMPUTE_CAPABILITIES", ()))
    driver = MIN_DRIVER.get(int(cuda.split(".")[0]))
    return (
        "CPU kernels and GPU kernels for %s (+PTX of the highest), CUDA %s runtime linked "
        "statically: needs an NVIDIA driver %s (TensorFlow %s)"
        % (caps, cuda, ">= " + driver if driver else "for CUDA %s" % cuda, info["TF_VERSION"]))


def main(argv):
    path = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bazel-bin", "tf_lstm_ops",
        "_lstm_ops.so")
    floor, why = manylinux_floor(path)
    info = read_build_info(os.path.dirname(path))
    print("library:   %s" % path)
    print("needs:     %s" % "; ".join(why))
    print("platform:  %s" % platform_tag(path))
    python = "links libpython: cp tag needed" if links_libpython(path) else "py3-none"
    print("python:    %s" % python)
    print("label:     +%s (%s)" % (local_label(info), describe(info)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
