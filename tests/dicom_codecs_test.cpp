// DICOM in the compressed transfer syntaxes GDCM writes (pydicom writes
// only RLE, which tests/dicom decodes): JPEG lossless, JPEG-LS lossless,
// JPEG 2000 lossless and explicit big endian,
// 8- and 16-bit, signed and not, gray and RGB, one frame and several, each
// decoded by imgstat to the very samples that went in (lossless), and their
// modality values as the uncompressed file's; JPEG baseline (lossy) within
// what its quantization moves. (GDCM 3.0.21 writes neither signed 12-bit
// nor multi-frame 16-bit in these syntaxes nor RGB in JPEG 2000, and its
// RLE coder asserts on sizes it should take: the cases are those it writes.)
#include <gdcmAttribute.h>
#include <gdcmImageChangeTransferSyntax.h>
#include <gdcmImageWriter.h>
#include <gdcmTrace.h>
#include <gdcmUIDGenerator.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "decode/decode.hpp"

using namespace imgstat;

namespace {

struct Source {
  uint32_t width = 0, height = 0, frames = 1, samples = 1, bits = 16;
  bool is_signed = false;
  double slope = 1, intercept = 0;
  std::vector<uint8_t> pixels;  // as stored: little-endian samples, chunky
};

Source make_source(uint32_t w, uint32_t h, uint32_t frames, uint32_t samples, uint32_t bits, bool is_signed,
                   uint32_t seed) {
  Source s{w, h, frames, samples, bits, is_signed};
  std::mt19937 rng(seed);
  const size_t n = size_t{w} * h * frames * samples;
  s.pixels.resize(n * (bits / 8));
  for (size_t i = 0; i < n; ++i) {
    if (bits == 8) {
      s.pixels[i] = static_cast<uint8_t>(rng() & 0xff);
    } else {
      // 12 bits stored in 16, as CT and MR keep them; signed: all 16.
      int v = is_signed ? static_cast<int>(rng() % 65536) - 32768 : static_cast<int>(rng() % 4096);
      const uint16_t u = static_cast<uint16_t>(v);
      std::memcpy(&s.pixels[2 * i], &u, 2);
    }
  }
  return s;
}

// The file, written by GDCM in `syntax` from the uncompressed image.
std::string write_dicom(const Source& s, const gdcm::TransferSyntax& syntax) {
  gdcm::ImageWriter writer;
  gdcm::Image& image = writer.GetImage();
  image.SetNumberOfDimensions(s.frames > 1 ? 3 : 2);
  image.SetDimension(0, s.width);
  image.SetDimension(1, s.height);
  if (s.frames > 1) image.SetDimension(2, s.frames);
  gdcm::PixelFormat pf(static_cast<unsigned short>(s.samples), static_cast<unsigned short>(s.bits),
                       static_cast<unsigned short>(s.bits == 16 && !s.is_signed ? 12 : s.bits),
                       static_cast<unsigned short>((s.bits == 16 && !s.is_signed ? 12 : s.bits) - 1),
                       static_cast<unsigned short>(s.is_signed ? 1 : 0));
  image.SetPixelFormat(pf);
  image.SetPhotometricInterpretation(s.samples == 3 ? gdcm::PhotometricInterpretation::RGB
                                                    : gdcm::PhotometricInterpretation::MONOCHROME2);
  image.SetPlanarConfiguration(0);
  image.SetSlope(s.slope);
  image.SetIntercept(s.intercept);
  image.SetTransferSyntax(gdcm::TransferSyntax::ExplicitVRLittleEndian);
  gdcm::DataElement pixel_data(gdcm::Tag(0x7fe0, 0x0010));
  pixel_data.SetByteValue(reinterpret_cast<const char*>(s.pixels.data()), static_cast<uint32_t>(s.pixels.size()));
  image.SetDataElement(pixel_data);
  gdcm::DataSet& ds = writer.GetFile().GetDataSet();
  gdcm::UIDGenerator uid;
  gdcm::Attribute<0x0008, 0x0016> sop_class = {"1.2.840.10008.5.1.4.1.1.7"};  // secondary capture
  gdcm::Attribute<0x0008, 0x0018> sop_instance = {uid.Generate()};
  gdcm::Attribute<0x0008, 0x0060> modality = {"OT"};
  ds.Replace(sop_class.GetAsDataElement());
  ds.Replace(sop_instance.GetAsDataElement());
  ds.Replace(modality.GetAsDataElement());
  if (syntax != gdcm::TransferSyntax::ExplicitVRLittleEndian) {
    gdcm::ImageChangeTransferSyntax change;
    change.SetTransferSyntax(syntax);
    change.SetInput(image);
    if (!change.Change()) return "";
    writer.SetImage(change.GetOutput());
  }
  std::ostringstream out;
  writer.SetStream(out);
  if (!writer.Write()) return "";
  return out.str();
}

// Every frame decoded into one buffer, as the sink receives it.
std::vector<uint8_t> decode_all(const std::string& file, const DecodeOptions& options, DecodePlan* plan_out) {
  const auto* data = reinterpret_cast<const uint8_t*>(file.data());
  const DecodePlan plan = plan_decode(data, file.size(), options);
  *plan_out = plan;
  std::vector<uint8_t> out;
  std::vector<uint8_t> band;
  uint32_t rows = 0;
  uint64_t row_bytes = 0;
  RowSink sink;
  sink.begin = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
    row_bytes = uint64_t{w} * channels * sample_size(type);
    rows = std::min<uint32_t>(h, 7);  // odd bands, so that no frame is one band
    band.resize(rows * row_bytes);
    return RowBand{band.data(), rows};
  };
  sink.band = [&](const uint8_t* r, uint32_t, uint32_t count) {
    out.insert(out.end(), r, r + count * row_bytes);
    return RowBand{band.data(), rows};
  };
  sink.plane = [](uint64_t) {};
  const BandedDecode d = decode_in_bands(data, file.size(), plan, options, sink);
  EXPECT_TRUE(d.taken);
  EXPECT_EQ(d.decoder, "gdcm");
  return out;
}

