"""A large 8-bit PGM the dataset checks share (4099 x 3001, every value
about equally often): past one message and the client's first read of an
object, so it is streamed, read where it lies, or read by ranges."""
import numpy as np


def write_large_pgm(path, width=4099, height=3001):
    y, x = np.mgrid[0:height, 0:width]
    body = ((x * 7 + y * 13 + (x * y) % 17) % 256).astype(np.uint8).tobytes()
    with open(path, "wb") as f:
        f.write(b"P5\n%d %d\n255\n" % (width, height) + body)
