// What decoding libraries print on their own — libpng's warnings and errors
// (fprintf to stderr), OpenCV's imdecode and log lines (std::cerr) — caught
// instead of reaching a terminal or a log raw. A line printed while a
// LibraryMessages scope is open on the same thread belongs to that scope (a
// request's decode: it becomes part of its error or warnings); any other
// line goes to the handler.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace imgstat {

// Routes the process's stderr FILE and std::cerr through the catcher, once;
// later calls only replace the handler. The handler gets each stray line
// (control characters replaced, cut to 500 bytes). Call it before any other
// thread starts, after anything that keeps the original stderr FILE (a
// logger's sink) was made.
void catch_library_messages(std::function<void(const std::string& line)> handler);

// The stream std::cerr was before catch_library_messages: the program's own
// messages go there.
std::ostream& program_stderr();

class LibraryMessages {
 public:
  LibraryMessages();
  ~LibraryMessages();
  LibraryMessages(const LibraryMessages&) = delete;
  LibraryMessages& operator=(const LibraryMessages&) = delete;

  // The distinct lines printed on this thread since the scope opened (at
  // most 8), oldest first.
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  friend void deliver_library_line(std::string line);
  std::vector<std::string> lines_;
  LibraryMessages* outer_;
};

}  // namespace imgstat
