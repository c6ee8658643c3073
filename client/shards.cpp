#include "shards.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace imgstat::client {

namespace {

// An archive in object storage is read through libarchive's callbacks:
// ranges that grow fourfold while reads follow one another (a tar's stream, up to
// kMaxStreamRead, several pieces in flight) and start small again after a
// jump (a zip's central directory and local headers, the header
// after a large member).
constexpr size_t kFirstStreamRead = size_t{64} << 10;
constexpr size_t kMaxStreamRead = size_t{16} << 20;
constexpr size_t kStreamPieceBytes = size_t{4} << 20;
constexpr int kStreamPiecesInFlight = 4;
// An uncompressed tar's members in a bucket are read a window at a time
// (few requests for many small members, which readers take in order);
// larger members by ranges of their own.
constexpr size_t kMemberWindowBytes = size_t{16} << 20;

struct ObjectStream {
  const ObjectInfo* object = nullptr;
  uint64_t at = 0;
  size_t next_read = kFirstStreamRead;
  std::string buffer;
  std::string code;  // the status of a read that failed ("" while none has)
};

la_ssize_t stream_read(archive* a, void* data, const void** out) {
  auto* s = static_cast<ObjectStream*>(data);
  const size_t n = static_cast<size_t>(std::min<uint64_t>(s->next_read, s->object->size - std::min(s->at, s->object->size)));
  if (n == 0) return 0;
  s->buffer.resize(n);
  try {
    read_object_parallel(*s->object, s->at, s->buffer.data(), n, kStreamPieceBytes, kStreamPiecesInFlight);
  } catch (const InputError& e) {
    s->code = e.code();
    archive_set_error(a, EIO, "%s", e.what());
    return -1;
  } catch (const std::exception& e) {
    s->code = "UNAVAILABLE";
    archive_set_error(a, EIO, "%s", e.what());
    return -1;
  }
  s->at += n;
  s->next_read = std::min(s->next_read * 4, kMaxStreamRead);
  *out = s->buffer.data();
  return static_cast<la_ssize_t>(n);
}

// A jump forward by less than the next read would bring is still a stream
// (the rest of a tar member that crosses a read's end): the reads stay
// large. Any other jump starts small again.
void jump(ObjectStream* s, uint64_t to) {
  if (to < s->at || to - s->at >= s->next_read) s->next_read = kFirstStreamRead;
  s->at = to;
}

la_int64_t stream_skip(archive*, void* data, la_int64_t request) {
  auto* s = static_cast<ObjectStream*>(data);
  const uint64_t k = std::min<uint64_t>(request > 0 ? static_cast<uint64_t>(request) : 0, s->object->size - std::min(s->at, s->object->size));
  jump(s, s->at + k);
  return static_cast<la_int64_t>(k);
}

la_int64_t stream_seek(archive*, void* data, la_int64_t offset, int whence) {
  auto* s = static_cast<ObjectStream*>(data);
  const la_int64_t base = whence == SEEK_CUR ? static_cast<la_int64_t>(s->at)
                          : whence == SEEK_END ? static_cast<la_int64_t>(s->object->size) : 0;
  const la_int64_t to = base + offset;
  if (to < 0 || static_cast<uint64_t>(to) > s->object->size) return ARCHIVE_FATAL;
  jump(s, static_cast<uint64_t>(to));
  return to;
}

// libarchive's reader, and where it reads an object from (kept as long as it).
struct Archive {
  std::unique_ptr<ObjectStream> stream;
  std::unique_ptr<archive, int (*)(archive*)> a{nullptr, archive_read_free};
  Archive() = default;
  Archive(Archive&& o) noexcept : stream(std::move(o.stream)), a(std::move(o.a)) {}
  Archive& operator=(Archive&& o) noexcept {
    reset();
    a = std::move(o.a);
    stream = std::move(o.stream);
    return *this;
  }
  ~Archive() { reset(); }
  archive* get() const { return a.get(); }
  explicit operator bool() const { return a != nullptr; }
  void reset() {
    a.reset();  // before the stream it may read from
    stream.reset();
  }
  // The status of a failed read: the object's, else DATA_LOSS.
  std::string code() const { return stream && !stream->code.empty() ? stream->code : "DATA_LOSS"; }
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() > n && s.compare(s.size() - n, n, tail) == 0;
}

std::string why(archive* a) {
  const char* w = archive_error_string(a);
  return w ? w : "no reason given";
}

// A file by its path, or an object (a shard in a bucket) by what opened it.
Archive open_archive(const std::string& path, const ObjectInfo* object = nullptr) {
  Archive a;
  a.a.reset(archive_read_new());
  if (!a) throw std::runtime_error("libarchive could not start");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  archive_read_support_format_zip(a.get());
  // libarchive seeks (a zip's central directory, an uncompressed tar's
  // members skipped) through the file it opens itself, or our callbacks.
  int rc = ARCHIVE_OK;
  if (object) {
    a.stream = std::make_unique<ObjectStream>();
    a.stream->object = object;
    archive_read_set_callback_data(a.get(), a.stream.get());
    archive_read_set_read_callback(a.get(), stream_read);
    archive_read_set_skip_callback(a.get(), stream_skip);
    archive_read_set_seek_callback(a.get(), stream_seek);
    rc = archive_read_open1(a.get());
  } else {
    rc = archive_read_open_filename(a.get(), path.c_str(), size_t{1} << 16);
  }
  if (rc != ARCHIVE_OK) {
    if (a.stream && !a.stream->code.empty()) throw InputError(a.stream->code, path + ": " + why(a.get()));
    throw std::runtime_error("not an archive libarchive reads (" + why(a.get()) + ")");
  }
  return a;
}

std::string member_name(archive_entry* e) {
  const char* p = archive_entry_pathname(e);
  std::string name = p ? p : "";
  while (name.rfind("./", 0) == 0) name.erase(0, 2);
  return name;
}

enum class Kind { kPlainTar, kZip, kStream };

struct Member {
  std::string name;       // in the archive
  size_t ordinal = 0;     // its header's place among all the archive's headers
  uint64_t size = 0;      // as its header declares
  uint64_t offset = 0;    // kPlainTar: where its bytes lie
  std::string error;      // why it cannot be read ("" when it can)
  bool input = true;      // else read beside an input (a key's label image)
};

// An archive opened and read up to (not including) header `next`.
struct Cursor {
  Archive a;
  size_t next = 0;
};

struct Shard {
  std::string path;
  ShardOptions options;
  bool in_object = false;  // a shard in a bucket (https://, s3://): read through object
  ObjectInfo object;
  Archive open() const { return open_archive(path, in_object ? &object : nullptr); }
  Kind kind = Kind::kPlainTar;
  uint64_t file_size = 0;
  std::vector<Member> members;  // the inputs, in archive order
  uint64_t inputs = 0;          // of members, those that are inputs (not beside one)
  std::unordered_map<size_t, size_t> by_ordinal;

