#include "decode/inflate/parallel_inflate.hpp"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "decode/inflate/deflate.hpp"

namespace imgstat {
namespace {

using deflate::Run;

// The last 32 KiB of output: what markers name.
class Window {
 public:
  void push(const uint8_t* p, size_t n) {
    constexpr size_t kMax = deflate::kMaxWindow;
    if (n >= kMax) {
      std::memcpy(buf_, p + n - kMax, kMax);
      len_ = kMax;
      return;
    }
    const size_t keep = std::min<size_t>(len_, kMax - n);
    std::memmove(buf_, buf_ + len_ - keep, keep);
    std::memcpy(buf_ + keep, p, n);
    len_ = keep + n;
  }
  // The byte `back` positions before the end (1: the last).
  uint8_t before(uint32_t back) const { return buf_[len_ - back]; }
  const uint8_t* data() const { return buf_; }
  size_t size() const { return len_; }

 private:
  uint8_t buf_[deflate::kMaxWindow];
  size_t len_ = 0;
};

// The stream as the pieces it comes in (a PNG's IDAT chunks), read by
// logical offset; more pieces may be appended as they are found.
class Pieces {
 public:
  explicit Pieces(const std::vector<StreamPiece>& pieces) {
    for (const StreamPiece& p : pieces) append(p);
  }
  void append(const StreamPiece& p) {
    pieces_.push_back(p);
    starts_.push_back(size_);
    size_ += p.size;
  }
  uint64_t size() const { return size_; }
  uint8_t at(uint64_t i) const {
    const size_t k = piece_of(i);
    return pieces_[k].data[i - starts_[k]];
  }
  void copy(uint64_t from, uint64_t len, uint8_t* to) const {
    for (size_t k = piece_of(from); len > 0; ++k) {
      const uint64_t off = from - starts_[k], n = std::min<uint64_t>(len, pieces_[k].size - off);
      std::memcpy(to, pieces_[k].data + off, n);
      to += n;
      from += n;
      len -= n;
    }
  }
  // [from, from + len) in place where one piece holds it, else null.
  const uint8_t* span(uint64_t from, uint64_t len) const {
    if (len == 0 || from >= size_) return nullptr;
    const size_t k = piece_of(from);
    return from - starts_[k] + len <= pieces_[k].size ? pieces_[k].data + (from - starts_[k]) : nullptr;
  }
  // The bytes from `from` to the end of the piece holding it (from < size()).
  StreamPiece rest_of_piece(uint64_t from) const {
    const size_t k = piece_of(from);
    return StreamPiece{pieces_[k].data + (from - starts_[k]), static_cast<size_t>(pieces_[k].size - (from - starts_[k]))};
  }

 private:
  size_t piece_of(uint64_t i) const {  // the piece holding byte i (pieces may be empty)
    size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
    while (pieces_[k].size == 0 || i - starts_[k] >= pieces_[k].size) ++k;
    return k;
  }
  std::vector<StreamPiece> pieces_;
  std::vector<uint64_t> starts_;
  uint64_t size_ = 0;
};

// The pieces there are, and the rest as they are asked for.
class Stream {
 public:
  Stream(const std::vector<StreamPiece>& pieces, const std::function<bool(StreamPiece*)>& more)
      : data_(pieces), more_(more), complete_(!more) {}
  const Pieces& data() const { return data_; }
  // At least `bytes` bytes, or all there are.
  void extend(uint64_t bytes) {
    StreamPiece p;
    while (!complete_ && data_.size() < bytes) {
      if (more_(&p)) data_.append(p);
      else complete_ = true;
    }
  }
  // One more piece; false when there are no more.
  bool grow() {
    StreamPiece p;
    if (complete_ || !more_(&p)) return !(complete_ = true);
    data_.append(p);
    return true;
  }
  void finish() { extend(UINT64_MAX); }
  bool complete() const { return complete_; }

