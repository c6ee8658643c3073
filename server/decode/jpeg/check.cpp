#include "decode/jpeg/check.hpp"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <optional>

#include <jpeglib.h>
#include <jerror.h>
#include <jpegint.h>  // the marker reader's discarded-byte count, open to applications
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "decode/jpeg/intervals.hpp"
#include "imgstat/error.hpp"

namespace imgstat {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  JpegCheck* out;
};

struct Progress {
  jpeg_progress_mgr pub;
  const std::function<bool()>* cancelled;
  ErrorManager* em;
};

std::string message_of(j_common_ptr cinfo) {
  char buf[JMSG_LENGTH_MAX];
  cinfo->err->format_message(cinfo, buf);
  return buf;
}

void on_error(j_common_ptr cinfo) {
  auto* em = reinterpret_cast<ErrorManager*>(cinfo->err);
  em->out->error = message_of(cinfo);
  std::longjmp(em->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* em = reinterpret_cast<ErrorManager*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  std::string m = message_of(cinfo);
  // Data that runs out, or meets a marker while blocks are still owed (half
  // a file with FF D9 appended; an end-of-image marker where a restart
  // marker was due), is a truncated file.
  const bool eoi_for_restart = code == JWRN_MUST_RESYNC && cinfo->err->msg_parm.i[0] == JPEG_EOI;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || eoi_for_restart) {
    em->out->truncated = true;
  } else if (code == JWRN_HUFF_BAD_CODE || code == JWRN_MUST_RESYNC || code == JWRN_NOT_SEQUENTIAL ||
             code == JWRN_BOGUS_PROGRESSION) {
    if (!em->out->corrupt) em->out->corrupt_reason = m;
    em->out->corrupt = true;
  }
  auto& w = em->out->warnings;
  constexpr size_t kMaxWarnings = 8;
  if (w.size() < kMaxWarnings && (w.empty() || w.back() != m)) w.push_back(std::move(m));
}

// jpeg_mem_src, handing out at most kPiece bytes at a time: libjpeg's fast
// Huffman path wants 512 bytes a block in its buffer, so it never runs.
struct PieceSource {
  static constexpr size_t kPiece = 256;
  jpeg_source_mgr pub;
  const JOCTET* next;
  const JOCTET* end;
};

void piece_init(j_decompress_ptr) {}
void piece_term(j_decompress_ptr) {}

boolean piece_fill(j_decompress_ptr cinfo) {
  static const JOCTET kEoi[2] = {0xff, JPEG_EOI};
  auto* src = reinterpret_cast<PieceSource*>(cinfo->src);
  if (src->next >= src->end) {  // as jpeg_mem_src: warn and end the image
    WARNMS(cinfo, JWRN_JPEG_EOF);
    src->pub.next_input_byte = kEoi;
    src->pub.bytes_in_buffer = 2;
    return TRUE;
  }
  const size_t n = std::min<size_t>(PieceSource::kPiece, static_cast<size_t>(src->end - src->next));
  src->pub.next_input_byte = src->next;
  src->pub.bytes_in_buffer = n;
  src->next += n;
  return TRUE;
}

void piece_skip(j_decompress_ptr cinfo, long count) {
  auto* src = reinterpret_cast<PieceSource*>(cinfo->src);
  while (count > 0) {
    if (src->pub.bytes_in_buffer == 0) piece_fill(cinfo);
    const size_t n = std::min<size_t>(static_cast<size_t>(count), src->pub.bytes_in_buffer);
    src->pub.next_input_byte += n;
    src->pub.bytes_in_buffer -= n;
    count -= static_cast<long>(n);
  }
}

void piece_src(j_decompress_ptr cinfo, PieceSource* src, const uint8_t* data, size_t size) {
  src->pub.init_source = piece_init;
  src->pub.fill_input_buffer = piece_fill;
  src->pub.skip_input_data = piece_skip;
  src->pub.resync_to_restart = jpeg_resync_to_restart;
  src->pub.term_source = piece_term;
  src->pub.bytes_in_buffer = 0;
  src->pub.next_input_byte = nullptr;
  src->next = data;
  src->end = data + size;
  cinfo->src = &src->pub;
}

