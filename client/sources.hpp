// Inputs of the CLI: files (read in chunks when streamed) or standard input.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace imgstat::client {

class Source {
 public:
  // "-" is standard input, read whole. Throws std::runtime_error when the
  // file cannot be opened.
  explicit Source(const std::string& name);
  ~Source();
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  bool is_file() const { return !is_stdin_; }
  std::string read_all();
  // Calls fn with consecutive pieces of at most chunk bytes; stops early when
  // fn returns false. fn may swap the piece's buffer away, and back.
  void for_each_chunk(size_t chunk, const std::function<bool(std::string&)>& fn);

 private:
  void read_at(uint64_t at, char* out, size_t n);
  std::string name_;
  int fd_ = -1;
  std::string stdin_data_;
  bool is_stdin_ = false;
  uint64_t size_ = 0;
};

// The files the CLI's arguments name: "-" and files as given; a folder, the
// images under it, recursively, by extension, sorted; a pattern with * ? or
// [ (quoted, so the shell left it), the paths it matches, where "**" also
// crosses folders. *missing collects patterns and folders that match nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& args, std::vector<std::string>* missing);

}  // namespace imgstat::client
