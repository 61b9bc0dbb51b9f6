#include "endpoints.hpp"

#include <algorithm>
#include <cstring>
#include <ifaddrs.h>
#include <netinet/in.h>

#include "tollgate/log_line.hpp"

namespace tollgate::proxy {

namespace {

std::string label_of(const tcp::endpoint& a) {
  const std::string ip = a.address().to_string();
  return (a.address().is_v6() ? "[" + ip + "]" : ip) + ":" + std::to_string(a.port());
}

bool is_out(const UpstreamEndpoint& e, std::int64_t now_us) {
  return e.ejected_until_us.load(std::memory_order_relaxed) > now_us;
}

// Ejections are rare and must respect max_percent across workers: one lock for all decisions.
std::mutex eject_mu;

}  // namespace

UpstreamEndpoint::UpstreamEndpoint(tcp::endpoint a, std::string host, std::size_t workers)
    : address(a), label(label_of(a)), host_header(std::move(host)),
      sessions(std::make_unique<TlsSessionCache[]>(std::max<std::size_t>(workers, 1))) {}

std::size_t pick_endpoint(const EndpointSet& set, std::uint32_t& rr, std::int64_t now_us,
                          const UpstreamEndpoint* const* tried, std::size_t tried_count) {
  const std::size_t n = set.endpoints.size();
  if (n == 0) return kNoEndpoint;
  if (n == 1) return tried_count == 0 ? 0 : kNoEndpoint;
  const std::size_t start = rr++ % n;
  std::size_t best_index = kNoEndpoint;
  UpstreamEndpoint* best = nullptr;
  bool best_out = true;
  int best_load = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t index = (start + i) % n;
    UpstreamEndpoint* e = set.endpoints[index].get();
    if (std::find(tried, tried + tried_count, e) != tried + tried_count) continue;
    const bool out = is_out(*e, now_us);
    const int load = e->outstanding.load(std::memory_order_relaxed);
    // In use before ejected; then fewer outstanding; ties to the first in this turn's order.
    if (best == nullptr || (best_out && !out) || (out == best_out && load < best_load)) {
      best = e;
      best_index = index;
      best_out = out;
      best_load = load;
    }
  }
  return best_index;
}

bool note_failure(const EndpointSet& set, UpstreamEndpoint& e, const EjectPolicy& p, std::int64_t now_us) {
  e.successes.store(0, std::memory_order_relaxed);
  const std::uint32_t f = e.failures.fetch_add(1, std::memory_order_relaxed) + 1;
  if (p.consecutive_failures == 0 || f < p.consecutive_failures) return false;
  std::lock_guard lock(eject_mu);
  if (is_out(e, now_us)) return false;
  std::size_t out = 0;
  for (const auto& x : set.endpoints) out += x.get() != &e && is_out(*x, now_us);
  if ((out + 1) * 100 > static_cast<std::size_t>(p.max_percent) * set.endpoints.size()) return false;
  const std::uint32_t k = std::min<std::uint32_t>(e.ejections.fetch_add(1, std::memory_order_relaxed) + 1, 10);
  e.ejected_until_us.store(now_us + p.base_us * k, std::memory_order_relaxed);
  e.failures.store(0, std::memory_order_relaxed);
  return true;
}

void note_success(UpstreamEndpoint& e, const EjectPolicy& p) {
  if (e.failures.load(std::memory_order_relaxed) != 0) e.failures.store(0, std::memory_order_relaxed);
  // After an ejection, as many successes in a row as the failures that eject end the run of
  // ejections: the next one lasts base_ms again.
  if (e.ejections.load(std::memory_order_relaxed) == 0) return;
  if (e.successes.fetch_add(1, std::memory_order_relaxed) + 1 >= std::max<std::uint32_t>(p.consecutive_failures, 1))
    e.ejections.store(0, std::memory_order_relaxed);
}

OwnListener::OwnListener(tcp::endpoint bound) : bound_(bound) {
  if (!bound_.address().is_unspecified()) return;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return;  // loopback addresses are still known to be its own
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      net::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, 4);
      local_.emplace_back(net::ip::address_v4(b));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      net::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &sin6->sin6_addr, 16);
      local_.emplace_back(net::ip::address_v6(b, sin6->sin6_scope_id));
    }
  }
  ::freeifaddrs(list);
}

bool OwnListener::owns(const tcp::endpoint& e) const {
  if (e.port() != bound_.port()) return false;
  net::ip::address a = e.address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
  if (a == bound_.address()) return true;
  if (!bound_.address().is_unspecified()) return false;
  // 0.0.0.0 takes IPv4 connections only; :: takes both (Linux's default, bindv6only 0).
  if (bound_.address().is_v4() && !a.is_v4()) return false;
  return a.is_loopback() || a.is_unspecified() || std::find(local_.begin(), local_.end(), a) != local_.end();
}

