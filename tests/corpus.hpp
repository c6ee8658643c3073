// The shared corpus (../shared/corpus beside the repository, or
// $IMGSTAT_CORPUS): files, MANIFEST rows and reference.jsonl entries.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace imgstat::testing {

inline std::filesystem::path corpus_dir() {
  if (const char* env = std::getenv("IMGSTAT_CORPUS")) return env;
  return IMGSTAT_DEFAULT_CORPUS;
}

inline std::string slurp_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline bool have_corpus() { return std::filesystem::exists(corpus_dir() / "reference.jsonl"); }

inline std::vector<nlohmann::json> corpus_references() {
  std::vector<nlohmann::json> rows;
  std::ifstream in(corpus_dir() / "reference.jsonl");
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

// MANIFEST.tsv rows as column name -> value.
inline std::vector<std::map<std::string, std::string>> corpus_manifest() {
  std::ifstream in(corpus_dir() / "MANIFEST.tsv");
  std::string line;
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream is(s);
    while (std::getline(is, cur, '\t')) out.push_back(cur);
    if (!s.empty() && s.back() == '\t') out.push_back("");
    return out;
  };
  if (std::getline(in, line)) header = split(line);
  while (std::getline(in, line)) {
    const auto cells = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace imgstat::testing
