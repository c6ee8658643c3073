#include "core/regions.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>

#include "imgstat/error.hpp"

namespace imgstat {
namespace {

using Clock = std::chrono::steady_clock;

// A ticket not taken by RegisterRegion within this long is dropped with its descriptor.
constexpr auto kTicketLifetime = std::chrono::seconds(60);
// Descriptors waiting for RegisterRegion, all connections together: each is
// an open file of the server's, and its file table is shared with gRPC.
constexpr size_t kMaxPendingTickets = 1024;

// 128 random bits: ids and tickets are capabilities, never guessed.
std::string random_id(const char* prefix) {
  static thread_local std::random_device device;
  static const char* kHex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = device();
    for (int b = 0; b < 8; ++b) s += kHex[(v >> (4 * b)) & 15];
  }
  return s;
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

struct Descriptor {
  int fd = -1;
  explicit Descriptor(int f) : fd(f) {}
  ~Descriptor() {
    if (fd >= 0) close(fd);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
};

}  // namespace

class Region {
 public:
  // memory's deleter unmaps the host pages, closes the CUDA IPC handle, or
  // closes the descriptor of a region that is read (data null, fd set).
  Region(std::string id, std::string name, std::string owner, uint64_t session, std::shared_ptr<void> memory,
         const uint8_t* data, uint64_t size, bool on_device, int fd = -1, uint64_t file_offset = 0)
      : id(std::move(id)), name(std::move(name)), owner(std::move(owner)), session(session),
        memory(std::move(memory)), data(data), size(size), on_device(on_device), fd(fd), file_offset(file_offset) {}
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  v1::Region describe() const {
    v1::Region r;
    r.set_region_id(id);
    r.set_name(name);
    r.set_size(size);
    r.set_pinned(pinned != nullptr);
    r.set_on_device(on_device);
    r.set_mapped(data != nullptr && !on_device);
    return r;
  }

  const std::string id, name, owner;
  const uint64_t session;
  const std::shared_ptr<void> memory;
  const uint8_t* const data;
  const uint64_t size;
  const bool on_device;
  const int fd;
  const uint64_t file_offset;
  // The engine's page-lock, when it took one; declared last, so it is
  // released before the pages it locks go.
  std::shared_ptr<void> pinned;
};

struct RegionTable::Ticket {
  uint64_t session;
  std::unique_ptr<Descriptor> fd;
  uint64_t file_size;
  bool sealed;  // against shrinking: mapped; else read at each use
  Clock::time_point expires;
};

void read_region(const RegionBytes& bytes, uint64_t at, uint64_t n, uint8_t* out) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got = pread(bytes.fd, out + done, static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30)),
                              static_cast<off_t>(bytes.offset + at + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(ErrorCode::kFailedPrecondition, std::string("the region's file cannot be read: ") + strerror(errno));
    if (got == 0)
      fail(ErrorCode::kFailedPrecondition, "the region's file was cut short while it was read: it ends before byte " +
                                               std::to_string(bytes.offset + at + done) + " of the region");
    done += static_cast<uint64_t>(got);
  }
}

RegionTable::RegionTable(const Limits& limits, Pin pin, OpenIpc open_ipc)
    : limits_(limits), pin_(std::move(pin)), open_ipc_(std::move(open_ipc)) {}
RegionTable::~RegionTable() = default;

uint64_t RegionTable::open_session() {
  std::lock_guard<std::mutex> lock(mu_);
  if (sessions_.size() >= limits_.max_region_connections)
    fail(ErrorCode::kResourceExhausted, std::to_string(sessions_.size()) +
                                            " region socket connections are open, the limit (--max-region-connections)");
  const uint64_t id = next_session_++;
  sessions_[id];
  return id;
}

std::string RegionTable::session_ticket(uint64_t session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) fail(ErrorCode::kFailedPrecondition, "the region socket connection has ended");
  if (it->second.empty()) it->second = random_id("s-");
  return it->second;
}