  std::mutex mu;
  std::vector<Cursor> idle;                    // kZip: cursors given back
  Cursor stream;                               // kStream: the one decompressor
  bool streaming = false;                      // kStream: a reader is using it
  std::condition_variable stream_free;
  std::map<size_t, std::string> parked;        // kStream: members read for a later reader
  uint64_t parked_bytes = 0;
  // Members not yet opened: at none, the shard's cursors are closed (a run
  // over 10,000 shards must not keep each one's files and buffers open).
  std::vector<bool> opened;
  size_t unopened = 0;

  std::mutex window_mu;                        // kPlainTar in a bucket: the members' window
  uint64_t window_at = 0;
  std::string window;
};

// Zip cursors kept open for reuse (each an open file and libarchive's buffers).
constexpr size_t kMaxIdleCursors = 8;

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Shard>> shards;
  std::unordered_map<std::string, std::pair<Shard*, size_t>> inputs;  // name to shard and member
};

Registry& registry() {
  static Registry* r = new Registry;  // members are opened until the process ends
  return *r;
}

std::string input_name(const std::string& path, const std::string& member) { return path + ":" + member; }

// Reads the member the cursor's last header named: exactly its declared
// size. Memory follows the bytes that come, not what the header declares.
std::string read_data(const Archive& c, const Member& m, const std::string& path) {
  archive* a = c.get();
  std::string data;
  data.reserve(static_cast<size_t>(std::min<uint64_t>(m.size, uint64_t{16} << 20)));
  std::vector<char> block(size_t{1} << 20);
  for (;;) {
    const la_ssize_t got = archive_read_data(a, block.data(), block.size());
    if (got < 0) throw InputError(c.code(), input_name(path, m.name) + ": cannot be read from its archive (" + why(a) + ")");
    if (got == 0) break;
    if (static_cast<uint64_t>(got) > m.size - data.size())
      throw InputError("DATA_LOSS", input_name(path, m.name) + ": holds more than the " + std::to_string(m.size) +
                                        " bytes its header declares");
    data.append(block.data(), static_cast<size_t>(got));
  }
  if (data.size() != m.size)
    throw InputError("DATA_LOSS", input_name(path, m.name) + ": the archive holds " + std::to_string(data.size()) +
                                      " of the " + std::to_string(m.size) + " bytes its header declares");
  return data;
}

