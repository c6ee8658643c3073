"""A GPU array (__cuda_array_interface__) analyzed in place by CUDA IPC,
against numpy over the same samples. The device buffer comes from the CUDA
driver through ctypes (CuPy is not in Debian). Runs where a GPU and a CUDA
server are (IMGSTAT_TEST_ENGINE=cuda); skipped elsewhere."""
import ctypes

import numpy as np
import pytest

import imgstat
from conftest import ENGINE
from test_arrays import check


class DeviceArray:
    """cuMemAlloc'd memory shaped as a numpy array, as CuPy would expose it."""

    def __init__(self, cuda, host):
        self.cuda, self.shape, self.dtype = cuda, host.shape, host.dtype
        self.pointer = ctypes.c_uint64()
        assert cuda.cuMemAlloc_v2(ctypes.byref(self.pointer), ctypes.c_size_t(host.nbytes)) == 0
        host = np.ascontiguousarray(host)
        assert cuda.cuMemcpyHtoD_v2(self.pointer, host.ctypes.data_as(ctypes.c_void_p),
                                    ctypes.c_size_t(host.nbytes)) == 0
        self.strides = None

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.pointer.value, False),
                "strides": self.strides, "version": 3, "stream": None}

    def free(self):
        self.cuda.cuMemFree_v2(self.pointer)


@pytest.fixture(scope="module")
def cuda():
    if ENGINE != "cuda":
        pytest.skip("the servers here compute on the CPU (IMGSTAT_TEST_ENGINE=cuda runs this)")
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        pytest.skip("no CUDA driver")
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    device, context = ctypes.c_int(), ctypes.c_void_p()
    if lib.cuInit(0) != 0 or lib.cuDeviceGet(ctypes.byref(device), 0) != 0:
        pytest.skip("no usable GPU")
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    assert lib.cuCtxSetCurrent(context) == 0
    return lib


def test_a_device_array_is_analyzed_in_place(server, cuda):
    rng = np.random.default_rng(12)
    with imgstat.Client(server.address) as client:
        for dtype, shape in [(np.uint8, (480, 640, 3)), (np.uint16, (257, 263)), (np.float32, (100, 101, 2)),
                             (np.uint8, (1, 1))]:
            host = (rng.integers(0, np.iinfo(dtype).max + 1, shape).astype(dtype) if dtype != np.float32
                    else rng.normal(0, 10, shape).astype(dtype))
            device = DeviceArray(cuda, host)
            try:
                r = client.analyze(device, stats="min_max,sum,stddev,histogram")
                assert r.engine == "cuda"
                check(r, host, f"device {np.dtype(dtype)} {shape}")
                again = client.analyze(device, stats="min_max,sum,stddev,histogram")  # registered once
                assert again.to_dict()["channels"] == r.to_dict()["channels"]
            finally:
                device.free()
        # Many at once: worker threads without a CUDA context of their own.
        hosts = [rng.integers(0, 256, (50 + i, 70, 3), dtype=np.uint8) for i in range(6)]
        devices = [DeviceArray(cuda, h) for h in hosts]
        try:
            for h, r in zip(hosts, client.analyze_many(devices + [hosts[0]])):
                check(r, h, "device array among many")
        finally:
            for d in devices:
                d.free()
        before = server.metric("imgstat_requests_total", method="RegisterRegion")
        whole = rng.integers(0, 256, (64, 100, 4), dtype=np.uint8)
        device = DeviceArray(cuda, whole)
        try:
            # Rows at a stride inside the allocation: channel planes are not packed, a crop of rows is.
            device.shape, device.strides = (30, 100, 4), (400, 4, 1)
            device.pointer = ctypes.c_uint64(device.pointer.value + 10 * 400)
            check(client.analyze(device), whole[10:40], "rows 10 to 40 of a device array")
            device.pointer = ctypes.c_uint64(device.pointer.value - 10 * 400)
        finally:
            device.free()
        assert server.metric("imgstat_requests_total", method="RegisterRegion") - before == 1


def test_old_device_registrations_are_given_back(server, cuda):
    """Each new allocation is a new IPC handle: past the client's CUDA_REGIONS
    the oldest are unregistered, so the server does not hold freed memory."""
    from imgstat._client import CUDA_REGIONS
    rng = np.random.default_rng(13)
    with imgstat.Client(server.address) as client:
        given_back = server.metric("imgstat_requests_total", method="UnregisterRegion")
        for i in range(CUDA_REGIONS + 4):
            host = rng.integers(0, 256, (20 + i, 30), dtype=np.uint8)
            device = DeviceArray(cuda, host)
            try:
                check(client.analyze(device), host, f"allocation {i}")
            finally:
                device.free()
        assert server.metric("imgstat_requests_total", method="UnregisterRegion") - given_back >= 3
