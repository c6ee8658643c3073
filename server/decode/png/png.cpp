#include "decode/png/png.hpp"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include "decode/inflate/parallel_inflate.hpp"
#include "decode/png/internal.hpp"

namespace imgstat {
namespace {

// One PNG at a time is inflated on every core; others meanwhile are
// inflated by zlib on their own core, as before: under load the cores are
// busy anyway, and each parallel inflate holds its chunks in flight.
class ParallelSlot {
 public:
  bool take(int cores) {
    int idle = 0;
    return cores > 1 && (taken_ = in_flight().compare_exchange_strong(idle, 1));
  }
  ~ParallelSlot() {
    if (taken_) in_flight().fetch_sub(1);
  }

 private:
  static std::atomic<int>& in_flight() {
    static std::atomic<int> n{0};
    return n;
  }
  bool taken_ = false;
};

// The parallel inflater's settings for PNG: chunks of 512 KiB (on 16 cores
// about 35 MB in flight for a photo), and at most 8 times that kept a chunk
// (photos inflate 2-6 times; what inflates more is inflated by zlib from
// there on, quickly).
ParallelInflateOptions png_inflate_options() {
  ParallelInflateOptions o;
  o.chunk_bytes = uint64_t{512} << 10;
  o.max_ratio = 8;
  return o;
}

// Image data under kParallelPngInflateBytes in a whole file of file_bytes
// that inflates to raw_bytes many times over: the parallel inflater's
// settings for it (tasks fixed, so that the memory reckoned before the
// decode is the decode's), or none. Each chunk may inflate to twice the
// file's ratio (a chunk past that goes to zlib, as any), the chunks sized
// so that kHighRatioPngTasks of them stay within kHighRatioPngInflateMemory.
constexpr uint32_t kHighRatioPngTasks = 8;
std::optional<ParallelInflateOptions> high_ratio_inflate_options(uint64_t raw_bytes, uint64_t file_bytes) {
  if (file_bytes == 0 || file_bytes >= kParallelPngInflateBytes || raw_bytes < kHighRatioPngRawBytes ||
      raw_bytes / file_bytes < kHighRatioPngRatio)
    return std::nullopt;
  ParallelInflateOptions o;
  o.tasks = kHighRatioPngTasks;
  o.max_ratio = static_cast<uint32_t>(std::min<uint64_t>(2 * (raw_bytes / file_bytes) + 1, 1100));
  const uint64_t fits = kHighRatioPngInflateMemory / (uint64_t{2} * o.tasks * o.max_ratio);  // marked: 2 bytes a symbol
  o.chunk_bytes = std::max<uint64_t>(4 << 10, std::min<uint64_t>(file_bytes / (2 * o.tasks) + 1, fits));
  o.slack_bytes = std::min<uint64_t>(o.slack_bytes, file_bytes);
  return o;
}

// One plain PNG decoded in bands. The image data is inflated (by zlib, or
// on every core) into two chunks of filtered rows: while one fills, a
// helper unfilters, converts and hands on the other.
class BandDecode {
 public:
  BandDecode(const uint8_t* data, size_t size, const png::Header& h, const std::function<bool()>& cancelled,
             const RowSink& sink, const std::function<void(uint64_t, uint64_t)>& release,
             const std::function<uint64_t(uint64_t)>& arrived, PngDecode& out)
      : data_(data), size_(size), h_(h), cancelled_(cancelled), sink_(sink), release_(release), arrived_(arrived),
        out_(out), idat_(data, size, h.image_data_at, arrived), convert_(h) {}

  void run();

 private:
  // A whole file's chunks are walked first and checked before a row goes
  // out (what the walk read goes back as it goes: the decode reads the image
  // data again, in order); false where libpng would refuse or warn.
  bool check_whole_file();
  void prepare();
  // The next IDAT's data, walked to where that is needed; false at the end.
  bool next_piece(StreamPiece* piece);
  // The decode is done with the file's bytes before offset: said a MiB at
  // a time, and at the end.
  void done_before(uint64_t offset);
  // Unfilters, converts and hands on one chunk of rows; false where libpng
  // would refuse or warn.
  bool pass_on(uint8_t* chunk, uint32_t y0, uint32_t n);
  void unfilter(uint8_t* chunk, uint32_t y0, uint32_t n);
  bool hand_on(uint8_t* chunk, uint32_t y0, uint32_t n);
  // The helper's verdict on the chunk it had, if any.
  bool passed() { return !passing_.valid() || passing_.get(); }
  size_t want() const { return size_t{std::min(chunk_rows_, h_.height - y0_)} * stride_; }
  // n more bytes are in the chunk being filled; false where libpng would refuse.
  bool commit(size_t n);
  // The parallel inflater's output, copied into the chunks.
  bool take(const uint8_t* p, size_t n);
  bool far_ahead(uint64_t from) const { return !arrived_ || arrived_(0) >= from + kParallelPngInflateBytes; }
  void inflate_in_parallel(const InflateResume* resume, ParallelInflateOptions options);
  void inflate_with_zlib();
  // Not taken after all, though rows may have gone out.
  void give_up() { out_.taken = false; }

