// WebDataset's brace names, and members read back from archives made here
// by libarchive (each kind of archive: where its members lie, held, or
// streamed in order), byte for byte against what was written.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shards.hpp"

namespace imgstat::client {
namespace {

TEST(Braces, RangesKeepTheirWidthAndListsTheirOrder) {
  EXPECT_EQ(expand_braces("shard-{000008..000011}.tar"),
            (std::vector<std::string>{"shard-000008.tar", "shard-000009.tar", "shard-000010.tar", "shard-000011.tar"}));
  EXPECT_EQ(expand_braces("s{3..1}"), (std::vector<std::string>{"s3", "s2", "s1"}));
  EXPECT_EQ(expand_braces("{a,b}-{0..1}.zip"), (std::vector<std::string>{"a-0.zip", "a-1.zip", "b-0.zip", "b-1.zip"}));
  EXPECT_EQ(expand_braces("x{a,{1..2}}y"), (std::vector<std::string>{"xay", "x1y", "x2y"}));
  EXPECT_EQ(expand_braces("{9..10}"), (std::vector<std::string>{"9", "10"}));
  // Braces that hold no range or list, and names without any, are themselves.
  EXPECT_EQ(expand_braces("plain{x}.tar"), (std::vector<std::string>{"plain{x}.tar"}));
  EXPECT_EQ(expand_braces("open{1..2.tar"), (std::vector<std::string>{"open{1..2.tar"}));
  EXPECT_EQ(expand_braces("a.tar"), (std::vector<std::string>{"a.tar"}));
  EXPECT_EQ(expand_braces("{,x}"), (std::vector<std::string>{"", "x"}));
  EXPECT_THROW(expand_braces("{0..99999999999}"), std::runtime_error);
  EXPECT_THROW(expand_braces("{0..9999}{0..9999}"), std::runtime_error);  // 10^8 names
}

TEST(Shards, NamesByExtension) {
  for (const char* yes : {"a.tar", "A.TAR", "x/b.tar.gz", "c.tgz", "d.tar.zst", "e.tar.xz", "f.tar.bz2", "g.zip"})
    EXPECT_TRUE(is_shard_name(yes)) << yes;
  for (const char* no : {"a.png", "tar", ".tar.png", "a.gz", "a.zst"}) EXPECT_FALSE(is_shard_name(no)) << no;
}

struct Written {
  std::string name;
  std::string data;
};

// An archive of these members in format (a libarchive format code) through
// filter (a libarchive filter code), a folder entry first.
std::string write_archive(const std::string& path, int format, int filter, const std::vector<Written>& files) {
  archive* a = archive_write_new();
  archive_write_set_format(a, format);
  if (filter != ARCHIVE_FILTER_NONE) archive_write_add_filter(a, filter);
  EXPECT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  archive_entry* e = archive_entry_new();
  archive_entry_set_pathname(e, "folder/");
  archive_entry_set_filetype(e, AE_IFDIR);
  archive_entry_set_perm(e, 0755);
  archive_write_header(a, e);
  for (const Written& f : files) {
    archive_entry_clear(e);
    archive_entry_set_pathname(e, f.name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(f.data.size()));
    EXPECT_EQ(archive_write_header(a, e), ARCHIVE_OK) << archive_error_string(a);
    if (!f.data.empty()) EXPECT_EQ(archive_write_data(a, f.data.data(), f.data.size()), static_cast<la_ssize_t>(f.data.size()));
  }
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  return path;
}

std::string read_member(const std::string& name) {
  MemberBytes m = open_member(name);
  if (m.held) return m.data;
  std::string out(static_cast<size_t>(m.size), '\0');
  EXPECT_EQ(pread(m.fd, out.data(), out.size(), static_cast<off_t>(m.offset)), static_cast<ssize_t>(out.size()));
  close(m.fd);
  return out;
}

class ShardKinds : public testing::TestWithParam<std::pair<int, int>> {};

TEST_P(ShardKinds, EveryMemberReadBackAsWrittenInAnyOrderAndAtOnce) {
  const auto [format, filter] = GetParam();
  std::mt19937 rng(format * 31 + filter);
  std::vector<Written> files;
  // Odd sizes (0, 1, a block and one, a long name), random bytes, and members that are no inputs.
  for (size_t size : {0, 1, 511, 512, 513, 70000, 3, 100000, 2}) {
    std::string data(size, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    files.push_back({"folder/" + std::to_string(files.size()) + "-" + std::to_string(size) + ".png", data});
  }
  files.push_back({std::string(150, 'n') + "/long.png", "long"});
  files.push_back({"folder/0.json", "{}"});
  files.push_back({"folder/0.seg.png", "labels"});
  const std::string path = testing::TempDir() + "/shard-" + std::to_string(format) + "-" + std::to_string(filter) +
                           (format == ARCHIVE_FORMAT_ZIP ? ".zip" : ".tar");
  write_archive(path, format, filter, files);
  auto ends = [](const std::string& m, const std::string& tail) {
    return m.size() > tail.size() && m.compare(m.size() - tail.size(), tail.size(), tail) == 0;
  };
  const ShardListing listing = list_shard(path, [&](const std::string& m) {
    return ends(m, ".seg.png") ? MemberUse::kBeside : ends(m, ".png") ? MemberUse::kInput : MemberUse::kLeftOut;
  });
  EXPECT_EQ(listing.skipped, 1u);
  EXPECT_EQ(listing.beside, 1u);
  EXPECT_EQ(listing.damage, "");
  ASSERT_EQ(listing.inputs.size(), files.size() - 2);
  for (size_t i = 0; i < listing.inputs.size(); ++i) {
    EXPECT_EQ(listing.inputs[i], path + ":" + files[i].name);
    EXPECT_TRUE(is_shard_member(listing.inputs[i]));
    EXPECT_EQ(shard_member_size(listing.inputs[i]), files[i].data.size());
  }
  EXPECT_FALSE(is_shard_member(path + ":folder/0.json"));
  // A member read beside the inputs: openable, no input; read between them below.
  const std::string beside = path + ":folder/0.seg.png";
  EXPECT_TRUE(is_shard_member(beside));
  EXPECT_EQ(read_member(beside), "labels");
  // Backwards (each read again from the start of a stream), then by four
  // readers at once as the CLI's readers take them: in order, racing.
  for (size_t i = listing.inputs.size(); i-- > 0;) EXPECT_EQ(read_member(listing.inputs[i]), files[i].data) << i;
  std::vector<std::thread> readers;
  std::vector<std::string> got(listing.inputs.size());
  std::atomic<size_t> next{0};
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&] {
      for (size_t i; (i = next++) < got.size();) got[i] = read_member(listing.inputs[i]);
    });
  for (std::thread& t : readers) t.join();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], files[i].data) << i;
}

