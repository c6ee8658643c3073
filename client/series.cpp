#include "render.hpp"

namespace imgstat::client {

std::vector<Outcome> each_series(Outcome o) {
  std::vector<Outcome> out;
  if (!o.ok || o.response.facts().series_count() <= 1) {
    out.push_back(std::move(o));
    return out;
  }
  google::protobuf::RepeatedPtrField<v1::AnalyzeResponse> others;
  others.Swap(o.response.mutable_other_series());
  const std::string file = o.file;
  o.file = file + " [series " + std::to_string(o.response.facts().series()) + "]";
  out.push_back(std::move(o));
  for (v1::AnalyzeResponse& r : others) {
    Outcome s = out.front();
    s.file = file + " [series " + std::to_string(r.facts().series()) + "]";
    s.response = std::move(r);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace imgstat::client
