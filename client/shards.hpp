// Datasets packed in archives, as WebDataset and most image sets ship them:
// tar shards (uncompressed, or gzip, zstd, xz, bzip2) and zip files. Each
// member an input is an input of its own, named SHARD:MEMBER. libarchive
// reads the headers and decompresses; nothing is unpacked to disk.
//
// How a member is read follows from the archive: an uncompressed tar's
// members lie whole in the file, and are read there by offset, in any order,
// streamed when large; a zip's come from its central directory, several
// readers each skipping to its own; a compressed tar is one stream, read in
// order by one decompressor per shard, members that a reader asks for ahead
// of an earlier one's reader held until that reader takes them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sources/input_error.hpp"
#include "sources/objects.hpp"

namespace imgstat::client {

// Past this a member that must be held to be read (a compressed tar's, a
// zip's) is refused: an uncompressed tar's are streamed from where they lie.
constexpr uint64_t kMaxHeldMemberBytes = uint64_t{512} << 20;

struct ShardOptions {
  uint64_t max_held_member_bytes = kMaxHeldMemberBytes;
};
// Members listed in all shards of one run (each a name and a few numbers).
constexpr uint64_t kMaxShardMembers = uint64_t{1} << 24;
// Names one brace pattern may stand for (LAION-5B is some 230,000 shards).
constexpr uint64_t kMaxBraceNames = uint64_t{1} << 20;

// An archive, by its name: .tar .tar.gz .tgz .tar.zst .tzst .tar.xz .txz
// .tar.bz2 .tbz2 .zip (any case).
bool is_shard_name(const std::string& path);

struct ShardListing {
  std::vector<std::string> inputs;  // "SHARD:MEMBER", in the archive's order
  uint64_t beside = 0;              // members read beside inputs
  uint64_t skipped = 0;             // regular members left out
  std::string damage;               // why the listing ended early ("" when it did not)
  // An uncompressed tar of one input the server reads whole (a Zarr store:
  // .zarray, .zgroup or .zattrs; a NIfTI pair, .hdr and .img): it is sent
  // as it is, not as members (nothing is listed in inputs).
  bool one_input = false;
};

// What a member is to a run: an input, read beside an input (a WebDataset
// key's label or mask image, KEY.seg.png), or neither (counted as left out).
enum class MemberUse { kInput, kBeside, kLeftOut };

// Lists a shard's regular members by use(member); inputs and members read
// beside them are known to open_member from then on. Throws
// std::runtime_error when the file cannot be opened or is no archive
// libarchive reads.
ShardListing list_shard(const std::string& path, const std::function<MemberUse(const std::string&)>& use,
                        const ShardOptions& options = {});

// A member read where it lies (fd or object, offset, size) or whole (data).
struct MemberBytes {
  int fd = -1;  // owned by the caller when set
  const ObjectInfo* object = nullptr;  // a large member of an uncompressed tar in a bucket (kept as long as the process)
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string data;
  bool held = false;  // data holds the member
};

// The shard a member listed by list_shard is in ("" for a name that is
// none), and how many of the shard's members are inputs.
std::string shard_of(const std::string& name, uint64_t* inputs = nullptr);
// Whether name is a member listed by list_shard (an input or beside one).
bool is_shard_member(const std::string& name);
// Its size as its header declares (0 for a name that is none).
uint64_t shard_member_size(const std::string& name);
// A member of an uncompressed tar in a bucket, where its bytes lie: a
// server that may fetch the bucket reads that range itself. False for any
// other name (and for a member that cannot be read: its reader says why).
struct MemberRange {
  std::string url;  // the shard's
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t object_size = 0;
  std::string etag;
};
bool member_range(const std::string& name, MemberRange* out);
// Its bytes. Throws InputError: DATA_LOSS for a member its archive does not
// hold whole or that changed, RESOURCE_EXHAUSTED past kMaxHeldMemberBytes.
MemberBytes open_member(const std::string& name);

// An input that cannot be read, and the status code that says why.
using imgstat::InputError;

// WebDataset's brace ranges and lists, as its shard names are written:
// "shard-{000000..000099}.tar" is 100 names, the width of the first bound
// kept; "{a,b}" each. Nested and repeated braces too; a name without any is itself.
std::vector<std::string> expand_braces(const std::string& pattern);

}  // namespace imgstat::client
