// --background-map and --background-mesh: an answer's background meshes
// written as float32 images (FITS by cfitsio, TIFF by libtiff), the
// background first and the background RMS second (FITS: the primary HDU and
// an extension, EXTNAME BACKGROUND and BACKGROUND_RMS; TIFF: two pages),
// channels as a third axis (FITS NAXIS3, TIFF samples per pixel).
#pragma once

#include <string>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat::client {

// at_image_size: interpolated to the image's size as photutils'
// Background2D.background is; else the meshes, one pixel a box. False with
// *error set when the answer has no meshes or the file cannot be written.
bool write_background_map(const v1::AnalyzeResponse& r, const std::string& path, bool at_image_size,
                          std::string* error);

}  // namespace imgstat::client
