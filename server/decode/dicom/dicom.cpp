#include "decode/dicom/dicom.hpp"

#include <gdcmExplicitDataElement.h>
#include <gdcmFile.h>
#include <gdcmSmartPointer.h>
#include <gdcmFileMetaInformation.h>
#include <gdcmImage.h>
#include <gdcmImageHelper.h>
#include <gdcmImplicitDataElement.h>
#include <gdcmPreamble.h>
#include <gdcmSequenceOfFragments.h>
#include <gdcmSequenceOfItems.h>
#include <gdcmImageReader.h>
#include <gdcmStringFilter.h>
#include <gdcmTrace.h>
#include <gdcmTransferSyntax.h>
#include <gdcmUIDs.h>

#include <setjmp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <istream>
#include <limits>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <streambuf>
#include <type_traits>

#include "decode/allocation_ceiling.hpp"
#include "decode/decode.hpp"
#include "decode/inflate/gzip.hpp"
#include "decode/isolated.hpp"

namespace {
// Debian builds GDCM with its assertions on, and some of them check the
// file rather than GDCM (fuzz_dicom: a damaged file meta group aborts the
// process in FileMetaInformation::ReadCompat). A server must not die of a
// file, so the C library's assertion handler is taken over: inside a GDCM
// call (guarded below) a failed assertion ends that call with an error,
// jumping back past GDCM's frames (what they allocated is lost: a few
// allocations, at most the file's size); anywhere else it is what glibc's
// is, a message and abort().
thread_local sigjmp_buf* t_gdcm_guard = nullptr;
thread_local char t_gdcm_assertion[256];
}  // namespace

extern "C" [[noreturn]] void __assert_fail(const char* expression, const char* file, unsigned int line,
                                           const char* function) {
  if (t_gdcm_guard && !imgstat::in_isolated_child()) {
    std::snprintf(t_gdcm_assertion, sizeof t_gdcm_assertion, "%s", expression);
    sigjmp_buf* to = t_gdcm_guard;
    t_gdcm_guard = nullptr;
    siglongjmp(*to, 1);
  }
  std::fprintf(stderr, "%s:%u: %s: Assertion `%s' failed.\n", file, line, function, expression);
  std::abort();
}

namespace imgstat {
namespace {

// What GDCM may allocate at once reading a file of n bytes: its values lie
// in the file (ElementFraming), and what it builds around them (a
// sequence's items, strings) stays within the file's size again.
constexpr size_t kGdcmCeilingPerFileByte = 2;
constexpr size_t kGdcmCeilingSlack = size_t{1} << 20;

// Runs fn, whose GDCM calls may fail an assertion (that is
// kInvalidArgument) and whose allocations stay under a ceiling from the
// file's size (decode/allocation_ceiling.hpp; above it, kInvalidArgument).
template <class Fn>
void gdcm_guarded(size_t file_bytes, Fn&& fn) {
  sigjmp_buf env;
  sigjmp_buf* const outer = t_gdcm_guard;
  const size_t ceiling = kGdcmCeilingPerFileByte * file_bytes + kGdcmCeilingSlack;
  const size_t outer_ceiling = exchange_allocation_ceiling(ceiling);
  auto restore = [&] {
    t_gdcm_guard = outer;
    exchange_allocation_ceiling(outer_ceiling);
  };
  if (sigsetjmp(env, 0) != 0) {
    restore();
    invalid_data(std::string("DICOM: GDCM cannot read it (its check \"") + t_gdcm_assertion + "\" failed)");
  }
  // GDCM turns a refused allocation into an error of its own, and some of
  // its readers go on after one: whatever it then says, the file is refused.
  auto refuse_if_past_ceiling = [&] {
    const size_t refused = last_refused_allocation();
    restore();
    if (refused > ceiling)
      invalid_data("DICOM: GDCM would allocate " + std::to_string(refused) + " bytes at once to read a file of " +
                   std::to_string(file_bytes) + " (damaged)");
  };
  t_gdcm_guard = &env;
  try {
    fn();
  } catch (...) {
    refuse_if_past_ceiling();
    throw;
  }
  refuse_if_past_ceiling();
}

// A read-only stream over the file's bytes, which GDCM seeks in.
class MemoryBuffer : public std::streambuf {
 public:
  MemoryBuffer(const uint8_t* data, size_t size) {
    char* p = reinterpret_cast<char*>(const_cast<uint8_t*>(data));
    setg(p, p, p + size);
  }

 protected:
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    const off_type base = dir == std::ios_base::beg ? 0 : dir == std::ios_base::cur ? gptr() - eback() : egptr() - eback();
    return seekpos(pos_type(base + off), std::ios_base::in);
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode) override {
    const off_type at = off_type(pos);
    if (at < 0 || at > egptr() - eback()) return pos_type(off_type(-1));
    setg(eback(), eback() + at, egptr());
    return pos;
  }
};

void quiet_gdcm() {
  static std::once_flag once;
  // GDCM's warnings print attribute values: nothing of a file goes to a log.
  std::call_once(once, [] {
    gdcm::Trace::SetDebug(false);
    gdcm::Trace::SetWarning(false);
    gdcm::Trace::SetError(false);
  });
}

std::string printable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

bool integral(double v) { return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15; }

// What plan and decode both derive from a file's image.
// Every use of GDCM holds this shared; a decoder's process is made with it
// held whole (decode/isolated).
std::shared_mutex g_gdcm;

// The attributes only, read by read_attributes; not gdcm::ImageReader,
// whose Read() decodes pixel data already (its lossy flag: fuzz_dicom
// faulted GDCM's RLE decoder there). Pixels are decoded in a process of
// their own (decode_dicom).
struct Reading {
  MemoryBuffer buffer;
  std::istream stream;
  // GDCM's filters hold the file by a counted pointer: it lives on the heap.
  gdcm::SmartPointer<gdcm::File> owner = new gdcm::File;
  gdcm::File& file = *owner;
  Reading(const uint8_t* data, size_t bytes) : buffer(data, bytes), stream(&buffer) { quiet_gdcm(); }
};

struct Values {
  SampleType stored = SampleType::kUint16;
  bool stored_wide = false;  // 32-bit integers or floats: float64 (or their float type)
  double slope = 1, intercept = 0;
  double lo = 0, hi = 0;     // the values the stored bits can give, after the modality LUT
  bool padding = false;
  double pad_lo = 0, pad_hi = 0;  // stored values that are padding
  bool invert = false;
  bool colour = false;
  uint32_t bytes = 2;        // stored bytes a sample
  bool is_signed = false, is_float = false;
  bool planar = false;  // colour samples RRR GGG BBB
  // BitsStored: the bits of a sample that are its value (the standard);
  // those above them (overlays, garbage) are masked off.
  unsigned bits = 16;
  // PALETTE COLOR: a stored value's R, G and B from the file's lookup
  // tables, as pydicom's apply_color_lut gives them: a value below the first
  // mapped takes the first entry, one past the last entry the last.
  bool palette = false;
  int64_t lut_first = 0;
  uint32_t lut_count = 3;  // R, G, B (and A where the file has an alpha table)
  bool palette_segmented = false;
  std::vector<uint16_t> lut[4];
  // BitsAllocated 1 (a binary segmentation): eight pixels a byte, the least
  // significant bit first, frames back to back, not byte-aligned (pydicom's
  // unpacking); each pixel's value is 0 or 1.
  bool one_bit = false;
};

SampleType narrowest(double lo, double hi) {
  if (lo >= 0 && hi <= 255) return SampleType::kUint8;
  if (lo >= -128 && hi <= 127) return SampleType::kInt8;
  if (lo >= 0 && hi <= 65535) return SampleType::kUint16;
  if (lo >= -32768 && hi <= 32767) return SampleType::kInt16;
  return SampleType::kFloat64;
}

// "Explicit VR Little Endian" and so on: GDCM's table of UIDs by name
// (TransferSyntax::GetTSString gives the UID again).
std::string transfer_syntax_name(const gdcm::TransferSyntax& ts) {
  gdcm::UIDs uid;
  if (!ts.GetString() || !uid.SetFromUID(ts.GetString()) || !uid.GetName()) return "";
  return printable(uid.GetName());
}

}  // namespace