std::string RegionTable::deposit(uint64_t session, int raw_fd) {
  auto fd = std::make_unique<Descriptor>(raw_fd);
  struct stat st;
  if (fstat(fd->fd, &st) != 0 || !S_ISREG(st.st_mode))
    fail(ErrorCode::kInvalidArgument, "the descriptor is not a regular file: pass a memfd (memfd_create)");
  const int flags = fcntl(fd->fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) == O_WRONLY)
    fail(ErrorCode::kInvalidArgument, "the descriptor is open for writing only: the server cannot read it");
  const int seals = fcntl(fd->fd, F_GET_SEALS);
  const bool sealed = seals >= 0 && (seals & F_SEAL_SHRINK);
  if (st.st_size <= 0) fail(ErrorCode::kInvalidArgument, "the descriptor's file is empty");
  std::lock_guard<std::mutex> lock(mu_);
  drop_expired_tickets();
  if (!sessions_.count(session)) fail(ErrorCode::kFailedPrecondition, "the region socket connection has ended");
  if (tickets_.size() >= kMaxPendingTickets)
    fail(ErrorCode::kResourceExhausted, std::to_string(tickets_.size()) +
                                            " descriptors wait to be registered, the server's limit: try again later");
  uint32_t pending = 0;
  for (const auto& [_, t] : tickets_) pending += t->session == session;
  if (pending >= limits_.max_region_tickets)
    fail(ErrorCode::kResourceExhausted, "this connection holds " + std::to_string(pending) +
                                            " descriptors not yet registered (--max-region-tickets): register or "
                                            "let them expire first");
  std::string ticket = random_id("t-");
  tickets_[ticket] = std::make_unique<Ticket>(
      Ticket{session, std::move(fd), static_cast<uint64_t>(st.st_size), sealed, Clock::now() + kTicketLifetime});
  return ticket;
}

void RegionTable::close_session(uint64_t session) {
  std::vector<std::shared_ptr<Region>> going;  // unmapped outside the lock, when no call holds them
  std::vector<std::unique_ptr<Ticket>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(session);
    for (auto it = tickets_.begin(); it != tickets_.end();)
      if (it->second->session == session) {
        dropped.push_back(std::move(it->second));
        it = tickets_.erase(it);
      } else {
        ++it;
      }
    for (auto it = regions_.begin(); it != regions_.end();)
      if (it->second->session == session) {
        Owner& o = owners_[it->second->owner];
        o.regions -= 1;
        o.bytes -= it->second->size;
        going.push_back(std::move(it->second));
        it = regions_.erase(it);
      } else {
        ++it;
      }
  }
}

void RegionTable::drop_expired_tickets() {
  const auto now = Clock::now();
  for (auto it = tickets_.begin(); it != tickets_.end();) it = it->second->expires <= now ? tickets_.erase(it) : ++it;
}

void RegionTable::check_room(const std::string& owner, uint64_t size) const {
  const auto it = owners_.find(owner);
  const Owner o = it == owners_.end() ? Owner{} : it->second;
  if (o.regions >= limits_.max_regions)
    fail(ErrorCode::kResourceExhausted,
         "the caller holds " + std::to_string(o.regions) + " regions, the limit (--max-regions)");
  if (size > limits_.max_region_bytes - std::min(limits_.max_region_bytes, o.bytes))
    fail(ErrorCode::kResourceExhausted, "the caller's regions would span " + mib(o.bytes + size) + ", over " +
                                            mib(limits_.max_region_bytes) + " (--max-region-bytes)");
}

v1::Region RegionTable::admit(std::shared_ptr<Region> region) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sessions_.count(region->session))
    fail(ErrorCode::kFailedPrecondition, "the region socket connection that passed it has ended");
  // Counted again: another registration of the same owner may have come in between.
  check_room(region->owner, region->size);
  Owner& o = owners_[region->owner];
  o.regions += 1;
  o.bytes += region->size;
  regions_[region->id] = region;
  return region->describe();
}