void on_progress(j_common_ptr cinfo) {
  auto* p = reinterpret_cast<Progress*>(cinfo->progress);
  if (*p->cancelled && (*p->cancelled)()) {
    p->em->out->error = "cancelled";
    std::longjmp(p->em->jump, 1);
  }
}

// Every coefficient of every component was sent to full precision: a
// progressive file cut between two scans, with its end marker, is not whole.
bool all_scans_present(const jpeg_decompress_struct& cinfo) {
  if (!cinfo.progressive_mode || !cinfo.coef_bits) return true;
  for (int c = 0; c < cinfo.num_components; ++c)
    for (int k = 0; k < DCTSIZE2; ++k)
      if (cinfo.coef_bits[c][k] != 0) return false;
  return true;
}

// libjpeg's errors longjmp back to the caller's setjmp; its warnings are
// collected into *out instead of printed.
void install_errors(jpeg_decompress_struct& cinfo, ErrorManager& em, JpegCheck* out) {
  cinfo.err = jpeg_std_error(&em.pub);
  em.pub.error_exit = on_error;
  em.pub.emit_message = on_message;
  em.out = out;
}

// One libjpeg pass over the data fed in small pieces: its errors and
// warnings go to *out, `cancelled` is polled. The caller sets its setjmp
// between constructing and open().
struct Pass {
  jpeg_decompress_struct cinfo;
  ErrorManager em;
  Progress progress;
  PieceSource source;
  Pass(JpegCheck* out, const std::function<bool()>& cancelled) {
    install_errors(cinfo, em, out);
    progress.pub.progress_monitor = on_progress;
    progress.cancelled = &cancelled;
    progress.em = &em;
  }
  void open(const uint8_t* data, size_t size) {
    jpeg_create_decompress(&cinfo);
    cinfo.progress = &progress.pub;
    piece_src(&cinfo, &source, data, size);
    jpeg_read_header(&cinfo, TRUE);
  }
};


// What the header pass says of the scan's MCUs, where the scan can be cut at
// restart markers into runs decoded apart: one baseline Huffman scan of all
// components, 8-bit, with restart markers.
std::optional<JpegScanFacts> scan_facts(const jpeg_decompress_struct& c, size_t scan_start) {
  if (c.progressive_mode || c.arith_code || c.data_precision != 8 || c.restart_interval == 0) return std::nullopt;
  if ((c.num_components != 1 && c.num_components != 3) || c.comps_in_scan != c.num_components) return std::nullopt;
  JpegScanFacts f;
  f.height = c.image_height;
  f.restart_interval = c.restart_interval;
  f.scan_start = scan_start;
  if (c.num_components == 1) {  // non-interleaved: an MCU is one block
    f.mcus_per_row = c.comp_info[0].width_in_blocks;
    f.mcu_rows = c.comp_info[0].height_in_blocks;
    f.mcu_height = DCTSIZE;
  } else {
    const uint32_t w = DCTSIZE * c.max_h_samp_factor, h = DCTSIZE * c.max_v_samp_factor;
    f.mcus_per_row = (c.image_width + w - 1) / w;
    f.mcu_rows = (c.image_height + h - 1) / h;
    f.mcu_height = h;
    for (int i = 0; i < c.num_components; ++i)
      if (c.comp_info[i].v_samp_factor != c.max_v_samp_factor) f.context_rows = true;
  }
  return f;
}

uint32_t decode_threads() { return static_cast<uint32_t>(std::max(1, tbb::this_task_arena::max_concurrency())); }

// Rows a band holds when the decode is cut into runs (cut_every(f) > 0):
// enough that every core gets a run, whole cut units, the whole image at most.
uint32_t interval_band_rows(const JpegScanFacts& f, uint64_t row_bytes) {
  const uint64_t unit = uint64_t{cut_every(f)} * f.mcu_height;
  const uint64_t bytes = std::max<uint64_t>(kBandBytes, kIntervalBandBytesPerCore * decode_threads());
  uint64_t rows = std::max<uint64_t>(band_rows(row_bytes, f.height), bytes / std::max<uint64_t>(1, row_bytes));
  rows = std::max<uint64_t>(unit, rows / unit * unit);
  return static_cast<uint32_t>(std::min<uint64_t>(rows, f.height));
}