 private:
  Pieces data_;
  const std::function<bool(StreamPiece*)>& more_;
  bool complete_;
};

// A marked symbol as a byte: itself, or the window's byte it names.
uint8_t resolve(uint16_t v, const Window& before) {
  return v < deflate::kMarkerBase ? static_cast<uint8_t>(v)
                                  : before.before(deflate::kMaxWindow - (v - deflate::kMarkerBase));
}

// Every marked symbol's byte in one table (a literal is itself, a marker
// its window byte), so that resolving is one load a symbol, no branch.
class Resolver {
 public:
  explicit Resolver(const Window& before) {
    for (uint32_t v = 0; v < deflate::kMarkerBase; ++v) table_[v] = static_cast<uint8_t>(v);
    const size_t have = before.size();
    for (uint32_t back = 1; back <= deflate::kMaxWindow; ++back)
      table_[deflate::kMarkerBase + deflate::kMaxWindow - back] = back <= have ? before.before(back) : 0;
  }
  // In place: byte j over symbol j's first byte, which no later symbol needs.
  void resolve(uint16_t* symbols, uint64_t n) const {
    uint8_t* out = reinterpret_cast<uint8_t*>(symbols);
    for (uint64_t j = 0; j < n; ++j) out[j] = table_[symbols[j]];
  }

 private:
  uint8_t table_[deflate::kMarkerBase + deflate::kMaxWindow];
};

uint64_t bits_at(const uint8_t* d, size_t n, uint64_t bit) {  // the next 57 bits or more, zeros past the end
  const uint64_t byte = bit >> 3;
  uint64_t w = 0;
  if (byte + 8 <= n) {
    std::memcpy(&w, d + byte, 8);
  } else {
    for (uint64_t i = byte; i < n && i < byte + 8; ++i) w |= uint64_t{d[i]} << (8 * (i - byte));
  }
  return w >> (bit & 7);
}

// Cheap tests before the full header parse: a non-final dynamic block with
// counts zlib takes and code-length codes that form a complete code, or a
// non-final stored block. Most positions fail the first few bits.
bool candidate(const uint8_t* d, size_t n, uint64_t bit) {
  const uint64_t w = bits_at(d, n, bit);
  if (w & 1) return false;  // final blocks are left to the chunk before
  const uint32_t type = (w >> 1) & 3;
  if (type == 0) return true;  // lengths checked by plausible_block_start
  if (type != 2) return false;
  if (((w >> 3) & 31) > 29 || ((w >> 8) & 31) > 29) return false;
  const uint32_t ncode = ((w >> 13) & 15) + 4;
  const uint64_t lengths = bits_at(d, n, bit + 17);
  int count[8] = {};
  for (uint32_t i = 0; i < ncode; ++i) ++count[(lengths >> (3 * i)) & 7];
  int left = 1;
  for (int len = 1; len < 8; ++len) {
    left = 2 * left - count[len];
    if (left < 0) return false;
  }
  return left == 0;
}

// The first place in [from, to) where a run of blocks starts that decodes
// to a block end at or past stop; not ok where none does.
Run find_run(const uint8_t* d, size_t n, uint64_t from, uint64_t to, uint64_t stop, uint32_t window, uint64_t max_out,
             uint64_t hint, deflate::Mapped<uint8_t> buffer, deflate::Mapped<uint16_t> marked) {
  for (uint64_t bit = from; bit < to; ++bit) {
    if (!candidate(d, n, bit) || !deflate::plausible_block_start(d, n, bit)) continue;
    Run r = deflate::decode_run(d, n, bit, stop, window, false, max_out, hint, std::move(buffer), std::move(marked));
    if (r.ok) return r;
    buffer = std::move(r.bytes);  // a false start's buffers for the next try
    marked = std::move(r.marked);
  }
  Run none;
  none.bytes = std::move(buffer);
  none.marked = std::move(marked);
  return none;
}

// Output buffers of finished runs, for the next ones: their pages are
// already mapped.
template <class T>
class BufferPool {
 public:
  deflate::Mapped<T> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return {};
    deflate::Mapped<T> b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give(deflate::Mapped<T> b, size_t most) {
    if (!b) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < most) free_.push_back(std::move(b));
  }