// Moves c to the header of ordinal o (reopening when it is past it).
void seek_header(Cursor& c, const Shard& s, const Member& m) {
  if (!c.a || c.next > m.ordinal) {
    c.a = s.open();
    c.next = 0;
  }
  archive_entry* e = nullptr;
  while (c.next <= m.ordinal) {
    const int rc = archive_read_next_header(c.a.get(), &e);
    if (rc == ARCHIVE_EOF || rc < ARCHIVE_WARN) {
      const std::string reason = rc == ARCHIVE_EOF ? std::string("it ends sooner") : why(c.a.get());
      const std::string code = rc == ARCHIVE_EOF ? std::string("DATA_LOSS") : c.a.code();
      c.a.reset();
      throw InputError(code, input_name(s.path, m.name) + ": the archive changed since it was listed (" + reason + ")");
    }
    ++c.next;
  }
  if (member_name(e) != m.name) {
    c.a.reset();
    throw InputError("DATA_LOSS", input_name(s.path, m.name) + ": the archive changed since it was listed");
  }
}

std::string read_zip_member(Shard& s, const Member& m) {
  Cursor c;
  {
    // The open cursor nearest before this member: skipping a zip's members
    // costs nothing, opening one reads its central directory.
    std::lock_guard<std::mutex> lock(s.mu);
    auto best = s.idle.end();
    for (auto it = s.idle.begin(); it != s.idle.end(); ++it)
      if (it->next <= m.ordinal && (best == s.idle.end() || it->next > best->next)) best = it;
    if (best != s.idle.end()) {
      c = std::move(*best);
      s.idle.erase(best);
    }
  }
  seek_header(c, s, m);
  std::string data = read_data(c.a, m, s.path);
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.unopened > 0 && s.idle.size() < kMaxIdleCursors) s.idle.push_back(std::move(c));
  if (s.unopened == 0) s.idle.clear();
  return data;
}

std::string read_stream_member(Shard& s, const Member& m) {
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    if (auto it = s.parked.find(m.ordinal); it != s.parked.end()) {
      std::string data = std::move(it->second);
      s.parked_bytes -= data.size();
      s.parked.erase(it);
      // The last member opened may come parked: the stream closes here then.
      if (s.unopened == 0 && !s.streaming) s.stream.a.reset();
      return data;
    }
    if (!s.streaming) break;
    s.stream_free.wait(lock);  // another reader decompresses: this member may come parked
  }
  s.streaming = true;
  struct Release {
    Shard& s;
    std::unique_lock<std::mutex>& lock;
    ~Release() {
      if (!lock.owns_lock()) lock.lock();
      if (s.unopened == 0) s.stream.a.reset();
      s.streaming = false;
      s.stream_free.notify_all();
    }
  } release{s, lock};
  lock.unlock();
  // One stream: every member between here and m is decompressed on the way,
  // and those that are inputs held for their readers (which take inputs in
  // order, so few are ahead of theirs).
  Cursor& c = s.stream;
  if (!c.a || c.next > m.ordinal) {
    c.a = s.open();
    c.next = 0;
  }
  archive_entry* e = nullptr;
  for (;;) {
    const int rc = archive_read_next_header(c.a.get(), &e);
    if (rc == ARCHIVE_EOF || rc < ARCHIVE_WARN) {
      const std::string reason = rc == ARCHIVE_EOF ? std::string("it ends sooner") : why(c.a.get());
      const std::string code = rc == ARCHIVE_EOF ? std::string("DATA_LOSS") : c.a.code();
      c.a.reset();
      throw InputError(code, input_name(s.path, m.name) + ": the archive changed since it was listed (" + reason + ")");
    }
    const size_t ordinal = c.next++;
    auto found = s.by_ordinal.find(ordinal);
    if (found == s.by_ordinal.end()) continue;
    const Member& here = s.members[found->second];
    if (member_name(e) != here.name) {
      c.a.reset();
      throw InputError("DATA_LOSS", input_name(s.path, m.name) + ": the archive changed since it was listed");
    }
    if (ordinal == m.ordinal) return read_data(c.a, m, s.path);
    if (!here.error.empty()) continue;
    std::string data;
    try {
      data = read_data(c.a, here, s.path);
    } catch (const InputError&) {
      continue;  // its own reader reads it again, and says why
    }
    lock.lock();
    // Past two members at the limit, members read ahead of their readers
    // are dropped (each reader then reads its own again).
    if (s.parked_bytes + data.size() <= 2 * s.options.max_held_member_bytes) {
      s.parked_bytes += data.size();
      s.parked[ordinal] = std::move(data);
      s.stream_free.notify_all();
    }
    lock.unlock();
  }
}