bool is_dicom(const uint8_t* data, size_t size) { return size >= 132 && std::memcmp(data + 128, "DICM", 4) == 0; }

namespace {

// GDCM allocates each element's value at the length the file declares
// before reading it (fuzz_dicom: 1.3 GB from a 2 KB file). So the data
// elements' framing is walked first, sequences and items included, and
// every defined length must lie in the bytes that remain of what holds it:
// what GDCM then allocates is within the file.
constexpr const char* kDeflated = "1.2.840.10008.1.2.1.99";  // Deflated Explicit VR Little Endian

class ElementFraming {
 public:
  // inflated: the data set after the meta group is a deflated one's, inflated.
  ElementFraming(const uint8_t* data, size_t size, bool inflated = false) : d_(data), n_(size), inflated_(inflated) {}

  // The file meta group (explicit VR little endian, whatever follows): where
  // it ends and the transfer syntax it names. False: a length past the file.
  bool meta(size_t* end, std::string* syntax) {
    size_t at = 132;
    syntax->clear();
    in_meta_ = true;
    while (at + 8 <= n_ && u16(at) == 0x0002) {
      const size_t start = at;
      if (!element(at, n_, 0)) return false;
      if (u16(start + 2) == 0x0010 && at - start >= 8) {
        const size_t value = start + 8;
        syntax->assign(reinterpret_cast<const char*>(d_ + value), at - value);
      }
    }
    in_meta_ = false;
    while (!syntax->empty() && (syntax->back() == '\0' || syntax->back() == ' ')) syntax->pop_back();
    *end = at;
    return true;
  }

  // Empty: every length lies in the file. Else what does not.
  std::string check() {
    size_t at = 0;
    std::string syntax;
    if (!meta(&at, &syntax)) return why_;
    // Without one GDCM guesses the byte order and VR from the bytes, and
    // reads lengths this walk would not.
    if (syntax.empty()) return "its file meta information names no transfer syntax (0002,0010)";
    if (syntax == kDeflated && !inflated_) return "its data set is deflated and was not inflated";
    explicit_ = syntax != "1.2.840.10008.1.2";
    little_ = syntax != "1.2.840.10008.1.2.2";
    // Nor one that says implicit VR but reads as explicit: GDCM would switch.
    if (!explicit_ && n_ - at >= 8 && std::isupper(d_[at + 4]) && std::isupper(d_[at + 5]))
      return "its transfer syntax says implicit VR, but its elements read as explicit";
    while (at < n_)
      if (!element(at, n_, 0)) return why_;
    return "";
  }

 private:
  static constexpr uint32_t kUndefined = 0xffffffffu;
  uint32_t u16(size_t at) const { return little_ ? d_[at] | d_[at + 1] << 8 : d_[at] << 8 | d_[at + 1]; }
  uint32_t u32(size_t at) const { return little_ ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2); }
  bool bad(const std::string& why) {
    why_ = why;
    return false;
  }
  static std::string hex(uint32_t v) {
    char b[8];
    std::snprintf(b, sizeof b, "%04x", v);
    return b;
  }
  bool is_item(size_t at, size_t end, uint32_t elem) const {
    return end - at >= 8 && u16(at) == 0xfffe && u16(at + 2) == elem;
  }
  // One data element at `at` (before `end`), its value skipped or walked.
  bool element(size_t& at, size_t end, int depth) {
    if (depth > 16) return bad("sequences nest more than 16 deep");
    if (end - at < 8) return bad("an element header is cut short at byte " + std::to_string(at));
    const uint32_t group = u16(at), elem = u16(at + 2);
    // Group 2 after the file meta group is read as the data set's (as GDCM
    // does: fuzz_dicom, 1.9 GB from an implicit-VR element read as explicit).
    const bool meta = in_meta_;
    const bool saved_little = little_;
    if (meta) little_ = true;
    std::string vr;
    uint32_t value = 0;
    if (explicit_ || meta) {
      vr.assign(reinterpret_cast<const char*>(d_ + at + 4), 2);
      // GDCM reads an element whose VR is not one as implicit (a 4-byte
      // length) and allocates that: such a file is refused here.
      static const char* const kVrs[] = {"AE", "AS", "AT", "CS", "DA", "DS", "DT", "FD", "FL", "IS", "LO", "LT",
                                         "OB", "OD", "OF", "OL", "OV", "OW", "PN", "SH", "SL", "SQ", "SS", "ST",
                                         "SV", "TM", "UC", "UI", "UL", "UN", "UR", "US", "UT", "UV"};
      if (std::find(std::begin(kVrs), std::end(kVrs), vr) == std::end(kVrs))
        return bad("element (" + hex(group) + "," + hex(elem) + ") has no valid VR");
      const bool long_form = vr == "OB" || vr == "OD" || vr == "OF" || vr == "OL" || vr == "OV" || vr == "OW" ||
                             vr == "SQ" || vr == "SV" || vr == "UC" || vr == "UN" || vr == "UR" || vr == "UT" ||
                             vr == "UV";
      if (long_form) {
        if (end - at < 12) return bad("an element header is cut short at byte " + std::to_string(at));
        value = u32(at + 8);
        at += 12;
      } else {
        value = u16(at + 6);
        at += 8;
      }
    } else {
      value = u32(at + 4);
      at += 8;
    }
    little_ = saved_little;
    const bool pixels = group == 0x7fe0 && elem == 0x0010;
    if (value == kUndefined) {
      // As GDCM reads it: pixel data's fragments holding bytes (and one
      // private element's, 7fe1,1060 OB), a sequence's items holding
      // elements, and any other element's items holding implicit-VR
      // elements (a UN sequence, as CP-246 writes it).
      const bool fragments = vr != "SQ" && (pixels || (group == 0x7fe1 && elem == 0x1060 && vr == "OB"));
      if (fragments || vr == "SQ" || !explicit_) return items(at, end, depth + 1, fragments, /*until_delimiter=*/true);
      explicit_ = false;
      const bool ok = items(at, end, depth + 1, false, /*until_delimiter=*/true);
      explicit_ = true;
      return ok;
    }
    if (value > end - at)
      return bad("element (" + hex(group) + "," + hex(elem) + ") declares " + std::to_string(value) + " bytes where " +
                 std::to_string(end - at) + " remain");
    const size_t stop = at + value;
    // A sequence of defined length: its items walked within it. Implicit
    // VR names no SQ: a value that starts as an item is taken for one.
    if (vr == "SQ" || (!explicit_ && !pixels && is_item(at, stop, 0xe000))) {
      if (!items(at, stop, depth + 1, false, false)) return false;
    }
    at = stop;
    return true;
  }
  // Items from `at`: to `end`, or to the sequence delimiter.
  bool items(size_t& at, size_t end, int depth, bool fragments, bool until_delimiter) {
    while (at < end) {
      if (end - at < 8) return bad("an item header is cut short at byte " + std::to_string(at));
      if (is_item(at, end, 0xe0dd)) {
        // GDCM reads what a fragments' delimiter declares as a fragment, and
        // allocates it first (fuzz_dicom in CI: past 96 MB from 4 KB).
        if (fragments && u32(at + 4) != 0)
          return bad("pixel data's sequence delimiter declares " + std::to_string(u32(at + 4)) + " bytes (a delimiter has none)");
        at += 8;
        if (until_delimiter) return true;
        continue;
      }
      if (!is_item(at, end, 0xe000)) return bad("a sequence holds something other than items at byte " + std::to_string(at));
      const uint32_t length = u32(at + 4);
      at += 8;
      if (length == kUndefined) {
        if (fragments) return bad("a pixel data fragment of undefined length");
        while (!is_item(at, end, 0xe00d)) {
          if (at >= end) return bad("an item of undefined length has no end");
          if (!element(at, end, depth)) return false;
        }
        at += 8;
        continue;
      }
      if (length > end - at)
        return bad("an item declares " + std::to_string(length) + " bytes where " + std::to_string(end - at) + " remain");
      const size_t stop = at + length;
      if (!fragments)
        while (at < stop)
          if (!element(at, stop, depth)) return false;
      at = stop;
    }
    return until_delimiter ? bad("a sequence of undefined length has no end") : true;
  }
  const uint8_t* d_;
  size_t n_;
  bool inflated_ = false;
  bool explicit_ = true, little_ = true, in_meta_ = false;
  std::string why_;
};

