#include "decode/jpeg_check.hpp"

#include <algorithm>
#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>
#include <jerror.h>

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

JpegCheck decode_jpeg(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                      bool* taken) {
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
