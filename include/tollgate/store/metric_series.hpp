// Series whose values are kept elsewhere and set in the gateway's registry when /metrics is
// scraped: a store's health and counts, the admin API's view of the switch and the config source.
// A series is registered by its first scrape; registering it again finds it (prometheus-cpp merges
// families of the same name and type).
#pragma once

#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace tollgate::store {

inline prometheus::Gauge& gauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                                const prometheus::Labels& labels = {}) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

inline prometheus::Counter& counter(prometheus::Registry& r, const std::string& name, const std::string& help,
                                    const prometheus::Labels& labels = {}) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

// A prometheus-cpp counter only goes up by increments: one whose total is kept elsewhere is
// advanced to it (integers below 2^53: exact).
inline void advance_to(prometheus::Counter& c, double total) {
  if (const double delta = total - c.Value(); delta > 0) c.Increment(delta);
}

}  // namespace tollgate::store