v1::Region RegionTable::register_region(const v1::RegisterRegionRequest& request, const std::string& owner) {
  if (request.has_cuda()) return register_device(request, owner);
  std::unique_ptr<Ticket> ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drop_expired_tickets();
    auto it = tickets_.find(request.ticket());
    if (it == tickets_.end())
      fail(ErrorCode::kNotFound, "no such ticket: each is good once, for a minute, while the region socket "
                                 "connection that passed its descriptor stays open");
    ticket = std::move(it->second);
    tickets_.erase(it);
  }
  const uint64_t file_size = ticket->file_size, offset = request.offset();
  if (offset >= file_size)
    fail(ErrorCode::kInvalidArgument, "offset " + std::to_string(offset) + " is not inside the descriptor's " +
                                          std::to_string(file_size) + " bytes");
  const uint64_t size = request.size() == 0 ? file_size - offset : request.size();
  if (size > file_size - offset)
    fail(ErrorCode::kInvalidArgument, "offset " + std::to_string(offset) + " + size " + std::to_string(size) +
                                          " is past the end of the descriptor's " + std::to_string(file_size) +
                                          " bytes");
  if (size > SIZE_MAX / 2) fail(ErrorCode::kInvalidArgument, "the region is too large to map");
  {  // the owner's room, checked before mapping
    std::lock_guard<std::mutex> lock(mu_);
    check_room(owner, size);
  }
  if (!ticket->sealed) {  // read at each use: never mapped, so never a SIGBUS
    const int fd = ticket->fd->fd;
    ticket->fd->fd = -1;
    std::shared_ptr<void> memory(nullptr, [fd](void*) { close(fd); });
    return admit(std::make_shared<Region>(random_id("r-"), request.name().substr(0, kMaxLoggedNameBytes), owner,
                                          ticket->session, memory, nullptr, size, false, fd, offset));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t map_offset = offset / page * page, skip = offset - map_offset;
  const size_t map_size = static_cast<size_t>(skip + size);
  void* map = mmap(nullptr, map_size, PROT_READ, MAP_SHARED, ticket->fd->fd, static_cast<off_t>(map_offset));
  if (map == MAP_FAILED) fail(ErrorCode::kInvalidArgument, std::string("the descriptor cannot be mapped: ") + strerror(errno));
  std::shared_ptr<void> memory(map, [map_size](void* p) { munmap(p, map_size); });
  auto region = std::make_shared<Region>(random_id("r-"), request.name().substr(0, kMaxLoggedNameBytes), owner,
                                         ticket->session, memory, static_cast<const uint8_t*>(map) + skip, size, false);
  if (pin_ && !request.pageable()) region->pinned = pin_(map, map_size);  // a second or more for tens of GiB: outside the lock
  return admit(std::move(region));
}

v1::Region RegionTable::register_device(const v1::RegisterRegionRequest& request, const std::string& owner) {
  if (!open_ipc_) fail(ErrorCode::kFailedPrecondition, "this server's engine reads no GPU memory (CUDA IPC regions)");
  uint64_t session = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [s, own] : sessions_)
      if (!own.empty() && own == request.ticket()) session = s;
    if (session == 0)
      fail(ErrorCode::kNotFound, "no such connection ticket: a GPU region takes the ticket the region socket "
                                 "answers to a byte sent without a descriptor, while that connection stays open");
    check_room(owner, request.cuda().size());
  }
  if (request.cuda().size() == 0) fail(ErrorCode::kInvalidArgument, "a GPU region's size must be at least 1");
  std::shared_ptr<void> memory = open_ipc_(request.cuda().handle(), request.cuda().size());
  auto region = std::make_shared<Region>(random_id("r-"), request.name().substr(0, kMaxLoggedNameBytes), owner, session,
                                         memory, static_cast<const uint8_t*>(memory.get()), request.cuda().size(), true);
  return admit(std::move(region));
}

std::vector<v1::Region> RegionTable::list(const std::string& owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::Region> out;
  for (const auto& [_, r] : regions_)
    if (r->owner == owner) out.push_back(r->describe());
  return out;
}

void RegionTable::unregister(const std::string& region_id, const std::string& owner) {
  std::shared_ptr<Region> going;  // unmapped outside the lock, once no call holds it
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(region_id);
  // Another caller's region is as absent as one that never was.
  if (it == regions_.end() || it->second->owner != owner)
    fail(ErrorCode::kNotFound, "no region " + region_id.substr(0, 64) + " of this caller");
  Owner& o = owners_[owner];
  o.regions -= 1;
  o.bytes -= it->second->size;
  going = std::move(it->second);
  regions_.erase(it);
}

RegionBytes RegionTable::resolve(const v1::RegionRef& ref, const std::string& owner) const {
  std::shared_ptr<const Region> region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(ref.region_id());
    if (it == regions_.end() || it->second->owner != owner)
      fail(ErrorCode::kNotFound, "no region " + ref.region_id().substr(0, 64) + " of this caller");
    region = it->second;
  }
  if (ref.offset() > region->size)
    fail(ErrorCode::kInvalidArgument, "region offset " + std::to_string(ref.offset()) + " is past the region's " +
                                          std::to_string(region->size) + " bytes");
  const uint64_t length = ref.length() == 0 ? region->size - ref.offset() : ref.length();
  if (length > region->size - ref.offset())
    fail(ErrorCode::kInvalidArgument, "region offset " + std::to_string(ref.offset()) + " + length " +
                                          std::to_string(length) + " is past the region's " +
                                          std::to_string(region->size) + " bytes");
  RegionBytes out;
  out.data = region->data ? region->data + ref.offset() : nullptr;
  out.size = length;
  out.on_device = region->on_device;
  out.fd = region->fd;
  out.offset = region->file_offset + ref.offset();
  out.region = std::move(region);
  return out;
}

size_t RegionTable::regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return regions_.size();
}

size_t RegionTable::pending_tickets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tickets_.size();
}

}  // namespace imgstat