// One run: a JPEG of whole MCU rows, of which rows [skip, skip + keep) go to
// dst and the context rows around them to a scratch row.
JpegCheck decode_run(const std::vector<uint8_t>& jpeg, J_COLOR_SPACE space, uint32_t skip, uint32_t keep, uint8_t* dst,
                     size_t row_bytes) {
  JpegCheck out;
  static const std::function<bool()> never;
  Pass pass(&out, never);
  jpeg_decompress_struct& cinfo = pass.cinfo;
  std::vector<JSAMPLE> scratch(row_bytes);
  if (setjmp(pass.em.jump)) {
    jpeg_destroy_decompress(&cinfo);
    out.ok = false;
    return out;
  }
  pass.open(jpeg.data(), jpeg.size());
  cinfo.out_color_space = space;
  jpeg_start_decompress(&cinfo);
  if (size_t{cinfo.output_width} * cinfo.output_components != row_bytes || cinfo.output_height < skip + keep) {
    jpeg_destroy_decompress(&cinfo);
    out.error = "a run's size differs from the image's";
    return out;
  }
  JSAMPROW rows[16];
  while (cinfo.output_scanline < cinfo.output_height) {
    const uint32_t y = cinfo.output_scanline, n = std::min<uint32_t>(16, cinfo.output_height - y);
    for (uint32_t i = 0; i < n; ++i)
      rows[i] = y + i >= skip && y + i < skip + keep ? dst + size_t{y + i - skip} * row_bytes : scratch.data();
    jpeg_read_scanlines(&cinfo, rows, n);
  }
  jpeg_finish_decompress(&cinfo);  // reads the run's last marker: bytes left before it are a warning
  // Bytes the entropy decoder held unread at a restart are counted here and
  // worded only at the next marker it has not already met, perhaps never:
  // one pass may name them at a marker of another run. Counted at all, the
  // file goes again in one pass for libjpeg's own words.
  if (cinfo.marker->discarded_bytes != 0) out.warnings.push_back("extraneous bytes before a restart marker");
  jpeg_destroy_decompress(&cinfo);
  out.ok = true;
  return out;
}

// decode_jpeg's rows, a band at a time, each band's runs on every core. Any
// run that warns or fails gives up (*taken false, no error): the caller
// decodes the file again in one pass, for libjpeg's own verdict and words.
JpegCheck decode_in_intervals(const uint8_t* data, const JpegScanFacts& f, const RestartMap& map, J_COLOR_SPACE space,
                              uint32_t width, uint32_t channels, const std::function<bool()>& cancelled,
                              const RowSink& sink, bool* taken) {
  JpegCheck out;
  const size_t row_bytes = size_t{width} * channels;
  const uint32_t cut_rows = map.cut_every * f.mcu_height;
  const uint32_t threads = decode_threads();
  RowBand band = sink.begin(width, f.height, channels, SampleType::kUint8);
  struct Run {
    uint32_t first_row, last_row;  // kept rows of the image
    std::vector<uint8_t> jpeg;
    uint32_t skip = 0;
    JpegCheck check;
  };
  uint32_t first = 0;
  while (first < f.height) {
    if (cancelled && cancelled()) {
      out.error = "cancelled";
      return out;
    }
    const uint32_t count = std::min(band.count, f.height - first), end = first + count;
    if (count == 0) fail(ErrorCode::kInternal, "JPEG: no room for the next rows");
    // About two runs a core, of whole cut units and at least kMinRunMcuRows.
    const uint32_t min_rows = (kMinRunMcuRows * f.mcu_height + cut_rows - 1) / cut_rows * cut_rows;
    const uint32_t run_rows = std::max(min_rows, (count + 2 * threads - 1) / (2 * threads));
    std::vector<Run> runs;
    for (uint32_t r0 = first; r0 < end;) {
      uint32_t r1 = (r0 + run_rows) / cut_rows * cut_rows;
      if (r1 <= r0) r1 = r0 + run_rows;
      r1 = std::min(r1, end);
      if (end - r1 < min_rows / 2) r1 = end;  // no sliver at the end
      runs.push_back(Run{r0, r1, {}, 0, {}});
      r0 = r1;
    }
    // Isolated: a thread waiting for the runs takes no other work (the
    // engine's, on the band before) that would hold the next band back.
    tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, runs.size(), [&](size_t i) {
      Run& run = runs[i];
      uint32_t m0 = run.first_row / f.mcu_height, m1 = (run.last_row + f.mcu_height - 1) / f.mcu_height;
      if (f.context_rows && m0 > 0) m0 -= 1;  // the upsampler's context above
      // One MCU row more below: the upsampler's context, and the restart
      // after the kept rows. One pass counts the bytes its entropy decoder
      // holds unread at a restart as extraneous (a warning); at the end of
      // an image it drops them silently, so a run ending on the kept rows
      // would miss that warning.
      m1 += 1;
      m0 = m0 / map.cut_every * map.cut_every;
      m1 = std::min(f.mcu_rows, (m1 + map.cut_every - 1) / map.cut_every * map.cut_every);
      run.jpeg = jpeg_of_mcu_rows(data, map, f, m0, m1);
      run.skip = run.first_row - m0 * f.mcu_height;
      run.check = decode_run(run.jpeg, space, run.skip, run.last_row - run.first_row,
                             band.rows + size_t{run.first_row - first} * row_bytes, row_bytes);
      std::vector<uint8_t>().swap(run.jpeg);
    }); });
    for (const Run& run : runs) {
      const JpegCheck& c = run.check;
      if (!c.ok || c.corrupt || c.truncated || !c.warnings.empty()) {
        *taken = false;
        out.ok = true;
        return out;
      }
    }
    out.runs += static_cast<uint32_t>(runs.size());
    band = sink.band(band.rows, first, count);
    first = end;
  }
  out.ok = true;
  return out;
}

}  // namespace