  const uint8_t* data_;
  size_t size_;
  const png::Header& h_;
  const std::function<bool()>& cancelled_;
  const RowSink& sink_;
  const std::function<void(uint64_t, uint64_t)>& release_;
  const std::function<uint64_t(uint64_t)>& arrived_;
  PngDecode& out_;

  png::ImageData idat_;
  size_t next_idat_ = 0;
  uint64_t released_ = 0;  // bytes before this done with
  png::Converter convert_;
  size_t row_bytes_ = 0, stride_ = 0, out_row_bytes_ = 0;
  uint32_t bpp_ = 1;
  bool short_palette_ = false;
  uint32_t chunk_rows_ = 0;
  // Two chunks of filtered rows: zlib fills one while the other is unfiltered.
  std::unique_ptr<uint8_t[]> filtered_[2];
  std::vector<uint8_t> last_row_;  // the chunk before's last row, unfiltered
  RowBand band_{};
  uint32_t band_first_ = 0, filled_ = 0;
  // The chunk of filtered rows being filled (k_), from the top row y0_;
  // full, it goes to the helper while the other fills.
  int k_ = 0;
  uint32_t y0_ = 0;
  size_t fill_ = 0;
  std::unique_ptr<tbb::task_arena> helper_arena_;
  std::future<bool> passing_;
  uint64_t idat_bytes_ = 0;
  ParallelSlot slot_;
};

bool BandDecode::check_whole_file() {
  size_t checked = idat_.offset();
  while (idat_.walk()) {
    if (release_ && idat_.offset() - checked >= (size_t{4} << 20))
      release_(checked, idat_.offset()), checked = idat_.offset();
  }
  if (release_) release_(checked, idat_.offset());
  return !idat_.bad();
}

void BandDecode::prepare() {
  const uint32_t channels_in = png::stored_channels(static_cast<uint32_t>(h_.colour_type));
  row_bytes_ = (size_t{h_.width} * channels_in * static_cast<uint32_t>(h_.bit_depth) + 7) / 8;
  stride_ = row_bytes_ + 1;
  bpp_ = std::max<uint32_t>(1, channels_in * static_cast<uint32_t>(h_.bit_depth) / 8);
  short_palette_ = h_.colour_type == png::kPalette && h_.palette_size < (1 << h_.bit_depth);
  out_row_bytes_ = size_t{h_.width} * convert_.out_channels * (h_.bit_depth == 16 ? 2 : 1);
  chunk_rows_ = band_rows(stride_, h_.height);
  for (auto& chunk : filtered_) chunk.reset(new uint8_t[size_t{chunk_rows_} * stride_]);
  last_row_.resize(row_bytes_);
}

bool BandDecode::next_piece(StreamPiece* piece) {
  if (next_idat_ == idat_.pieces().size() && !idat_.walk()) return false;
  *piece = idat_.pieces()[next_idat_++];
  return true;
}

void BandDecode::done_before(uint64_t offset) {
  if (release_ && offset > released_ && (offset - released_ >= (1 << 20) || offset == size_))
    release_(released_, offset), released_ = offset;
}

// A row filtered with None or Sub needs no row above it, so each such row
// starts a run of rows that depends on no other run; the runs on every core
// of the arena (OpenCV writes Sub everywhere: every row a run).
void BandDecode::unfilter(uint8_t* chunk, uint32_t y0, uint32_t n) {
  std::vector<uint32_t> runs;
  for (uint32_t i = 0; i < n; ++i)
    if (i == 0 || chunk[size_t{i} * stride_] <= 1) runs.push_back(i);
  runs.push_back(n);
  auto unfilter_run = [&](size_t r) {
    for (uint32_t i = runs[r]; i < runs[r + 1]; ++i) {
      uint8_t* row = chunk + size_t{i} * stride_ + 1;
      const uint8_t* prev = i ? row - stride_ : y0 ? last_row_.data() : nullptr;
      png_unfilter_row(row[-1], row, prev, row_bytes_, bpp_);
    }
  };
  if (runs.size() > 2 && tbb::this_task_arena::max_concurrency() > 1) {
    tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, runs.size() - 1, unfilter_run); });
  } else {
    for (size_t r = 0; r + 1 < runs.size(); ++r) unfilter_run(r);
  }
}

