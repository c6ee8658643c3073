// libFuzzer: any bytes as a page of an S3 listing (ListObjectsV2's XML), as
// a store or anything posing as one may answer: its objects, or an
// InputError; nothing read outside the page.
#include <string>

#include "sources/objects.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const imgstat::ListingPage page = imgstat::parse_listing_page(std::string(reinterpret_cast<const char*>(data), size));
    // Every object comes from a <Contents> of its own: never more than the page could hold.
    if (page.objects.size() > size / 21) __builtin_trap();
  } catch (const imgstat::InputError&) {
  }
  return 0;
}