struct Syntax {
  gdcm::TransferSyntax::TSType ts;
  const char* name;
};

}  // namespace

TEST(DicomCodecs, LosslessSyntaxesGiveBackTheStoredSamples) {
  gdcm::Trace::SetWarning(false);
  const Syntax syntaxes[] = {{gdcm::TransferSyntax::JPEGLosslessProcess14_1, "JPEG lossless"},
                             {gdcm::TransferSyntax::JPEGLSLossless, "JPEG-LS lossless"},
                             {gdcm::TransferSyntax::JPEG2000Lossless, "JPEG 2000 lossless"},
                             {gdcm::TransferSyntax::ExplicitVRBigEndian, "explicit big endian"}};
  struct Case {
    uint32_t w, h, frames, samples, bits;
    bool is_signed;
  };
  const Case cases[] = {{37, 23, 1, 1, 16, false}, {31, 17, 1, 1, 16, true}, {29, 19, 3, 1, 8, false},
                        {23, 13, 1, 3, 8, false}};
  int checked = 0;
  for (const Syntax& syntax : syntaxes) {
    for (const Case& c : cases) {
      if (syntax.ts == gdcm::TransferSyntax::JPEG2000Lossless && c.samples == 3) continue;  // GDCM does not write it
      SCOPED_TRACE(std::string(syntax.name) + ": " + std::to_string(c.w) + "x" + std::to_string(c.h) + "x" +
                   std::to_string(c.frames) + ", " + std::to_string(c.samples) + " samples of " +
                   std::to_string(c.bits) + (c.is_signed ? " signed" : " unsigned"));
      const Source s = make_source(c.w, c.h, c.frames, c.samples, c.bits, c.is_signed, 50 + checked);
      const std::string file = write_dicom(s, gdcm::TransferSyntax(syntax.ts));
      if (file.empty()) {
        ADD_FAILURE() << "GDCM did not write it";
        continue;
      }
      DecodeOptions stored;
      stored.stored_values = true;
      DecodePlan plan;
      const std::vector<uint8_t> got = decode_all(file, stored, &plan);
      EXPECT_EQ(plan.planes, c.frames);
      EXPECT_EQ(plan.band_layout.channels, c.samples);
      EXPECT_EQ(plan.band_layout.type, c.bits == 8 ? SampleType::kUint8
                                       : c.is_signed ? SampleType::kInt16 : SampleType::kUint16);
      EXPECT_TRUE(got == s.pixels) << "the samples that went in";
      // Modality values (no rescale written: the samples) through the same file.
      DecodePlan modality_plan;
      EXPECT_TRUE(decode_all(file, DecodeOptions{}, &modality_plan) == s.pixels);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 15);
}

TEST(DicomCodecs, RescaledLosslessFileGivesModalityValues) {
  Source s = make_source(41, 29, 2, 1, 16, false, 7);
  s.slope = 1;
  s.intercept = -1024;
  const std::string file = write_dicom(s, gdcm::TransferSyntax::JPEGLSLossless);
  ASSERT_FALSE(file.empty());
  DecodePlan plan;
  const std::vector<uint8_t> got = decode_all(file, DecodeOptions{}, &plan);
  ASSERT_EQ(plan.band_layout.type, SampleType::kInt16);  // 12 bits less 1024: Hounsfield units in int16
  ASSERT_EQ(got.size(), s.pixels.size());
  for (size_t i = 0; i < got.size() / 2; ++i) {
    uint16_t stored;
    int16_t hu;
    std::memcpy(&stored, &s.pixels[2 * i], 2);
    std::memcpy(&hu, &got[2 * i], 2);
    ASSERT_EQ(hu, static_cast<int>(stored) - 1024) << "sample " << i;
  }
}

TEST(DicomCodecs, JpegBaselineDecodesWithinItsQuantization) {
  const Source s = make_source(64, 48, 1, 1, 8, false, 9);
  const std::string file = write_dicom(s, gdcm::TransferSyntax::JPEGBaselineProcess1);
  if (file.empty()) GTEST_SKIP() << "this GDCM writes no JPEG baseline";
  DecodePlan plan;
  const std::vector<uint8_t> got = decode_all(file, DecodeOptions{}, &plan);
  ASSERT_EQ(got.size(), s.pixels.size());
  double in = 0, out = 0;
  for (size_t i = 0; i < got.size(); ++i) in += s.pixels[i], out += got[i];
  // Lossy: the mean moves by what quantization gives, not by a wrong decode.
  EXPECT_NEAR(out / got.size(), in / got.size(), 4.0);
}