bool BandDecode::hand_on(uint8_t* chunk, uint32_t y0, uint32_t n) {
  if (short_palette_) {  // an index past the palette: libpng warns at the end
    const int per_byte = 8 / h_.bit_depth, mask = (1 << h_.bit_depth) - 1;
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t* row = chunk + size_t{i} * stride_ + 1;
      for (uint32_t x = 0; x < h_.width; ++x) {
        const int idx =
            h_.bit_depth == 8 ? row[x] : (row[x / per_byte] >> (8 - h_.bit_depth * (x % per_byte + 1))) & mask;
        if (idx >= h_.palette_size) return false;
      }
    }
  }
  const SampleType type = h_.bit_depth == 16 ? SampleType::kUint16 : SampleType::kUint8;
  for (uint32_t i = 0; i < n;) {
    if (y0 == 0 && i == 0) {
      out_.taken = true;  // from here a refusal comes after rows went out: the caller drops them
      band_ = sink_.begin(h_.width, h_.height, convert_.out_channels, type);
    }
    if (band_.count <= filled_) fail(ErrorCode::kInternal, "PNG: no room for the next rows");
    // The rows that fit in this band, converted on every thread of the
    // helper's arena (a whole image's band takes every chunk whole).
    const uint32_t k = std::min(n - i, band_.count - filled_);
    uint8_t* out = band_.rows + size_t{filled_} * out_row_bytes_;
    const uint8_t* in = chunk + size_t{i} * stride_ + 1;
    auto convert = [&](const tbb::blocked_range<uint32_t>& rows) {
      for (uint32_t r = rows.begin(); r != rows.end(); ++r)
        convert_.row(in + size_t{r} * stride_, out + size_t{r} * out_row_bytes_);
    };
    const uint32_t grain = static_cast<uint32_t>(std::max<size_t>(1, kParallelRowsBytes / std::max<size_t>(1, out_row_bytes_)));
    if (k > grain && tbb::this_task_arena::max_concurrency() > 1) {
      tbb::this_task_arena::isolate([&] { tbb::parallel_for(tbb::blocked_range<uint32_t>(0, k, grain), convert); });
    } else {
      convert(tbb::blocked_range<uint32_t>(0, k));
    }
    filled_ += k;
    i += k;
    const uint32_t y = y0 + i - 1;  // the last row handed on
    if (filled_ == band_.count || y + 1 == h_.height) {
      if (cancelled_ && cancelled_()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      band_ = sink_.band(band_.rows, band_first_, filled_);
      band_first_ += filled_;
      filled_ = 0;
      if (band_.count == 0 && y + 1 < h_.height) fail(ErrorCode::kInternal, "PNG: no room for the next rows");
    }
  }
  return true;
}

bool BandDecode::pass_on(uint8_t* chunk, uint32_t y0, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i)
    if (chunk[size_t{i} * stride_] > 4) return false;  // no such filter
  unfilter(chunk, y0, n);
  if (!hand_on(chunk, y0, n)) return false;
  std::memcpy(last_row_.data(), chunk + size_t{n - 1} * stride_ + 1, row_bytes_);
  return true;
}

bool BandDecode::commit(size_t n) {
  fill_ += n;
  if (fill_ < want()) return true;
  const uint32_t rows = std::min(chunk_rows_, h_.height - y0_);
  if (!passed()) return false;
  if (rows == h_.height) {  // one chunk: no helper
    if (!pass_on(filtered_[k_].get(), y0_, rows)) return false;
  } else {
    // Inflating and unfiltering overlap: a helper unfilters chunk k while
    // chunk k + 1 is inflated, in an arena as large as the caller's.
    if (!helper_arena_) helper_arena_ = std::make_unique<tbb::task_arena>(tbb::this_task_arena::max_concurrency());
    uint8_t* chunk = filtered_[k_].get();
    const uint32_t y0 = y0_;
    passing_ = std::async(std::launch::async, [this, chunk, y0, rows] {
      return helper_arena_->execute([&] { return pass_on(chunk, y0, rows); });
    });
  }
  y0_ += rows;
  fill_ = 0;
  k_ ^= 1;
  return true;
}