 private:
  std::mutex mu_;
  std::vector<deflate::Mapped<T>> free_;
};

// A run's marked symbols once resolved in place: bytes.
const uint8_t* resolved(const Run& r) { return reinterpret_cast<const uint8_t*>(r.marked.get()); }

uint32_t be32(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }

uint32_t adler_of(uint32_t adler, const uint8_t* p, size_t n) {
  while (n > 0) {
    const uInt k = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    adler = static_cast<uint32_t>(adler32(adler, p, k));
    p += k;
    n -= k;
  }
  return adler;
}

// zlib from a block boundary on: raw inflate with the header's window,
// the window's bytes as its dictionary and the bits before the boundary
// primed away, so that it answers for the rest of the stream exactly as it
// would have inflating from the start; then the checksum over the whole
// output, and nothing after it.
bool zlib_from(Stream& stream, uint32_t window, uint64_t bit, const Window& win, uint64_t total, uint32_t adler,
               uint64_t expected, const std::function<bool(const uint8_t*, size_t)>& sink) {
  const Pieces& data = stream.data();
  z_stream z{};
  int bits = 0;
  for (uint32_t w = window; w > 1; w >>= 1) ++bits;
  if (inflateInit2(&z, -bits) != Z_OK) return false;
  struct End {
    z_stream& z;
    ~End() { inflateEnd(&z); }
  } end{z};
  if (win.size() && inflateSetDictionary(&z, win.data(), static_cast<uInt>(win.size())) != Z_OK) return false;
  uint64_t at = bit >> 3;
  stream.extend(at + 1);
  if (bit & 7) {
    if (at >= data.size() || inflatePrime(&z, static_cast<int>(8 - (bit & 7)), data.at(at) >> (bit & 7)) != Z_OK)
      return false;
    ++at;
  }
  std::vector<uint8_t> out(1 << 20);
  bool ended = false, failed = false;
  uint64_t used = at;  // bytes of the stream zlib has taken
  for (uint64_t pos = at; !ended && !failed;) {
    if (pos >= data.size()) {
      if (!stream.grow()) break;
      continue;
    }
    const StreamPiece piece = data.rest_of_piece(pos);
    pos += piece.size;
    z.next_in = const_cast<Bytef*>(piece.data);
    z.avail_in = static_cast<uInt>(piece.size);
    do {
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      const int r = inflate(&z, Z_NO_FLUSH);
      const size_t got = out.size() - z.avail_out;
      if (got > expected - total) {
        failed = true;
        break;
      }
      if (got) {
        adler = adler_of(adler, out.data(), got);
        total += got;
        if (!sink(out.data(), got)) failed = true;
      }
      if (r == Z_STREAM_END) ended = true;
      else if (r == Z_BUF_ERROR && z.avail_in == 0) break;  // on to the next piece
      else if (r != Z_OK) failed = true;                     // damage
    } while (!ended && !failed && (z.avail_in > 0 || z.avail_out == 0));
    used += piece.size - z.avail_in;
  }
  if (!ended || failed) return false;
  // The checksum right after the deflate data, and nothing after it.
  stream.finish();
  if (data.size() < 4) return false;
  const uint64_t n = data.size() - 4;
  if (used != n || total != expected) return false;
  uint8_t sum[4];
  data.copy(n, 4, sum);
  return be32(sum) == adler;
}

// What has gone to the sink: its size, checksum, last window, and where
// the last run ended.
struct Progress {
  Window window;
  uint64_t total = 0;
  uint64_t end_bit = 16;
  uint32_t adler = static_cast<uint32_t>(adler32(0, nullptr, 0));
  bool ended = false;
};

// A run confirmed in order, with the window before it and its checksum.
struct Confirmed {
  Run run;
  Window before;
  uint32_t adler = 0;
};

// The stream inflated a group of chunks at a time, one chunk a task, until
// it ends or a run cannot be vouched for (zlib does the rest).
class GroupInflate {
 public:
  GroupInflate(Stream& stream, uint32_t window, uint64_t expected,
               const std::function<bool(const uint8_t*, size_t)>& sink, const ParallelInflateOptions& options)
      : stream_(stream), data_(stream.data()), window_(window), expected_(expected), sink_(sink), options_(options),
        chunk_(std::max<uint64_t>(options.chunk_bytes, 1024)),
        tasks_(options.tasks ? options.tasks
                             : static_cast<uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency()))),
        max_out_(std::min<uint64_t>(expected, chunk_ * options.max_ratio)) {
    // What a chunk likely inflates to, from the whole stream's ratio: its
    // buffer at once, not grown by copying.
    if (!options.size_hint) stream.finish();  // the ratio from the whole stream
    const double stream_bytes = static_cast<double>(std::max<uint64_t>(options.size_hint, data_.size()));
    hint_ = static_cast<uint64_t>(static_cast<double>(expected) / stream_bytes * static_cast<double>(chunk_) * 1.25) +
            (64 << 10);
    // The deflate data known so far: it ends where the checksum starts once
    // the stream is complete; before, every group has its bytes.
    n_ = data_.size() - 4;
  }

  bool run();

 private:
  uint64_t stop_of(uint64_t i) const { return std::min<uint64_t>((2 + (i + 1) * chunk_) * 8, n_ * 8); }
  // A run reads its own copy of the stream from where it starts to a slack
  // past its chunk: a block that reaches further is not taken (the chunk is
  // decoded again, or zlib goes on from there). known_start: the output
  // before from_bit is `before` (none at the stream's start).
  Run run_from(uint64_t from_bit, uint64_t stop_bit, bool known_start, bool find, const Window* before);
  // 1. Every chunk of the group at once: its first block, decoded to a block
  // end at or past the chunk's end. The group's first chunk goes on from
  // where the last group ended, its window known: bytes, no markers to
  // resolve.
  std::vector<Run> first_blocks(uint64_t first, uint64_t last);
  // 2. In order: each run confirmed by the one before ending where it
  // starts (else decoded again from there), and the window before it. A run
  // that cannot be vouched for leaves the rest to zlib (stuck_).
  std::vector<Confirmed> confirm(std::vector<Run>& runs, uint64_t first, uint64_t last, Progress& next);
  // 3. Markers resolved and checksums taken, every run at once.
  void resolve_all(std::vector<Confirmed>& done) const;
  // 4. In order to the sink; false where it refuses.
  bool emit(std::vector<Confirmed>& done);

  Stream& stream_;
  const Pieces& data_;
  const uint32_t window_;
  const uint64_t expected_;
  const std::function<bool(const uint8_t*, size_t)>& sink_;
  const ParallelInflateOptions& options_;
  const uint64_t chunk_, tasks_, max_out_;
  uint64_t hint_ = 0;
  uint64_t n_ = 0;
  BufferPool<uint8_t> pool_, copies_;  // outputs, and copies of the stream
  BufferPool<uint16_t> marks_;         // marked outputs
  Progress done_;
  bool stuck_ = false;
};

