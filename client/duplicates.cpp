#include "duplicates.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace imgstat::client {
namespace {

struct UnionFind {
  std::vector<uint32_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0u); }
  uint32_t find(uint32_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  }
  void join(uint32_t a, uint32_t b) {
    a = find(a), b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

// Groups of at least two members from a union-find over n items, each
// group in item order, groups in the order of their first item.
std::vector<std::vector<uint32_t>> groups_of(UnionFind& u, size_t n) {
  std::unordered_map<uint32_t, size_t> at;
  std::vector<std::vector<uint32_t>> out;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t r = u.find(static_cast<uint32_t>(i));
    auto [it, added] = at.emplace(r, out.size());
    if (added) out.emplace_back();
    out[it->second].push_back(i);
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const auto& g) { return g.size() < 2; }), out.end());
  return out;
}

}  // namespace

void DuplicateFinder::add(const std::string& file, const v1::AnalyzeResponse& r) {
  if (!r.has_hashes() || r.hashes().pixels().size() != 16) return;
  images_.push_back({file, r.hashes().pixels(), r.hashes().has_phash(), r.hashes().phash()});
}

DuplicateFinder::Groups DuplicateFinder::groups() const {
  Groups g;
  g.images = images_.size();
  // Exact: equal pixel hashes.
  std::unordered_map<std::string, uint32_t> first;  // pixels -> its first image
  std::vector<uint32_t> same(images_.size());
  UnionFind exact(images_.size());
  for (uint32_t i = 0; i < images_.size(); ++i) {
    auto [it, added] = first.emplace(images_[i].pixels, i);
    same[i] = it->second;
    if (!added) exact.join(it->second, i);
  }
  for (const auto& members : groups_of(exact, images_.size())) {
    g.exact.emplace_back();
    for (uint32_t i : members) g.exact.back().push_back(images_[i].file);
  }
  // Near: over the distinct images (one per exact group) with a phash, the
  // distinct phashes first, then pairs of those within distance_.
  std::vector<uint32_t> nodes;  // distinct images with a phash
  for (uint32_t i = 0; i < images_.size(); ++i)
    if (same[i] == i && images_[i].has_phash) nodes.push_back(i);
  g.with_phash = 0;
  for (const Image& im : images_) g.with_phash += im.has_phash;
  UnionFind near(nodes.size());
  std::unordered_map<uint64_t, uint32_t> by_phash;  // phash -> its first node
  std::vector<uint64_t> distinct;                   // distinct phashes, and their first node
  std::vector<uint32_t> distinct_node;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    auto [it, added] = by_phash.emplace(images_[nodes[n]].phash, n);
    if (added) {
      distinct.push_back(images_[nodes[n]].phash);
      distinct_node.push_back(n);
    } else {
      near.join(it->second, n);
    }
  }
  if (distance_ > 0 && distinct.size() > 1) {
    const uint32_t blocks = distance_ + 1;
    std::vector<std::pair<int, int>> spans;  // bit offset and width of each block
    for (uint32_t b = 0, at = 0; b < blocks; ++b) {
      const int width = static_cast<int>(64 / blocks + (b < 64 % blocks ? 1 : 0));
      spans.emplace_back(static_cast<int>(at), width);
      at += static_cast<uint32_t>(width);
    }
    for (const auto& [offset, width] : spans) {
      std::unordered_map<uint64_t, std::vector<uint32_t>> bucket;
      const uint64_t mask = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
      for (uint32_t d = 0; d < distinct.size(); ++d) {
        std::vector<uint32_t>& seen = bucket[(distinct[d] >> offset) & mask];
        for (uint32_t e : seen)
          if (static_cast<uint32_t>(std::popcount(distinct[d] ^ distinct[e])) <= distance_)
            near.join(distinct_node[d], distinct_node[e]);
        seen.push_back(d);
      }
    }
  }
  std::vector<std::vector<uint32_t>> copies(images_.size());  // each distinct image's exact duplicates, itself first
  for (uint32_t i = 0; i < images_.size(); ++i) copies[same[i]].push_back(i);
  for (const auto& members : groups_of(near, nodes.size())) {
    g.near.emplace_back();
    for (uint32_t n : members)
      for (uint32_t i : copies[nodes[n]]) g.near.back().push_back(images_[i].file);
  }
  return g;
}

std::string DuplicateFinder::json() const {
  const Groups g = groups();
  nlohmann::json j = {{"images", g.images},
                      {"images_with_phash", g.with_phash},
                      {"pixel_hash", "XXH3-128 of the decoded pixels"},
                      {"phash_distance", distance_},
                      {"exact", g.exact},
                      {"near", g.near}};
  return nlohmann::json({{"dataset_duplicates", j}}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string DuplicateFinder::table() const {
  const Groups g = groups();
  std::string out = "duplicates over " + std::to_string(g.images) + " images: " + std::to_string(g.exact.size()) +
                    " groups of equal pixels, " + std::to_string(g.near.size()) + " of near duplicates (phash within " +
                    std::to_string(distance_) + " bits)\n";
  auto list = [&](const char* what, const std::vector<std::vector<std::string>>& groups) {
    size_t shown = 0;
    for (const auto& group : groups) {
      if (++shown > 20) {
        out += "  ... " + std::to_string(groups.size() - 20) + " more " + what + " groups (--json lists them all)\n";
        break;
      }
      out += std::string("  ") + what + ":";
      for (const std::string& f : group) out += " " + f;
      out += "\n";
    }
  };
  list("exact", g.exact);
  list("near", g.near);
  return out;
}

}  // namespace imgstat::client