bool BandDecode::take(const uint8_t* p, size_t n) {
  while (n > 0) {
    if (y0_ == h_.height) return false;  // more image data than rows
    const size_t step = std::min(n, want() - fill_);
    std::memcpy(filtered_[k_].get() + fill_, p, step);
    p += step;
    n -= step;
    if (!commit(step)) return false;
  }
  return true;
}

void BandDecode::run() {
  if (!arrived_ && !check_whole_file()) return;
  prepare();
  WaitOnExit<bool> drain{passing_};
  // Much image data and more than one core: inflated on all of them, zlib's
  // bytes and verdict (inflate/parallel_inflate.hpp), read from the IDAT
  // chunks in place, its output cut into chunks of rows as it comes. From
  // the start where the image data is there (or, arriving, already far
  // ahead); else from where zlib, inflating as the data comes, falls that
  // far behind it (a file arriving faster than one core inflates).
  idat_bytes_ = arrived_ ? size_ - idat_.offset() : 0;  // arriving: most of what is left
  for (const StreamPiece& piece : idat_.pieces()) idat_bytes_ += piece.size;
  const int cores = tbb::this_task_arena::max_concurrency();
  if (idat_bytes_ >= kParallelPngInflateBytes && far_ahead(idat_.offset()) && slot_.take(cores)) {
    inflate_in_parallel(nullptr, png_inflate_options());
    return;
  }
  // Whole, small and inflating many times over.
  const std::optional<ParallelInflateOptions> high = high_ratio_inflate_options(uint64_t{h_.height} * stride_, size_);
  if (high && cores > 1 && (!arrived_ || arrived_(0) >= size_) && slot_.take(cores)) {
    inflate_in_parallel(nullptr, *high);
    return;
  }
  inflate_with_zlib();
}

void BandDecode::inflate_in_parallel(const InflateResume* resume, ParallelInflateOptions options) {
  options.size_hint = arrived_ ? idat_bytes_ : 0;
  options.resume = resume;
  out_.parallel_from = resume ? static_cast<int64_t>(resume->bit / 8) : 0;
  // Stream offsets back to the file's: the IDAT piece holding each. The
  // pieces are walked on this thread, between the inflater's groups.
  const std::vector<StreamPiece> walked(idat_.pieces().begin(), idat_.pieces().begin() + next_idat_);
  std::vector<uint64_t> starts;
  uint64_t stream_at = 0;
  for (const StreamPiece& piece : walked) starts.push_back(stream_at), stream_at += piece.size;
  auto more = [&](StreamPiece* piece) {
    if (!next_piece(piece)) return false;
    starts.push_back(stream_at);
    stream_at += piece->size;
    return true;
  };
  if (release_)
    options.consumed = [&](uint64_t offset) {
      const size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin());
      if (i > 0) {
        const StreamPiece& piece = idat_.pieces()[i - 1];
        done_before(static_cast<uint64_t>(piece.data - data_) + std::min<uint64_t>(offset - starts[i - 1], piece.size));
      }
    };
  auto take = [this](const uint8_t* p, size_t n) { return this->take(p, n); };
  const bool inflated = parallel_inflate(walked, more, uint64_t{h_.height} * stride_, take, options);
  if (!passed() || !inflated || y0_ != h_.height || idat_.bad()) return give_up();
  done_before(size_);
}

