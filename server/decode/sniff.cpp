#include "decode/sniff.hpp"
#include "decode/dicom/dicom.hpp"
#include "decode/inflate/gzip.hpp"
#include "decode/nifti/nifti.hpp"
#include "decode/tar/tar.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace imgstat {
namespace {

bool starts_with(const uint8_t* d, size_t n, const char* magic, size_t m) {
  return n >= m && std::memcmp(d, magic, m) == 0;
}

uint32_t le16(const uint8_t* p) { return p[0] | (p[1] << 8); }
uint32_t be16(const uint8_t* p) { return (p[0] << 8) | p[1]; }
uint32_t le24(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16); }
uint32_t le32(const uint8_t* p) { return le16(p) | (le16(p + 2) << 16); }
uint32_t be32(const uint8_t* p) { return (be16(p) << 16) | be16(p + 2); }
uint64_t le64(const uint8_t* p) { return le32(p) | (uint64_t{le32(p + 4)} << 32); }
uint64_t be64(const uint8_t* p) { return (uint64_t{be32(p)} << 32) | be32(p + 4); }

void set_size(Probe& p, int64_t w, int64_t h) {
  if (w <= 0 || h <= 0) return;
  p.has_size = true;
  p.width = static_cast<uint64_t>(w);
  p.height = static_cast<uint64_t>(h);
}

// First IFD's ImageWidth (256), ImageLength (257), BitsPerSample (258),
// Photometric (262) and SamplesPerPixel (277), classic or BigTIFF. Offsets
// come from the file: every one is checked against n before it is read.
void probe_tiff(Probe& p, const uint8_t* d, size_t n) {
  const bool le = d[0] == 'I';
  auto u16 = [&](size_t o) { return le ? le16(d + o) : be16(d + o); };
  auto u32 = [&](size_t o) { return le ? le32(d + o) : be32(d + o); };
  auto u64 = [&](size_t o) { return le ? le64(d + o) : be64(d + o); };
  const bool big = u16(2) == 43;
  if (big && n < 16) return;
  const uint64_t ifd = big ? u64(8) : u32(4);
  const size_t count_size = big ? 8 : 2, entry_size = big ? 20 : 12;
  if (ifd > n || count_size > n - ifd) return;
  const uint64_t count = big ? u64(ifd) : u16(ifd);
  int64_t w = -1, h = -1, bits = 1, samples = 1, photometric = -1;
  bool seen_bits = false, seen_samples = false;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t e = ifd + count_size + i * entry_size;
    if (e > n || entry_size > n - e) break;
    const uint32_t tag = u16(e), type = u16(e + 2);
    const uint64_t values = big ? u64(e + 4) : u32(e + 4);
    const size_t value = e + (big ? 12 : 8);
    // Any integer type, as libtiff reads these tags (negative: none); LONG8
    // and SLONG8 (16, 17) are BigTIFF's: a classic entry has 4 bytes for its value.
    int64_t v = -1;
    switch (type) {
      case 1: v = d[value]; break;                                              // BYTE
      case 6: v = static_cast<int8_t>(d[value]); break;                         // SBYTE
      case 3: v = u16(value); break;                                            // SHORT
      case 8: v = static_cast<int16_t>(u16(value)); break;                      // SSHORT
      case 4: v = u32(value); break;                                            // LONG
      case 9: v = static_cast<int32_t>(u32(value)); break;                      // SLONG
      case 16: if (big) v = u64(value) > INT64_MAX ? -1 : static_cast<int64_t>(u64(value)); break;
      case 17: if (big) v = static_cast<int64_t>(u64(value)); break;
    }
    if (v < 0) v = -1;
    if (tag == 258 && type == 3 && values * 2 > (big ? 8u : 4u)) {  // one per sample, stored elsewhere
      const uint64_t at = big ? u64(value) : u32(value);
      v = at <= n && n - at >= 2 ? u16(at) : -1;
    }
    // A tag given twice: libtiff keeps the first.
    if (tag == 256 && w < 0) w = v;
    if (tag == 257 && h < 0) h = v;
    if (tag == 258 && v > 0 && !seen_bits) bits = v, seen_bits = true;
    if (tag == 262 && photometric < 0) photometric = v;
    if (tag == 277 && v > 0 && !seen_samples) samples = v, seen_samples = true;
  }
  set_size(p, w, h);
  const uint64_t sample = bits <= 8 ? 1 : bits <= 16 ? 2 : bits <= 32 ? 4 : 8;
  const uint64_t channels = photometric == 3 ? 3 : static_cast<uint64_t>(std::min<int64_t>(samples, 4));
  // OpenCV reads tile by tile into the image: the samples, and a tile beside them.
  p.bytes_per_pixel = channels * sample + 4;
}