JpegHeader read_jpeg_header(const uint8_t* data, size_t size, uint64_t max_pixels) {
  JpegHeader h;
  JpegCheck scratch;
  jpeg_decompress_struct cinfo;
  ErrorManager em;
  install_errors(cinfo, em, &scratch);
  if (setjmp(em.jump)) {
    jpeg_destroy_decompress(&cinfo);
    fail(ErrorCode::kInvalidArgument, "JPEG: " + scratch.error);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  h.width = cinfo.image_width;
  h.height = cinfo.image_height;
  h.components = static_cast<uint32_t>(cinfo.num_components);
  h.progressive = cinfo.progressive_mode;
  h.arithmetic = cinfo.arith_code;
  uint64_t largest = 0;
  for (int c = 0; c < cinfo.num_components; ++c) {
    const uint64_t b = uint64_t{cinfo.comp_info[c].width_in_blocks} * cinfo.comp_info[c].height_in_blocks;
    h.blocks += b;
    largest = std::max(largest, b);
  }
  const std::optional<JpegScanFacts> facts = scan_facts(cinfo, size - cinfo.src->bytes_in_buffer);
  if (facts && cut_every(*facts) > 0 && decode_threads() > 1) {
    h.interval_threads = decode_threads();
    h.interval_band_rows = interval_band_rows(*facts, uint64_t{h.width} * (h.components == 1 ? 1 : 3));
  }
  jpeg_destroy_decompress(&cinfo);
  if (h.width == 0 || h.height > max_pixels / h.width)
    fail(ErrorCode::kResourceExhausted, "image is " + std::to_string(h.width) + "x" + std::to_string(h.height) +
                                            " = " + std::to_string(h.width * h.height) + " pixels, over the limit of " +
                                            std::to_string(max_pixels));
  // Arithmetic coding can spend far less than a bit on a block; Huffman cannot.
  if (!h.arithmetic && uint64_t{size} * 8 < largest)
    fail(ErrorCode::kInvalidArgument,
         "JPEG: declares " + std::to_string(h.width) + "x" + std::to_string(h.height) + " (" +
             std::to_string(largest) + " blocks) but " + std::to_string(size) +
             " bytes cannot hold a bit for each block: corrupt or truncated");
  return h;
}

uint64_t jpeg_coefficient_bytes(const JpegHeader& h) {
  return h.progressive ? h.blocks * DCTSIZE2 * sizeof(JCOEF) : 0;
}

namespace {
JpegCheck decode_jpeg(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                      bool* taken, bool in_runs);
}  // namespace

JpegCheck decode_jpeg(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                      bool* taken) {
  return decode_jpeg(data, size, cancelled, sink, taken, /*in_runs=*/true);
}

namespace {
JpegCheck decode_jpeg(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                      bool* taken, bool in_runs) {
  JpegCheck out;
  Pass pass(&out, cancelled);
  jpeg_decompress_struct& cinfo = pass.cinfo;
  *taken = false;
  if (setjmp(pass.em.jump)) {
    jpeg_destroy_decompress(&cinfo);
    out.ok = false;
    return out;
  }
  pass.open(data, size);
  if (cinfo.num_components == 4) {
    jpeg_destroy_decompress(&cinfo);
    out.ok = true;
    return out;
  }
  *taken = true;
  // OpenCV's settings (grfmt_jpeg.cpp): libjpeg's defaults, Gray or RGB out.
  cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  if (in_runs && out.warnings.empty() && decode_threads() > 1) {
    const size_t scan_start = static_cast<size_t>(pass.source.next - data) - cinfo.src->bytes_in_buffer;
    const std::optional<JpegScanFacts> facts = scan_facts(cinfo, scan_start);
    const std::optional<RestartMap> map = facts ? map_restarts(data, size, *facts) : std::nullopt;
    if (map) {
      const J_COLOR_SPACE space = cinfo.out_color_space;
      const uint32_t width = cinfo.image_width, channels = cinfo.num_components == 1 ? 1 : 3;
      jpeg_destroy_decompress(&cinfo);
      JpegCheck runs = decode_in_intervals(data, *facts, *map, space, width, channels, cancelled, sink, taken);
      // A run that warned: the file again in one pass, which words the
      // warnings (or the refusal) as libjpeg reads the whole file.
      if (*taken || !runs.error.empty()) return runs;
      return decode_jpeg(data, size, cancelled, sink, taken, /*in_runs=*/false);
    }
  }
  jpeg_start_decompress(&cinfo);
  const uint32_t width = cinfo.output_width, height = cinfo.output_height;
  const uint32_t channels = static_cast<uint32_t>(cinfo.output_components);
  const size_t row_bytes = size_t{width} * channels;
  try {  // the sink may throw (limits, memory, the engine): libjpeg's memory goes first
    RowBand band = sink.begin(width, height, channels, SampleType::kUint8);
    uint32_t band_first = 0, filled = 0;
    JSAMPROW rows[16];
    while (cinfo.output_scanline < height) {
      const uint32_t n = std::min<uint32_t>({16, height - cinfo.output_scanline, band.count - filled});
      for (uint32_t i = 0; i < n; ++i) rows[i] = band.rows + (filled + i) * row_bytes;
      filled += jpeg_read_scanlines(&cinfo, rows, n);
      if (filled == band.count || cinfo.output_scanline == height) {
        band = sink.band(band.rows, band_first, filled);
        band_first += filled;
        filled = 0;
        if (band.count == 0 && cinfo.output_scanline < height) fail(ErrorCode::kInternal, "JPEG: no room for the next rows");
      }
    }
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  if (!all_scans_present(cinfo)) out.truncated = true;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out.ok = true;
  return out;
}

}  // namespace

JpegCheck check_jpeg(const uint8_t* data, size_t size, const std::function<bool()>& cancelled) {
  JpegCheck out;
  Pass pass(&out, cancelled);
  jpeg_decompress_struct& cinfo = pass.cinfo;
  std::vector<JSAMPLE> row;
  if (setjmp(pass.em.jump)) {
    jpeg_destroy_decompress(&cinfo);
    out.ok = false;
    return out;
  }
  pass.open(data, size);
  // Entropy decoding is what finds corrupt or missing data; 1/8 scale skips
  // most of the inverse DCT and colour work that OpenCV will do for real.
  cinfo.scale_num = 1;
  cinfo.scale_denom = 8;
  cinfo.dct_method = JDCT_IFAST;
  cinfo.do_fancy_upsampling = FALSE;
  jpeg_start_decompress(&cinfo);
  row.resize(static_cast<size_t>(cinfo.output_width) * cinfo.output_components);
  JSAMPROW rows[1] = {row.data()};
  while (cinfo.output_scanline < cinfo.output_height) jpeg_read_scanlines(&cinfo, rows, 1);
  if (!all_scans_present(cinfo)) out.truncated = true;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out.ok = true;
  return out;
}

}  // namespace imgstat
