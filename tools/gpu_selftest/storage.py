"""Storage types and buffer allocators of the GPU self-test, shared by block_lstm_checks.py,
cudnn_rnn_checks.py and gpu_selftest.py (NumPy only; torch is imported lazily by TorchAllocator).

Storage dtypes are the engines' names: "half", "bfloat16", "float32", "float64". bfloat16 has no
NumPy dtype: it travels as uint16 bit patterns, rounded to nearest even from float32 (float64
values go through float32 first, as Eigen::bfloat16(double) does).

An *allocator* owns the buffers the self-test module reads and writes; both allocators have one
interface, so every check runs unchanged on either:

    alloc.backend                   "host" or "cuda": what the module is asked to run on
    alloc.stream                    the stream handed to the module (an int; 0 on the host)
    alloc.upload(values, dtype)     float64 values -> a new buffer holding them in dtype's storage
    alloc.empty(shape, dtype)       a new buffer, poisoned with 0xFF bytes (NaN in every float
                                    format: values the engine never wrote show up as NaN)
    alloc.empty_bytes(nbytes)       a new uint8 buffer, poisoned with 0xFF
    alloc.scratch(nbytes)           a 256-byte aligned scratch block, poisoned with 0xFF and
                                    followed by a guard zone (a Scratch)
    alloc.scratch_intact(scratch)   whether the guard behind the requested bytes is untouched
    alloc.ptr(buf)                  its address as an int (0 for None and for empty buffers)
    alloc.download(buf, dtype)      buffer -> float64 NumPy array of its shape
    alloc.download_bytes(buf)       a byte buffer -> uint8 NumPy array
    alloc.write_bytes(buf, off, b)  overwrite bytes of a byte buffer
    alloc.synchronize()             wait for the stream (downloads synchronise themselves too)

NumpyAllocator: host memory (256-byte aligned NumPy arrays) for backend "host".
TorchAllocator: torch tensors; on a CUDA device for backend "cuda" (the launchers of
cc/<family>/gpu_launchers.h on the allocator's stream), or on the CPU for backend "host".
"""

import contextlib

import numpy as np

DTYPES = ("half", "bfloat16", "float32", "float64")
STORAGE = {"half": np.float16, "bfloat16": np.uint16, "float32": np.float32,
           "float64": np.float64}
# what the engines compute in (cc/gpu/common.h's Acc<T>)
ACC = {"half": np.float32, "bfloat16": np.float32, "float32": np.float32,
       "float64": np.float64}

ALIGN = 256
GUARD_BYTES = 1024
GUARD = 0xA5
POISON = 0xFF


def check_dtype(dtype):
    if dtype not in STORAGE:
        raise ValueError("dtype must be one of %s, not %r" % (", ".join(DTYPES), dtype))


# ------------------------------------------------------------------------------------------------
# storage conversions
# ------------------------------------------------------------------------------------------------