void probe_webp(Probe& p, const uint8_t* d, size_t n) {
  if (n < 30) return;
  if (std::memcmp(d + 12, "VP8 ", 4) == 0)
    set_size(p, le16(d + 26) & 0x3fff, le16(d + 28) & 0x3fff);
  else if (std::memcmp(d + 12, "VP8L", 4) == 0 && d[20] == 0x2f) {
    const uint32_t bits = le32(d + 21);
    set_size(p, (bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1);
  } else if (std::memcmp(d + 12, "VP8X", 4) == 0)
    set_size(p, le24(d + 24) + 1, le24(d + 27) + 1);
}

// Saturates instead of overflowing: "99999999999999999999" is a huge size, not UB.
int64_t to_int(const std::string& s) { return std::strtoll(s.c_str(), nullptr, 10); }

// Whitespace- and comment-separated header tokens of PNM/PFM.
std::vector<std::string> pnm_tokens(const uint8_t* d, size_t n, size_t want) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 2; i < std::min<size_t>(n, 4096) && out.size() < want; ++i) {
    const char c = static_cast<char>(d[i]);
    if (c == '#') {
      while (i < n && d[i] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) out.push_back(std::move(cur)), cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

void probe_pam(Probe& p, const uint8_t* d, size_t n) {
  const std::string head(reinterpret_cast<const char*>(d), std::min<size_t>(n, 4096));
  std::istringstream in(head);
  std::string key;
  int64_t w = -1, h = -1;
  while (in >> key && key != "ENDHDR") {
    if (key == "WIDTH") in >> w;
    if (key == "HEIGHT") in >> h;
  }
  set_size(p, w, h);
}

void probe_hdr(Probe& p, const uint8_t* d, size_t n) {
  const std::string head(reinterpret_cast<const char*>(d), std::min<size_t>(n, 8192));
  const size_t blank = head.find("\n\n");
  if (blank == std::string::npos) return;
  std::istringstream in(head.substr(blank + 2));
  std::string a1, a2;
  int64_t n1 = -1, n2 = -1;
  if (!(in >> a1 >> n1 >> a2 >> n2) || a1.size() != 2 || a2.size() != 2) return;
  if (a1[1] == 'Y')
    set_size(p, n2, n1);
  else
    set_size(p, n1, n2);
}

// The dataWindow attribute (box2i) of the first header.
// Every attribute of the header is walked: OpenEXR allocates what each one
// declares before it reads it, so one that declares more than the file
// holds is refused here, before OpenEXR sees it.
void probe_exr(Probe& p, const uint8_t* d, size_t n) {
  size_t o = 8;
  while (o < n) {
    const uint8_t* name = d + o;
    const void* name_end = std::memchr(name, 0, n - o);
    if (!name_end) return;
    if (name_end == name) return;  // the header's end
    o = static_cast<const uint8_t*>(name_end) - d + 1;
    const void* type_end = std::memchr(d + o, 0, n - o);
    if (!type_end) return;
    o = static_cast<const uint8_t*>(type_end) - d + 1;
    if (n - o < 4) return;
    const uint32_t size = le32(d + o);
    o += 4;
    if (size > n - o) {
      p.corrupt = "header attribute \"" + std::string(reinterpret_cast<const char*>(name)) + "\" declares " +
                  std::to_string(size) + " bytes, more than the " + std::to_string(n - o) + " left in the file";
      return;
    }
    if (std::strcmp(reinterpret_cast<const char*>(name), "dataWindow") == 0 && size == 16) {
      auto i32 = [&](size_t k) { return static_cast<int32_t>(le32(d + o + 4 * k)); };
      set_size(p, int64_t{i32(2)} - i32(0) + 1, int64_t{i32(3)} - i32(1) + 1);
    }
    o += size;
  }
}

// A tRNS chunk before the first IDAT (where it must be).
bool png_has_trns(const uint8_t* d, size_t n) {
  for (size_t o = 8; o <= n && n - o >= 8;) {
    const uint64_t length = be32(d + o);
    if (std::memcmp(d + o + 4, "tRNS", 4) == 0) return true;
    if (std::memcmp(d + o + 4, "IDAT", 4) == 0) return false;
    o += 12 + length;
  }
  return false;
}

// The first image descriptor's size: the frame that is decoded, which may be
// far larger than the logical screen the header gives.
void probe_gif(Probe& p, const uint8_t* d, size_t n) {
  if (n < 13) return;
  size_t o = 13;
  if (d[10] & 0x80) o += size_t{3} << ((d[10] & 7) + 1);  // global colour table
  while (o < n) {
    if (d[o] == 0x2c) {  // image descriptor
      if (n - o >= 10) set_size(p, le16(d + o + 5), le16(d + o + 7));
      return;
    }
    if (d[o] != 0x21 || n - o < 2) return;  // not an extension: corrupt or the end
    o += 2;
    while (o < n && d[o] != 0) o += size_t{d[o]} + 1;  // sub-blocks
    ++o;
  }
}

// JPEG 2000: the SIZ marker segment of the codestream (after the JP2 boxes in
// a .jp2 file): image extent less offset, and the number of components.
void probe_jpeg2000(Probe& p, const uint8_t* d, size_t n) {
  static const uint8_t kSiz[] = {0xff, 0x4f, 0xff, 0x51};
  const uint8_t* at = static_cast<const uint8_t*>(memmem(d, std::min<size_t>(n, 1 << 16), kSiz, 4));
  if (!at) return;
  const size_t o = at - d;
  if (n - o < 42) return;
  const int64_t w = int64_t{be32(d + o + 8)} - be32(d + o + 16), h = int64_t{be32(d + o + 12)} - be32(d + o + 20);
  set_size(p, w, h);
  const uint64_t components = be16(d + o + 40);
  // OpenJPEG holds an int32 per sample; OpenCV's image is beside it.
  p.bytes_per_pixel = components * 4 + 8;
}

// A gzip file whose first inflated bytes are a FITS primary header's.
bool gzip_of_fits(const uint8_t* d, size_t n) {
  const std::vector<uint8_t> head = gzip_head(d, n, 9);
  return head.size() == 9 && std::memcmp(head.data(), "SIMPLE  =", 9) == 0;
}

bool is_nifti_gzip(const uint8_t* d, size_t n) {
  if (n < 18 || d[0] != 0x1f || d[1] != 0x8b) return false;
  const std::vector<uint8_t> head = gzip_head(d, n, 540);
  return is_nifti(head.data(), head.size());
}

}  // namespace

Probe probe(const uint8_t* d, size_t n) {
  Probe p;
  p.format = "unknown";
  if (starts_with(d, n, "\x89PNG\r\n\x1a\n", 8)) {
    p.format = "PNG";
    if (n >= 26) {
      set_size(p, be32(d + 16), be32(d + 20));
      const uint32_t depth = d[24], colour = d[25];
      // OpenCV gives gray+alpha as BGRA, and a tRNS chunk adds alpha to the rest.
      const uint64_t channels = png_has_trns(d, n) || colour >= 4 ? 4 : colour == 0 ? 1 : 3;
      p.bytes_per_pixel = channels * (depth == 16 ? 2 : 1);
      if (p.has_size) {
        const uint64_t stored = colour == 2 ? 3 : colour == 4 ? 2 : colour == 6 ? 4 : 1;
        const uint64_t row = (p.width * stored * depth + 7) / 8 + 1;  // filter byte
        if (p.height <= (uint64_t{1} << 40) / std::max<uint64_t>(row, 1)) p.least_bytes = p.height * row / 1032;
      }
    }
  } else if (starts_with(d, n, "\xff\xd8\xff", 3)) {
    p.format = "JPEG";  // libjpeg reads its header (jpeg/check)
  } else if (starts_with(d, n, "II*\0", 4) || starts_with(d, n, "MM\0*", 4) ||
             starts_with(d, n, "II+\0", 4) || starts_with(d, n, "MM\0+", 4)) {
    p.format = "TIFF";
    if (n >= 8) probe_tiff(p, d, n);
  } else if (is_dicom(d, n)) {
    // "DICM" lies at 128, after a preamble that may be anything: a file that
    // starts as a PNG, JPEG or TIFF (a dual-personality file's preamble is a
    // TIFF header) is that, as its own readers take it. Before NIfTI and
    // FITS, whose headers no DICOM preamble is meant to hold.
    p.format = "DICOM";  // GDCM reads its attributes (dicom/)
    p.bytes_per_pixel = 8;
  } else if (is_nifti(d, n) || is_nifti_gzip(d, n)) {
    p.format = "NIfTI";  // libnifti reads its header (nifti/)
    p.bytes_per_pixel = 8;
  } else if (starts_with(d, n, "SIMPLE  =", 9) || gzip_of_fits(d, n)) {
    p.format = "FITS";  // its image HDUs and sizes are cfitsio's to read (fits/)
    p.bytes_per_pixel = 8;
  } else if (is_tar(d, n)) {
    // After the magics at the first byte that no file name starts with, before
    // those a name may (a first member "BMW.jpg" is no BMP): a tar's own magic
    // lies at 257, where any file may hold those bytes.
    p.format = "tar";  // several files as one input: what they are is tar/'s to say
    p.bytes_per_pixel = 8;
  } else if (starts_with(d, n, "BM", 2)) {
    p.format = "BMP";
    if (n >= 26) {
      if (le32(d + 14) == 12) {  // OS/2 1.x: unsigned 16-bit sizes
        set_size(p, le16(d + 18), le16(d + 20));
      } else if (n >= 30) {
        set_size(p, static_cast<int32_t>(le32(d + 18)), std::abs(static_cast<int64_t>(static_cast<int32_t>(le32(d + 22)))));
      }
      p.bytes_per_pixel = 5;  // BGR(A) samples; palette images also hold their indices
    }
  } else if (n >= 12 && starts_with(d, n, "RIFF", 4) && std::memcmp(d + 8, "WEBP", 4) == 0) {
    p.format = "WebP";
    probe_webp(p, d, n);
    p.bytes_per_pixel = 8;  // the canvas and the frame taken from it
  } else if (starts_with(d, n, "GIF87a", 6) || starts_with(d, n, "GIF89a", 6)) {
    p.format = "GIF";
    probe_gif(p, d, n);
    p.bytes_per_pixel = 5;  // palette indices and the BGR(A) frame
    // An LZW code (3 bits at least) stands for at most 4096 pixels.
    if (p.has_size && p.width <= (uint64_t{1} << 20)) p.least_bytes = p.width * p.height * 3 / 8 / 4096;
  } else if (starts_with(d, n, "\x76\x2f\x31\x01", 4)) {
    p.format = "EXR";
    probe_exr(p, d, n);
    p.bytes_per_pixel = 32;  // up to 4 float channels, read through a frame buffer of the same size
  } else if (starts_with(d, n, "#?RADIANCE", 10) || starts_with(d, n, "#?RGBE", 6)) {
    p.format = "HDR";
    probe_hdr(p, d, n);
    p.bytes_per_pixel = 16;  // 3 floats and the RGBE bytes
  } else if (n >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '6' && std::isspace(d[2])) {
    p.format = "PNM";
    const bool gray = d[1] != '3' && d[1] != '6';
    const auto t = pnm_tokens(d, n, gray && (d[1] == '1' || d[1] == '4') ? 2 : 3);
    if (t.size() >= 2) set_size(p, to_int(t[0]), to_int(t[1]));
    p.bytes_per_pixel = (gray ? 1 : 3) * (t.size() == 3 && to_int(t[2]) > 255 ? 2 : 1);
  } else if (starts_with(d, n, "P7\n", 3)) {
    p.format = "PAM";
    probe_pam(p, d, n);
    p.bytes_per_pixel = 8;
  } else if (n >= 3 && d[0] == 'P' && (d[1] == 'F' || d[1] == 'f') && std::isspace(d[2])) {
    p.format = "PFM";
    const auto t = pnm_tokens(d, n, 2);
    if (t.size() == 2) set_size(p, to_int(t[0]), to_int(t[1]));
    p.bytes_per_pixel = d[1] == 'F' ? 12 : 4;
  } else if (starts_with(d, n, "\0\0\0\x0cjP  \r\n\x87\n", 12) || starts_with(d, n, "\xff\x4f\xff\x51", 4)) {
    p.format = "JPEG2000";
    probe_jpeg2000(p, d, n);
  } else if (starts_with(d, n, "\x59\xa6\x6a\x95", 4)) {
    p.format = "SunRaster";
    if (n >= 12) set_size(p, be32(d + 4), be32(d + 8));
    p.bytes_per_pixel = 5;
  }
  return p;
}

const std::vector<std::string>& supported_formats() {
  static const std::vector<std::string> formats = {"PNG", "JPEG", "TIFF", "BMP", "WebP", "GIF", "EXR",
                                                   "HDR", "PNM", "PAM", "PFM", "JPEG2000", "SunRaster", "FITS", "NIfTI", "DICOM", "Zarr", "tar"};
  return formats;
}

bool is_supported_format(const std::string& format) {
  const auto& f = supported_formats();
  return std::find(f.begin(), f.end(), format) != f.end();
}

}  // namespace imgstat