// zlib, as libpng runs it (the window its header names), straight from the
// IDAT chunks into the chunks of filtered rows: no copy of the compressed
// data, no buffer of the whole image. libdeflate inflates faster but
// accepts streams zlib refuses (codes 286-287 and 30-31, incomplete code
// sets), so a damaged file would get pixels here and an error from libpng.
// Arriving, it stops at each block's end to see whether it has fallen
// behind (Z_BLOCK).
void BandDecode::inflate_with_zlib() {
  z_stream z{};
  if (inflateInit2(&z, 0) != Z_OK) return give_up();
  struct End {
    z_stream& z;
    ~End() { inflateEnd(&z); }
  } end{z};
  bool ended = false;
  uint64_t piece_start = 0;  // the stream offset of the piece zlib reads
  StreamPiece piece{nullptr, 0};
  const int cores = tbb::this_task_arena::max_concurrency();
  const bool may_hand_over = arrived_ && idat_bytes_ >= kParallelPngInflateBytes && cores > 1;
  while (y0_ < h_.height) {
    if (ended) {  // too little image data
      passed();
      return give_up();
    }
    if (z.avail_in == 0) {
      piece_start += piece.size;
      if (!next_piece(&piece)) {
        passed();
        return give_up();
      }
      z.next_in = const_cast<Bytef*>(piece.data);
      z.avail_in = static_cast<uInt>(piece.size);
      continue;
    }
    z.next_out = filtered_[k_].get() + fill_;
    z.avail_out = static_cast<uInt>(want() - fill_);
    const int r = inflate(&z, may_hand_over ? Z_BLOCK : Z_NO_FLUSH);
    if (r == Z_STREAM_END) ended = true;
    else if (r != Z_OK) {
      passed();
      return give_up();
    }
    if (!commit(want() - fill_ - z.avail_out)) return give_up();
    if (z.next_in) done_before(static_cast<uint64_t>(z.next_in - data_));
    // At the end of a block that is not the last, with rows still to come.
    if (may_hand_over && (z.data_type & 128) && !(z.data_type & 64) && !ended && y0_ < h_.height &&
        far_ahead(static_cast<uint64_t>(z.next_in - data_)) && slot_.take(cores)) {
      uint8_t window[32768];
      uInt window_size = sizeof window;
      if (inflateGetDictionary(&z, window, &window_size) != Z_OK) return give_up();
      const uint64_t used = piece_start + (piece.size - z.avail_in);
      InflateResume resume{used * 8 - static_cast<uint64_t>(z.data_type & 7), z.total_out,
                           static_cast<uint32_t>(z.adler), window, window_size};
      return inflate_in_parallel(&resume, png_inflate_options());
    }
  }
  if (!passed()) return give_up();
  // The stream ends exactly with the last row, its checksum right, and no
  // data follows it: anything else makes libpng warn or refuse.
  uint8_t spare = 0;
  while (!ended) {
    if (z.avail_in == 0) {
      if (!next_piece(&piece)) break;
      z.next_in = const_cast<Bytef*>(piece.data);
      z.avail_in = static_cast<uInt>(piece.size);
      continue;
    }
    z.next_out = &spare;
    z.avail_out = 1;
    const int r = inflate(&z, Z_NO_FLUSH);
    if (r == Z_STREAM_END && z.avail_out == 1) ended = true;
    else if (r != Z_OK || z.avail_out == 0) break;  // damaged, or more image data than rows
  }
  while (next_piece(&piece)) z.avail_in += static_cast<uInt>(piece.size > 0);
  if (!ended || z.avail_in != 0 || idat_.bad()) give_up();
  done_before(size_);
}

}  // namespace

uint64_t png_stream_memory_bytes(uint64_t width, uint64_t height, uint32_t bit_depth, uint32_t colour_type,
                                 bool interlaced, uint64_t file_bytes) {
  if (!png::streamable(bit_depth, colour_type, interlaced) || width == 0 || height == 0) return 0;
  const uint64_t stride = (width * png::stored_channels(colour_type) * bit_depth + 7) / 8 + 1;
  const uint64_t out_row = width * 4 * (bit_depth == 16 ? 2 : 1);
  const std::optional<ParallelInflateOptions> high = high_ratio_inflate_options(stride * height, file_bytes);
  const uint64_t inflating = file_bytes >= kParallelPngInflateBytes ? parallel_inflate_memory_bytes(png_inflate_options())
                             : high ? std::max<uint64_t>(parallel_inflate_memory_bytes(*high), 64 << 10)
                                    : uint64_t{64} << 10;  // zlib's state
  // Two chunks of filtered rows (one filling, one unfiltering), a row kept
  // across chunks, two bands of pixels.
  return 2 * stride * band_rows(stride, height) + stride + 2 * out_row * band_rows(out_row, height) + inflating;
}

// The image data is the first IDAT chunk and the IDATs that follow it, then
// IEND: anything else (a CRC libpng would refuse, chunks after the image
// data) is libpng's. A file still arriving is walked as the decode needs its
// chunks, and damage met late gives up rows already given.
PngDecode decode_png(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                     const std::function<void(uint64_t, uint64_t)>& release,
                     const std::function<uint64_t(uint64_t)>& arrived) {
  PngDecode out;
  png::Header h;
  if (!png::read_header(data, size, arrived, &out.warnings, &h)) return out;
  if (!png::streamable(h.bit_depth, h.colour_type, h.interlaced)) return out;
  BandDecode(data, size, h, cancelled, sink, release, arrived, out).run();
  return out;
}

}  // namespace imgstat