// A segmented palette table (PS3.3 C.7.9.2) expanded as pydicom's
// _expand_segmented_lut and GDCM expand it: discrete segments' entries as
// they are; linear ones from the entry before to y1 as numpy's
// around(linspace(y0 + step, y1, n)) (step (y1 - y0) / n, halves to even);
// indirect ones replaying `count` segments from an offset counted in
// entries. Untrusted: past `entries` entries, a segment running past its
// table, indirection deeper than kMaxIndirection or more than
// kMaxSegments segments in all (an indirect segment may point at itself)
// are refused.
class SegmentedTable {
 public:
  SegmentedTable(const std::vector<uint16_t>& data, bool eight_bit, uint64_t entries)
      : d_(data), eight_bit_(eight_bit), entries_(entries) {}

  std::vector<uint16_t> expand() {
    std::vector<uint16_t> out;
    run(0, 0, false, 0, 0, out);
    return out;
  }

 private:
  static constexpr int kMaxIndirection = 4;
  static constexpr uint64_t kMaxSegments = uint64_t{1} << 20;

  [[noreturn]] static void bad(const std::string& why) {
    invalid_data("DICOM: a segmented palette table " + why);
  }
  uint16_t at(uint64_t i) const {
    if (i >= d_.size()) bad("has a segment running past its end");
    return d_[i];
  }
  void put(std::vector<uint16_t>& out, uint16_t v) {
    if (out.size() >= entries_) bad("expands past its descriptor's " + std::to_string(entries_) + " entries");
    out.push_back(v);
  }

  // Segments from `offset` (all, or `count` of them) appended to out; the
  // entry before them is `last` where `has_last` (an indirect segment's).
  void run(uint64_t offset, uint64_t count, bool has_last, uint16_t last, int depth, std::vector<uint16_t>& out) {
    const size_t first = out.size();
    uint64_t read = 0;
    while (offset + 1 < d_.size()) {
      if (++segments_ > kMaxSegments) bad("has more than " + std::to_string(kMaxSegments) + " segments");
      const uint16_t opcode = d_[offset], length = d_[offset + 1];
      offset += 2;
      if (opcode == 0) {
        for (uint64_t i = 0; i < length; ++i) put(out, at(offset + i));
        offset += length;
      } else if (opcode == 1) {
        // pydicom takes a nested replay's first y0 from the entry before it
        // only where that is not 0.
        if (out.size() == first && !(has_last && last != 0)) bad("begins with a linear segment");
        if (length == 0) bad("has a linear segment of no entries");
        const double y0 = out.size() > first ? out.back() : last, y1 = at(offset);
        offset += 1;
        if (y0 == y1) {
          for (uint64_t i = 0; i < length; ++i) put(out, static_cast<uint16_t>(y1));
        } else {
          const double step = (y1 - y0) / length, start = y0 + step;
          const double inner = length > 1 ? (y1 - start) / (length - 1) : 0;
          for (uint64_t i = 0; i < length; ++i) {
            double y = static_cast<double>(i) * inner;
            asm("" : "+x"(y));  // numpy's order: the product, then the sum, each rounded
            y = i + 1 == length && length > 1 ? y1 : y + start;
            put(out, static_cast<uint16_t>(std::nearbyint(y)));
          }
        }
      } else if (opcode == 2) {
        if (out.size() == first) bad("begins with an indirect segment");
        if (depth >= kMaxIndirection) bad("nests indirect segments more than " + std::to_string(kMaxIndirection) + " deep");
        uint64_t target = 0;
        if (eight_bit_) {
          target = uint64_t{at(offset)} | uint64_t{at(offset + 1)} << 8 | uint64_t{at(offset + 2)} << 16 |
                   uint64_t{at(offset + 3)} << 24;
          offset += 4;
        } else {
          target = uint64_t{at(offset)} | uint64_t{at(offset + 1)} << 16;
          offset += 2;
        }
        const uint16_t before = out.back();
        if (length > 0) run(target, length, true, before, depth + 1, out);
      } else {
        bad("has a segment of unknown type " + std::to_string(opcode));
      }
      if (++read == count) return;
    }
  }

  const std::vector<uint16_t>& d_;
  bool eight_bit_;
  uint64_t entries_;
  uint64_t segments_ = 0;
};

