// The loops of quality_rows.hpp, included by quality_rows.cpp (the
// baseline instruction set) and quality_rows_avx2.cpp (-mavx2) inside an
// unnamed namespace each: no function compiled for AVX2 here has external
// linkage, so the linker cannot hand one to a caller on a CPU without it.
// Only plain loops: no inline function from another header.
//
// Sums run in 32 bits over pieces short enough that they cannot overflow
// (vector lanes twice as many as in 64 bits), then join 64-bit totals.

constexpr uint32_t kBucketShift = 12;  // kBrightnessShift (quality.hpp)

template <uint32_t C, uint32_t R, uint32_t G, uint32_t B>
void grey_row(const uint8_t* p, uint64_t w, uint8_t* out) {
  for (uint64_t x = 0; x < w; ++x)
    out[x] = static_cast<uint8_t>((9798u * p[x * C + R] + 19235u * p[x * C + G] + 3735u * p[x * C + B] + 16384u) >> 15);
}

template <uint32_t C, uint32_t R, uint32_t G, uint32_t B>
void pil_l_row(const uint8_t* p, uint64_t w, uint8_t* out) {
  for (uint64_t x = 0; x < w; ++x)
    out[x] = static_cast<uint8_t>((19595u * p[x * C + R] + 38470u * p[x * C + G] + 7471u * p[x * C + B] + 0x8000u) >> 16);
}

template <uint32_t C, uint32_t R, uint32_t G, uint32_t B>
void pil_rgb_row(const uint8_t* p, uint64_t w, uint8_t* out) {
  for (uint64_t x = 0; x < w; ++x) {
    out[3 * x] = p[x * C + R];
    out[3 * x + 1] = p[x * C + G];
    out[3 * x + 2] = p[x * C + B];
  }
}

template <uint32_t C, uint32_t R, uint32_t G, uint32_t B>
void keys_row(const uint8_t* p, uint64_t n, uint16_t* keys) {
  for (uint64_t x = 0; x < n; ++x) {
    const uint32_t r = p[x * C + R], g = p[x * C + G], b = p[x * C + B];
    keys[x] = static_cast<uint16_t>((241u * r * r + 691u * g * g + 68u * b * b) >> kBucketShift);
  }
}

// n <= 1024: |rg| <= 255 and |yb2| <= 510, so 1024 squares stay under 2^31.
template <uint32_t C, uint32_t R, uint32_t G, uint32_t B>
void colour_row(const uint8_t* p, uint64_t n, ColourRowSums* s, uint16_t* keys) {
  int32_t rg = 0, rgq = 0, yb = 0, ybq = 0, unequal = 0;
  for (uint64_t x = 0; x < n; ++x) {
    const int32_t r = p[x * C + R], g = p[x * C + G], b = p[x * C + B];
    const int32_t d = r - g, e = r + g - 2 * b;
    rg += d, rgq += d * d, yb += e, ybq += e * e;
    unequal |= d | e;
    keys[x] = static_cast<uint16_t>((241u * static_cast<uint32_t>(r * r) + 691u * static_cast<uint32_t>(g * g) +
                                     68u * static_cast<uint32_t>(b * b)) >> kBucketShift);
  }
  s->rg += rg, s->rg_sq += rgq, s->yb2 += yb, s->yb2_sq += ybq;
  s->unequal = s->unequal || unequal != 0;
}

template <uint32_t C, uint32_t R, uint32_t G, uint32_t B>
constexpr QualityRows rows_of() {
  return QualityRows{grey_row<C, R, G, B>, pil_l_row<C, R, G, B>, pil_rgb_row<C, R, G, B>, colour_row<C, R, G, B>,
                     keys_row<C, R, G, B>};
}

constexpr QualityRows kRows[4] = {rows_of<3, 0, 1, 2>(), rows_of<3, 2, 1, 0>(), rows_of<4, 0, 1, 2>(),
                                  rows_of<4, 2, 1, 0>()};

const QualityRows* rows_for(uint32_t channels, const uint32_t* rgb) {
  if (channels != 3 && channels != 4) return nullptr;
  const int base = channels == 3 ? 0 : 2;
  if (rgb[0] == 0 && rgb[1] == 1 && rgb[2] == 2) return &kRows[base];
  if (rgb[0] == 2 && rgb[1] == 1 && rgb[2] == 0) return &kRows[base + 1];
  return nullptr;
}

// Pieces of 2048: |lap| <= 1020, so 2048 squares stay under 2^31.
void laplacian_inner(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint64_t x0, uint64_t x1,
                     LaplacianRowSums* s) {
  for (uint64_t a = x0; a < x1; a += 2048) {
    const uint64_t b = a + 2048 < x1 ? a + 2048 : x1;
    int32_t gs = 0, gsq = 0, ls = 0, lsq = 0;
    for (uint64_t x = a; x < b; ++x) {
      const int32_t v = mid[x];
      const int32_t lap = mid[x - 1] + mid[x + 1] + up[x] + down[x] - 4 * v;
      gs += v, gsq += v * v, ls += lap, lsq += lap * lap;
    }
    s->grey += gs, s->grey_sq += gsq, s->lap += ls, s->lap_sq += lsq;
  }
}
