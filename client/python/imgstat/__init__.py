"""imgstat for Python: exact per-channel statistics of images from an
imgstat server.

    import imgstat
    with imgstat.Client("localhost:50051") as client:
        result = client.analyze("photo.png")
        print(result.channels[0].mean, result.channels[0].histogram)

Inputs are paths, encoded bytes, numpy arrays, PIL images and GPU arrays
(``__cuda_array_interface__``). On the server's own host arrays and large
files travel through shared memory, not the socket; ``shared_array`` gives
an array that lives there from the start, and GPU arrays go by CUDA IPC.

``import imgstat`` loads neither gRPC nor numpy: they load with the first
``Client``.
"""
from ._errors import Error

__version__ = "@VERSION@"
__all__ = ["Client", "Error", "Result", "Channel", "Part", "Plane", "Partial", "shared_array", "ImageStat", "aio",
           "find_duplicates", "dataset_quality", "__version__"]


def __getattr__(name):
    # Lazy: gRPC and numpy take most of an import's time, and a script that
    # only formats errors, or asks the version, needs neither.
    if name == "Client":
        from . import _client
        return _client.Client
    if name == "shared_array":
        from . import _regions
        return _regions.shared_array
    if name == "Partial":
        from . import _partial
        return _partial.Partial
    if name in ("Result", "Channel", "Part", "Plane"):
        from . import _result
        return getattr(_result, name)
    if name == "dataset_quality":
        from . import _quality
        return _quality.dataset_quality
    if name == "find_duplicates":
        from . import _duplicates
        return _duplicates.find_duplicates
    if name in ("ImageStat", "aio"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'imgstat' has no attribute {name!r}")
