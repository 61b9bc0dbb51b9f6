// tollgate-sim: JSON lines in, one JSON line out per input line (flushed), see README.
#include <iostream>
#include <string>

#include "tollgate/app/simulator.hpp"

int main() {
  tollgate::app::Simulator sim;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::cout << sim.handle_line(line) << std::endl;  // endl flushes: a driver may wait for each answer
  }
  return 0;
}
