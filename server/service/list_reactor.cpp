// ListObjects: the listing runs on a fetch thread (it waits on the store),
// then its pages are written one at a time, each after the last is taken.
#include "service/service.hpp"

namespace imgstat {
namespace {

// Objects a page holds (S3's own page size): some tens of KiB of names.
constexpr size_t kListedPerPage = 1000;

class ListReactor final : public grpc::ServerWriteReactor<v1::ListObjectsResponse> {
 public:
  ListReactor(grpc::CallbackServerContext* ctx, const v1::ListObjectsRequest* request, CallEnv& env)
      : ctx_(ctx), env_(env), call_(call_context(ctx, env.auth)), prefix_(request->prefix()) {
    if (!env_.fetch_queue) {
      finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          prefix_.substr(0, 200) + ": outside what this server may fetch (--fetch-allow not given: it "
                                                   "fetches nothing)"));
      return;
    }
    if (!env_.fetch_queue->submit([this] {
          const grpc::Status status = run_guarded([&] {
            for (const ObjectInfo& o : env_.analyzer.list_prefix(prefix_, call_)) {
              if (pages_.empty() || pages_.back().objects_size() >= static_cast<int>(kListedPerPage)) pages_.emplace_back();
              v1::ListedObject* l = pages_.back().add_objects();
              l->set_name(o.name);
              l->set_size(o.size);
            }
          });
          if (!status.ok() || pages_.empty()) return finish(status);
          StartWrite(&pages_[0]);
        }))
      finish(queue_full_status(*env_.fetch_queue));
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return finish(grpc::Status(grpc::StatusCode::CANCELLED, "the caller stopped reading"));
    if (++written_ < pages_.size()) return StartWrite(&pages_[written_]);
    finish(grpc::Status::OK);
  }

  void OnDone() override {
    env_.admission.leave();
    delete this;
  }

 private:
  void finish(const grpc::Status& status) {
    log_request({"ListObjects", take_request_id(ctx_), ctx_->peer(), call_.caller, prefix_.substr(0, 200), 0, nullptr,
                 status, 0, ms_since(started_)});
    env_.call_ended("ListObjects", status, started_);
    Finish(status);
  }

  grpc::CallbackServerContext* ctx_;
  CallEnv& env_;
  const CallContext call_;
  const std::string prefix_;
  std::vector<v1::ListObjectsResponse> pages_;
  size_t written_ = 0;
  const Clock::time_point started_ = Clock::now();
};

}  // namespace

grpc::ServerWriteReactor<v1::ListObjectsResponse>* make_list_reactor(grpc::CallbackServerContext* ctx,
                                                                     const v1::ListObjectsRequest* request,
                                                                     CallEnv& env) {
  return new ListReactor(ctx, request, env);
}

}  // namespace imgstat
