#include <gtest/gtest.h>

#include "tollgate/app/simulator.hpp"

namespace tollgate::app {
namespace {

TEST(Simulator, AnswersTheIssueExample) {
  Simulator sim;
  EXPECT_EQ(sim.handle_line(R"({"op":"config","t_us":0,"rate":5,"burst":5,"mode":"pay_now","initial":"full","warmup_us":0,"cold_factor":3})"),
            R"({"ok":true})");
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":1000,"permits":1,"timeout_us":500000})"),
              R"({"granted":true,"wait_us":0})");
  EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":1000,"permits":1,"timeout_us":500000})"),
            R"({"granted":true,"wait_us":200000})");
  EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":1000,"permits":1,"timeout_us":500000})"),
            R"({"granted":true,"wait_us":400000})");
  EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":1000,"permits":1,"timeout_us":500000})"),
            R"({"granted":false,"retry_after_us":100000})");
  EXPECT_EQ(sim.handle_line(R"({"op":"acquire","t_us":1000,"permits":1})"), R"({"granted":true,"wait_us":600000})");
  EXPECT_EQ(sim.handle_line(R"({"op":"set_rate","t_us":1000,"rate":10})"), R"({"ok":true})");
  EXPECT_EQ(sim.handle_line(R"({"op":"acquire","t_us":1000,"permits":1})"), R"({"granted":true,"wait_us":700000})");
}

TEST(Simulator, DefaultsAreTheGatewaysRule) {
  Simulator sim;
  EXPECT_EQ(sim.handle_line(R"({"op":"config","rate":2})"), R"({"ok":true})");  // pay_now, full, burst = rate
  EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":0})"), R"({"granted":true,"wait_us":0})");
  EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":0})"), R"({"granted":true,"wait_us":0})");
  EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":0})"), R"({"granted":false,"retry_after_us":500000})");
}

TEST(Simulator, MalformedLinesGetAnErrorAndTheSimulatorGoesOn) {
  Simulator sim;
  EXPECT_NE(sim.handle_line(R"({"op":"try_acquire","t_us":0})").find("no bucket yet"), std::string::npos);
  EXPECT_NE(sim.handle_line("garbage").find("\"error\""), std::string::npos);
  EXPECT_NE(sim.handle_line("").find("\"error\""), std::string::npos);
  EXPECT_NE(sim.handle_line("[1,2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(sim.handle_line(R"({"op":"config","rate":0})").find("'rate' must be > 0"), std::string::npos);
  EXPECT_NE(sim.handle_line(R"({"op":"config","rate":1,"mode":"later"})").find("'mode'"), std::string::npos);
  EXPECT_NE(sim.handle_line(R"({"op":"config","rate":1,"extra":1})").find("unknown field 'extra'"), std::string::npos);
  EXPECT_EQ(sim.handle_line(R"({"op":"config","rate":1})"), R"({"ok":true})");
  EXPECT_NE(sim.handle_line(R"({"op":"try_acquire","t_us":"soon"})").find("'t_us' must be an integer"),
            std::string::npos);
  EXPECT_NE(sim.handle_line(R"({"op":"try_acquire","t_us":0,"permits":-1})").find("'permits'"), std::string::npos);
  EXPECT_NE(sim.handle_line(R"({"op":"fly","t_us":0})").find("unknown op"), std::string::npos);
  EXPECT_EQ(sim.handle_line(R"({"op":"try_acquire","t_us":0})"), R"({"granted":true,"wait_us":0})");
}

TEST(Simulator, WarmUpAndPayLater) {
  Simulator sim;
  sim.handle_line(R"({"op":"config","t_us":0,"rate":2,"mode":"pay_later","warmup_us":4000000})");
  EXPECT_EQ(sim.handle_line(R"({"op":"acquire","t_us":0})"), R"({"granted":true,"wait_us":0})");
  EXPECT_EQ(sim.handle_line(R"({"op":"acquire","t_us":0})"), R"({"granted":true,"wait_us":1375000})");
}

}  // namespace
}  // namespace tollgate::app