// PALETTE COLOR's tables, as pydicom reads them: the red descriptor
// (0028,1101: entries, 0 for 65536; the first stored value mapped; bits an
// entry) for all, and each table's entries 8 or 16 bits by its data's
// length (8-bit entries come packed, or one a 16-bit word); or segmented
// tables (0028,1221-1224), their entries of the descriptor's bits. An
// alpha table (0028,1204 or 1224) makes a fourth channel. The values' type
// is the entries'. Big-endian files are refused by name. `descriptor` is
// 0028,1101 as text.
SampleType read_palette(const gdcm::File& file, const std::string& descriptor, Values* v) {
  const gdcm::DataSet& ds = file.GetDataSet();
  if (v->is_float || v->bytes > 2)
    invalid_data("DICOM: PALETTE COLOR indices of " + std::to_string(8 * v->bytes) + " bits (8 or 16 are read)");
  if (file.GetHeader().GetDataSetTransferSyntax() == gdcm::TransferSyntax::ExplicitVRBigEndian)
    invalid_data("DICOM: a big-endian PALETTE COLOR image is not read");
  const bool segmented = !ds.FindDataElement(gdcm::Tag(0x0028, 0x1201)) && ds.FindDataElement(gdcm::Tag(0x0028, 0x1221));
  const uint16_t first_tag = segmented ? 0x1221 : 0x1201;
  if (!ds.FindDataElement(gdcm::Tag(0x0028, first_tag)))
    invalid_data("DICOM: a PALETTE COLOR image without its lookup table data (0028,1201-1203 or 1221-1223)");
  long long d[3];
  const char* p = descriptor.c_str();
  for (long long& x : d) {
    char* end = nullptr;
    x = std::strtoll(p, &end, 10);
    if (end == p) invalid_data("DICOM: its palette descriptor (0028,1101) is not three numbers");
    p = end;
    while (*p == '\\' || *p == ' ') ++p;
  }
  if (d[0] < 0 || d[0] > 65535 || d[1] < -32768 || d[1] > 65535)
    invalid_data("DICOM: its palette descriptor (0028,1101) is out of range");
  if (segmented && d[2] != 8 && d[2] != 16)
    invalid_data("DICOM: segmented palette tables of " + std::to_string(d[2]) + "-bit entries (8 or 16 are read)");
  const uint64_t entries = d[0] == 0 ? 65536 : static_cast<uint64_t>(d[0]);
  // "US or SS": a negative first value read as US is a signed image's.
  v->lut_first = v->is_signed && d[1] > 32767 ? d[1] - 65536 : d[1];
  v->lut_count = ds.FindDataElement(gdcm::Tag(0x0028, static_cast<uint16_t>(first_tag + 3))) ? 4 : 3;
  uint64_t entry_bytes = segmented ? static_cast<uint64_t>(d[2] / 8) : 0;
  for (uint16_t c = 0; c < v->lut_count; ++c) {
    const gdcm::Tag tag(0x0028, static_cast<uint16_t>(first_tag + c));
    const gdcm::ByteValue* bv = ds.FindDataElement(tag) ? ds.GetDataElement(tag).GetByteValue() : nullptr;
    if (!bv) {
      char name[16];
      std::snprintf(name, sizeof name, "(0028,%04x)", first_tag + c);
      invalid_data(std::string("DICOM: a PALETTE COLOR image without its lookup table data ") + name);
    }
    const uint64_t length = bv->GetLength();
    const auto* q = reinterpret_cast<const uint8_t*>(bv->GetPointer());
    if (segmented) {
      std::vector<uint16_t> words(length / entry_bytes);
      for (uint64_t i = 0; i < words.size(); ++i)
        words[i] = entry_bytes == 1 ? q[i] : static_cast<uint16_t>(q[2 * i] | q[2 * i + 1] << 8);
      v->lut[c] = SegmentedTable(words, entry_bytes == 1, entries).expand();
      if (v->lut[c].size() != entries)
        invalid_data("DICOM: a segmented palette table expands to " + std::to_string(v->lut[c].size()) +
                     " entries where its descriptor says " + std::to_string(entries));
      continue;
    }
    const uint64_t bytes = length == entries ? 1 : length == 2 * entries ? 2 : 0;
    if (bytes == 0 || (entry_bytes && bytes != entry_bytes))
      invalid_data("DICOM: a palette table of " + std::to_string(length) + " bytes for " + std::to_string(entries) +
                   " entries (8 or 16 bits an entry, every table alike)");
    entry_bytes = bytes;
    v->lut[c].resize(entries);
    for (uint64_t i = 0; i < entries; ++i)
      v->lut[c][i] = bytes == 1 ? q[i] : static_cast<uint16_t>(q[2 * i] | q[2 * i + 1] << 8);
  }
  v->palette = true;
  v->palette_segmented = segmented;
  return entry_bytes == 1 ? SampleType::kUint8 : SampleType::kUint16;
}

// gdcm::Reader::Read, where a data set does not read as its transfer syntax
// says, reads it again as one broken encoding after another (CP-246 UN,
// 16-bit VRs, explicit and implicit mixed), each allocating the lengths it
// then finds: lengths ElementFraming never saw (fuzz_dicom: 100 MB from a
// 4 KB file). So the file is read once, as it says, and refused otherwise.
void read_attributes(Reading& r) {
  gdcm::File& file = r.file;
  std::istream& is = r.stream;
  bool read = false;
  try {
    file.GetHeader().GetPreamble().Read(is);
    try {
      file.GetHeader().Read(is);
    } catch (const std::exception&) {
      // A file meta group without its group length (0002,0000) first, as
      // gdcm::Reader reads one (ElementFraming walked it as explicit VR).
      is.clear();
      is.seekg(132);
      file.GetHeader().Clear();
      file.GetHeader().ReadCompat(is);
    }
    const gdcm::TransferSyntax& ts = file.GetHeader().GetDataSetTransferSyntax();
    gdcm::DataSet& ds = file.GetDataSet();
    if (ts.GetSwapCode() == gdcm::SwapCode::BigEndian) {
      if (ts.GetNegociatedType() == gdcm::TransferSyntax::Explicit) {
        ds.Read<gdcm::ExplicitDataElement, gdcm::SwapperDoOp>(is);
        read = true;
      }
    } else if (ts.GetNegociatedType() == gdcm::TransferSyntax::Implicit) {
      ds.Read<gdcm::ImplicitDataElement, gdcm::SwapperNoOp>(is);
      read = true;
    } else if (ts.IsValid()) {
      // A deflated data set is read inflated (dicom_bytes).
      ds.Read<gdcm::ExplicitDataElement, gdcm::SwapperNoOp>(is);
      read = true;
    }
  } catch (...) {
    read = false;
  }
  if (!read) invalid_data("DICOM: GDCM cannot read its attributes as its transfer syntax says (damaged)");
}

// A value's text as the file holds it (UI, IS, DS, LO), without its padding.
std::string text_of(const gdcm::DataSet& ds, uint16_t group, uint16_t element) {
  const gdcm::Tag tag(group, element);
  if (!ds.FindDataElement(tag)) return "";
  const gdcm::ByteValue* bv = ds.GetDataElement(tag).GetByteValue();
  if (!bv || !bv->GetPointer()) return "";
  std::string s(bv->GetPointer(), bv->GetLength());
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  const size_t start = s.find_first_not_of(' ');
  return start == std::string::npos ? "" : s.substr(start);
}

// A US value (little endian: segmentations are read little endian only).
bool us_of(const gdcm::DataSet& ds, uint16_t group, uint16_t element, uint32_t* out) {
  const gdcm::Tag tag(group, element);
  if (!ds.FindDataElement(tag)) return false;
  const gdcm::ByteValue* bv = ds.GetDataElement(tag).GetByteValue();
  if (!bv || bv->GetLength() < 2) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(bv->GetPointer());
  *out = static_cast<uint32_t>(p[0] | p[1] << 8);
  return true;
}

// n numbers of a multi-valued DS (1.5\-2\3); false where fewer, or not finite.
bool numbers_of(const std::string& text, double* out, int n) {
  const char* p = text.c_str();
  for (int i = 0; i < n; ++i) {
    char* end = nullptr;
    out[i] = std::strtod(p, &end);
    if (end == p || !std::isfinite(out[i])) return false;
    p = end;
    while (*p == '\\' || *p == ' ') ++p;
  }
  return true;
}

// A GDCM call inside gdcm_guarded whose failed assertion must not jump past
// the caller's frames (what they own would leak): it ends here, as an error
// that unwinds them.
template <class Fn>
void gdcm_call(Fn&& fn) {
  sigjmp_buf env;
  sigjmp_buf* const outer = t_gdcm_guard;
  if (sigsetjmp(env, 0) != 0) {
    t_gdcm_guard = outer;
    invalid_data(std::string("DICOM: GDCM cannot read it (its check \"") + t_gdcm_assertion + "\" failed)");
  }
  t_gdcm_guard = &env;
  try {
    fn();
  } catch (...) {
    t_gdcm_guard = outer;
    throw;
  }
  t_gdcm_guard = outer;
}

// Each item of a sequence (at most `most`), its nested data set handed to
// fn while the sequence is held (GetValueAsSQ may parse it anew, and
// GDCM's checks may fail on a damaged one).
template <class Fn>
void each_item(const gdcm::DataSet& ds, uint16_t group, uint16_t element, uint64_t most, Fn&& fn) {
  const gdcm::Tag tag(group, element);
  if (!ds.FindDataElement(tag)) return;
  gdcm::SmartPointer<gdcm::SequenceOfItems> sq;
  gdcm_call([&] { sq = ds.GetDataElement(tag).GetValueAsSQ(); });
  if (!sq) return;
  const uint64_t n = std::min<uint64_t>(sq->GetNumberOfItems(), most);
  for (uint64_t i = 0; i < n; ++i) fn(i, sq->GetItem(i + 1).GetNestedDataSet());
}

