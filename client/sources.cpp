#include "sources.hpp"

#include "shards.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fnmatch.h>
#include <glob.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <cstring>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace imgstat::client {

namespace {

using Writer = std::unique_ptr<archive, int (*)(archive*)>;

// A tar as the server's Zarr reader takes it: pax (ustar headers, a pax
// header only for a long name), no blocking, so that its size is known
// before it is made; times and owners left out, so that it is the same
// for the same files.
Writer tar_writer(void* out, la_ssize_t (*write)(archive*, void*, const void*, size_t)) {
  Writer a(archive_write_new(), archive_write_free);
  if (!a) throw std::runtime_error("libarchive could not start");
  archive_write_set_format_pax_restricted(a.get());
  archive_write_set_bytes_per_block(a.get(), 0);
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open(a.get(), out, nullptr, write, nullptr) != ARCHIVE_OK)
    throw std::runtime_error(std::string("libarchive: ") + archive_error_string(a.get()));
  return a;
}

void write_header(archive* a, const std::string& key, uint64_t size) {
  std::unique_ptr<archive_entry, void (*)(archive_entry*)> e(archive_entry_new(), archive_entry_free);
  archive_entry_set_pathname(e.get(), key.c_str());
  archive_entry_set_filetype(e.get(), AE_IFREG);
  archive_entry_set_perm(e.get(), 0644);
  archive_entry_set_size(e.get(), static_cast<la_int64_t>(size));
  if (archive_write_header(a, e.get()) != ARCHIVE_OK)
    throw std::runtime_error(std::string("libarchive: ") + archive_error_string(a));
}

}  // namespace

bool is_zarr_store(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  for (const char* meta : {".zarray", ".zgroup", ".zattrs"})
    if (fs::is_regular_file(fs::path(path) / meta, ec)) return true;
  return false;
}

bool is_dicom_file(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (p.filename() == "DICOMDIR") return false;
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".dcm" || ext == ".dicom") return true;
  char magic[4] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const ssize_t got = fd >= 0 ? ::pread(fd, magic, 4, 128) : -1;
  if (fd >= 0) ::close(fd);
  return got == 4 && std::memcmp(magic, "DICM", 4) == 0;
}

namespace {

// Shards in buckets listed at once (each listing mostly waits on its store).
constexpr size_t kShardsListedAtOnce = 8;
// An object's first request: the whole of a small one (most images), the
// size and ETag of a large one.
constexpr size_t kObjectFirstBytes = size_t{4} << 20;
// A large object read whole: ranges of this size, this many at once.
constexpr size_t kObjectPieceBytes = size_t{8} << 20;
constexpr int kObjectPiecesInFlight = 8;

}  // namespace

