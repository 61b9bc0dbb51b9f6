// tollgate-sim: JSON lines in, one JSON line out per input line (flushed), see README.
#include <iostream>
#include <string>

#include "tollgate/app/simulator.hpp"

#include <cstring>

#include "tollgate/store/redis_codec.hpp"

int main(int argc, char** argv) {
  // --redis-script: print the Lua acquire script the Redis store runs (for redis-benchmark).
  if (argc > 1 && !std::strcmp(argv[1], "--redis-script")) {
    std::cout << tollgate::store::acquire_script();
    return 0;
  }
  // --redis-lean-script: the one the store runs for a request with one bucket and nothing else.
  if (argc > 1 && !std::strcmp(argv[1], "--redis-lean-script")) {
    std::cout << tollgate::store::lean_acquire_script();
    return 0;
  }
  tollgate::app::Simulator sim;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::cout << sim.handle_line(line) << std::endl;  // endl flushes: a driver may wait for each answer
  }
  return 0;
}