INSTANTIATE_TEST_SUITE_P(Kinds, ShardKinds,
                         testing::Values(std::pair{ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE},
                                         std::pair{ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FILTER_NONE},
                                         std::pair{ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP},
                                         std::pair{ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FILTER_ZSTD},
                                         std::pair{ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_XZ},
                                         std::pair{ARCHIVE_FORMAT_ZIP, ARCHIVE_FILTER_NONE}));

size_t open_files() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(Shards, ShardsReadToTheEndKeepNoFileOpen) {
  // A pass over thousands of shards: each one's cursors closed once its
  // members are all opened, by readers at once.
  const size_t before = open_files();
  for (int k = 0; k < 24; ++k) {
    const bool zip = k % 2 == 0;
    const std::string path = testing::TempDir() + "/many-" + std::to_string(k) + (zip ? ".zip" : ".tar.gz");
    std::vector<Written> files;
    for (int i = 0; i < 9; ++i) files.push_back({std::to_string(i) + ".png", std::string(100 + i * 1000, char('a' + i))});
    write_archive(path, zip ? ARCHIVE_FORMAT_ZIP : ARCHIVE_FORMAT_TAR_PAX_RESTRICTED,
                  zip ? ARCHIVE_FILTER_NONE : ARCHIVE_FILTER_GZIP, files);
    const ShardListing listing = list_shard(path, [](const std::string&) { return MemberUse::kInput; });
    ASSERT_EQ(listing.inputs.size(), files.size());
    std::vector<std::thread> readers;
    std::atomic<size_t> next{0};
    for (int t = 0; t < 4; ++t)
      readers.emplace_back([&] {
        for (size_t i; (i = next++) < files.size();) EXPECT_EQ(read_member(listing.inputs[i]), files[i].data);
      });
    for (std::thread& t : readers) t.join();
  }
  EXPECT_EQ(open_files(), before);
}

TEST(Shards, DamageEndsTheListingAndIsSaid) {
  const std::string path = testing::TempDir() + "/cut.tar";
  write_archive(path, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE,
                {{"a.png", std::string(1000, 'a')}, {"b.png", std::string(5000, 'b')}, {"c.png", std::string(100, 'c')}});
  // Cut inside b: a whole, b declares more than the file holds after it.
  std::filesystem::resize_file(path, 512 * 2 + 1024 + 512 * 2 + 2000);
  const ShardListing listing = list_shard(path, [](const std::string&) { return MemberUse::kInput; });
  ASSERT_GE(listing.inputs.size(), 2u);
  EXPECT_EQ(read_member(listing.inputs[0]), std::string(1000, 'a'));
  try {
    open_member(listing.inputs[1]);
    ADD_FAILURE() << "b.png was read";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "DATA_LOSS");
    EXPECT_NE(std::string(e.what()).find("declares 5000 bytes"), std::string::npos) << e.what();
  }
  EXPECT_NE(listing.damage, "");
  EXPECT_THROW(list_shard(testing::TempDir() + "/no-such.tar", [](const std::string&) { return MemberUse::kInput; }), std::runtime_error);
}

}  // namespace
}  // namespace imgstat::client