Source::Source(const std::string& name, bool dicom_series, const std::vector<std::string>& files) : name_(name) {
  if (is_object_name(name) && !is_shard_member(name)) {
    object_info_ = open_object(name, kObjectFirstBytes, &object_head_);
    size_ = object_info_.size;
    if (object_head_.size() == size_) {
      held_ = true;
      held_data_ = std::move(object_head_);
      object_head_.clear();
    } else {
      object_ = true;
    }
    return;
  }
  if (is_shard_member(name)) {
    MemberBytes m = open_member(name);
    size_ = m.size;
    if (m.held) {
      held_ = true;
      held_data_ = std::move(m.data);
    } else if (m.object) {
      object_ = true;  // a large member of a tar in a bucket: ranges where it lies
      object_info_ = *m.object;
      base_ = m.offset;
    } else {
      member_ = true;
      fd_ = m.fd;
      base_ = m.offset;
    }
    return;
  }
  if (dicom_series && !files.empty()) {
    std::vector<Member> members;
    std::error_code ec;
    std::vector<std::string> unique = files;  // a file named twice is one slice
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    for (const std::string& f : unique) {
      const uint64_t size = std::filesystem::file_size(f, ec);
      if (ec) throw std::runtime_error(f + ": " + ec.message());
      members.push_back({f.substr(f.find_first_not_of('/')), f, size});
    }
    set_members(std::move(members));
    return;
  }
  if (dicom_series && name != "-" && std::filesystem::is_directory(name) && !is_zarr_store(name)) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<Member> files;
    for (fs::recursive_directory_iterator it(name, ec), end; !ec && it != end; it.increment(ec)) {
      if (!it->is_regular_file(ec) || !is_dicom_file(it->path().string())) continue;
      files.push_back({fs::relative(it->path(), name, ec).generic_string(), it->path().string(), it->file_size(ec)});
    }
    if (ec) throw std::runtime_error("the folder cannot be listed: " + ec.message());
    if (files.empty()) throw std::runtime_error("no DICOM files in this folder");
    set_members(std::move(files));
    return;
  }
  if (name != "-" && is_zarr_store(name)) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(name, ec), end; !ec && it != end; it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      store_.push_back({fs::relative(it->path(), name, ec).generic_string(), it->path().string(), it->file_size(ec)});
    }
    if (ec) throw std::runtime_error("the Zarr store cannot be listed: " + ec.message());
    set_members(std::move(store_));
    return;
  }
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".hdr") == 0) {
    // A NIfTI pair's header (magic ni1 or ni2): sent with its voxels.
    char head[348] = {};
    const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    const ssize_t got = fd >= 0 ? ::pread(fd, head, sizeof head, 0) : -1;
    if (fd >= 0) ::close(fd);
    const bool pair = (got == 348 && std::memcmp(head + 344, "ni1", 4) == 0) || (got >= 8 && std::memcmp(head + 4, "ni2", 4) == 0);
    const std::string stem = name.substr(0, name.size() - 4);
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const char* ext : {".img", ".img.gz"}) {
      if (!pair || !fs::is_regular_file(stem + ext, ec)) continue;
      const std::string base = fs::path(stem).filename().string();
      set_members({{base + ".hdr", name, fs::file_size(name, ec)}, {base + ext, stem + ext, fs::file_size(stem + ext, ec)}});
      return;
    }
  }
  if (name == "-") {
    held_ = true;
    std::ostringstream all;
    all << std::cin.rdbuf();
    held_data_ = all.str();
    size_ = held_data_.size();
    return;
  }
  // Opened once: a dataset pass reads thousands of small files, and each
  // open, stat and stream set-up is a share of the client's time per file.
  fd_ = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::strerror(errno));
  struct stat st {};
  const int e = ::fstat(fd_, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
  if (e != 0) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(e == EISDIR ? "is a directory" : std::strerror(e));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

Source::~Source() {
  if (fd_ >= 0) ::close(fd_);
}

void Source::read_at(uint64_t at, char* out, size_t n) {
  if (object_) {
    // What the first request brought, then the rest by ranges.
    size_t done = 0;
    if (at < object_head_.size()) {
      done = static_cast<size_t>(std::min<uint64_t>(n, object_head_.size() - at));
      std::memcpy(out, object_head_.data() + at, done);
    }
    if (done < n)
      read_object_parallel(object_info_, base_ + at + done, out + done, n - done, kObjectPieceBytes, kObjectPiecesInFlight);
    return;
  }
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out + done, n - done, static_cast<off_t>(base_ + at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw std::runtime_error(std::string("read failed: ") + std::strerror(errno));
    if (got == 0)
      throw std::runtime_error("read failed: the file is shorter than the " + std::to_string(size_) + " bytes it had");
    done += static_cast<size_t>(got);
  }
}

void Source::set_members(std::vector<Member> members) {
  store_ = std::move(members);
  std::sort(store_.begin(), store_.end(), [](const Member& a, const Member& b) { return a.key < b.key; });
  // The tar's layout, made once by libarchive without the data: each
  // member's header as written (unblocked, so each comes whole as it is
  // written) and where its data goes; libarchive pads the data it was not
  // given with zeros, which are only counted. Every read then copies each
  // file's bytes straight to their place.
  struct Out {
    uint64_t at = 0;
    std::string* capture = nullptr;
  } out;
  Writer a = tar_writer(&out, [](archive*, void* p, const void* bytes, size_t n) -> la_ssize_t {
    auto* o = static_cast<Out*>(p);
    if (o->capture) o->capture->append(static_cast<const char*>(bytes), n);
    o->at += n;
    return static_cast<la_ssize_t>(n);
  });
  for (Member& m : store_) {
    // The last member's data and padding (zeros) first: not part of this header.
    if (&m != &store_.front()) archive_write_finish_entry(a.get());
    out.capture = &m.header;
    write_header(a.get(), m.key, m.size);
    out.capture = nullptr;
    m.data_at = out.at;
  }
  archive_write_close(a.get());
  size_ = out.at;
}

void Source::read_member(const Member& m, char* out) const {
  const int fd = ::open(m.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(m.path + ": " + std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  for (uint64_t at = 0; at < m.size;) {
    const ssize_t got = ::pread(fd, out + at, std::min<uint64_t>(m.size - at, size_t{1} << 30), static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw std::runtime_error(m.path + ": changed while it was read (" + std::to_string(m.size) + " bytes listed)");
    at += static_cast<uint64_t>(got);
  }
}

void Source::read_into(char* out) const {
  // Each file read straight to its place, several at once (a store's chunks
  // are many files): reading is the cost of a local pass. Zeros are where
  // nothing is written (the caller's memory is zeroed).
  for (const Member& m : store_) std::memcpy(out + m.data_at - m.header.size(), m.header.data(), m.header.size());
  std::atomic<size_t> next{0};
  std::exception_ptr failed;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; (i = next++) < store_.size();) {
      try {
        read_member(store_[i], out + store_[i].data_at);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed) failed = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n = std::min<size_t>(store_.size(), std::max(1u, std::thread::hardware_concurrency()));
  for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (failed) std::rethrow_exception(failed);
}

void Source::store_chunks(size_t chunk, const std::function<bool(std::string&)>& fn) {
  std::string piece;
  piece.reserve(chunk);
  // Appends [from, from + n) (zeros where from is null), handing on each full piece.
  auto put = [&](const char* from, uint64_t n) {
    while (n > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, chunk - piece.size()));
      if (from) piece.append(from, take), from += take;
      else piece.append(take, '\0');
      n -= take;
      if (piece.size() == chunk) {
        if (!fn(piece)) return false;
        piece.clear();
      }
    }
    return true;
  };
  std::string data;
  uint64_t at = 0;
  for (const Member& m : store_) {
    if (!put(nullptr, m.data_at - m.header.size() - at) || !put(m.header.data(), m.header.size())) return;
    data.resize(static_cast<size_t>(m.size));
    read_member(m, data.data());
    if (!put(data.data(), m.size)) return;
    at = m.data_at + m.size;
  }
  if (!put(nullptr, size_ - at)) return;
  if (!piece.empty()) fn(piece);
}

std::string Source::read_all() {
  if (held_) return held_data_;
  if (!store_.empty()) {
    std::string all(static_cast<size_t>(size_), '\0');
    read_into(all.data());
    return all;
  }
  std::string data(static_cast<size_t>(size_), '\0');
  read_at(0, data.data(), data.size());
  return data;
}

void Source::for_each_chunk(size_t chunk, const std::function<bool(std::string&)>& fn) {
  if (!store_.empty()) return store_chunks(chunk, fn);
  if (held_) {
    for (size_t off = 0; off < held_data_.size(); off += chunk) {
      std::string piece = held_data_.substr(off, chunk);
      if (!fn(piece)) return;
    }
    return;
  }
  // The next piece is read while fn sends this one: reading the file and
  // writing to the socket (or the engine) overlap instead of taking turns.
  std::string pieces[2];
  auto read = [&](std::string& piece, uint64_t at) {
    piece.resize(static_cast<size_t>(std::min<uint64_t>(size_ - at, chunk)));
    read_at(at, piece.data(), piece.size());
  };
  if (size_ == 0) return;
  read(pieces[0], 0);
  uint64_t next_at = pieces[0].size();
  for (int k = 0;; k ^= 1) {
    std::future<void> ahead;
    if (next_at < size_) ahead = std::async(std::launch::async, read, std::ref(pieces[k ^ 1]), next_at);
    const bool more = fn(pieces[k]);
    if (ahead.valid()) ahead.get();  // also when fn stopped: the read must end before its buffer does
    if (!more || next_at == size_) return;
    next_at += pieces[k ^ 1].size();
  }
}

namespace {

std::string lower_case(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool image_extension(const std::filesystem::path& p) {
  static const char* kExtensions[] = {".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".tif", ".tiff", ".bmp", ".dib",
                                      ".webp", ".gif", ".exr", ".hdr", ".pic", ".pnm", ".pbm", ".pgm", ".ppm",
                                      ".pam", ".pfm", ".jp2", ".j2k", ".ras", ".sr", ".fits", ".fit", ".fts", ".fz", ".nii", ".dcm", ".dicom"};
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  std::string ext = lower(p.extension().string());
  // Gzip-compressed FITS and NIfTI as they are named: .fits.gz, .nii.gz...
  if (ext == ".gz") ext = lower(p.stem().extension().string());
  return std::find(std::begin(kExtensions), std::end(kExtensions), ext) != std::end(kExtensions);
}

// Every regular file under root whose path (relative to root when pattern
// is relative to it) satisfies keep; sorted, unreadable folders skipped.
template <class Keep>
std::vector<std::string> walk(const std::filesystem::path& root, Keep keep) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && is_zarr_store(it->path().string())) {
      out.push_back(it->path().string());
      it.disable_recursion_pending();
    } else if (it->is_regular_file(ec) && keep(it->path())) {
      out.push_back(it->path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string dataset_key(const std::string& name) {
  const size_t base = name.find_last_of("/:") == std::string::npos ? 0 : name.find_last_of("/:") + 1;
  const size_t dot = name.find('.', base);
  return dot == std::string::npos ? name : name.substr(0, dot);
}

std::string dicom_list_name(const std::vector<std::string>& files) {
  if (files.size() == 1) return files.front();
  return files.front() + " .. " + files.back() + " (" + std::to_string(files.size()) + " files)";
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& given, std::vector<std::string>* missing,
                                       const InputOptions& options, std::vector<std::string>* dicom_files,
                                       std::vector<std::string>* notes) {
  namespace fs = std::filesystem;
  const bool dicom_series = options.dicom_series;
  std::vector<std::string> extensions;
  for (const std::string& e : options.extensions) extensions.push_back(lower_case(e));
  std::vector<std::string> beside;
  for (const std::string& e : options.beside) beside.push_back(lower_case(e));
  auto ends_in = [](const std::string& path, const std::vector<std::string>& tails) {
    const std::string p = lower_case(path);
    return std::any_of(tails.begin(), tails.end(), [&](const std::string& e) {
      return p.size() > e.size() && p.compare(p.size() - e.size(), e.size(), e) == 0;
    });
  };
  auto wanted = [&](const std::string& path) {
    if (ends_in(path, beside)) return false;
    return extensions.empty() ? image_extension(path) : ends_in(path, extensions);
  };
  std::vector<std::string> out;
  auto member_use = [&](const std::string& member) {
    if (ends_in(member, beside)) return MemberUse::kBeside;
    return options.every_file || wanted(member) ? MemberUse::kInput : MemberUse::kLeftOut;
  };
  // Shards in buckets named themselves are listed several at once, ahead
  // (each listing waits on its store); their members keep their places.
  std::map<std::string, std::shared_future<ShardListing>> listed_ahead;
  // A shard's members in its place; any other file itself.
  auto add_file = [&](const std::string& f) {
    std::error_code ec;
    if (!is_shard_name(f) || (!is_object_name(f) && !fs::is_regular_file(f, ec))) return out.push_back(f);
    if (options.skip_shard && options.skip_shard(f)) return;
    // --dicom-series: a tar of DICOM files is their series, one input (the server reads it whole).
    if (dicom_series && !is_object_name(f) && lower_case(f).size() > 4 && lower_case(f).compare(lower_case(f).size() - 4, 4, ".tar") == 0)
      return out.push_back(f);
    try {
      const auto ahead = listed_ahead.find(f);
      const ShardListing listing = ahead != listed_ahead.end() ? ahead->second.get() : list_shard(f, member_use);
      if (listing.one_input && is_object_name(f))
        return missing->push_back(f + " (a Zarr store or NIfTI pair packed in a tar is read from a disk, not a bucket)");
      if (listing.one_input) return out.push_back(f);  // a Zarr store's or NIfTI pair's tar: the server reads it whole
      out.insert(out.end(), listing.inputs.begin(), listing.inputs.end());
      if (!listing.damage.empty())
        missing->push_back(f + " (damaged after its first " + std::to_string(listing.inputs.size() + listing.skipped) +
                           " members: " + listing.damage + ")");
      else if (listing.inputs.empty() && listing.skipped == 0)
        missing->push_back(f + " (an empty archive)");
      if (listing.skipped > 0 && notes)
        notes->push_back(f + ": " + std::to_string(listing.skipped) + " of its " +
                         std::to_string(listing.skipped + listing.beside + listing.inputs.size()) + " members left out, " +
                         (extensions.empty() ? "not images by their names (--extensions or --bytes to read them)"
                                             : "not of the extensions asked for"));
    } catch (const std::exception& e) {
      missing->push_back(f + " (" + e.what() + ")");
    }
  };
  // An object itself; an s3:// prefix ("s3://bucket/images/") or pattern
  // ("s3://bucket/images/*.jpg", "**" crossing folders), the objects its
  // listing holds, filtered as a folder's files are.
  auto add_object = [&](const std::string& arg) {
    const bool s3 = lower_case(arg.substr(0, 5)) == "s3://";
    const size_t slash = s3 ? arg.find('/', 5) : std::string::npos;
    const size_t wild = arg.find_first_of("*?[");
    const bool prefix = s3 && (slash == std::string::npos || arg.back() == '/');
    if (!s3 || (!prefix && wild == std::string::npos)) return add_file(arg);
    const std::string bucket_head = slash == std::string::npos ? arg + "/" : arg.substr(0, slash + 1);
    const std::string pattern = arg.substr(std::min(arg.size(), bucket_head.size()));
    std::string no_folders = pattern;
    for (size_t at; (at = no_folders.find("**/")) != std::string::npos;) no_folders.erase(at, 3);
    const int flags = pattern.find("**") == std::string::npos ? FNM_PATHNAME : 0;
    uint64_t left_out = 0;
    try {
      const std::string listed = wild == std::string::npos ? bucket_head + pattern : arg.substr(0, wild);
      auto keep = [&](const std::string& key) {
        if (wild != std::string::npos && fnmatch(pattern.c_str(), key.c_str(), flags) != 0 &&
            fnmatch(no_folders.c_str(), key.c_str(), flags) != 0)
          return false;
        // Shards a pattern names are read for their members, as a local
        // pattern's are (a prefix, as a folder, answers its images).
        if (options.every_file || wanted(key) || (wild != std::string::npos && is_shard_name(key))) return true;
        ++left_out;
        return false;
      };
      std::vector<ObjectInfo> found;
      if (auto on_server = options.list_on_server ? options.list_on_server(listed) : std::nullopt) {
        // Listed by a server that may fetch the prefix: keys as the store's listing gives them.
        for (std::string& name : *on_server)
          if (keep(name.substr(bucket_head.size()))) found.push_back({std::move(name)});
      } else {
        found = list_objects(listed, keep);
      }
      if (found.empty())
        missing->push_back(arg + (left_out > 0 ? (extensions.empty() ? " (no images under this prefix)" : " (no objects of those extensions)")
                                               : " (no objects under this prefix)"));
      for (const ObjectInfo& o : found) {
        if (wild != std::string::npos && !options.every_file && is_shard_name(o.name))
          add_file(o.name);
        else
          out.push_back(o.name);
      }
      if (left_out > 0 && notes)
        notes->push_back(arg + ": " + std::to_string(left_out) + " objects left out, " +
                         (extensions.empty() ? "not images by their names (--extensions or --bytes to read them)"
                                             : "not of the extensions asked for"));
    } catch (const std::exception& e) {
      missing->push_back(arg + " (" + e.what() + ")");
    }
  };
  // WebDataset's brace ranges first (a quoted "shard-{000..099}.tar"),
  // unless a file has that very name.
  std::vector<std::string> args;
  for (const std::string& arg : given) {
    std::error_code ec;
    if (arg.find('{') == std::string::npos || fs::exists(arg, ec)) {
      args.push_back(arg);
      continue;
    }
    try {
      for (std::string& a : expand_braces(arg)) args.push_back(std::move(a));
    } catch (const std::exception& e) {
      missing->push_back(e.what());
    }
  }
  {
    std::vector<std::string> shards;
    for (const std::string& arg : args)
      if (is_object_name(arg) && is_shard_name(arg) && arg.find_first_of("*?[") == std::string::npos &&
          !listed_ahead.count(arg) && !(options.skip_shard && options.skip_shard(arg))) {
        shards.push_back(arg);
        listed_ahead[arg];
      }
    auto next = std::make_shared<std::atomic<size_t>>(0);
    std::vector<std::shared_ptr<std::promise<ShardListing>>> promises;
    for (const std::string& name : shards) {
      promises.push_back(std::make_shared<std::promise<ShardListing>>());
      listed_ahead[name] = promises.back()->get_future().share();
    }
    std::vector<std::thread> listers;
    for (size_t t = 0; t < std::min(shards.size(), kShardsListedAtOnce); ++t)
      listers.emplace_back([&, next] {
        for (size_t k; (k = next->fetch_add(1)) < shards.size();) {
          try {
            promises[k]->set_value(list_shard(shards[k], member_use));
          } catch (...) {
            promises[k]->set_exception(std::current_exception());
          }
        }
      });
    for (std::thread& t : listers) t.join();
  }
  for (const std::string& arg : args) {
    std::error_code ec;
    if (is_object_name(arg)) {
      add_object(arg);
    } else if (arg == "-" || is_zarr_store(arg) || (dicom_series && fs::is_directory(arg, ec))) {
      out.push_back(arg);
    } else if (fs::is_regular_file(arg, ec)) {
      add_file(arg);
    } else if (fs::is_directory(arg, ec)) {
      const std::vector<std::string> found = walk(arg, [&](const fs::path& p) { return wanted(p.string()); });
      if (found.empty()) missing->push_back(arg + (extensions.empty() ? " (no images in this folder)" : " (no files of those extensions in this folder)"));
      out.insert(out.end(), found.begin(), found.end());
    } else if (arg.find_first_of("*?[") == std::string::npos) {
      out.push_back(arg);  // missing or unreadable: its analysis says why
    } else if (arg.find("**") != std::string::npos) {
      // ** crosses folders: walk from the fixed part and match whole paths.
      const std::string fixed = arg.substr(0, arg.find_first_of("*?["));
      const fs::path root = fixed.find('/') == std::string::npos ? fs::path(".") : fs::path(fixed.substr(0, fixed.rfind('/') + 1));
      const bool dot = root == fs::path(".");
      std::string no_folders = arg;
      for (size_t at; (at = no_folders.find("**/")) != std::string::npos;) no_folders.erase(at, 3);
      const std::vector<std::string> found = walk(root, [&](const fs::path& p) {
        std::string path = p.string();
        if (dot && path.rfind("./", 0) == 0) path = path.substr(2);
        // Without FNM_PATHNAME * also matches /; "**/" may also match no folder at all.
        return fnmatch(arg.c_str(), path.c_str(), 0) == 0 || fnmatch(no_folders.c_str(), path.c_str(), 0) == 0;
      });
      if (found.empty()) missing->push_back(arg);
      for (const std::string& f : found) add_file(dot && f.rfind("./", 0) == 0 ? f.substr(2) : f);
    } else {
      glob_t g{};
      if (glob(arg.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i)
          if (fs::is_regular_file(g.gl_pathv[i], ec)) add_file(g.gl_pathv[i]);
      } else {
        missing->push_back(arg);
      }
      globfree(&g);
    }
  }
  if (dicom_series && dicom_files) {
    // The DICOM files named: one series input, where the first was.
    std::vector<std::string> kept;
    size_t at = SIZE_MAX;
    for (const std::string& f : out) {
      std::error_code ec;
      if (f != "-" && fs::is_regular_file(f, ec) && is_dicom_file(f)) {
        if (at == SIZE_MAX) at = kept.size();
        dicom_files->push_back(f);
      } else {
        kept.push_back(f);
      }
    }
    if (at != SIZE_MAX) {
      kept.insert(kept.begin() + static_cast<std::ptrdiff_t>(at), dicom_list_name(*dicom_files));
    }
    out = std::move(kept);
  }
  return out;
}

}  // namespace imgstat::client
