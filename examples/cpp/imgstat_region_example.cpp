// Calling imgstat from C++ on the server's own host: an encoded image in one
// call, then a raw frame through shared memory (a region) that no socket
// carries: a sealed memfd passed once over the region socket, registered,
// named by the call, unregistered.
//
//   imgstat-region-example localhost:50051 photo.png frame.raw 4096x3072x1:uint16
//
// Prints one JSON object per answer, with the proto's field names. Links
// imgstat_proto, imgstat_region_client (client/region_client.hpp) and gRPC.
#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "imgstat/v1/imgstat.grpc.pb.h"
#include "region_client.hpp"

namespace v1 = imgstat::v1;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void check(const grpc::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.error_message());
}

v1::Options every_statistic() {
  v1::Options o;
  o.add_statistics(v1::STATISTIC_ALL);
  o.add_percentiles(1);
  o.add_percentiles(99);
  return o;
}

void emit(const char* method, const std::string& file, const v1::AnalyzeResponse& r) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string response;
  google::protobuf::util::MessageToJsonString(r, &response, options);
  std::cout << nlohmann::json{{"method", method}, {"file", file}, {"response", nlohmann::json::parse(response)}}.dump()
            << std::endl;
}

// The frame's bytes in a memfd sealed against shrinking and growing: the
// server maps it in place, and no one can cut it short under that mapping.
int sealed_memfd(const std::string& bytes) {
  const int fd = memfd_create("imgstat-frame", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::runtime_error("memfd_create failed");
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) throw std::runtime_error("writing the memfd failed");
    done += static_cast<size_t>(n);
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) throw std::runtime_error("sealing the memfd failed");
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 7) {
    std::cerr << "usage: " << argv[0] << " SERVER IMAGE FRAME.raw WxHxC:TYPE [MASK LABELS]\n";
    return 2;
  }
  const std::string server = argv[1], image = argv[2], frame = argv[3], layout = argv[4];
  std::smatch m;
  static const std::regex spec(R"((\d+)x(\d+)x(\d+):(uint8|uint16|int8|int16|float32|float64))");
  if (!std::regex_match(layout, m, spec)) {
    std::cerr << "layout: WxHxC:TYPE, e.g. 4096x3072x1:uint16\n";
    return 2;
  }
  static const std::map<std::string, v1::SampleType> types = {
      {"uint8", v1::SAMPLE_TYPE_UINT8}, {"uint16", v1::SAMPLE_TYPE_UINT16}, {"int8", v1::SAMPLE_TYPE_INT8},
      {"int16", v1::SAMPLE_TYPE_INT16}, {"float32", v1::SAMPLE_TYPE_FLOAT32}, {"float64", v1::SAMPLE_TYPE_FLOAT64}};
  try {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);  // histograms of up to 65536 bins per channel
    auto stub = v1::ImageStats::NewStub(grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args));
    auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(60); };

    {  // An encoded image, its bytes in the message.
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      v1::AnalyzeRequest r;
      r.mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
      r.mutable_input()->set_name(image);
      r.mutable_input()->set_data(slurp(image));
      *r.mutable_options() = every_statistic();
      v1::AnalyzeResponse answer;
      check(stub->Analyze(&ctx, r, &answer), "Analyze");
      emit("Analyze", image, answer);
    }
    if (argc == 7) {  // The image under a mask, then per label of a label image (0 left out).
      for (const bool by_label : {false, true}) {
        grpc::ClientContext ctx;
        ctx.set_deadline(deadline());
        v1::AnalyzeRequest r;
        r.mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
        r.mutable_input()->set_name(image);
        r.mutable_input()->set_data(slurp(image));
        *r.mutable_options() = every_statistic();
        v1::Parts* parts = r.mutable_options()->mutable_parts();
        if (by_label) {
          parts->mutable_labels()->mutable_image()->set_data(slurp(argv[6]));
          parts->mutable_labels()->set_ignore(0);
        } else {
          parts->mutable_mask()->mutable_image()->set_data(slurp(argv[5]));
        }
        v1::AnalyzeResponse answer;
        check(stub->Analyze(&ctx, r, &answer), by_label ? "Analyze (labels)" : "Analyze (mask)");
        emit(by_label ? "AnalyzeLabels" : "AnalyzeMask", image, answer);
      }
    }

    // The raw frame through a region. The region socket's path is in ServerInfo.
    v1::ServerInfo info;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      check(stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info), "GetServerInfo");
    }
    if (info.region_socket().empty()) throw std::runtime_error("this server offers no regions");
    // The connection is the region's lifetime: it stays open while the region is used.
    imgstat::client::RegionSocketClient socket(info.region_socket());
    const int fd = sealed_memfd(slurp(frame));
    const std::string ticket = socket.pass(fd);
    close(fd);  // the server holds its own
    v1::Region region;
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      v1::RegisterRegionRequest r;
      r.set_ticket(ticket);
      r.set_name(frame);
      check(stub->RegisterRegion(&ctx, r, &region), "RegisterRegion");
    }
    {  // Registered once, it may be named by any number of calls.
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      v1::AnalyzeRequest r;
      r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
      r.mutable_input()->set_name(frame);
      v1::RawLayout* raw = r.mutable_input()->mutable_raw();
      raw->set_width(static_cast<uint32_t>(std::stoul(m[1])));
      raw->set_height(static_cast<uint32_t>(std::stoul(m[2])));
      raw->set_channels(static_cast<uint32_t>(std::stoul(m[3])));
      raw->set_sample_type(types.at(m[4]));
      r.mutable_input()->mutable_region()->set_region_id(region.region_id());  // offset 0, length 0: all of it
      *r.mutable_options() = every_statistic();
      v1::AnalyzeResponse answer;
      check(stub->Analyze(&ctx, r, &answer), "Analyze (region)");
      emit("AnalyzeRegion", frame, answer);
    }
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      v1::UnregisterRegionRequest r;
      r.set_region_id(region.region_id());
      v1::UnregisterRegionResponse done;
      check(stub->UnregisterRegion(&ctx, r, &done), "UnregisterRegion");
    }
  } catch (const std::exception& e) {
    std::cerr << "imgstat: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
