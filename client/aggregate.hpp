// --aggregate's answers: the merged state (core/aggregation.hpp) as one
// outcome per kind of image, and a partial's file.
#pragma once

#include <string>
#include <vector>

#include "core/aggregation.hpp"
#include "imgstat/v1/imgstat.pb.h"
#include "render.hpp"

namespace imgstat::client {

// One outcome per kind of image, in the order each kind was first met.
std::vector<Outcome> outcomes_of(const Aggregation& aggregation);
// Why a statistic asked for is missing from every float group (float
// histograms need --range; float distributions are not merged).
std::vector<std::string> notes_of(const Aggregation& aggregation);

// A partial's file: the proto's binary form. Written whole or not at all
// (a temporary beside it, synced, renamed over it), so that a pass stopped
// while writing leaves the one before. False with *why when it cannot be.
bool write_partial(const std::string& path, const v1::Partial& partial, std::string* why);
bool read_partial(const std::string& path, v1::Partial* partial, std::string* why);

}  // namespace imgstat::client
