// Remote's Aggregate call: a slice of --aggregate's files merged by the
// server itself, so that neither side pays a call and an answer a file nor
// this process parses and merges every file's answer (on_server.hpp says
// when the CLI goes this way).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "call_support.hpp"
#include "calls.hpp"
#include "sources.hpp"
#include "sources/input_error.hpp"

namespace imgstat::client {

Remote::AggregateMemory::~AggregateMemory() {
  if (data) munmap(data, capacity);
  if (fd >= 0) close(fd);
}

namespace {

// Bytes of inputs one message carries where the bytes travel in it.
constexpr uint64_t kAggregateMessageBytes = uint64_t{1} << 20;

// The file's bytes into out (size of them, as it was listed); else false
// with its failure, worded as a pass a call a file words it.
bool read_whole(const std::string& path, char* out, uint64_t size, std::string* code, std::string* error) {
  try {
    Source source(path);
    if (source.size() != size)
      throw std::runtime_error("its size changed since the pass listed it (" + std::to_string(size) + " bytes)");
    source.read_at(0, out, size);
    return true;
  } catch (const std::exception& e) {
    const auto* input = dynamic_cast<const imgstat::InputError*>(&e);
    *code = input ? input->code() : "NOT_FOUND";
    *error = std::string("cannot read: ") + e.what();
    return false;
  }
}

}  // namespace

uint64_t Remote::aggregate_file_limit() {
  v1::ServerInfo info;
  if (!server_info(deadline(), &info) || info.limits().aggregate_inputs() == 0) return 0;
  const uint64_t message = info.limits().max_message_bytes();
  return std::min<uint64_t>(kStreamChunk, message > kEnvelope ? message - kEnvelope : 0);
}

unsigned Remote::aggregate_window() {
  v1::ServerInfo info;
  return server_info(deadline(), &info) ? std::max(1u, info.limits().batch_window()) : 1u;
}

bool Remote::ready(AggregateMemory& memory, std::chrono::system_clock::time_point until) {
  if (memory.failed || !use_regions_) return false;
  if (memory.fd < 0) {
    // Sealed against shrinking, as the server asks of a memfd it maps.
    memory.fd = memfd_create("imgstat-aggregate", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void* p = MAP_FAILED;
    if (memory.fd >= 0 && ftruncate(memory.fd, static_cast<off_t>(memory.capacity)) == 0 &&
        fcntl(memory.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0)
      p = mmap(nullptr, memory.capacity, PROT_READ | PROT_WRITE, MAP_SHARED, memory.fd, 0);
    memory.failed = p == MAP_FAILED;
    if (memory.failed) return false;
    memory.data = static_cast<char*>(p);
  }
  if (memory.region_id.empty()) {
    v1::Region region;
    RegionSocketClient* socket = region_socket(until);
    memory.failed = !socket || !register_descriptor(*socket, memory.fd, 0, 0, "imgstat-aggregate", until, &region, true);
    if (memory.failed) return false;
    memory.region_id = region.region_id();
  }
  return true;
}

void Remote::release(AggregateMemory& memory) {
  if (!memory.region_id.empty()) unregister({memory.region_id}, deadline());
  memory.region_id.clear();
}

grpc::Status Remote::aggregate(std::span<const std::string> files, std::span<const uint64_t> sizes,
                               const v1::Input& like, const v1::Options& options, AggregateMemory* memory,
                               v1::AggregateResponse* out, std::vector<std::pair<size_t, Outcome>>* unread) {
  if (unreachable_now()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, kUnreachable);
  // Each input keeps the time a call of its own would have, a window of them at a time.
  auto until = std::chrono::system_clock::time_point::max();
  if (timeout_ > 0) {
    const uint64_t windows = (files.size() + aggregate_window() - 1) / aggregate_window();
    until = std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                   std::chrono::duration<double>(timeout_ * std::max<uint64_t>(1, windows)));
  }
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  auto backoff = kFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    out->Clear();
    unread->clear();
    const bool shared = memory && total <= memory->capacity && ready(*memory, until);
    const grpc::Status status = aggregate_once(files, sizes, like, options, shared ? memory : nullptr, until, out, unread);
    // UNAVAILABLE: the server went away with the call's partial; the whole
    // call goes again (to whichever server the channel picks next), so each
    // input is merged once.
    if (!retry_unavailable(status.error_code() == grpc::StatusCode::UNAVAILABLE, attempt, backoff, until)) return status;
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
    if (shared) memory->region_id.clear();  // a restarted server does not know it: registered again
  }
}

grpc::Status Remote::aggregate_once(std::span<const std::string> files, std::span<const uint64_t> sizes,
                                    const v1::Input& like, const v1::Options& options, AggregateMemory* memory,
                                    std::chrono::system_clock::time_point until, v1::AggregateResponse* out,
                                    std::vector<std::pair<size_t, Outcome>>* unread) {
  v1::ServerInfo info;
  const int per_message =
      server_info(until, &info) ? static_cast<int>(std::max(1u, info.limits().aggregate_inputs())) : 1;
  // The first message holds a window of inputs, each next one twice the one
  // before: the server begins once a window's files are read, not the slice's.
  int send_at = static_cast<int>(std::min<uint64_t>(per_message, aggregate_window()));
  // Bytes carried in one message: within the server's limit, with room for the rest of it.
  const uint64_t limit = message_limit(until);
  const uint64_t per_message_bytes = std::min(kAggregateMessageBytes, limit > kEnvelope ? limit - kEnvelope : 0);
  grpc::ClientContext ctx;
  prepare(ctx, until);
  std::unique_ptr<grpc::ClientWriter<v1::AggregateRequest>> writer = stub_->Aggregate(&ctx, out);
  v1::AggregateRequest message;
  *message.mutable_options() = options;
  std::vector<size_t> sent;  // a place on the call: its file's in files
  uint64_t offset = 0, bytes = 0;
  bool open = true;
  for (size_t i = 0; i < files.size() && open; offset += sizes[i], ++i) {
    std::string code, error;
    v1::Input input = like;
    input.set_name(files[i]);
    bool read = true;
    if (memory) {
      read = read_whole(files[i], memory->data + offset, sizes[i], &code, &error);
      // A file of no bytes names none (a length of 0 would be the region's rest): refused as empty.
      if (sizes[i] > 0) {
        v1::RegionRef* ref = input.mutable_region();
        ref->set_region_id(memory->region_id);
        ref->set_offset(offset);
        ref->set_length(sizes[i]);
      }
    } else {
      if (bytes > 0 && bytes + sizes[i] > per_message_bytes) {  // this file goes in the next message
        open = writer->Write(message);
        message.Clear();
        bytes = 0;
        if (!open) break;
      }
      std::string* data = input.mutable_data();
      data->resize(sizes[i]);
      read = read_whole(files[i], data->data(), sizes[i], &code, &error);
      bytes += sizes[i];
    }
    if (!read) {
      unread->emplace_back(i, failure(files[i], code, error));
      continue;
    }
    *message.add_inputs() = std::move(input);
    sent.push_back(i);
    if (message.inputs_size() >= send_at || bytes >= per_message_bytes) {
      open = writer->Write(message);
      message.Clear();
      bytes = 0;
      send_at = std::min(per_message, 2 * send_at);
    }
  }
  if (open && (message.has_options() || message.inputs_size() > 0)) open = writer->Write(message);
  if (open) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return status;
  for (v1::AggregateFailure& f : *out->mutable_failures()) {
    if (f.index() >= sent.size())
      return grpc::Status(grpc::StatusCode::INTERNAL, "the server's Aggregate answer names input " +
                                                          std::to_string(f.index()) + " of " +
                                                          std::to_string(sent.size()) + " sent");
    f.set_index(sent[f.index()]);
  }
  return status;
}

}  // namespace imgstat::client