Run GroupInflate::run_from(uint64_t from_bit, uint64_t stop_bit, bool known_start, bool find, const Window* before) {
  const uint64_t first = std::min(n_, from_bit >> 3),
                 last = std::max(first, std::min(n_, (stop_bit >> 3) + 1 + options_.slack_bytes));
  // Read in place where one piece holds it all.
  const uint8_t* bytes = data_.span(first, last - first);
  deflate::Mapped<uint8_t> local;
  if (!bytes) {
    local = copies_.take();
    if (!local || local.get_deleter().bytes < last - first)
      local = deflate::map_array<uint8_t>(std::max<uint64_t>(last - first, chunk_ + options_.slack_bytes + 16));
    data_.copy(first, last - first, local.get());
    bytes = local.get();
  }
  const uint64_t base = first * 8, size = last - first;
  Run r = find ? find_run(bytes, size, from_bit - base, stop_bit - base, stop_bit - base, window_, max_out_, hint_,
                          pool_.take(), marks_.take())
               : deflate::decode_run(bytes, size, from_bit - base, stop_bit - base, window_, known_start, max_out_,
                                     hint_, pool_.take(), marks_.take(),
                                     before ? deflate::Before{before->data(), before->size()} : deflate::Before{});
  r.start_bit += base;
  r.end_bit += base;
  copies_.give(std::move(local), tasks_);
  if (!r.ok) {  // its buffers back for the next try
    pool_.give(std::move(r.bytes), 2 * tasks_);
    marks_.give(std::move(r.marked), 2 * tasks_);
  }
  return r;
}

