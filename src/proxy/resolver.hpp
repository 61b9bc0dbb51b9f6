// Internal to the proxy: upstream names resolved off the request path. One thread of its own runs
// c-ares: every name is asked again every upstreams.<name>.dns_refresh_ms, or at its record's TTL
// when that is shorter (never below a second); an answer is handed to the upstream's
// UpstreamEndpoints, which publish a new set to the workers when it changed. A failed or empty
// answer keeps the last good set (logged once per episode, counted per upstream).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "endpoints.hpp"

namespace tollgate::proxy {

class Resolver {
 public:
  // `upstreams` outlive the resolver. IP-literal URLs are set at once; names on start().
  Resolver(const config::DnsConfig& dns, std::vector<UpstreamEndpoints*> upstreams);
  ~Resolver();  // stops the thread
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;
  // Starts the thread and waits up to `first` for every name's first answer (or failure), so that
  // a normal start serves at once; a name still unresolved then answers 503 until it resolves.
  void start(std::chrono::milliseconds first);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::proxy