// A small member of an uncompressed tar in a bucket, from the window that
// holds it: readers take members in order, so one request serves many.
std::string read_window_member(Shard& s, const Member& m) {
  std::lock_guard<std::mutex> lock(s.window_mu);
  if (m.offset < s.window_at || m.offset + m.size > s.window_at + s.window.size()) {
    const uint64_t n = std::min<uint64_t>(s.file_size - m.offset, std::max<uint64_t>(kMemberWindowBytes, m.size));
    s.window.clear();
    s.window.resize(static_cast<size_t>(n));
    try {
      read_object_parallel(s.object, m.offset, s.window.data(), s.window.size(), kStreamPieceBytes, kStreamPiecesInFlight);
    } catch (...) {
      s.window.clear();
      throw;
    }
    s.window_at = m.offset;
  }
  std::string data = s.window.substr(static_cast<size_t>(m.offset - s.window_at), static_cast<size_t>(m.size));
  bool last = false;
  {
    std::lock_guard<std::mutex> shard_lock(s.mu);
    last = s.unopened == 0;
  }
  if (last) std::string().swap(s.window);  // a run over many shards keeps no window of a shard read
  return data;
}

}  // namespace

bool is_shard_name(const std::string& path) {
  const std::string p = lower(path);
  for (const char* ext : {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tbz", ".zip"})
    if (ends_with(p, ext)) return true;
  return false;
}

ShardListing list_shard(const std::string& path, const std::function<MemberUse(const std::string&)>& use,
                        const ShardOptions& options) {
  auto shard = std::make_unique<Shard>();
  shard->path = path;
  shard->options = options;
  if (is_object_name(path)) {
    // Its size and ETag: every later read is pinned to this object.
    std::string head;
    shard->object = open_object(path, kFirstStreamRead, &head);
    shard->in_object = true;
    shard->file_size = shard->object.size;
  } else {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw std::runtime_error(std::strerror(errno));
    shard->file_size = static_cast<uint64_t>(st.st_size);
  }
  Archive a = shard->open();
  ShardListing out;
  bool zarr_metadata = false;
  std::set<std::string> pair_stems, pair_data;  // NIfTI: X.hdr, and X.img or X.img.gz
  archive_entry* e = nullptr;
  for (size_t ordinal = 0;; ++ordinal) {
    const int rc = archive_read_next_header(a.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      // An object that cannot be read further is no damaged archive.
      if (a.stream && !a.stream->code.empty()) throw InputError(a.stream->code, why(a.get()));
      out.damage = why(a.get());
      break;
    }
    if (ordinal == 0) {
      const bool zip = (archive_format(a.get()) & ARCHIVE_FORMAT_BASE_MASK) == ARCHIVE_FORMAT_ZIP;
      // One filter is "none": the tar's bytes are the file's.
      shard->kind = zip ? Kind::kZip : archive_filter_count(a.get()) == 1 ? Kind::kPlainTar : Kind::kStream;
    }
    if (archive_entry_filetype(e) != AE_IFREG) continue;
    const std::string name = member_name(e);
    if (shard->kind == Kind::kPlainTar) {
      const std::string base = name.substr(name.find_last_of('/') == std::string::npos ? 0 : name.find_last_of('/') + 1);
      if (base == ".zarray" || base == ".zgroup" || base == ".zattrs") zarr_metadata = true;
      if (ends_with(base, ".hdr")) pair_stems.insert(name.substr(0, name.size() - 4));
      if (ends_with(base, ".img")) pair_data.insert(name.substr(0, name.size() - 4));
      if (ends_with(base, ".img.gz")) pair_data.insert(name.substr(0, name.size() - 7));
    }
    const MemberUse how = use(name);
    if (how == MemberUse::kLeftOut) {
      ++out.skipped;
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      if (registry().inputs.size() + shard->members.size() >= kMaxShardMembers)
        throw std::runtime_error("more than " + std::to_string(kMaxShardMembers) + " members in the shards named");
    }
    Member m;
    m.name = name;
    m.ordinal = ordinal;
    m.input = how == MemberUse::kInput;
    const la_int64_t declared = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
    m.size = declared > 0 ? static_cast<uint64_t>(declared) : 0;
    if (declared < 0) m.error = "its header declares no size";
    if (shard->kind == Kind::kPlainTar && m.error.empty()) {
      // The headers are consumed, the data not yet: what libarchive has
      // consumed of the file is where the member's bytes begin.
      m.offset = static_cast<uint64_t>(archive_filter_bytes(a.get(), 0));
      if (archive_entry_sparse_count(e) > 0) {
        m.error = "a sparse member (unpack the archive to read it)";
      } else if (m.offset > shard->file_size || m.size > shard->file_size - m.offset) {
        m.error = "its header declares " + std::to_string(m.size) + " bytes, the archive holds " +
                  std::to_string(shard->file_size - std::min(m.offset, shard->file_size)) + " after it";
      }
    } else if (m.error.empty() && m.size > options.max_held_member_bytes) {
      m.error = "RESOURCE_EXHAUSTED:a compressed member of " + std::to_string(m.size) +
                " bytes (at most " + std::to_string(options.max_held_member_bytes) +
                " are decompressed in memory; an uncompressed tar's members are streamed)";
    }
    shard->by_ordinal[ordinal] = shard->members.size();
    shard->members.push_back(std::move(m));
  }
  if (out.damage.empty() && shard->kind == Kind::kPlainTar) {
    const bool pair = std::any_of(pair_stems.begin(), pair_stems.end(), [&](const std::string& s) { return pair_data.count(s); });
    if (zarr_metadata || pair) {
      out.one_input = true;
      out.skipped = 0;
      return out;  // nothing registered: the tar is read whole, by its name
    }
  }
  shard->opened.assign(shard->members.size(), false);
  shard->unopened = shard->members.size();
  std::lock_guard<std::mutex> lock(registry().mu);
  for (size_t i = 0; i < shard->members.size(); ++i) {
    std::string name = input_name(path, shard->members[i].name);
    if (shard->members[i].input) {
      out.inputs.push_back(name);
      ++shard->inputs;
    } else
      ++out.beside;
    registry().inputs[std::move(name)] = {shard.get(), i};
  }
  registry().shards.push_back(std::move(shard));
  return out;
}

std::string shard_of(const std::string& name, uint64_t* inputs) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().inputs.find(name);
  if (it == registry().inputs.end()) return "";
  if (inputs) *inputs = it->second.first->inputs;
  return it->second.first->path;
}

bool is_shard_member(const std::string& name) {
  if (name.find(':') == std::string::npos) return false;
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().inputs.count(name) > 0;
}

uint64_t shard_member_size(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().inputs.find(name);
  return it == registry().inputs.end() ? 0 : it->second.first->members[it->second.second].size;
}

bool member_range(const std::string& name, MemberRange* out) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().inputs.find(name);
  if (it == registry().inputs.end()) return false;
  const Shard& s = *it->second.first;
  const Member& m = s.members[it->second.second];
  if (!s.in_object || s.kind != Kind::kPlainTar || !m.error.empty() || m.size == 0) return false;
  *out = {s.path, m.offset, m.size, s.object.size, s.object.etag};
  return true;
}

