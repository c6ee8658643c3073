// --local: the same request core and engine in this process, no server.
#include <fcntl.h>
#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "call_support.hpp"
#include "calls.hpp"
#include "shards.hpp"
#include "core/status_name.hpp"

namespace imgstat::client {

Local::Local(EngineKind kind) {
  EngineOptions options;
  options.kind = kind;
  Limits limits;
  limits.max_pixels = uint64_t{1} << 40;
  limits.max_input_bytes = UINT64_MAX;
  std::shared_ptr<Engine> engine = make_engine(options);
  std::shared_ptr<GpuJpegDecoder> gpu_jpeg;
  if (engine->takes_device_images()) gpu_jpeg = open_gpu_jpeg_decoder_on_first_use(GpuJpegOptions{});
  analyzer_ = std::make_unique<Analyzer>(engine, limits, std::move(gpu_jpeg));
}

namespace {

// A regular file mapped read-only; release(offset) gives back the pages
// before offset, which a later read faults in again from the file.
class MappedFile {
 public:
  MappedFile(const std::string& path, uint64_t size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == size) {
      void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const uint8_t*>(p);
        size_ = size;
      }
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The whole pages inside [begin, end).
  void release(uint64_t begin, uint64_t end) {
    static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t from = (begin + page - 1) / page * page, to = std::min<uint64_t>(end, size_) / page * page;
    if (to > from) madvise(const_cast<uint8_t*>(data_) + from, to - from, MADV_DONTNEED);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

Outcome Local::analyze(Source& source, const Request& request) {
  try {
    const bool pixels = request.input.kind() == v1::INPUT_KIND_RAW || request.input.kind() == v1::INPUT_KIND_BYTES;
    // Raw inputs go to the engine in chunks as they are read, as the server
    // takes them: no copy of the whole file in memory, and 16 MiB held
    // (256 MiB took 2.1 s whole, 0.3 s in chunks, on 2 cores). The luminance
    // is computed on whole images only: those up to 256 MiB are read whole.
    const bool whole = needs_whole_image(stats_request_of(request.options)) && source.size() <= (uint64_t{256} << 20);
    // Parts need the whole image at once: raw pixels with parts are read
    // where the file's pages lie too, not copied.
    const bool parts = request.options.has_parts();
    if (!pixels && source.is_tar()) {
      // Several files as one tar, made in fresh pages (zero, and faulted in
      // by the threads that read into them) rather than a string zeroed
      // first on one core.
      v1::AnalyzeRequest r;
      *r.mutable_input() = request.input;
      *r.mutable_options() = options_with_map(request);
      void* p = mmap(nullptr, source.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map memory: ") + std::strerror(errno));
      // Faulted 2 MiB at a time where the kernel gives huge pages (a store
      // of GBs: 4 KiB faults cost more than reading it on these VMs).
      madvise(p, source.size(), MADV_HUGEPAGE);
      struct Unmap {
        void* p;
        size_t n;
        ~Unmap() { munmap(p, n); }
      } unmap{p, source.size()};
      source.read_into(static_cast<char*>(p));
      return outcome_of(source.name(), grpc::Status::OK,
                        analyzer_->analyze_mapped(r, static_cast<const uint8_t*>(p), source.size(), {}));
    }
    if ((!pixels || parts) && source.is_file() && source.size() > 0) {
      v1::AnalyzeRequest r;
      *r.mutable_input() = request.input;
      *r.mutable_options() = options_with_map(request);
      MappedFile file(source.name(), source.size());
      if (file.data()) {
        // Decoded from the file's pages in place; the streamed decoders say
        // how far they have read, and those pages go back (the page cache
        // keeps them): memory is what is in flight, not the file (as vips
        // reads it).
        return outcome_of(source.name(), grpc::Status::OK,
                          analyzer_->analyze_mapped(r, file.data(), file.size(),
                                                    [&](uint64_t begin, uint64_t end) { file.release(begin, end); }));
      }
    }
    if (!pixels || (!request.force_stream && whole)) {
      v1::AnalyzeRequest r;
      *r.mutable_input() = request.input;
      r.mutable_input()->set_data(source.read_all());
      *r.mutable_options() = options_with_map(request);
      return outcome_of(source.name(), grpc::Status::OK, analyzer_->analyze(r));
    }
    v1::StreamHeader header;
    *header.mutable_input() = request.input;
    *header.mutable_options() = options_with_map(request);
    header.set_total_bytes(source.size());
    auto upload = analyzer_->begin_upload(header);
    source.for_each_chunk(size_t{16} << 20, [&](std::string& c) {
      upload->add(c);
      return true;
    });
    return outcome_of(source.name(), grpc::Status::OK, upload->finish({}));
  } catch (const Error& e) {
    return failure(source.name(), status_code_name(static_cast<int>(e.code())), e.what());
  } catch (const InputError& e) {  // the input could not be read to its end
    return failure(source.name(), e.code(), std::string("cannot read: ") + e.what());
  } catch (const std::exception& e) {
    return failure(source.name(), "INTERNAL", e.what());
  }
}


}  // namespace imgstat::client