def float32_to_bfloat16_bits(a):
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even; NaN stays a
    (quiet) NaN of the same sign; overflow rounds to infinity."""
    a = np.array(a, dtype=np.float32, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    u = a.view(np.uint32).astype(np.uint64)
    bits = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    quiet_nan = (u >> 16) | 0x40
    return np.asarray(np.where(np.isnan(a), quiet_nan, bits), dtype=np.uint16)


def bfloat16_bits_to_float32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_storage(values, dtype):
    """float64 values -> a C-contiguous NumPy array of dtype's storage (bfloat16: uint16 bits)."""
    check_dtype(dtype)
    a = np.asarray(values, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to +-inf is the rounding
        if dtype == "bfloat16":
            return float32_to_bfloat16_bits(a.astype(np.float32))
        return a.astype(STORAGE[dtype], order="C")


def from_storage(array, dtype):
    """dtype's storage array -> float64."""
    check_dtype(dtype)
    if dtype == "bfloat16":
        return bfloat16_bits_to_float32(array).astype(np.float64)
    return np.asarray(array).astype(np.float64)


def round_to(values, dtype):
    """float64 values rounded to dtype, as float64 (None stays None)."""
    return None if values is None else from_storage(to_storage(values, dtype), dtype)


def rounded(d, dtype):
    """round_to over the values of a dict."""
    return {k: round_to(v, dtype) for k, v in d.items()}


# ------------------------------------------------------------------------------------------------
# allocators
# ------------------------------------------------------------------------------------------------

class Scratch:
    """A scratch block: `buffer` holds nbytes followed by GUARD_BYTES of guard (uint8, NumPy or
    torch); `keep` the allocation it lives in. Its address is 0 when nbytes is 0."""

    def __init__(self, buffer, nbytes, keep):
        self.buffer, self.nbytes, self._keep = buffer, int(nbytes), keep


class NumpyAllocator:
    """Host memory for backend "host": 256-byte aligned NumPy arrays."""

    backend = "host"
    stream = 0

    @staticmethod
    def _aligned(nbytes):
        raw = np.empty(int(nbytes) + ALIGN, np.uint8)
        offset = (-raw.ctypes.data) % ALIGN
        return raw[offset:offset + int(nbytes)]

    def empty(self, shape, dtype):
        check_dtype(dtype)
        shape = tuple(int(s) for s in shape)
        itemsize = np.dtype(STORAGE[dtype]).itemsize
        buf = self._aligned(int(np.prod(shape, dtype=np.int64)) * itemsize)
        buf.fill(POISON)
        return buf.view(STORAGE[dtype]).reshape(shape)

    def upload(self, values, dtype):
        s = to_storage(values, dtype)
        out = self.empty(s.shape, dtype)
        out[...] = s
        return out

    def empty_bytes(self, nbytes):
        buf = self._aligned(nbytes)
        buf.fill(POISON)
        return buf

    def scratch(self, nbytes):
        raw = self._aligned(int(nbytes) + GUARD_BYTES)
        raw[:] = GUARD
        raw[:int(nbytes)] = POISON
        return Scratch(raw, nbytes, raw)

    def scratch_intact(self, scratch):
        return bool(np.all(scratch.buffer[scratch.nbytes:] == GUARD))

    @staticmethod
    def ptr(buf):
        if buf is None:
            return 0
        if isinstance(buf, Scratch):
            return buf.buffer.ctypes.data if buf.nbytes else 0
        return buf.ctypes.data if buf.size else 0

    @staticmethod
    def download(buf, dtype):
        return from_storage(np.array(buf), dtype)

    @staticmethod
    def download_bytes(buf):
        return np.array(buf, np.uint8)

    @staticmethod
    def write_bytes(buf, offset, data):
        buf[offset:offset + len(data)] = np.frombuffer(bytes(data), np.uint8)

    def synchronize(self):
        pass


class TorchAllocator:
    """torch tensors as buffers. On a CUDA device (backend "cuda") every allocation, copy and
    engine call is ordered on one stream: `stream` (a torch.cuda.Stream) or, by default, the
    device's current stream when the allocator is made. On the CPU (device "cpu") the buffers are
    host memory for backend "host". torch is imported here, not at module import."""

    def __init__(self, device="cuda", stream=None, torch=None):
        if torch is None:
            import torch
        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.backend = "cuda" if self.cuda else "host"
        if self.cuda:
            self._stream = stream if stream is not None else torch.cuda.current_stream(self.device)
            self.stream = self._stream.cuda_stream
        else:
            self._stream, self.stream = None, 0
        self.types = {"half": torch.float16, "bfloat16": torch.bfloat16,
                      "float32": torch.float32, "float64": torch.float64}

    def _on_stream(self):
        if self.cuda:
            return self.torch.cuda.stream(self._stream)
        return contextlib.nullcontext()

    def empty(self, shape, dtype):
        check_dtype(dtype)
        shape = tuple(int(s) for s in shape)
        n = int(np.prod(shape, dtype=np.int64))
        with self._on_stream():
            flat = self.torch.empty(n, dtype=self.types[dtype], device=self.device)
            flat.view(self.torch.uint8).fill_(POISON)
        return flat.view(shape)

    def upload(self, values, dtype):
        s = to_storage(values, dtype)
        flat = s.reshape(-1)
        if dtype == "bfloat16":  # torch takes no uint16 from NumPy: move the bits as int16
            flat = flat.view(np.int16)
        with self._on_stream():
            t = self.torch.from_numpy(flat.copy()).to(self.device)
        if dtype == "bfloat16":
            t = t.view(self.torch.bfloat16)
        return t.view(s.shape)

    def empty_bytes(self, nbytes):
        with self._on_stream():
            return self.torch.full((int(nbytes),), POISON, dtype=self.torch.uint8,
                                   device=self.device)

    def scratch(self, nbytes):
        nbytes = int(nbytes)
        with self._on_stream():
            raw = self.torch.full((nbytes + ALIGN + GUARD_BYTES,), GUARD, dtype=self.torch.uint8,
                                  device=self.device)
            offset = (-raw.data_ptr()) % ALIGN
            raw[offset:offset + nbytes] = POISON
        return Scratch(raw[offset:offset + nbytes + GUARD_BYTES], nbytes, raw)

    def scratch_intact(self, scratch):
        with self._on_stream():
            return bool((scratch.buffer[scratch.nbytes:] == GUARD).all().item())

    def ptr(self, buf):
        if buf is None:
            return 0
        if isinstance(buf, Scratch):
            return buf.buffer.data_ptr() if buf.nbytes else 0
        return buf.data_ptr() if buf.numel() else 0

    def download(self, buf, dtype):
        with self._on_stream():
            t = buf.detach().cpu()
        if dtype == "bfloat16":
            return from_storage(t.view(self.torch.int16).numpy().view(np.uint16), dtype)
        return from_storage(t.numpy(), dtype)

    def download_bytes(self, buf):
        with self._on_stream():
            return buf.detach().cpu().numpy().astype(np.uint8)

    def write_bytes(self, buf, offset, data):
        src = np.frombuffer(bytes(data), np.uint8).copy()
        with self._on_stream():
            buf[offset:offset + len(data)] = self.torch.from_numpy(src).to(self.device)

    def synchronize(self):
        if self.cuda:
            self._stream.synchronize()
