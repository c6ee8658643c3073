"""The 4,000 500x375 q90 JPEGs the GPU scripts' dataset figures use (three
corpus photos shifted and noised): python3 bench/load/jpeg_set.py DIR CORPUS"""
import os
import sys

import cv2
import numpy as np

out, corpus = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
base = [cv2.resize(cv2.imread(f), (500, 375)) for f in
        [f'{corpus}/png/skimage_coffee.png', f'{corpus}/png/skimage_chelsea.png',
         f'{corpus}/png/skimage_astronaut.png'] if os.path.exists(f)]
for i in range(4000):
    img = np.roll(base[i % len(base)], int(rng.integers(0, 500)), axis=1)
    img = np.clip(img.astype(np.int16) + rng.integers(-6, 7, img.shape, dtype=np.int16), 0, 255).astype(np.uint8)
    cv2.imwrite(f'{out}/{i:05d}.jpg', img, [cv2.IMWRITE_JPEG_QUALITY, 90])