constexpr const char* kSegmentationStorage = "1.2.840.10008.5.1.4.1.1.66.4";
constexpr uint64_t kListedSegments = 32;  // named in the Segments fact, the rest counted

// A multi-frame file's per-frame functional groups (5200,9230): each
// frame's position and, in a segmentation, its segment and source image;
// its segments (0062,0002). Only these attributes are read.
void read_frames(const gdcm::DataSet& ds, DicomImage* out) {
  out->sop_instance = text_of(ds, 0x0008, 0x0018);
  out->segmentation = text_of(ds, 0x0008, 0x0016) == kSegmentationStorage;
  if (out->segmentation) {
    out->fractional = text_of(ds, 0x0062, 0x0001) == "FRACTIONAL";
    // The segments' numbers and labels (SegmentLabel: what a segment is, no
    // one's name) are facts: the label volume's labels are the numbers.
    std::string listed;
    each_item(ds, 0x0062, 0x0002, uint64_t{1} << 16, [&](uint64_t i, const gdcm::DataSet& item) {
      uint32_t number = 0;
      if (!us_of(item, 0x0062, 0x0004, &number)) return;
      out->segments.push_back(number);
      if (i < kListedSegments)
        listed += (listed.empty() ? "" : ", ") + std::to_string(number) + " " +
                  printable(text_of(item, 0x0062, 0x0005).substr(0, 64));
      else if (i == kListedSegments)
        listed += ", ...";
    });
    std::sort(out->segments.begin(), out->segments.end());
    out->keywords.emplace_back("SegmentationType", out->fractional ? "FRACTIONAL" : "BINARY");
    if (!listed.empty()) out->keywords.emplace_back("Segments", listed);
  }
  if (!ds.FindDataElement(gdcm::Tag(0x5200, 0x9230))) return;
  std::vector<DicomFramePlace> places;
  each_item(ds, 0x5200, 0x9230, out->frames, [&](uint64_t, const gdcm::DataSet& frame) {
    DicomFramePlace p;
    each_item(frame, 0x0020, 0x9113, 1, [&](uint64_t, const gdcm::DataSet& position) {
      p.has_position = numbers_of(text_of(position, 0x0020, 0x0032), p.position, 3);
    });
    each_item(frame, 0x0062, 0x000a, 1, [&](uint64_t, const gdcm::DataSet& segment) {
      us_of(segment, 0x0062, 0x000b, &p.segment);
    });
    each_item(frame, 0x0008, 0x9124, 1, [&](uint64_t, const gdcm::DataSet& derivation) {
      each_item(derivation, 0x0008, 0x2112, 1, [&](uint64_t, const gdcm::DataSet& source) {
        p.source = text_of(source, 0x0008, 0x1155);
        const std::string frame_number = text_of(source, 0x0008, 0x1160);
        char* end = nullptr;
        const unsigned long long n = std::strtoull(frame_number.c_str(), &end, 10);
        if (!frame_number.empty() && end != frame_number.c_str()) p.source_frame = n;
      });
    });
    places.push_back(std::move(p));
  });
  if (places.size() == out->frames) out->frame_places = std::move(places);
}