std::vector<Run> GroupInflate::first_blocks(uint64_t first, uint64_t last) {
  std::vector<Run> runs(last - first);
  tbb::this_task_arena::isolate([&] {
    tbb::parallel_for(first, last, [&](uint64_t i) {
      Run& r = runs[i - first];
      if (i == first && done_.end_bit < stop_of(i))
        r = run_from(done_.end_bit, stop_of(i), true, false, &done_.window);
      else if (i != first)
        r = run_from((2 + i * chunk_) * 8, stop_of(i), false, true, nullptr);
    });
  });
  return runs;
}

std::vector<Confirmed> GroupInflate::confirm(std::vector<Run>& runs, uint64_t first, uint64_t last, Progress& next) {
  std::vector<Confirmed> done;
  done.reserve(last - first);
  for (uint64_t i = first; i < last && !next.ended; ++i) {
    if (next.end_bit >= stop_of(i)) continue;  // a block of the run before covered this chunk
    Run& r = runs[i - first];
    if (!r.ok || r.start_bit != next.end_bit)  // from the true end, its window known
      r = run_from(next.end_bit, stop_of(i), true, false, &next.window);
    // Not decoded, reaching before the stream's start, or too long.
    if (!r.ok || r.max_back > next.total || r.size() > expected_ - next.total) {
      stuck_ = true;
      break;
    }
    Confirmed c{std::move(r), next.window, 0};
    // The window after it: its bytes' last 32 KiB, or, before them, the
    // last of its marked symbols resolved now (only those).
    if (c.run.byte_count >= deflate::kMaxWindow) {
      next.window.push(c.run.output_bytes() + c.run.byte_count - deflate::kMaxWindow, deflate::kMaxWindow);
    } else {
      const uint64_t want = std::min<uint64_t>(c.run.marked_count, deflate::kMaxWindow - c.run.byte_count);
      std::vector<uint8_t> tail(want);
      const uint16_t* from = c.run.marked.get() + (c.run.marked_count - want);
      for (uint64_t k = 0; k < want; ++k) tail[k] = resolve(from[k], c.before);
      if (!tail.empty()) next.window.push(tail.data(), tail.size());
      if (c.run.byte_count) next.window.push(c.run.output_bytes(), c.run.byte_count);
    }
    next.total += c.run.size();
    next.end_bit = c.run.end_bit;
    next.ended = c.run.final;
    done.push_back(std::move(c));
  }
  return done;
}

void GroupInflate::resolve_all(std::vector<Confirmed>& done) const {
  const uint32_t empty_adler = static_cast<uint32_t>(adler32(0, nullptr, 0));
  tbb::this_task_arena::isolate([&] {
    tbb::parallel_for(size_t{0}, done.size(), [&](size_t k) {
      Confirmed& c = done[k];
      if (c.run.marked_count) Resolver(c.before).resolve(c.run.marked.get(), c.run.marked_count);
      c.adler = adler_of(adler_of(empty_adler, resolved(c.run), c.run.marked_count), c.run.output_bytes(),
                         c.run.byte_count);
    });
  });
}

bool GroupInflate::emit(std::vector<Confirmed>& done) {
  for (Confirmed& c : done) {
    if (c.run.marked_count && !sink_(resolved(c.run), c.run.marked_count)) return false;
    if (c.run.byte_count && !sink_(c.run.output_bytes(), c.run.byte_count)) return false;
    done_.adler = static_cast<uint32_t>(adler32_combine(done_.adler, c.adler, static_cast<z_off_t>(c.run.size())));
    pool_.give(std::move(c.run.bytes), tasks_);
    marks_.give(std::move(c.run.marked), tasks_);
    c = Confirmed{};  // the rest of its memory goes now
  }
  return true;
}

