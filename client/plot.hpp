// --plot: a PNG of each channel's histogram, drawn over the bins the data
// occupies, with labelled axes.
#pragma once

#include <string>

#include "render.hpp"

namespace imgstat::client {

// Writes the histograms of o (which must hold them) to path as a PNG; false
// with *error set when there is nothing to draw or the file cannot be written.
bool write_plot(const Outcome& o, const std::string& path, std::string* error);

}  // namespace imgstat::client