// The image's layout and values, from its attributes alone (no pixel decoded).
DicomImage describe(Reading& r, bool stored_values, uint64_t max_planes, uint64_t max_pixels, Values* v) {
  read_attributes(r);
  const gdcm::File& file0 = r.file;
  if (!file0.GetDataSet().FindDataElement(gdcm::Tag(0x7fe0, 0x0010))) invalid_data("DICOM: no pixel data");
  const std::vector<unsigned int> dims = gdcm::ImageHelper::GetDimensionsValue(file0);
  const gdcm::PixelFormat pf = gdcm::ImageHelper::GetPixelFormatValue(file0);
  DicomImage out;
  out.width = dims.size() > 0 ? dims[0] : 0;
  out.height = dims.size() > 1 ? dims[1] : 0;
  out.frames = dims.size() > 2 && dims[2] > 0 ? dims[2] : 1;
  if (out.width == 0 || out.height == 0 || out.frames == 0) invalid_data("DICOM: the image has no pixels (Rows, Columns or frames 0)");
  if (out.frames > max_planes)
    fail(ErrorCode::kResourceExhausted, "DICOM: " + std::to_string(out.frames) + " frames, past the limit of " +
                                            std::to_string(max_planes) + " (--max-planes)");
  if (out.height > max_pixels / out.width)
    fail(ErrorCode::kResourceExhausted, "DICOM: frames of " + std::to_string(out.width) + "x" +
                                            std::to_string(out.height) + " pixels, over the limit of " +
                                            std::to_string(max_pixels));
  const unsigned spp = pf.GetSamplesPerPixel();
  if (spp != 1 && spp != 3) invalid_data("DICOM: " + std::to_string(spp) + " samples a pixel (1 or 3 are read)");
  out.channels = spp;
  const gdcm::PhotometricInterpretation pi = gdcm::ImageHelper::GetPhotometricInterpretationValue(file0);
  v->planar = spp > 1 && gdcm::ImageHelper::GetPlanarConfigurationValue(file0) == 1;
  const std::string pi_name = printable(gdcm::PhotometricInterpretation::GetPIString(pi));
  const bool palette = pi == gdcm::PhotometricInterpretation::PALETTE_COLOR;
  if (palette && spp != 1) invalid_data("DICOM: a PALETTE COLOR image of " + std::to_string(spp) + " samples a pixel (1 is read)");
  v->bytes = pf.GetBitsAllocated() <= 8 ? 1 : pf.GetBitsAllocated() <= 16 ? 2 : pf.GetBitsAllocated() <= 32 ? 4 : 8;
  if (pf.GetBitsAllocated() == 1) {
    const gdcm::TransferSyntax syntax = file0.GetHeader().GetDataSetTransferSyntax();
    if (spp != 1) invalid_data("DICOM: 1-bit pixel data of " + std::to_string(spp) + " samples a pixel (1 is read)");
    if (syntax.IsEncapsulated() || syntax == gdcm::TransferSyntax::ExplicitVRBigEndian)
      invalid_data("DICOM: 1-bit pixel data is read uncompressed and little endian only");
    v->one_bit = true;
  }
  out.bits_stored = pf.GetBitsStored();
  v->is_signed = pf.GetPixelRepresentation() == 1;
  const gdcm::PixelFormat::ScalarType st = pf.GetScalarType();
  v->is_float = st == gdcm::PixelFormat::FLOAT32 || st == gdcm::PixelFormat::FLOAT64 || st == gdcm::PixelFormat::FLOAT16;
  if (st == gdcm::PixelFormat::FLOAT16) invalid_data("DICOM: 16-bit float pixel data is not read");
  switch (v->bytes) {
    case 1: v->stored = v->is_signed ? SampleType::kInt8 : SampleType::kUint8; break;
    case 2: v->stored = v->is_signed ? SampleType::kInt16 : SampleType::kUint16; break;
    case 4: v->stored = v->is_float ? SampleType::kFloat32 : SampleType::kFloat64, v->stored_wide = !v->is_float; break;
    default: v->stored = SampleType::kFloat64, v->stored_wide = !v->is_float; break;
  }
  v->colour = spp == 3;
  const gdcm::TransferSyntax ts = file0.GetHeader().GetDataSetTransferSyntax();
  const bool jpeg_lossy = ts == gdcm::TransferSyntax::JPEGBaselineProcess1 || ts == gdcm::TransferSyntax::JPEGExtendedProcess2_4;
  if (v->colour) {
    const bool ybr = pi_name.rfind("YBR", 0) == 0 && !jpeg_lossy;
    out.channel_names = ybr ? std::vector<std::string>{"Y", "Cb", "Cr"} : std::vector<std::string>{"R", "G", "B"};
  }
  // The modality LUT, padding and MONOCHROME1: gray images' values.
  const unsigned b = std::max<unsigned>(1, std::min<unsigned>(out.bits_stored ? out.bits_stored : pf.GetBitsAllocated(), 32));
  v->bits = b;
  const double smin = v->is_signed ? -std::ldexp(1.0, b - 1) : 0;
  const double smax = v->is_signed ? std::ldexp(1.0, b - 1) - 1 : std::ldexp(1.0, b) - 1;
  gdcm::StringFilter sf;
  sf.SetFile(r.file);
  auto attribute = [&](uint16_t group, uint16_t element) {
    const gdcm::Tag tag(group, element);
    if (!r.file.GetDataSet().FindDataElement(tag)) return std::string();
    return printable(sf.ToString(tag));
  };
  {
    // Geometry, to order a series' slices.
    out.series_uid = attribute(0x0020, 0x000e);
    out.has_position = numbers_of(attribute(0x0020, 0x0032), out.position, 3);
    out.has_orientation = numbers_of(attribute(0x0020, 0x0037), out.orientation, 6);
    const std::string instance = attribute(0x0020, 0x0013);
    char* end = nullptr;
    const long long n = std::strtoll(instance.c_str(), &end, 10);
    out.has_instance = !instance.empty() && end != instance.c_str();
    out.instance = n;
  }
  SampleType type = v->stored;
  if (palette && !stored_values) {
    type = read_palette(r.file, attribute(0x0028, 0x1101), v);
    out.bits_stored = type == SampleType::kUint8 ? 8 : 16;  // the values' bits are the tables' entries'
    out.channels = v->lut_count;
    out.channel_names = {"R", "G", "B"};
    if (v->lut_count == 4) out.channel_names.push_back("A");
  } else if (!stored_values && !v->colour) {
    const std::vector<double> rescale = gdcm::ImageHelper::GetRescaleInterceptSlopeValue(file0);
    v->intercept = rescale.size() > 0 ? rescale[0] : 0;
    v->slope = rescale.size() > 1 ? rescale[1] : 1;
    if (!std::isfinite(v->slope) || !std::isfinite(v->intercept) || v->slope == 0) v->slope = 1, v->intercept = 0;
    const double a = v->slope * smin + v->intercept, c = v->slope * smax + v->intercept;
    v->lo = std::min(a, c), v->hi = std::max(a, c);
    const bool identity = v->slope == 1 && v->intercept == 0;
    if (v->is_float) type = identity ? v->stored : SampleType::kFloat64;
    else if (integral(v->slope) && integral(v->intercept)) type = identity && !v->stored_wide ? v->stored : narrowest(v->lo, v->hi);
    else type = SampleType::kFloat64;
    const std::string pad = attribute(0x0028, 0x0120), limit = attribute(0x0028, 0x0121);
    if (!pad.empty() && !v->is_float) {
      v->padding = true;
      v->pad_lo = std::strtod(pad.c_str(), nullptr);
      v->pad_hi = limit.empty() ? v->pad_lo : std::strtod(limit.c_str(), nullptr);
      if (v->pad_hi < v->pad_lo) std::swap(v->pad_lo, v->pad_hi);
      // Missing pixels are NaN: float32 where it holds every value exactly.
      type = type != SampleType::kFloat64 && std::fabs(v->lo) < (1 << 24) && std::fabs(v->hi) < (1 << 24)
                 ? SampleType::kFloat32 : SampleType::kFloat64;
    }
    v->invert = pi == gdcm::PhotometricInterpretation::MONOCHROME1;
  }
  out.type = type;
  out.decoded_bytes = v->one_bit ? (out.width * out.height * out.frames + 7) / 8 : out.width * out.height * out.frames * spp * v->bytes;
  // GDCM reads a file cut short as if its last element were whole (zeros
  // for what is missing): ElementFraming found every length in the file.
  // It decodes fewer frames than declared as zeros too: the pixel data
  // must hold every frame declared.
  const gdcm::DataSet& ds = r.file.GetDataSet();
  const gdcm::DataElement& pixel_data = ds.GetDataElement(gdcm::Tag(0x7fe0, 0x0010));
  if (const gdcm::ByteValue* bv = pixel_data.GetByteValue()) {
    if (uint64_t{bv->GetLength()} < out.decoded_bytes)
      invalid_data("DICOM: its pixel data holds " + std::to_string(bv->GetLength()) + " bytes, but " +
                   std::to_string(out.frames) + " frames of " + std::to_string(out.width) + "x" +
                   std::to_string(out.height) + " need " + std::to_string(out.decoded_bytes));
  } else if (const gdcm::SequenceOfFragments* fragments = pixel_data.GetSequenceOfFragments()) {
    if (fragments->GetNumberOfFragments() < out.frames)
      invalid_data("DICOM: " + std::to_string(out.frames) + " frames declared, but its compressed pixel data has " +
                   std::to_string(fragments->GetNumberOfFragments()) + " fragments");
  } else {
    invalid_data("DICOM: no pixel data");
  }
  auto keep = [&](const char* key, std::string value) {
    if (!value.empty()) out.keywords.emplace_back(key, std::move(value));
  };
  // The allowlist: nothing that names or dates a patient.
  keep("Modality", attribute(0x0008, 0x0060));
  keep("BodyPartExamined", attribute(0x0018, 0x0015));
  keep("SeriesDescription", attribute(0x0008, 0x103e));
  keep("PixelSpacing", attribute(0x0028, 0x0030));
  keep("SliceThickness", attribute(0x0018, 0x0050));
  keep("PhotometricInterpretation", pi_name);
  keep("TransferSyntaxUID", printable(ts.GetString() ? ts.GetString() : ""));
  keep("TransferSyntax", transfer_syntax_name(ts));
  keep("BitsStored", std::to_string(pf.GetBitsStored()));
  if (!stored_values && !v->colour && !v->palette) {
    if (v->slope != 1 || v->intercept != 0) keep("RescaleSlope", number(v->slope)), keep("RescaleIntercept", number(v->intercept));
    keep("values", std::string(v->slope != 1 || v->intercept != 0 ? "modality (rescaled)" : "modality (as stored)") +
                       (v->invert ? ", MONOCHROME1 inverted (lo + hi - value)" : "") +
                       (v->padding ? ", padding missing" : ""));
  } else if (v->palette) {
    keep("values", std::string("PALETTE COLOR applied (") + (v->lut_count == 4 ? "R, G, B, A" : "R, G, B") + " from its " +
                       (v->palette_segmented ? "segmented " : "") + "lookup tables)");
  } else if (stored_values) {
    keep("values", "stored");
  }
  // Last: GDCM's helpers above may fail a check (gdcm::Attribute's), which
  // jumps past this frame, and what read_frames adds to `out` would leak.
  read_frames(r.file.GetDataSet(), &out);
  return out;
}

