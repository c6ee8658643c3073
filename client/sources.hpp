// Inputs of the CLI: files (read in chunks when streamed), standard input,
// members of archives (shards.hpp), objects (https://, s3://: read by
// ranges, sources/objects.hpp), or several files that are one input,
// sent as one uncompressed tar of them: a Zarr store (a folder), a NIfTI
// pair (a .hdr and its .img).
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sources/objects.hpp"

namespace imgstat::client {

class Source {
 public:
  // "-" is standard input, read whole; a shard's member listed by
  // expand_inputs ("SHARD:MEMBER") is read from its archive; a folder with Zarr metadata
  // (is_zarr_store), and a NIfTI pair's .hdr (with its .img), are their
  // files as a tar, made as it is read. Throws
  // std::runtime_error when the file cannot be opened.
  // dicom_series: a folder is its DICOM files (recursively), one tar; so
  // are `files` (DICOM files named together), the input `name`.
  explicit Source(const std::string& name, bool dicom_series = false, const std::vector<std::string>& files = {});
  ~Source();
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  // A file whose bytes may be mapped or handed over as they lie.
  bool is_file() const { return !held_ && !member_ && !object_ && store_.empty(); }
  // Bytes that lie as they are in a file (a file, a member of an
  // uncompressed tar): its descriptor (this Source's) and where they begin
  // there, so a server on this host reads them itself; -1 otherwise.
  int descriptor() const { return is_file() || member_ ? fd_ : -1; }
  uint64_t offset_in_file() const { return base_; }
  std::string read_all();
  // Several files as one tar (a Zarr store, a NIfTI pair, a DICOM series).
  bool is_tar() const { return !store_.empty(); }
  // That tar written to out (size() bytes, zeroed), its files read at once.
  void read_into(char* out) const;
  // Calls fn with consecutive pieces of at most chunk bytes; stops early when
  // fn returns false. fn may swap the piece's buffer away, and back.
  void for_each_chunk(size_t chunk, const std::function<bool(std::string&)>& fn);
  // Bytes [at, at + n) of a file, a member or an object into out; throws
  // std::runtime_error (read failed, or shorter than it was).
  void read_at(uint64_t at, char* out, size_t n);

 private:
  void store_chunks(size_t chunk, const std::function<bool(std::string&)>& fn);
  struct Member {
    std::string key;   // its name in the tar
    std::string path;  // where it is read
    uint64_t size;
    std::string header;    // its tar header(s), as libarchive wrote them
    uint64_t data_at = 0;  // where its bytes go in the tar
  };
  void read_member(const Member& m, char* out) const;
  void set_members(std::vector<Member> members);
  std::vector<Member> store_;
  std::string name_;
  int fd_ = -1;
  std::string held_data_;  // standard input, or a member decompressed
  bool held_ = false;
  bool member_ = false;   // a member read where it lies in its archive: fd_ from base_
  bool object_ = false;   // an object larger than its first request: read by ranges
  ObjectInfo object_info_;
  std::string object_head_;  // its first bytes, from that first request
  uint64_t base_ = 0;
  uint64_t size_ = 0;
};

// A folder that holds .zarray, .zgroup or .zattrs: one input.
bool is_zarr_store(const std::string& path);

// A DICOM file: named .dcm or .dicom, or "DICM" at byte 128 (DICOMDIR left out).
bool is_dicom_file(const std::string& path);

// What expand_inputs takes from folders and shards.
struct InputOptions {
  // A folder named is one input: its DICOM files' series (Source's tar), and
  // so are the DICOM files named, together (dicom_files).
  bool dicom_series = false;
  // Every file of a folder and member of a shard, not only images (--bytes).
  bool every_file = false;
  // Only files and members with these extensions (".jpg", ".seg.png"; any
  // case), in place of the image extensions.
  std::vector<std::string> extensions;
  // Files and members read beside inputs, not inputs themselves: WebDataset
  // keys' label or mask images (--labels .seg.png).
  std::vector<std::string> beside;
  // Lists an s3:// prefix on a server that may fetch it: the names under
  // it, or nullopt where no server may (the client then lists it with its
  // own credentials). Unset: the client lists.
  std::function<std::optional<std::vector<std::string>>(const std::string& prefix)> list_on_server;
  // Shards left out whole, not listed (--resume: an earlier pass did them).
  std::function<bool(const std::string& shard)> skip_shard;
};

// WebDataset's key of a file or member: its path up to the first dot of its
// base name ("dir/000123.seg.png" is "dir/000123"); with an archive's name before a colon kept.
std::string dataset_key(const std::string& name);

// The files the CLI's arguments name: "-" and files as given; a folder, the
// images under it, recursively, by extension, sorted (a Zarr store under it
// one input); a pattern with * ? or
// [ (quoted, so the shell left it), the paths it matches, where "**" also
// crosses folders; names with WebDataset's braces ({000..099}, {a,b}) each;
// a shard (.tar, .tar.gz, .zip...: shards.hpp), each image member, as
// "SHARD:MEMBER". *missing collects patterns, folders and shards that match
// nothing (the name) or cannot be read (the name and why, in parentheses), *notes what was left out (members that are no
// images).
// dicom_series: a folder named is one input (Source's tar of its DICOM
// files), and so are the DICOM files named, together (*dicom_files), an
// input named for them where the first was.
std::vector<std::string> expand_inputs(const std::vector<std::string>& args, std::vector<std::string>* missing,
                                       const InputOptions& options = {}, std::vector<std::string>* dicom_files = nullptr,
                                       std::vector<std::string>* notes = nullptr);
// That input's name: "FIRST .. LAST (N files)", or the one file's.
std::string dicom_list_name(const std::vector<std::string>& files);

}  // namespace imgstat::client
