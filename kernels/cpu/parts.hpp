// Parts of an image on the CPU engine: rectangles and tiles as views,
// masks as runs of selected pixels, labels counted per part, floats gathered.
#pragma once

#include "imgstat/engine.hpp"

namespace imgstat::cpu {

// Engine::analyze_parts on the calling thread's arena.
Result analyze_parts_on_cpu(const ImageView& image, const Parts& parts, const StatsRequest& request);

}  // namespace imgstat::cpu
