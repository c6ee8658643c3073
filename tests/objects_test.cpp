// Objects' pieces that need no store: a listing page parsed as S3 writes
// it (escaped keys, ETags in quotes, a continuation token) and refused when
// it is none; settings found as the AWS CLI finds them.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "sources/objects.hpp"

namespace imgstat {
namespace {

TEST(Listing, PageAsS3WritesIt) {
  const ListingPage page = parse_listing_page(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult><Name>b</Name><IsTruncated>true</IsTruncated>"
      "<Contents><Key>dir/a &amp; b &lt;c&gt;.png</Key><ETag>&quot;9dd4e461&quot;</ETag><Size>12345</Size></Contents>"
      "<Contents><Key>caf&#xe9;/&#20013;.jpg</Key><Size>18446744073709551615</Size><ETag>\"e-2\"</ETag></Contents>"
      "<Contents><Key>dir/</Key><Size>0</Size></Contents>"
      "<NextContinuationToken>1dK+p/q=&amp;</NextContinuationToken></ListBucketResult>");
  ASSERT_EQ(page.objects.size(), 3u);
  EXPECT_EQ(page.objects[0].name, "dir/a & b <c>.png");
  EXPECT_EQ(page.objects[0].etag, "\"9dd4e461\"");
  EXPECT_EQ(page.objects[0].size, 12345u);
  EXPECT_EQ(page.objects[1].name, "caf\xc3\xa9/\xe4\xb8\xad.jpg");
  EXPECT_EQ(page.objects[1].size, UINT64_MAX);
  EXPECT_EQ(page.objects[2].name, "dir/");
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next_token, "1dK+p/q=&");
  const ListingPage last = parse_listing_page("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
  EXPECT_TRUE(last.objects.empty());
  EXPECT_FALSE(last.truncated);
}

TEST(Listing, PagesThatAreNoneRefused) {
  for (const char* bad : {"<Contents><Key>a</Key><Size>1</Size>",                   // never closed
                          "<Contents><Key>a<Size>1</Size></Contents>",              // <Key> never closed
                          "<Contents><Key>a</Key><Size>12x</Size></Contents>",       // no number
                          "<Contents><Key>a</Key><Size>-1</Size></Contents>",        // negative
                          "<Contents><Key>a</Key><Size>99999999999999999999</Size></Contents>",  // past 64 bits
                          "<Contents><Key>a</Key></Contents>",                       // no size
                          "<Contents><Key>a &nbsp; b</Key><Size>1</Size></Contents>",  // an entity XML lacks
                          "<Contents><Key>a &#0; b</Key><Size>1</Size></Contents>",
                          "<Contents><Key>a &#x110000; b</Key><Size>1</Size></Contents>",
                          "<Contents><Key>a & b</Key><Size>1</Size></Contents>"}) {
    try {
      parse_listing_page(bad);
      ADD_FAILURE() << bad << ": parsed";
    } catch (const InputError& e) {
      EXPECT_EQ(e.code(), "FAILED_PRECONDITION") << bad;
    }
  }
}

class Settings : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                          "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "CURL_CA_BUNDLE"})
      unsetenv(v);
    dir_ = ::testing::TempDir() + "objects-settings-" + std::to_string(::getpid());
    std::system(("mkdir -p " + dir_).c_str());
    std::ofstream(dir_ + "/credentials") << "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = defaultsecret\n\n"
                                         << "[lab]\naws_access_key_id=LABKEY\n aws_secret_access_key = lab secret \n"
                                         << "aws_session_token = labtoken\n";
    std::ofstream(dir_ + "/config") << "[default]\nregion = eu-north-1\n\n[profile lab]\n# a comment\nregion=ap-south-2\n"
                                    << "endpoint_url = http://store.lab:9000\n";
    setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ + "/credentials").c_str(), 1);
    setenv("AWS_CONFIG_FILE", (dir_ + "/config").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    std::system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
};

TEST_F(Settings, DefaultProfileFromTheFiles) {
  const ObjectSettings s = ObjectSettings::from_environment();
  EXPECT_EQ(s.access_key, "DEFAULTKEY");
  EXPECT_EQ(s.secret_key, "defaultsecret");
  EXPECT_EQ(s.region, "eu-north-1");
  EXPECT_EQ(s.endpoint, "");
}

TEST_F(Settings, NamedProfileWithItsEndpoint) {
  setenv("AWS_PROFILE", "lab", 1);
  const ObjectSettings s = ObjectSettings::from_environment();
  EXPECT_EQ(s.access_key, "LABKEY");
  EXPECT_EQ(s.secret_key, "lab secret");
  EXPECT_EQ(s.session_token, "labtoken");
  EXPECT_EQ(s.region, "ap-south-2");
  EXPECT_EQ(s.endpoint, "http://store.lab:9000");
}

TEST_F(Settings, EnvironmentBeforeTheFiles) {
  setenv("AWS_PROFILE", "lab", 1);
  setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
  setenv("AWS_DEFAULT_REGION", "us-west-2", 1);
  setenv("AWS_ENDPOINT_URL", "https://general.example", 1);
  setenv("AWS_ENDPOINT_URL_S3", "https://s3.example", 1);
  setenv("CURL_CA_BUNDLE", "/etc/curl.pem", 1);
  ObjectSettings s = ObjectSettings::from_environment();
  EXPECT_EQ(s.access_key, "ENVKEY");
  EXPECT_EQ(s.secret_key, "envsecret");
  EXPECT_EQ(s.session_token, "");  // the profile's token belongs to its own keys
  EXPECT_EQ(s.region, "us-west-2");
  EXPECT_EQ(s.endpoint, "https://s3.example");
  EXPECT_EQ(s.ca_bundle, "/etc/curl.pem");
  setenv("AWS_REGION", "sa-east-1", 1);
  setenv("AWS_CA_BUNDLE", "/etc/aws.pem", 1);
  unsetenv("AWS_ENDPOINT_URL_S3");
  s = ObjectSettings::from_environment();
  EXPECT_EQ(s.region, "sa-east-1");
  EXPECT_EQ(s.ca_bundle, "/etc/aws.pem");
  EXPECT_EQ(s.endpoint, "https://general.example");
}

TEST(ObjectNames, Schemes) {
  EXPECT_TRUE(is_object_name("https://example.org/a.png"));
  EXPECT_TRUE(is_object_name("HTTP://example.org/a.png"));
  EXPECT_TRUE(is_object_name("s3://bucket/key.jpg"));
  EXPECT_FALSE(is_object_name("s3:/bucket/key.jpg"));
  EXPECT_FALSE(is_object_name("photos/https://x.png"));
  EXPECT_FALSE(is_object_name("file:///tmp/a.png"));
}

}  // namespace
}  // namespace imgstat
