#include "background_map.hpp"

#include <fitsio.h>
#include <tiffio.h>

#include <cstdio>
#include <vector>

#include "imgstat/background_map.hpp"

namespace imgstat::client {
namespace {

struct Planes {
  uint64_t width = 0, height = 0;
  std::vector<std::vector<float>> background, rms;  // per channel, row-major
};

BackgroundMesh mesh_of(const v1::BackgroundMesh& m) {
  BackgroundMesh out;
  out.rows = m.rows();
  out.columns = m.columns();
  out.box_rows = m.box_rows();
  out.box_columns = m.box_columns();
  out.background.assign(m.background().begin(), m.background().end());
  out.rms.assign(m.background_rms().begin(), m.background_rms().end());
  return out;
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

bool ends_with(const std::string& s, const std::string& tail) {
  if (s.size() < tail.size()) return false;
  for (size_t i = 0; i < tail.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - tail.size() + i])) != tail[i]) return false;
  return true;
}

bool write_fits(const Planes& p, const std::string& path, std::string* error) {
  std::remove(path.c_str());  // cfitsio will not overwrite
  fitsfile* f = nullptr;
  int status = 0;
  const int naxis = p.background.size() > 1 ? 3 : 2;
  long axes[3] = {static_cast<long>(p.width), static_cast<long>(p.height), static_cast<long>(p.background.size())};
  fits_create_diskfile(&f, path.c_str(), &status);  // the name as given: no extended filename syntax
  const char* names[2] = {"BACKGROUND", "BACKGROUND_RMS"};
  const std::vector<std::vector<float>>* planes[2] = {&p.background, &p.rms};
  for (int hdu = 0; hdu < 2 && !status; ++hdu) {
    fits_create_img(f, FLOAT_IMG, naxis, axes, &status);
    fits_update_key_str(f, "EXTNAME", names[hdu], nullptr, &status);
    fits_update_key_str(f, "CREATOR", "imgstat", "photutils Background2D's meshes", &status);
    LONGLONG first = 1;
    for (const std::vector<float>& plane : *planes[hdu]) {
      fits_write_img(f, TFLOAT, first, static_cast<LONGLONG>(plane.size()), const_cast<float*>(plane.data()), &status);
      first += static_cast<LONGLONG>(plane.size());
    }
  }
  int close_status = 0;
  if (f) fits_close_file(f, &close_status);
  if (status || close_status) {
    char text[FLEN_STATUS];
    fits_get_errstatus(status ? status : close_status, text);
    *error = "cannot write " + path + " as FITS: " + text;
    return false;
  }
  return true;
}

bool write_tiff(const Planes& p, const std::string& path, std::string* error) {
  TIFF* t = TIFFOpen(path.c_str(), p.width * p.height * p.background.size() * 8 >= (uint64_t{1} << 31) ? "w8" : "w");
  if (!t) {
    *error = "cannot open " + path + " to write";
    return false;
  }
  const uint32_t channels = static_cast<uint32_t>(p.background.size());
  const std::vector<std::vector<float>>* planes[2] = {&p.background, &p.rms};
  const char* names[2] = {"background", "background RMS"};
  std::vector<float> row(p.width * channels);
  bool ok = true;
  for (int page = 0; page < 2 && ok; ++page) {
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, static_cast<uint32_t>(p.width));
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, static_cast<uint32_t>(p.height));
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, channels);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 32);
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_IEEEFP);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, channels >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
    if (channels == 2 || channels == 4) {
      uint16_t extra = EXTRASAMPLE_UNSPECIFIED;
      TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &extra);
    }
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, TIFFDefaultStripSize(t, 0));
    TIFFSetField(t, TIFFTAG_IMAGEDESCRIPTION, names[page]);
    TIFFSetField(t, TIFFTAG_SUBFILETYPE, page ? FILETYPE_PAGE : 0);
    for (uint64_t y = 0; y < p.height && ok; ++y) {
      for (uint64_t x = 0; x < p.width; ++x)
        for (uint32_t c = 0; c < channels; ++c) row[x * channels + c] = (*planes[page])[c][y * p.width + x];
      ok = TIFFWriteScanline(t, row.data(), static_cast<uint32_t>(y), 0) == 1;
    }
    ok = ok && TIFFWriteDirectory(t) == 1;
  }
  TIFFClose(t);
  if (!ok) *error = "cannot write " + path + " as TIFF";
  return ok;
}

}  // namespace

bool write_background_map(const v1::AnalyzeResponse& r, const std::string& path, bool at_image_size,
                          std::string* error) {
  Planes p;
  for (const v1::BackgroundMesh& m : r.background()) {
    if (m.background().empty()) {
      *error = "channel " + m.channel() + " has no background mesh (every box left out)";
      return false;
    }
    const BackgroundMesh mesh = mesh_of(m);
    if (at_image_size) {
      p.width = r.width();
      p.height = r.height();
      p.background.push_back(background_image(mesh, mesh.background, p.width, p.height));
      p.rms.push_back(background_image(mesh, mesh.rms, p.width, p.height));
    } else {
      p.width = mesh.columns;
      p.height = mesh.rows;
      p.background.push_back(to_float(mesh.background));
      p.rms.push_back(to_float(mesh.rms));
    }
  }
  if (p.background.empty()) {
    *error = "the answer has no background meshes";
    return false;
  }
  if (ends_with(path, ".fits") || ends_with(path, ".fit") || ends_with(path, ".fts")) return write_fits(p, path, error);
  if (ends_with(path, ".tif") || ends_with(path, ".tiff")) return write_tiff(p, path, error);
  *error = path + ": name a .fits or .tif file";
  return false;
}

}  // namespace imgstat::client
