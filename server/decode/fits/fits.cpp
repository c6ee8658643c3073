#include "decode/fits/fits.hpp"
#include "decode/decode.hpp"
#include "decode/inflate/gzip.hpp"
#include "decode/isolated.hpp"

#include <fitsio.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <type_traits>

namespace imgstat {
namespace {

// Every use of cfitsio holds this shared; starting the tile decoder's
// process takes it whole, so that no thread is inside cfitsio (holding its
// own locks) as the child is made.
std::shared_mutex g_cfitsio;

// cfitsio's words for a status, and the first message it stacked (which
// names the keyword or HDU); the stack is cleared.
std::string cfitsio_words(int status) {
  char text[FLEN_STATUS] = {0};
  fits_get_errstatus(status, text);
  std::string out = text;
  char message[FLEN_ERRMSG] = {0};
  if (fits_read_errmsg(message) && message[0] && out.find(message) == std::string::npos) out += ": " + std::string(message);
  fits_clear_errmsg();
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return out;
}

// The values' type (fits.hpp says which and why).
SampleType values_type(int bitpix, double bzero, double bscale, bool blank) {
  if (bitpix < 0) return bitpix == -32 && bzero == 0 && bscale == 1 ? SampleType::kFloat32 : SampleType::kFloat64;
  const bool unscaled = bscale == 1 && bzero == 0;
  const bool offset = bscale == 1 && ((bitpix == 8 && bzero == -128) || (bitpix == 16 && bzero == 32768));
  if (blank) return bitpix <= 16 && (unscaled || offset) ? SampleType::kFloat32 : SampleType::kFloat64;
  if (bitpix == 8 && unscaled) return SampleType::kUint8;
  if (bitpix == 8 && offset) return SampleType::kInt8;
  if (bitpix == 16 && unscaled) return SampleType::kInt16;
  if (bitpix == 16 && offset) return SampleType::kUint16;
  return SampleType::kFloat64;
}

int cfitsio_type(SampleType t) {
  switch (t) {
    case SampleType::kUint8: return TBYTE;
    case SampleType::kInt8: return TSBYTE;
    case SampleType::kUint16: return TUSHORT;
    case SampleType::kInt16: return TSHORT;
    case SampleType::kFloat32: return TFLOAT;
    case SampleType::kFloat64: return TDOUBLE;
  }
  return TDOUBLE;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Checked product; false past 64 bits.
bool multiply(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  *out = a * b;
  return true;
}

// One image HDU (the current one), or an empty optional reason why not.
// Big-endian stored samples S to the values' type, as cfitsio converts
// them: BLANK to NaN, then value = stored * BSCALE + BZERO in double (the
// product rounded, then the sum), or the signedness offset as a bit flip.
template <class S>
S load_be(const uint8_t* p) {
  uint8_t b[sizeof(S)];
  for (size_t i = 0; i < sizeof(S); ++i) b[i] = p[sizeof(S) - 1 - i];
  S v;
  std::memcpy(&v, b, sizeof(S));
  return v;
}

// Unscaled floats: each value's bytes reversed, nothing else (a loop the
// compiler vectorizes).
template <class U>
void reverse_bytes(const uint8_t* from, uint8_t* to, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    U u;
    std::memcpy(&u, from + i * sizeof(U), sizeof(U));
    if constexpr (sizeof(U) == 4) u = __builtin_bswap32(u);
    else u = __builtin_bswap64(u);
    std::memcpy(to + i * sizeof(U), &u, sizeof(U));
  }
}

template <class S>
void convert_stored(const FitsImage& im, const uint8_t* from, uint8_t* to, uint64_t n) {
  const bool unit = im.bscale == 1;
  switch (im.type) {
    case SampleType::kUint8:
      std::memcpy(to, from, n);
      return;
    case SampleType::kInt8:
      for (uint64_t i = 0; i < n; ++i) to[i] = from[i] ^ 0x80;
      return;
    case SampleType::kInt16:
    case SampleType::kUint16: {
      const uint16_t flip = im.type == SampleType::kUint16 ? 0x8000 : 0;
      for (uint64_t i = 0; i < n; ++i) {
        const uint16_t v = static_cast<uint16_t>((from[2 * i] << 8 | from[2 * i + 1]) ^ flip);
        std::memcpy(to + 2 * i, &v, 2);
      }
      return;
    }
    case SampleType::kFloat32:
      if constexpr (std::is_same_v<S, float>) return reverse_bytes<uint32_t>(from, to, n);
      for (uint64_t i = 0; i < n; ++i) {
        const S s = load_be<S>(from + i * sizeof(S));
        float v;
        if constexpr (std::is_floating_point_v<S>) v = static_cast<float>(s);
        else v = im.has_blank && static_cast<long long>(s) == im.blank ? std::numeric_limits<float>::quiet_NaN()
                                                                       : static_cast<float>(static_cast<double>(s) + im.bzero);
        std::memcpy(to + 4 * i, &v, 4);
      }
      return;
    case SampleType::kFloat64:
      if constexpr (std::is_same_v<S, double>) return reverse_bytes<uint64_t>(from, to, n);
      for (uint64_t i = 0; i < n; ++i) {
        const S s = load_be<S>(from + i * sizeof(S));
        double v;
        if (!std::is_floating_point_v<S> && im.has_blank && static_cast<long long>(s) == im.blank) {
          v = std::numeric_limits<double>::quiet_NaN();
        } else if (unit) {
          v = static_cast<double>(s) + im.bzero;
        } else {
          double product = static_cast<double>(s) * im.bscale;
          asm("" : "+x"(product));  // no FMA: cfitsio rounds the product, then the sum
          v = product + im.bzero;
        }
        std::memcpy(to + 8 * i, &v, 8);
      }
      return;
  }
}

void convert_rows(const FitsImage& im, const uint8_t* from, uint8_t* to, uint64_t n) {
  switch (im.bitpix) {
    case 8: return convert_stored<uint8_t>(im, from, to, n);
    case 16: return convert_stored<int16_t>(im, from, to, n);
    case 32: return convert_stored<int32_t>(im, from, to, n);
    case 64: return convert_stored<int64_t>(im, from, to, n);
    case -32: return convert_stored<float>(im, from, to, n);
    case -64: return convert_stored<double>(im, from, to, n);
  }
  fail(ErrorCode::kInternal, "FITS: BITPIX " + std::to_string(im.bitpix) + " planned but not converted");
}

// The HDUs' framing, walked before cfitsio sees them: cfitsio allocates
// from header values before it checks them against the file (fuzz_fits: a
// table of 2^55 rows, a calloc of 22 PB). Each HDU's mandatory keywords
// must be integers in range, its data must lie in the file, and a
// compressed image's tiles must be its table's rows. Returns how many HDUs
// from the first pass, and why the next does not.
struct HduCards {
  std::map<std::string, long long> ints;       // integer values
  std::map<std::string, std::string> strings;  // quoted values, trailing blanks dropped
  std::map<std::string, std::string> raw;      // every value as written (before a comment)
  std::set<std::string> flags;                 // logical keywords that are T
  uint64_t data_start = 0, data_bytes = 0;
  bool primary = false;
};

struct HduFraming {
  int hdus = 0;
  std::string stop;
  std::vector<HduCards> cards;  // of each HDU counted
};

bool card_integer(const char* card, long long* out) {
  // The value: after "= ", to a comment's "/"; one integer, nothing else.
  const char* p = card + 10;
  const char* end = card + 80;
  while (p < end && *p == ' ') ++p;
  const char* q = p;
  if (q < end && (*q == '+' || *q == '-')) ++q;
  const char* digits = q;
  while (q < end && *q >= '0' && *q <= '9') ++q;
  if (q == digits || q - digits > 18) return false;
  const char* r = q;
  while (r < end && *r == ' ') ++r;
  if (r < end && *r != '/') return false;
  *out = std::strtoll(p, nullptr, 10);
  return true;
}

// A value as written: from column 11 to a comment's '/' outside quotes, trimmed.
std::string card_raw(const char* card) {
  std::string v;
  bool quoted = false;
  for (int i = 10; i < 80; ++i) {
    const char c = card[i];
    if (c == '\'') quoted = !quoted;
    if (c == '/' && !quoted) break;
    v += c;
  }
  const size_t a = v.find_first_not_of(' '), b = v.find_last_not_of(' ');
  return a == std::string::npos ? "" : v.substr(a, b - a + 1);
}

// A real number as FITS writes one (1.5, -2E3, 1.0D-5); false for anything else.
bool card_real(const std::string& raw, double* out) {
  if (raw.empty() || raw.size() > 40) return false;
  std::string t = raw;
  for (char& c : t)
    if (c == 'D' || c == 'd') c = 'E';
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool card_string(const char* card, std::string* out) {
  const char* p = card + 10;
  const char* end = card + 80;
  while (p < end && *p == ' ') ++p;
  if (p == end || *p != '\'') return false;
  out->clear();
  for (++p; p < end; ++p) {
    if (*p == '\'') {
      if (p + 1 < end && p[1] == '\'') {
        *out += '\'';
        ++p;
        continue;
      }
      while (!out->empty() && out->back() == ' ') out->pop_back();
      return true;
    }
    *out += *p;
  }
  return false;
}

HduFraming fits_framing(const uint8_t* data, size_t size) {
  HduFraming out;
  uint64_t at = 0;
  constexpr uint64_t kRecord = kFitsRecordBytes;
  while (at < size) {
    HduCards hdu;
    hdu.primary = at == 0;
    std::map<std::string, long long>& keys = hdu.ints;
    std::set<std::string>& flags = hdu.flags;
    std::map<std::string, std::string>& strings = hdu.strings;
    std::string text;
    bool ended = false;
    uint64_t h = at;
    for (; h + 80 <= size && !ended; h += 80) {
      const char* card = reinterpret_cast<const char*>(data + h);
      std::string key(card, 8);
      while (!key.empty() && key.back() == ' ') key.pop_back();
      if (key == "END") ended = true;
      else if (card[8] == '=' && card[9] == ' ') {
        long long v = 0;
        hdu.raw[key] = card_raw(card);
        if (card_integer(card, &v)) keys[key] = v;
        else if (card_string(card, &text)) strings[key] = text;
        else if (hdu.raw[key] == "T") flags.insert(key);
      }
    }
    const std::string which = "HDU " + std::to_string(out.hdus + 1);
    if (!ended) return out.stop = which + " has no END card", out;
    const uint64_t header = (h - at + kRecord - 1) / kRecord * kRecord;
    auto need = [&](const std::string& key, long long lo, long long hi, long long* v) {
      auto it = keys.find(key);
      if (it == keys.end() || it->second < lo || it->second > hi) return false;
      *v = it->second;
      return true;
    };
    long long bitpix = 0, naxis = 0;
    if (!need("BITPIX", -64, 64, &bitpix) ||
        (bitpix != 8 && bitpix != 16 && bitpix != 32 && bitpix != 64 && bitpix != -32 && bitpix != -64))
      return out.stop = which + ": BITPIX is not 8, 16, 32, 64, -32 or -64", out;
    if (!need("NAXIS", 0, 999, &naxis)) return out.stop = which + ": NAXIS is not 0 to 999", out;
    uint64_t elements = naxis > 0 ? 1 : 0;
    std::vector<long long> axes;
    for (long long i = 1; i <= naxis; ++i) {
      long long n = 0;
      if (!need("NAXIS" + std::to_string(i), 0, INT64_MAX, &n))
        return out.stop = which + ": NAXIS" + std::to_string(i) + " is not a size", out;
      axes.push_back(n);
      if (!multiply(elements, static_cast<uint64_t>(n), &elements) || elements > (uint64_t{1} << 62))
        return out.stop = which + ": its axes declare more than 2^62 samples", out;
    }
    long long pcount = 0, gcount = 1;
    if (at > 0) {
      if (!need("PCOUNT", 0, INT64_MAX, &pcount) || !need("GCOUNT", 0, INT64_MAX, &gcount))
        return out.stop = which + ": PCOUNT or GCOUNT is not a count", out;
    }
    uint64_t bytes = 0;
    if (!multiply(static_cast<uint64_t>(std::abs(bitpix) / 8), static_cast<uint64_t>(gcount), &bytes) ||
        static_cast<uint64_t>(pcount) > UINT64_MAX - elements ||
        !multiply(bytes, elements + static_cast<uint64_t>(pcount), &bytes))
      return out.stop = which + ": its data would be more than 2^64 bytes", out;
    if (header > size - at || bytes > size - at - header) {
      // An image's header cfitsio reads without allocating by its axes: it
      // is read (and its data found short, or its size past the limits,
      // said when it is planned); nothing after it is.
      const bool image = at == 0 || !keys.count("TFIELDS");
      if (image && !flags.count("ZIMAGE")) {
        hdu.data_start = at + std::min<uint64_t>(header, size - at);
        hdu.data_bytes = bytes;
        out.cards.push_back(std::move(hdu));
        ++out.hdus;
      }
      out.stop = "HDU " + std::to_string(out.hdus + (image ? 0 : 1)) + ": its data runs past the file's end";
      return out;
    }
    long long tfields = 0;
    if (keys.count("TFIELDS") && !need("TFIELDS", 0, 999, &tfields))
      return out.stop = which + ": TFIELDS is not 0 to 999", out;
    if (flags.count("ZIMAGE")) {  // a tile-compressed image: its tiles are the table's rows
      long long znaxis = 0;
      if (!need("ZNAXIS", 1, 999, &znaxis) || naxis != 2)
        return out.stop = which + ": a compressed image whose ZNAXIS or table is not one", out;
      uint64_t tiles = 1;
      for (long long i = 1; i <= znaxis; ++i) {
        long long n = 0, t = 0;
        if (!need("ZNAXIS" + std::to_string(i), 1, INT64_MAX, &n))
          return out.stop = which + ": ZNAXIS" + std::to_string(i) + " is not a size", out;
        const std::string tile = "ZTILE" + std::to_string(i);
        if (keys.count(tile)) {
          if (!need(tile, 1, INT64_MAX, &t)) return out.stop = which + ": " + tile + " is not a size", out;
        } else {
          t = i == 1 ? n : 1;
        }
        if (!multiply(tiles, static_cast<uint64_t>((n + t - 1) / t), &tiles) || tiles > size)
          return out.stop = which + ": more compressed tiles than the file could hold", out;
      }
      // Compression parameters cfitsio divides by or sizes with as they come.
      for (int i = 1; i <= 999; ++i) {
        const std::string name = "ZNAME" + std::to_string(i), value = "ZVAL" + std::to_string(i);
        if (!strings.count(name)) break;
        long long v = 0;
        const std::string& n = strings[name];
        if ((n == "BLOCKSIZE" && (!need(value, 1, 1 << 20, &v))) ||
            (n == "BYTEPIX" && (!need(value, 1, 8, &v) || (v != 1 && v != 2 && v != 4 && v != 8))))
          return out.stop = which + ": " + n + " " + value + " is not one cfitsio takes", out;
      }
      if (tiles != static_cast<uint64_t>(axes[1]))
        return out.stop = which + ": " + std::to_string(tiles) + " compressed tiles in a table of " +
                          std::to_string(axes[1]) + " rows",
               out;
    }
    hdu.data_start = at + header;
    hdu.data_bytes = bytes;
    out.cards.push_back(std::move(hdu));
    ++out.hdus;
    at += header + (bytes + kRecord - 1) / kRecord * kRecord;
  }
  return out;
}

// One HDU as an image, from its cards alone (cfitsio opens no HDU in the
// server: it allocates and divides by header values as it does, and
// fuzz_fits found both), or false: not an image with data (`skipped` says
// why when it looks like one that is not read).
bool describe(const HduCards& h, int hdu, uint64_t max_planes, FitsImage* out, std::string* skipped) {
  auto integer = [&](const std::string& key, long long* v) {
    auto it = h.ints.find(key);
    if (it == h.ints.end()) return false;
    *v = it->second;
    return true;
  };
  auto text = [&](const std::string& key) {
    auto it = h.strings.find(key);
    return it == h.strings.end() ? std::string() : it->second;
  };
  const bool compressed = h.flags.count("ZIMAGE") && text("XTENSION") == "BINTABLE";
  if (!h.primary && !compressed && text("XTENSION") != "IMAGE") return false;  // a table
  const std::string z = compressed ? "Z" : "";
  long long bitpix = 0, naxis = 0;
  if (!integer(z + "BITPIX", &bitpix) || !integer(z + "NAXIS", &naxis))
    return *skipped = "no " + z + "BITPIX or " + z + "NAXIS", false;
  if (bitpix != 8 && bitpix != 16 && bitpix != 32 && bitpix != 64 && bitpix != -32 && bitpix != -64)
    return *skipped = z + "BITPIX " + std::to_string(bitpix), false;
  if (naxis == 0) return false;  // no data: a primary HDU before extensions
  if (naxis < 0 || naxis > static_cast<long long>(kMaxFitsAxes))
    return *skipped = z + "NAXIS " + std::to_string(naxis) + ", more axes than the " + std::to_string(kMaxFitsAxes) +
                      " read",
           false;
  FitsImage& im = *out;
  im = FitsImage{};
  im.hdu = hdu;
  im.bitpix = static_cast<int>(bitpix);
  im.compressed = compressed;
  for (long long i = 1; i <= naxis; ++i) {
    long long n = 0;
    if (!integer(z + "NAXIS" + std::to_string(i), &n) || n < 0)
      return *skipped = "no " + z + "NAXIS" + std::to_string(i), false;
    if (n == 0) return false;  // no data
    im.axes.push_back(static_cast<uint64_t>(n));
  }
  uint64_t planes = 1;
  for (size_t i = 2; i < im.axes.size(); ++i)
    if (!multiply(planes, im.axes[i], &planes) || planes > max_planes)
      fail(ErrorCode::kResourceExhausted, "FITS HDU " + std::to_string(hdu) + ": NAXIS3 and higher declare more than " +
                                              std::to_string(max_planes) + " planes, past the limit (--max-planes)");
  uint64_t samples = 0, bytes = 0;
  const uint64_t sample_bytes = static_cast<uint64_t>(std::abs(bitpix) / 8);
  if (!multiply(im.width(), im.height(), &samples) || !multiply(samples, planes, &samples) ||
      !multiply(samples, sample_bytes, &bytes))
    fail(ErrorCode::kResourceExhausted, "FITS HDU " + std::to_string(hdu) + ": its axes declare more than 2^64 bytes");
  if (!compressed) {
    im.data_start = h.data_start;
    if (bytes > UINT64_MAX - im.data_start)
      invalid_data("FITS HDU " + std::to_string(hdu) + ": its data would end past 2^64 bytes");
    im.data_end = im.data_start + bytes;  // checked against the file once the pixel limit has been
  } else {
    // cfitsio decodes a tile whole: ZTILEn, else rows (its default).
    uint64_t tile = 8;  // it decodes into doubles or 64-bit integers at most
    for (size_t i = 0; i < im.axes.size(); ++i) {
      long long t = 0;
      if (!integer("ZTILE" + std::to_string(i + 1), &t)) t = i == 0 ? static_cast<long long>(im.axes[0]) : 1;
      if (t <= 0 || !multiply(tile, static_cast<uint64_t>(t), &tile) || tile > kMaxFitsTileBytes)
        fail(ErrorCode::kResourceExhausted, "FITS HDU " + std::to_string(hdu) + ": its compressed tiles (ZTILEn) " +
                                                "hold more than " + std::to_string(kMaxFitsTileBytes >> 20) +
                                                " MiB each, decoded");
    }
    // A tile decoded, its compressed bytes (at most as many), cfitsio's buffers (NIOBUF of IOBUFLEN).
    im.decoder_bytes = 2 * tile + uint64_t{NIOBUF} * IOBUFLEN;
  }
  auto real = [&](const std::string& key, double* v) {
    auto it = h.raw.find(key);
    return it != h.raw.end() && card_real(it->second, v);
  };
  if (h.raw.count("BZERO") && !real("BZERO", &im.bzero)) return *skipped = "BZERO is not a number", false;
  if (h.raw.count("BSCALE") && !real("BSCALE", &im.bscale)) return *skipped = "BSCALE is not a number", false;
  if (im.bscale == 0) return *skipped = "BSCALE 0: not a scaling", false;
  if (bitpix > 0) im.has_blank = integer("BLANK", &im.blank) || (compressed && integer("ZBLANK", &im.blank));
  im.type = values_type(im.bitpix, im.bzero, im.bscale, im.has_blank);
  if (bitpix == 64)
    im.warning = "FITS HDU " + std::to_string(hdu) + ": 64-bit integers are answered as float64, exact to 2^53";
  auto keep = [&](const char* key, std::string value) { im.keywords.emplace_back(key, std::move(value)); };
  keep("BITPIX", std::to_string(bitpix));
  if (im.bzero != 0) keep("BZERO", number(im.bzero));
  if (im.bscale != 1) keep("BSCALE", number(im.bscale));
  if (im.has_blank) keep("BLANK", std::to_string(im.blank));
  for (const char* key : {"EXTNAME", "OBJECT", "TELESCOP", "INSTRUME", "FILTER", "EXPTIME", "DATE-OBS", "BUNIT"}) {
    auto it = h.raw.find(key);
    if (it == h.raw.end()) continue;
    std::string v = h.strings.count(key) ? h.strings.at(key) : it->second;
    for (char& c : v)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
    keep(key, v);
  }
  return true;
}

}  // namespace

uint64_t FitsImage::planes() const {
  uint64_t n = 1;
  for (size_t i = 2; i < axes.size(); ++i) n *= axes[i];
  return n;
}

bool is_fits(const uint8_t* data, size_t size) { return size >= 9 && std::memcmp(data, "SIMPLE  =", 9) == 0; }

FitsPlan plan_fits(const uint8_t* data, size_t size, uint64_t max_images, uint64_t max_planes,
                   const std::function<bool()>& cancelled, size_t content) {
  // Framed within the file's own bytes: padding is no data.
  const HduFraming framing = fits_framing(data, content ? std::min(content, size) : size);
  if (framing.hdus == 0) invalid_data("FITS: " + framing.stop);
  FitsPlan plan;
  if (!framing.stop.empty()) plan.warning = "FITS: HDUs end at " + framing.stop;
  std::vector<std::string> skipped;
  for (int hdu = 1; hdu <= framing.hdus; ++hdu) {
    if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while reading FITS headers");
    FitsImage image;
    std::string why;
    if (describe(framing.cards[static_cast<size_t>(hdu - 1)], hdu, max_planes, &image, &why)) {
      if (plan.images.size() >= max_images)
        fail(ErrorCode::kResourceExhausted, "FITS: more than " + std::to_string(max_images) +
                                                " image HDUs, past the limit (--max-planes)");
      plan.images.push_back(std::move(image));
    } else if (!why.empty()) {
      skipped.push_back("HDU " + std::to_string(hdu) + " (" + why + ")");
    }
  }
  if (plan.images.empty())
    invalid_data("FITS: no image HDU with data" +
                 (skipped.empty() ? std::string() : "; not read: " + skipped.front()) +
                 (plan.warning.empty() ? std::string() : "; " + plan.warning));
  if (!skipped.empty()) {
    std::string w = "FITS: image HDUs not read: " + skipped.front();
    for (size_t i = 1; i < std::min<size_t>(skipped.size(), 4); ++i) w += ", " + skipped[i];
    if (plan.warning.empty()) plan.warning = w;
    else plan.warning += "; " + w;
  }
  return plan;
}

void decode_fits(const uint8_t* data, size_t size, const FitsImage& image, const std::vector<uint64_t>& planes,
                 const std::function<bool()>& cancelled, const RowSink& sink) {
  const uint64_t width = image.width(), height = image.height();
  const int datatype = cfitsio_type(image.type);
  const size_t sample = sample_size(image.type);
  const uint64_t row_bytes = width * sample;
  // Missing integer pixels (BLANK) become NaN; float data keeps its NaN as they are.
  double nan64 = std::numeric_limits<double>::quiet_NaN();
  float nan32 = std::numeric_limits<float>::quiet_NaN();
  void* null_value = image.has_blank ? (image.type == SampleType::kFloat32 ? static_cast<void*>(&nan32)
                                                                          : static_cast<void*>(&nan64))
                                     : nullptr;
  const uint32_t threads = static_cast<uint32_t>(std::max(1, tbb::this_task_arena::max_concurrency()));

  if (!image.compressed) {
    // Straight from the file's bytes: the data lies there whole (planned).
    const uint64_t stored = static_cast<uint64_t>(std::abs(image.bitpix) / 8), in_row = width * stored;
    if (image.data_end > size || image.data_start + in_row * height * image.planes() > size)
      invalid_data("FITS HDU " + std::to_string(image.hdu) + ": its data ends early");
    if (sink.read_planes) {
      // Each value a function of its stored bytes: the engine reads any
      // range of the chosen planes, converted where it lies.
      const uint8_t* first = data + image.data_start;
      const uint64_t plane_values = width * height;
      sink.read_planes(Layout{width, height, 1, image.type, 0}, planes.size(),
                       [&](uint64_t at, uint64_t n, uint8_t* out) {
                         if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
                         read_converted_planes(
                             at, n, out, planes.size(), plane_values, stored, sample,
                             [&](uint64_t k) { return first + planes[k] * plane_values * stored; },
                             [&](const uint8_t* from, uint8_t* to, uint64_t count) { convert_rows(image, from, to, count); },
                             "FITS");
                       });
      return;
    }
    RowBand band = sink.begin(static_cast<uint32_t>(width), static_cast<uint32_t>(height), 1, image.type);
    for (size_t k = 0; k < planes.size(); ++k) {
      if (k > 0) sink.plane(k);
      const uint8_t* plane = data + image.data_start + planes[k] * in_row * height;
      for (uint64_t y = 0; y < height;) {
        if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
        if (band.count == 0) fail(ErrorCode::kInternal, "FITS: the sink gave a band of no rows");
        const uint64_t n = std::min<uint64_t>(band.count, height - y);
        const uint64_t runs = threads > 1 && n * row_bytes >= (uint64_t{1} << 20) ? std::min<uint64_t>(n, threads * 4) : 1;
        auto run = [&](size_t i) {
          const uint64_t r0 = n * i / runs, r1 = n * (i + 1) / runs;
          convert_rows(image, plane + (y + r0) * in_row, band.rows + r0 * row_bytes, (r1 - r0) * width);
        };
        if (runs == 1) run(0);
        else tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, static_cast<size_t>(runs), run); });
        band = sink.band(band.rows, static_cast<uint32_t>(y), static_cast<uint32_t>(n));
        y += n;
      }
    }
    return;
  }
  // Tile-compressed: cfitsio's decoders trust the compressed bytes (fuzz_fits:
  // its Rice decoder reads past a damaged tile until it faults), so the
  // tiles are decoded in a process of their own (decode/isolated).
  const uint64_t plane_bytes = row_bytes * height, total = plane_bytes * planes.size();
  const IsolatedOutput decoded = run_isolated(
      total, g_cfitsio,
      [&](uint8_t* pixels) -> std::string {
        int status = 0, type = 0, any = 0;
        void* memory = const_cast<uint8_t*>(data);
        size_t memory_size = size;
        fitsfile* f = nullptr;
        fits_open_memfile(&f, "imgstat.fits", READONLY, &memory, &memory_size, 0, nullptr, &status);
        if (!status) fits_movabs_hdu(f, image.hdu, &type, &status);
        for (size_t k = 0; k < planes.size() && !status; ++k) {
          long long first_pixel[kMaxFitsAxes];
          first_pixel[0] = first_pixel[1] = 1;
          uint64_t rest = planes[k];
          for (size_t i = 2; i < image.axes.size(); ++i) {
            first_pixel[i] = static_cast<long long>(rest % image.axes[i] + 1);
            rest /= image.axes[i];
          }
          fits_read_pixll(f, datatype, first_pixel, static_cast<long long>(width * height), null_value,
                          pixels + k * plane_bytes, &any, &status);
        }
        return status ? "cfitsio cannot decode its compressed tiles (" + cfitsio_words(status) + ")" : "";
      },
      cancelled, "FITS HDU " + std::to_string(image.hdu));
  const uint8_t* pixels = decoded.data();
  RowBand band = sink.begin(static_cast<uint32_t>(width), static_cast<uint32_t>(height), 1, image.type);
  for (size_t k = 0; k < planes.size(); ++k) {
    if (k > 0) sink.plane(k);
    for (uint64_t y = 0; y < height;) {
      if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      if (band.count == 0) fail(ErrorCode::kInternal, "FITS: the sink gave a band of no rows");
      const uint64_t n = std::min<uint64_t>(band.count, height - y);
      std::memcpy(band.rows, pixels + k * plane_bytes + y * row_bytes, n * row_bytes);
      band = sink.band(band.rows, static_cast<uint32_t>(y), static_cast<uint32_t>(n));
      y += n;
    }
  }
}

}  // namespace imgstat
