// libFuzzer: the request front end as the proxy runs it, without sockets. Bytes go through the
// proxy's own parser (proxy/http1, with the proxy's header and body limits, the chunked decoder for
// a chunked body), the target through normalisation (proxy/request_target), then the whole
// decision (proxy/request_policy: rule match, client address behind trusted proxies, client keys
// for keyed buckets, quotas and maxShare) and every verdict's headers and bodies, and the access-log
// line that echoes parts of the request.
#include <boost/beast/core/string.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "tollgate/config/snapshot.hpp"
#include "tollgate/proxy/access_log.hpp"
#include "tollgate/proxy/client_key.hpp"
#include "tollgate/proxy/http1.hpp"
#include "tollgate/proxy/request_policy.hpp"
#include "tollgate/proxy/request_target.hpp"
#include "tollgate/proxy/throttle.hpp"

namespace {

using namespace tollgate;
namespace http1 = proxy::http1;

const std::shared_ptr<const config::Snapshot>& rules() {
  static const auto snap = [] {
    std::vector<config::RawRow> rows;
    auto add = [&rows](const char* url, const char* key_by, bool quota) {
      config::RawRow r;
      r.config_id = static_cast<std::int64_t>(rows.size() + 1);
      r.channel_type = "IBE";
      r.interface_url = url;
      r.rate_limit = 5;
      r.status = 1;
      if (key_by) r.key_by = key_by;
      if (quota) {
        config::RawQuota q;
        q.quota_id = r.config_id;
        q.period_seconds = 60;
        q.limit_count = 20;
        q.key_by = "client_ip_path";
        r.quotas.push_back(q);
        r.max_share = 0.5;
      }
      rows.push_back(r);
    };
    add("/shopping/search", nullptr, false);
    add("/search", "header:X-Api-Key", true);
    add("/pricing", "client_ip", false);
    add("/a/b/c", nullptr, true);
    add("/Booking/Confirm", nullptr, false);
    rows.back().match_case = "insensitive";  // the lowered-tail lookup, on arbitrary paths
    return config::make_snapshot(config::validate_rows(rows), 1, "fuzz");
  }();
  return snap;
}

class Fields final : public proxy::HeaderSource {
 public:
  explicit Fields(const http1::RequestHead& h) : h_(h) {}
  std::optional<std::string_view> find(std::string_view name) const override {
    const http1::Field* f = h_.find(name);
    return f ? std::optional<std::string_view>(f->value) : std::nullopt;
  }
  std::string joined(std::string_view name) const override {
    std::string out;
    for (const http1::Field& f : h_.all())
      if (boost::beast::iequals(f.name, name)) out.append(out.empty() ? "" : ",").append(f.value);
    return out;
  }

 private:
  const http1::RequestHead& h_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static http1::RequestHead head;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  if (http1::parse_request_head(in, 16 * 1024, head) != http1::Error::none) return 0;
  std::string body;
  if (http1::request_body(head).kind == http1::BodyKind::chunked) {
    http1::ChunkedDecoder decoder(64 * 1024);
    decoder.decode(in.substr(head.head_bytes), [&body](const char* p, std::size_t n) { body.append(p, n); });
  }

  proxy::RequestTarget target;
  proxy::parse_target(head.target, target);
  const std::string_view path = target.error == proxy::TargetError::none ? target.match : proxy::path_of(head.target);

  static proxy::Metrics metrics;
  static const proxy::TrustedProxies trusted = [] {
    proxy::TrustedProxies t;
    (void)t.add("127.0.0.0/8");
    (void)t.add("fd00::/8");
    return t;
  }();
  static const auto views = std::make_shared<const proxy::RuleViews>(rules(), metrics);
  const proxy::PolicySettings settings{100, 10, &trusted,
                                       size % 2 ? proxy::MissingKey::reject : proxy::MissingKey::anonymous};
  const Fields fields(head);
  const proxy::RequestFacts facts{path, "127.0.0.1", fields, static_cast<std::int64_t>(size % 128)};
  proxy::Plan plan;
  proxy::plan_request(facts, views.get(), size % 3 ? config::SwitchMode::enforce : config::SwitchMode::shadow,
                      settings, plan);
  if (plan.step == proxy::Step::decide) {
    store::StoreDecision sd;
    sd.decision.retry_after_us = static_cast<std::int64_t>(size) * 1000;
    sd.decision.wait_us = static_cast<std::int64_t>(size % 7) * 1000;
    sd.quotas.resize(plan.request.quotas.size());
    for (const store::Bound bound : {store::Bound::bucket, store::Bound::quota, store::Bound::share}) {
      if ((bound == store::Bound::quota && sd.quotas.empty()) || (bound == store::Bound::share && !plan.request.share))
        continue;
      sd.bound = bound;
      sd.decision.granted = false;
      (void)proxy::verdict_for(plan, sd);
      sd.decision.granted = true;
      (void)proxy::verdict_for(plan, sd);
    }
  }

  proxy::AccessRecord rec;
  rec.method = head.method_text;
  rec.path = path;
  rec.client = "127.0.0.1";
  rec.bucket = plan.rule ? std::string_view(plan.rule->bucket) : std::string_view();
  (void)proxy::access_line(rec);
  (void)proxy::error_body("bad_request", plan.detail);
  return 0;
}