UpstreamEndpoints::UpstreamEndpoints(const config::UpstreamConfig& conf, std::size_t workers, Metrics& metrics,
                                     UpstreamMetrics& um, std::shared_ptr<const OwnListener> own)
    : conf_(conf), workers_(workers), metrics_(metrics), um_(um), by_target_(conf.targets.size()),
      set_(std::make_shared<EndpointSet>()), own_(std::move(own)), own_left_out_(conf.targets.size()) {
  policy_.consecutive_failures = conf.eject.consecutive_failures;
  policy_.base_us = static_cast<std::int64_t>(conf.eject.base_ms) * 1000;
  policy_.max_percent = conf.eject.max_percent;
  um_.unresolved->Set(1);
}

UpstreamEndpoints::~UpstreamEndpoints() {
  std::lock_guard lock(mu_);
  for (const auto& e : set_->endpoints) metrics_.remove_endpoint(e->series);
}

std::shared_ptr<const EndpointSet> UpstreamEndpoints::current(std::uint64_t& version) const {
  std::lock_guard lock(mu_);
  version = version_.load(std::memory_order_relaxed);
  return set_;
}

bool UpstreamEndpoints::set_addresses(std::size_t target, std::vector<tcp::endpoint> addresses) {
  std::lock_guard lock(mu_);
  std::vector<EndpointPtr>& old = by_target_[target];
  if (own_) leave_out_own(target, addresses);
  std::vector<EndpointPtr> now;
  for (const tcp::endpoint& a : addresses) {
    if (std::any_of(now.begin(), now.end(), [&](const EndpointPtr& e) { return e->address == a; })) continue;
    EndpointPtr found;
    for (const auto& list : by_target_)  // kept (with its health and pools), from this URL or another
      for (const auto& e : list)
        if (e->address == a) found = e;
    if (!found) {
      found = std::make_shared<UpstreamEndpoint>(a, conf_.targets[target].host_header, workers_);
      found->series = metrics_.endpoint(conf_.name, found->label);
      found->series.up->Set(1);
    }
    now.push_back(std::move(found));
  }
  // The same addresses in another order (a resolver that rotates its answers) change nothing:
  // compared as sets, so a rotation is neither logged nor a new set.
  const bool same = now.size() == old.size() && std::all_of(now.begin(), now.end(), [&](const EndpointPtr& e) {
                      return std::find(old.begin(), old.end(), e) != old.end();
                    });
  if (same) return false;
  std::vector<EndpointPtr> gone;
  for (const auto& e : old)
    if (std::find(now.begin(), now.end(), e) == now.end()) gone.push_back(e);
  old = std::move(now);
  auto set = std::make_shared<EndpointSet>();
  for (const auto& list : by_target_)
    for (const auto& e : list)
      if (std::find(set->endpoints.begin(), set->endpoints.end(), e) == set->endpoints.end()) set->endpoints.push_back(e);
  for (const auto& e : gone) {
    if (std::find(set->endpoints.begin(), set->endpoints.end(), e) != set->endpoints.end()) continue;
    e->in_set.store(false, std::memory_order_release);
    metrics_.remove_endpoint(e->series);
  }
  set_ = std::move(set);
  version_.fetch_add(1, std::memory_order_release);
  const bool resolved = !set_->endpoints.empty();
  resolved_.store(resolved, std::memory_order_release);
  um_.unresolved->Set(resolved ? 0 : 1);
  return true;
}

void UpstreamEndpoints::leave_out_own(std::size_t target, std::vector<tcp::endpoint>& addresses) {
  std::vector<tcp::endpoint> own;
  std::erase_if(addresses, [&](const tcp::endpoint& a) {
    if (!own_->owns(a)) return false;
    own.push_back(a);
    return true;
  });
  // Said once, when an answer first has it (a name answers the same at every refresh).
  std::vector<tcp::endpoint>& known = own_left_out_[target];
  for (const tcp::endpoint& a : own) {
    if (std::find(known.begin(), known.end(), a) != known.end()) continue;
    um_.self_refused->Increment();
    const std::string ip = a.address().to_string();
    log_line("tollgate: warn: upstream '", conf_.name, "': ", conf_.targets[target].url, " gives ",
             a.address().is_v6() ? "[" + ip + "]" : ip, ":", a.port(),
             ", the gateway's own listener: left out (a request sent there would come back to the gateway)",
             addresses.empty() ? "; no other address is left" : "");
  }
  known = std::move(own);
}

void UpstreamEndpoints::mark_ejected(UpstreamEndpoint& e) {
  std::lock_guard lock(mu_);  // set_addresses removes a leaving endpoint's series under it
  if (!e.in_set.load(std::memory_order_relaxed)) return;
  e.series.up->Set(0);
  e.series.ejections->Increment();
}

void UpstreamEndpoints::refresh_gauges(std::int64_t now_us) {
  std::lock_guard lock(mu_);
  for (const auto& e : set_->endpoints) {
    const double up = is_out(*e, now_us) ? 0 : 1;
    if (e->series.up->Value() != up) {
      e->series.up->Set(up);
      if (up == 1) log_line("tollgate: upstream '", conf_.name, "' endpoint ", e->label, " back in use after its ejection");
    }
  }
}

}  // namespace tollgate::proxy
