"""Shared memory with a server on the same host (imgstat.v1 RegisterRegion):
memfds the server maps in place, files it reads itself, and GPU memory by
CUDA IPC. docs/regions.md has the protocol."""
import ctypes
import fcntl
import mmap
import os
import socket
import threading
import weakref

import numpy as np

# Seals that let the server map a memfd in place: no one can cut it short
# under that mapping (writes stay allowed: a shared array is changed in place).
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
_PAGE = mmap.PAGESIZE
# Every live memfd mapping by its first byte's address, so that any array
# (a view, a slice, np.asarray of one) is found in it by its data pointer.
_memories = weakref.WeakValueDictionary()
_memories_lock = threading.Lock()


class Memory(mmap.mmap):
    """A sealed memfd mapped here; numpy arrays over it are what
    ``shared_array`` returns. Its registrations with servers go with it."""

    def __new__(cls, size, name="imgstat"):
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, max(size, 1))
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            self = super().__new__(cls, fd, max(size, 1), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.size = size
        self.fresh = True  # no page touched yet
        probe = np.frombuffer(self, dtype=np.uint8, count=1)
        self.address = probe.ctypes.data
        del probe
        self.registered = {}  # (id(Registrations), pageable) -> (weakref to it, region_id)
        weakref.finalize(self, Memory._gone, fd, self.registered)
        with _memories_lock:
            _memories[self.address] = self
        return self

    @staticmethod
    def _gone(fd, registered):
        os.close(fd)
        for owner, region_id in registered.values():
            regions = owner()
            if regions is not None:
                regions.forget(region_id)

    @staticmethod
    def holding(address, nbytes):
        """The Memory that holds [address, address + nbytes), if one does."""
        with _memories_lock:
            for start, memory in list(_memories.items()):
                if start <= address and address + nbytes <= start + memory.size:
                    return memory
        return None


def shared_array(shape: "int | tuple[int, ...]", dtype: "np.typing.DTypeLike" = np.uint8) -> np.ndarray:
    """A zero-filled numpy array in shared memory (a sealed memfd): analyzing
    it, or any view of it whose rows are packed samples, on a server of this
    host copies nothing. It is registered with a server on first use and
    read in place from then on, so changes made later are what the next
    call sees. The memory is freed when no array uses it any more."""
    dt = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
    nbytes = dt.itemsize
    for s in shape:
        if s < 0:
            raise ValueError("shared_array: negative dimension")
        nbytes *= s
    memory = Memory(nbytes, "imgstat-shared-array")
    return np.frombuffer(memory, dtype=dt, count=nbytes // dt.itemsize).reshape(shape)


_MADV_POPULATE_WRITE = 23  # Linux 5.14; older kernels refuse it and the copy faults the pages in
_libc = None


def _populate(address, nbytes):
    """Allocates and maps a fresh memfd's pages in one call, not one fault a
    page (a quarter less time for 1 GiB here)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    start = address - address % _PAGE
    _libc.madvise(start, nbytes + (address - start), _MADV_POPULATE_WRITE)


def copy_into(dst, src, threads, fresh=False):
    """dst[...] = src on several threads (numpy lets the GIL go while it
    copies): a large array's pages are allocated and filled in parallel.
    dst is C-contiguous; fresh: its pages were never touched."""
    rows = dst.shape[0]
    if threads <= 1 or dst.nbytes < (32 << 20) or rows < 2:
        if fresh:
            _populate(dst.ctypes.data, dst.nbytes)
        np.copyto(dst, src)
        return
    from concurrent.futures import ThreadPoolExecutor
    k = min(threads, rows)
    bounds = [rows * i // k for i in range(k + 1)]

    def piece(i):
        d = dst[bounds[i]:bounds[i + 1]]
        if fresh:
            _populate(d.ctypes.data, d.nbytes)
        np.copyto(d, src[bounds[i]:bounds[i + 1]])
    with ThreadPoolExecutor(k) as pool:
        list(pool.map(piece, range(k)))


class RegionSocket:
    """The connection to the server's region socket: the regions registered
    with its tickets live until it closes."""

    def __init__(self, path):
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self._socket.connect(path)
        except OSError:
            self._socket.close()
            raise
        self._lock = threading.Lock()
        self._pending = b""

    def pass_fd(self, fd):
        """The ticket for fd (None: the connection's own, for GPU memory)."""
        with self._lock:
            if fd is None:
                self._socket.sendall(b"R")
            else:
                socket.send_fds(self._socket, [b"R"], [fd])
            line = self._pending
            while b"\n" not in line and len(line) < 4096:
                more = self._socket.recv(4096)
                if not more:
                    raise OSError("the region socket closed without an answer")
                line += more
            line, _, self._pending = line.partition(b"\n")
        text = line.decode(errors="replace").strip()
        if text.startswith("ok "):
            return text[3:]
        raise OSError(text[6:] if text.startswith("error ") else f"the region socket answered {text!r}")

    def close(self):
        self._socket.close()


class Cuda:
    """The CUDA driver API through ctypes (libcuda.so.1), for IPC handles of
    device arrays; None where there is no driver."""
    _lib = None
    _tried = False

    @classmethod
    def driver(cls):
        if not cls._tried:
            cls._tried = True
            try:
                lib = ctypes.CDLL("libcuda.so.1")
                lib.cuIpcGetMemHandle.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
                lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                        ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
                lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
                lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
                lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
                lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
                lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
                lib.cuDevicePrimaryCtxRetain.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
                cls._lib = lib
            except (OSError, AttributeError):
                cls._lib = None
        return cls._lib

    @classmethod
    def _current(cls, lib, pointer):
        """Makes the pointer's device's primary context current on this thread
        when none is (a worker thread of analyze_many): CuPy, PyTorch and
        Numba allocate in the primary context."""
        ctx = ctypes.c_void_p()
        if lib.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and ctx.value:
            return
        ordinal = ctypes.c_int(-1)
        if lib.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(pointer)) != 0:  # DEVICE_ORDINAL
            return  # the calls below say what is wrong
        device, primary = ctypes.c_int(), ctypes.c_void_p()
        if (lib.cuDeviceGet(ctypes.byref(device), ordinal) == 0
                and lib.cuDevicePrimaryCtxRetain(ctypes.byref(primary), device) == 0):
            lib.cuCtxSetCurrent(primary)

    @classmethod
    def synchronize(cls, stream, pointer):
        """Waits for the work queued on the array's stream (its producer's)."""
        lib = cls.driver()
        if lib is None:
            return
        cls._current(lib, pointer)
        r = lib.cuStreamSynchronize(ctypes.c_void_p(stream))
        if r != 0:
            raise OSError(f"cuStreamSynchronize on the array's stream failed ({r})")

    @classmethod
    def allocation(cls, pointer):
        """(base, size, ipc handle bytes) of the allocation holding a device
        pointer; raises OSError when it cannot be shared."""
        lib = cls.driver()
        if lib is None:
            raise OSError("no CUDA driver (libcuda.so.1) in this process")
        cls._current(lib, pointer)
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        r = lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer))
        if r != 0:
            raise OSError(f"cuMemGetAddressRange failed ({r}): is the array's memory on a GPU of this process?")
        handle = ctypes.create_string_buffer(64)
        r = lib.cuIpcGetMemHandle(handle, base)
        if r != 0:
            raise OSError(f"cuIpcGetMemHandle failed ({r}): memory from cudaMalloc can be shared, "
                          "managed or pooled memory cannot")
        return base.value, size.value, handle.raw
