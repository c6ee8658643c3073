#include "jpeg_check.hpp"

#include <csetjmp>
#include <cstdio>

#include <jpeglib.h>
#include <jerror.h>

namespace imgstat {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  JpegCheck* out;
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
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) em->out->truncated = true;
  std::string m = message_of(cinfo);
  auto& w = em->out->warnings;
  constexpr size_t kMaxWarnings = 8;
  if (w.size() < kMaxWarnings && (w.empty() || w.back() != m)) w.push_back(std::move(m));
}

}  // namespace

JpegCheck check_jpeg(const uint8_t* data, size_t size, uint64_t max_pixels) {
  JpegCheck out;
  jpeg_decompress_struct cinfo;
  ErrorManager em;
  cinfo.err = jpeg_std_error(&em.pub);
  em.pub.error_exit = on_error;
  em.pub.emit_message = on_message;
  em.out = &out;
  std::vector<JSAMPLE> row;
  if (setjmp(em.jump)) {
    jpeg_destroy_decompress(&cinfo);
    out.ok = false;
    return out;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  out.width = cinfo.image_width;
  out.height = cinfo.image_height;
  if (out.width * out.height > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return out;
  }
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
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out.ok = true;
  return out;
}

}  // namespace imgstat