bool GroupInflate::run() {
  uint64_t first_chunk = 0;
  if (const InflateResume* r = options_.resume) {
    if (r->bit < 16 || r->total > expected_ || r->window_size > deflate::kMaxWindow) return false;
    done_.end_bit = r->bit;
    done_.total = r->total;
    done_.adler = r->adler;
    if (r->window_size) done_.window.push(r->window, r->window_size);
    first_chunk = (done_.end_bit / 8 - 2) / chunk_;  // the chunk it stopped in: from the true end, window known
  }
  for (uint64_t first = first_chunk; !done_.ended && !stuck_; first += tasks_) {
    // The group's bytes and a slack past them (the pieces are walked as far
    // as that), or the whole stream.
    stream_.extend(2 + (first + tasks_) * chunk_ + options_.slack_bytes + 1 + 4);
    n_ = data_.size() - 4;
    const uint64_t chunks = (n_ - 2 + chunk_ - 1) / chunk_;
    if (first >= chunks) break;
    const uint64_t last = std::min(chunks, first + tasks_);
    std::vector<Run> runs = first_blocks(first, last);
    Progress next = done_;
    next.ended = false;
    std::vector<Confirmed> confirmed = confirm(runs, first, last, next);
    resolve_all(confirmed);
    if (!emit(confirmed)) return false;
    next.adler = done_.adler;
    done_ = std::move(next);
    if (options_.consumed) options_.consumed(std::min<uint64_t>(n_, done_.end_bit / 8));
  }
  if (!done_.ended)
    return zlib_from(stream_, window_, done_.end_bit, done_.window, done_.total, done_.adler, expected_, sink_);
  // The final block, then the checksum and nothing else: zlib's stream end.
  stream_.finish();
  n_ = data_.size() - 4;
  uint8_t sum[4];
  data_.copy(n_, 4, sum);
  return (done_.end_bit + 7) / 8 == n_ && done_.total == expected_ && be32(sum) == done_.adler;
}

}  // namespace

uint64_t parallel_inflate_memory_bytes(const ParallelInflateOptions& o) {
  const uint64_t tasks = o.tasks ? o.tasks : static_cast<uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  // Each run: its copy of the stream, its output (marked symbols are two
  // bytes: bounded as if all were) and the window before it.
  return tasks * (o.chunk_bytes + o.slack_bytes + o.chunk_bytes * o.max_ratio * 2 + (64 << 10));
}

bool parallel_inflate(const uint8_t* data, size_t size, uint64_t expected,
                      const std::function<bool(const uint8_t*, size_t)>& sink, const ParallelInflateOptions& options) {
  return parallel_inflate(std::vector<StreamPiece>{{data, size}}, expected, sink, options);
}

bool parallel_inflate(const std::vector<StreamPiece>& pieces, uint64_t expected,
                      const std::function<bool(const uint8_t*, size_t)>& sink, const ParallelInflateOptions& options) {
  return parallel_inflate(pieces, {}, expected, sink, options);
}

bool parallel_inflate(const std::vector<StreamPiece>& pieces, const std::function<bool(StreamPiece*)>& more,
                      uint64_t expected, const std::function<bool(const uint8_t*, size_t)>& sink,
                      const ParallelInflateOptions& options) {
  Stream stream(pieces, more);
  const Pieces& data = stream.data();
  stream.extend(2 + 1 + 4);
  if (data.size() < 2 + 1 + 4) return false;
  const uint32_t cmf = data.at(0), flg = data.at(1);
  if ((cmf & 15) != 8 || (cmf >> 4) > 7 || (cmf * 256 + flg) % 31 != 0 || (flg & 0x20)) return false;
  return GroupInflate(stream, 1u << ((cmf >> 4) + 8), expected, sink, options).run();
}

}  // namespace imgstat
