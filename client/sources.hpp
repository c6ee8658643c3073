// Inputs of the CLI: files (read in chunks when streamed), standard input,
// or several files that are one input, sent as one uncompressed tar of
// them: a Zarr store (a folder), a NIfTI pair (a .hdr and its .img).
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace imgstat::client {

class Source {
 public:
  // "-" is standard input, read whole; a folder with Zarr metadata
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
  bool is_file() const { return !is_stdin_ && store_.empty(); }
  std::string read_all();
  // Several files as one tar (a Zarr store, a NIfTI pair, a DICOM series).
  bool is_tar() const { return !store_.empty(); }
  // That tar written to out (size() bytes, zeroed), its files read at once.
  void read_into(char* out) const;
  // Calls fn with consecutive pieces of at most chunk bytes; stops early when
  // fn returns false. fn may swap the piece's buffer away, and back.
  void for_each_chunk(size_t chunk, const std::function<bool(std::string&)>& fn);

 private:
  void read_at(uint64_t at, char* out, size_t n);
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
  std::string stdin_data_;
  bool is_stdin_ = false;
  uint64_t size_ = 0;
};

// A folder that holds .zarray, .zgroup or .zattrs: one input.
bool is_zarr_store(const std::string& path);

// A DICOM file: named .dcm or .dicom, or "DICM" at byte 128 (DICOMDIR left out).
bool is_dicom_file(const std::string& path);

// The files the CLI's arguments name: "-" and files as given; a folder, the
// images under it, recursively, by extension, sorted (a Zarr store under it
// one input); a pattern with * ? or
// [ (quoted, so the shell left it), the paths it matches, where "**" also
// crosses folders. *missing collects patterns and folders that match nothing.
// dicom_series: a folder named is one input (Source's tar of its DICOM
// files), and so are the DICOM files named, together (*dicom_files), an
// input named for them where the first was.
std::vector<std::string> expand_inputs(const std::vector<std::string>& args, std::vector<std::string>* missing,
                                       bool dicom_series = false, std::vector<std::string>* dicom_files = nullptr);
// That input's name: "FIRST .. LAST (N files)", or the one file's.
std::string dicom_list_name(const std::vector<std::string>& files);

}  // namespace imgstat::client