template <class S>
void convert_gray(const uint8_t* from, uint64_t n, const Values& v, SampleType to_type, uint8_t* to) {
  const bool identity = v.slope == 1 && v.intercept == 0 && !v.invert && !v.padding;
  for (uint64_t i = 0; i < n; ++i) {
    S s;
    std::memcpy(&s, from + i * sizeof(S), sizeof(S));
    double x = static_cast<double>(s);
    if constexpr (std::is_integral_v<S>) {
      if (v.bits < 8 * sizeof(S)) {
        // Only BitsStored bits are the value (sign-extended where signed): a
        // sample with higher bits set would otherwise pass the type planned.
        const uint64_t u = static_cast<uint64_t>(static_cast<std::make_unsigned_t<S>>(s)) & ((uint64_t{1} << v.bits) - 1);
        const bool negative = v.is_signed && (u >> (v.bits - 1)) != 0;
        x = negative ? static_cast<double>(static_cast<int64_t>(u) - (int64_t{1} << v.bits)) : static_cast<double>(u);
      }
    }
    const bool missing = v.padding && x >= v.pad_lo && x <= v.pad_hi;
    if (!identity) {
      double product = x * v.slope;
      asm("" : "+x"(product));  // pydicom's order: the product, then the sum, each rounded
      x = product + v.intercept;
      if (v.invert) x = v.lo + v.hi - x;
    }
    switch (to_type) {
      case SampleType::kUint8: to[i] = static_cast<uint8_t>(x); break;
      case SampleType::kInt8: { const int8_t t = static_cast<int8_t>(x); std::memcpy(to + i, &t, 1); break; }
      case SampleType::kUint16: { const uint16_t t = static_cast<uint16_t>(x); std::memcpy(to + 2 * i, &t, 2); break; }
      case SampleType::kInt16: { const int16_t t = static_cast<int16_t>(x); std::memcpy(to + 2 * i, &t, 2); break; }
      case SampleType::kFloat32: {
        const float t = missing ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(x);
        std::memcpy(to + 4 * i, &t, 4);
        break;
      }
      case SampleType::kFloat64: {
        const double t = missing ? std::numeric_limits<double>::quiet_NaN() : x;
        std::memcpy(to + 8 * i, &t, 8);
        break;
      }
    }
  }
}

void convert(const uint8_t* from, uint64_t n, const Values& v, SampleType to_type, uint8_t* to) {
  if (!v.is_float && !v.stored_wide && v.stored == to_type && v.slope == 1 && v.intercept == 0 && !v.invert && !v.padding) {
    if (v.bits >= 8 * v.bytes) {
      std::memcpy(to, from, n * v.bytes);
      return;
    }
    if (v.bytes == 2) {
      // BitsStored of 16: masked (and sign-extended) in integers, as convert_gray does in doubles.
      const uint16_t mask = static_cast<uint16_t>((1u << v.bits) - 1), sign = static_cast<uint16_t>(1u << (v.bits - 1));
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t u;
        std::memcpy(&u, from + 2 * i, 2);
        u &= mask;
        if (v.is_signed && (u & sign)) u |= static_cast<uint16_t>(~mask);
        std::memcpy(to + 2 * i, &u, 2);
      }
      return;
    }
  }
  if (v.is_float) {
    if (v.bytes == 4) return convert_gray<float>(from, n, v, to_type, to);
    return convert_gray<double>(from, n, v, to_type, to);
  }
  switch (v.bytes) {
    case 1: return v.is_signed ? convert_gray<int8_t>(from, n, v, to_type, to) : convert_gray<uint8_t>(from, n, v, to_type, to);
    case 2: return v.is_signed ? convert_gray<int16_t>(from, n, v, to_type, to) : convert_gray<uint16_t>(from, n, v, to_type, to);
    case 4: return v.is_signed ? convert_gray<int32_t>(from, n, v, to_type, to) : convert_gray<uint32_t>(from, n, v, to_type, to);
    default: return v.is_signed ? convert_gray<int64_t>(from, n, v, to_type, to) : convert_gray<uint64_t>(from, n, v, to_type, to);
  }
}

// A row of stored values through the palette: R, G, B (and A) a pixel.
void apply_palette(const uint8_t* from, uint64_t n, const Values& v, SampleType to_type, uint8_t* to) {
  const int64_t last = static_cast<int64_t>(v.lut[0].size()) - 1;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t u = v.bytes == 1 ? from[i] : static_cast<uint64_t>(from[2 * i] | from[2 * i + 1] << 8);
    if (v.bits < 8 * v.bytes) u &= (uint64_t{1} << v.bits) - 1;
    const bool negative = v.is_signed && (u >> (v.bits - 1)) != 0;
    const int64_t value = negative ? static_cast<int64_t>(u) - (int64_t{1} << v.bits) : static_cast<int64_t>(u);
    const size_t k = static_cast<size_t>(std::clamp<int64_t>(value - v.lut_first, 0, last));
    const uint32_t n_out = v.lut_count;
    for (uint32_t c = 0; c < n_out; ++c) {
      const uint16_t e = v.lut[c][k];
      if (to_type == SampleType::kUint8) to[n_out * i + c] = static_cast<uint8_t>(e);
      else std::memcpy(to + 2 * (n_out * i + c), &e, 2);
    }
  }
}

// A file's bytes as GDCM reads them: the file itself, or, where its data
// set is deflated (Deflated Explicit VR Little Endian), the preamble and
// meta group followed by the data set inflated (zlib, within max_inflated),
// as gdcm::Reader inflates it before reading.
struct DicomBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::vector<uint8_t> inflated;
};

DicomBytes dicom_bytes(const uint8_t* data, size_t size, uint64_t max_inflated) {
  DicomBytes out{data, size, {}};
  size_t end = 0;
  std::string syntax;
  if (!ElementFraming(data, size).meta(&end, &syntax) || syntax != kDeflated) return out;  // check() says what is wrong
  if (end + 2 > size) invalid_data("DICOM: its deflated data set is empty (truncated)");
  std::vector<uint8_t> set = inflate_raw(data + end, size - end, max_inflated, "DICOM (deflated data set)");
  out.inflated.reserve(end + set.size());
  out.inflated.assign(data, data + end);
  out.inflated.insert(out.inflated.end(), set.begin(), set.end());
  out.data = out.inflated.data();
  out.size = out.inflated.size();
  return out;
}

}  // namespace

DicomImage plan_dicom(const uint8_t* file, size_t file_size, bool stored_values, uint64_t max_planes,
                      uint64_t max_pixels, uint64_t max_inflated) {
  const DicomBytes bytes = dicom_bytes(file, file_size, max_inflated);
  const uint8_t* data = bytes.data;
  const size_t size = bytes.size;
  const std::string framing = ElementFraming(data, size, !bytes.inflated.empty()).check();
  if (!framing.empty()) invalid_data("DICOM: " + framing + " (truncated or corrupt)");
  std::shared_lock<std::shared_mutex> lock(g_gdcm);
  Reading r(data, size);
  Values v;
  DicomImage out;
  gdcm_guarded(size, [&] { out = describe(r, stored_values, max_planes, max_pixels, &v); });
  out.inflated_bytes = bytes.inflated.size();
  return out;
}

