// tollgate-sim: drives one token bucket from JSON lines, so a rule can be tried against a recorded
// trace of request times. Same limiter code as the gateway.
#pragma once

#include <memory>
#include <string>

#include "tollgate/limiter/token_bucket.hpp"

namespace tollgate::app {

class Simulator {
 public:
  // One input line -> one output line (JSON, no newline). Never throws.
  std::string handle_line(const std::string& line);

 private:
  std::unique_ptr<limiter::TokenBucket> bucket_;
};

}  // namespace tollgate::app