MemberBytes open_member(const std::string& name) {
  Shard* s = nullptr;
  size_t i = 0;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().inputs.find(name);
    if (it == registry().inputs.end()) throw InputError("NOT_FOUND", name + ": no such member listed");
    std::tie(s, i) = it->second;
  }
  const Member& m = s->members[i];
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->opened[i]) {
      s->opened[i] = true;
      --s->unopened;
    }
  }
  if (!m.error.empty()) {
    if (m.error.rfind("RESOURCE_EXHAUSTED:", 0) == 0) throw InputError("RESOURCE_EXHAUSTED", m.error.substr(19));
    throw InputError("DATA_LOSS", m.error);
  }
  MemberBytes out;
  out.size = m.size;
  if (s->kind == Kind::kPlainTar && s->in_object) {
    if (m.size > kMemberWindowBytes) {
      out.object = &s->object;  // read by ranges of its own, where it lies
      out.offset = m.offset;
      return out;
    }
    out.data = read_window_member(*s, m);
    out.held = true;
    return out;
  }
  if (s->kind == Kind::kPlainTar) {
    out.fd = ::open(s->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (out.fd < 0) throw InputError("NOT_FOUND", s->path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(out.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != s->file_size) {
      ::close(out.fd);
      throw InputError("DATA_LOSS", "its archive changed since it was listed (" + std::to_string(s->file_size) +
                                        " bytes then)");
    }
    out.offset = m.offset;
    return out;
  }
  out.data = s->kind == Kind::kZip ? read_zip_member(*s, m) : read_stream_member(*s, m);
  out.held = true;
  return out;
}

std::vector<std::string> expand_braces(const std::string& pattern) {
  // The first brace group that holds ".." or ",", expanded; the rest of the
  // name expanded again for each of its values.
  size_t open = std::string::npos, close = std::string::npos;
  for (size_t at = pattern.find('{'); at != std::string::npos; at = pattern.find('{', at + 1)) {
    size_t depth = 0, end = at;
    for (; end < pattern.size(); ++end) {
      if (pattern[end] == '{') ++depth;
      if (pattern[end] == '}' && --depth == 0) break;
    }
    if (end == pattern.size()) break;
    const std::string inner = pattern.substr(at + 1, end - at - 1);
    if (inner.find(',') != std::string::npos || inner.find("..") != std::string::npos) {
      open = at;
      close = end;
      break;
    }
  }
  if (open == std::string::npos) return {pattern};
  const std::string head = pattern.substr(0, open), inner = pattern.substr(open + 1, close - open - 1),
                    tail = pattern.substr(close + 1);
  std::vector<std::string> values;
  const size_t dots = inner.find("..");
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  };
  if (dots != std::string::npos && inner.find(',') == std::string::npos && digits(inner.substr(0, dots)) &&
      digits(inner.substr(dots + 2))) {
    const std::string lo = inner.substr(0, dots), hi = inner.substr(dots + 2);
    const uint64_t a = std::stoull(lo), b = std::stoull(hi);
    const uint64_t n = (a <= b ? b - a : a - b) + 1;
    if (n > kMaxBraceNames) throw std::runtime_error("{" + inner + "}: more than " + std::to_string(kMaxBraceNames) + " names");
    for (uint64_t k = 0; k < n; ++k) {
      std::string v = std::to_string(a <= b ? a + k : a - k);
      if (v.size() < lo.size()) v.insert(0, lo.size() - v.size(), '0');  // as WebDataset writes them: 000007
      values.push_back(v);
    }
  } else {
    size_t depth = 0, from = 0;
    for (size_t k = 0; k <= inner.size(); ++k) {
      if (k < inner.size() && inner[k] == '{') ++depth;
      if (k < inner.size() && inner[k] == '}') --depth;
      if (k == inner.size() || (inner[k] == ',' && depth == 0)) {
        values.push_back(inner.substr(from, k - from));
        from = k + 1;
      }
    }
  }
  std::vector<std::string> out;
  for (const std::string& v : values)
    for (const std::string& rest : expand_braces(v + tail)) {
      if (out.size() >= kMaxBraceNames)
        throw std::runtime_error(pattern + ": more than " + std::to_string(kMaxBraceNames) + " names");
      out.push_back(head + rest);
    }
  return out;
}

}  // namespace imgstat::client