void decode_dicom(const uint8_t* file, size_t file_size, const DicomImage& planned, bool stored_values,
                  const std::vector<uint64_t>& frames, const std::function<bool()>& cancelled, const RowSink& sink) {
  const DicomBytes bytes = dicom_bytes(file, file_size, planned.inflated_bytes);
  if (bytes.inflated.size() != planned.inflated_bytes) fail(ErrorCode::kInternal, "DICOM: inflated otherwise than planned");
  const uint8_t* data = bytes.data;
  const size_t size = bytes.size;
  Values v;
  DicomImage image;
  // Uncompressed pixel data is the samples: taken from the attributes as
  // read, no codec, no process of its own.
  std::vector<uint8_t> native;
  bool is_native = false;
  {
    std::shared_lock<std::shared_mutex> lock(g_gdcm);
    Reading r(data, size);
    gdcm_guarded(size, [&] {
      image = describe(r, stored_values, uint64_t{1} << 40, uint64_t{1} << 62, &v);
      const gdcm::TransferSyntax ts = r.file.GetHeader().GetDataSetTransferSyntax();
      const gdcm::ByteValue* bv = r.file.GetDataSet().GetDataElement(gdcm::Tag(0x7fe0, 0x0010)).GetByteValue();
      if (bv && !ts.IsEncapsulated() && (ts == gdcm::TransferSyntax::ImplicitVRLittleEndian ||
                                        ts == gdcm::TransferSyntax::ExplicitVRLittleEndian ||
                                        ts == gdcm::TransferSyntax::DeflatedExplicitVRLittleEndian ||
                                        ts == gdcm::TransferSyntax::ExplicitVRBigEndian)) {
        is_native = true;
        // Its length was checked; GDCM has swapped a big-endian OW value as it read it.
        native.assign(bv->GetPointer(), bv->GetPointer() + image.decoded_bytes);
      }
    });
  }
  if (image.width != planned.width || image.height != planned.height || image.type != planned.type)
    fail(ErrorCode::kInternal, "DICOM: read otherwise than planned");
  // GDCM's codecs trust the compressed bytes: they run in a process of their own.
  const uint64_t expected = image.decoded_bytes;
  IsolatedOutput decoded;
  if (!is_native) decoded = run_isolated(
      expected, g_gdcm,
      [&](uint8_t* out) -> std::string {
        MemoryBuffer buffer(data, size);
        std::istream stream(&buffer);
        gdcm::ImageReader reader;
        reader.SetStream(stream);
        if (!reader.Read()) return "GDCM cannot read it as an image";
        const gdcm::Image& im = reader.GetImage();
        if (im.GetBufferLength() != expected)
          return "GDCM gives " + std::to_string(im.GetBufferLength()) + " bytes of pixels where " +
                 std::to_string(expected) + " were declared";
        if (!im.GetBuffer(reinterpret_cast<char*>(out))) {
          const char* name = gdcm::TransferSyntax::GetTSString(im.GetTransferSyntax());
          return "GDCM cannot decode its pixel data (" + printable(name ? name : "unknown transfer syntax") +
                 ": damaged, or a codec it lacks)";
        }
        return "";
      },
      cancelled, "DICOM");
  const uint8_t* pixels = is_native ? native.data() : decoded.data();
  // A palette's pixel is one stored value, three samples out.
  const uint64_t samples_per_row = image.width * (v.palette ? 1 : image.channels), frame_samples = samples_per_row * image.height;
  const uint64_t out_row = image.width * image.channels * sample_size(image.type);
  const bool planar = v.planar;
  RowBand band = sink.begin(static_cast<uint32_t>(image.width), static_cast<uint32_t>(image.height), image.channels, image.type);
  std::vector<uint8_t> row, unpacked;
  for (size_t k = 0; k < frames.size(); ++k) {
    if (k > 0) sink.plane(k);
    const uint8_t* frame = nullptr;
    if (v.one_bit) {
      unpacked.resize(frame_samples);
      const uint64_t bit0 = frames[k] * frame_samples;
      for (uint64_t i = 0; i < frame_samples; ++i) unpacked[i] = (pixels[(bit0 + i) >> 3] >> ((bit0 + i) & 7)) & 1;
      frame = unpacked.data();
    } else {
      frame = pixels + frames[k] * frame_samples * v.bytes;
    }
    for (uint64_t y = 0; y < image.height;) {
      if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      if (band.count == 0) fail(ErrorCode::kInternal, "DICOM: the sink gave a band of no rows");
      const uint64_t n = std::min<uint64_t>(band.count, image.height - y);
      for (uint64_t i = 0; i < n; ++i) {
        const uint8_t* from = frame + (y + i) * samples_per_row * v.bytes;
        if (planar) {  // RRR GGG BBB: a row of each plane, interleaved
          row.resize(samples_per_row * v.bytes);
          const uint64_t plane = image.width * image.height * v.bytes;
          for (uint64_t x = 0; x < image.width; ++x)
            for (uint32_t c = 0; c < image.channels; ++c)
              std::memcpy(row.data() + (x * image.channels + c) * v.bytes,
                          frame + c * plane + ((y + i) * image.width + x) * v.bytes, v.bytes);
          from = row.data();
        }
        if (v.palette) apply_palette(from, image.width, v, image.type, band.rows + i * out_row);
        else convert(from, samples_per_row, v, image.type, band.rows + i * out_row);
      }
      band = sink.band(band.rows, static_cast<uint32_t>(y), static_cast<uint32_t>(n));
      y += n;
    }
  }
}

}  // namespace imgstat

namespace imgstat {

void decode_dicom_labels(const uint8_t* file, size_t file_size, const DicomImage& planned, const DicomLabels& labels,
                         const std::vector<uint64_t>& planes, const std::function<bool()>& cancelled,
                         const RowSink& sink) {
  const DicomBytes bytes = dicom_bytes(file, file_size, planned.inflated_bytes);
  if (bytes.inflated.size() != planned.inflated_bytes) fail(ErrorCode::kInternal, "DICOM: inflated otherwise than planned");
  Values v;
  DicomImage image;
  std::vector<uint8_t> packed;  // the frames' bits, as the file holds them
  {
    std::shared_lock<std::shared_mutex> lock(g_gdcm);
    Reading r(bytes.data, bytes.size);
    gdcm_guarded(bytes.size, [&] {
      image = describe(r, true, uint64_t{1} << 40, uint64_t{1} << 62, &v);
      const gdcm::ByteValue* bv = r.file.GetDataSet().GetDataElement(gdcm::Tag(0x7fe0, 0x0010)).GetByteValue();
      if (bv) packed.assign(bv->GetPointer(), bv->GetPointer() + image.decoded_bytes);  // its length was checked
    });
  }
  if (!v.one_bit || packed.empty() || image.width != planned.width || image.height != planned.height ||
      image.frame_places.size() != planned.frame_places.size())
    fail(ErrorCode::kInternal, "DICOM SEG: read otherwise than planned");
  const uint64_t n = image.width * image.height;
  std::vector<uint16_t> plane(n);
  RowBand band;
  for (size_t k = 0; k < planes.size(); ++k) {
    std::fill(plane.begin(), plane.end(), uint16_t{0});
    for (const uint32_t f : labels.frames.at(planes[k])) {
      if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      const uint16_t segment = static_cast<uint16_t>(image.frame_places[f].segment);
      const uint64_t bit0 = uint64_t{f} * n;
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t b = bit0 + i;
        if ((b & 7) == 0 && i + 8 <= n && packed[b >> 3] == 0) {
          i += 7;
          continue;
        }
        if (!((packed[b >> 3] >> (b & 7)) & 1)) continue;
        if (plane[i] != 0 && plane[i] != segment && !labels.union_only)
          invalid_data("DICOM SEG: segments " + std::to_string(plane[i]) + " and " + std::to_string(segment) +
                       " overlap at pixel (" + std::to_string(i % image.width) + ", " + std::to_string(i / image.width) +
                       ") of plane " + std::to_string(planes[k]) +
                       ": a label volume needs segments that do not overlap (each one is a mask of its own)");
        plane[i] = segment;
      }
    }
    band = send_plane(sink, band, reinterpret_cast<const uint8_t*>(plane.data()), static_cast<uint32_t>(image.width),
                      static_cast<uint32_t>(image.height), 1, SampleType::kUint16, k, "DICOM SEG");
  }
}

}  // namespace imgstat
