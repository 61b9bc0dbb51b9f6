// Window quotas: fixed and sliding, exact to their definitions (limiter/window.hpp), on a manual
// timeline (plain integers: the arithmetic never reads a clock).
#include <gtest/gtest.h>

#include "tollgate/limiter/window.hpp"

namespace tollgate::limiter {
namespace {

constexpr Micros kSecond = 1'000'000;

WindowParams quota(std::int64_t limit, Micros period, WindowAlgorithm a = WindowAlgorithm::fixed) {
  return {period, limit, a};
}

// Admitted requests out of `n` sent at `now`.
int burst(WindowState& st, const WindowParams& p, int n, Micros now) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += window_try_acquire(st, p, 1, now).admitted ? 1 : 0;
  return ok;
}

TEST(FixedWindow, CountsUpToTheLimitAndResetsAtTheBoundary) {
  const auto p = quota(3, kSecond);
  WindowState st{window_index(10 * kSecond, kSecond), 0, 0};
  EXPECT_EQ(burst(st, p, 5, 10 * kSecond + 100), 3);
  const auto d = window_try_acquire(st, p, 1, 10 * kSecond + 250'000);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.retry_after_us, 750'000);  // the next window
  EXPECT_EQ(d.reset_us, 750'000);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(burst(st, p, 1, 11 * kSecond - 1), 0);
  EXPECT_EQ(burst(st, p, 5, 11 * kSecond), 3);  // a fresh window
}

TEST(FixedWindow, TwiceTheLimitAcrossABoundary) {
  // The known weakness: limit at the end of one window and limit at the start of the next.
  const auto p = quota(10, 60 * kSecond);
  WindowState st{};
  const Micros boundary = 120 * kSecond;
  EXPECT_EQ(burst(st, p, 10, boundary - 1), 10);
  EXPECT_EQ(burst(st, p, 10, boundary), 10);  // 20 admitted within two microseconds
}

TEST(SlidingWindow, SmoothsTheBoundaryBurst) {
  const auto p = quota(10, 60 * kSecond, WindowAlgorithm::sliding);
  WindowState st{};
  const Micros boundary = 120 * kSecond;
  EXPECT_EQ(burst(st, p, 10, boundary - 1), 10);
  // Just after the boundary the previous window still weighs (almost) fully: nothing more.
  EXPECT_EQ(burst(st, p, 10, boundary), 0);
  // A quarter into the window, previous * 0.75 = 7.5: two more fit (7.5 + 2 <= 10), not three.
  EXPECT_EQ(burst(st, p, 10, boundary + 15 * kSecond), 2);
  // Halfway: 5 + 2 = 7 used: three more.
  EXPECT_EQ(burst(st, p, 10, boundary + 30 * kSecond), 3);
}

TEST(SlidingWindow, EstimateIsTheDefinition) {
  const auto p = quota(100, kSecond, WindowAlgorithm::sliding);
  WindowState st{5, 7, 40};  // window 5: 7 so far, 40 in window 4
  const Micros now = 5 * kSecond + 250'000;
  const auto d = window_check(st, p, 1, now);
  EXPECT_DOUBLE_EQ(d.used, 40 * 0.75 + 7);
  EXPECT_TRUE(d.admitted);
  EXPECT_DOUBLE_EQ(d.remaining, 100 - 37 - 1);
}

TEST(SlidingWindow, RetryAfterIsTheFirstMicrosecondThatFits) {
  const auto p = quota(10, 10 * kSecond, WindowAlgorithm::sliding);
  WindowState st{1, 5, 10};  // previous full, 5 in the current window
  const Micros now = 10 * kSecond + 2 * kSecond;  // estimate 10 * 0.8 + 5 = 13
  const auto d = window_check(st, p, 1, now);
  ASSERT_FALSE(d.admitted);
  // Fits when 10 * (1 - e/10s) + 5 + 1 <= 10, i.e. e >= 6 s: 4 s from now.
  EXPECT_EQ(d.retry_after_us, 4 * kSecond);
  auto later = st;
  roll(later, p, now + d.retry_after_us);
  EXPECT_TRUE(window_check(later, p, 1, now + d.retry_after_us).admitted);
  EXPECT_FALSE(window_check(st, p, 1, now + d.retry_after_us - 1).admitted);
}

TEST(SlidingWindow, RetryAfterInTheNextWindowWhenTheCurrentIsFull) {
  const auto p = quota(4, 10 * kSecond, WindowAlgorithm::sliding);
  WindowState st{0, 4, 0};  // current window full
  const auto d = window_check(st, p, 1, 3 * kSecond);
  ASSERT_FALSE(d.admitted);
  // Next window: 4 * (1 - e/10s) + 1 <= 4 from e = 2.5 s; the window starts in 7 s.
  EXPECT_EQ(d.retry_after_us, 7 * kSecond + 2'500'000);
}

TEST(SlidingWindow, NeverMoreThanTwiceTheLimitInAnyPeriod) {
  // The documented worst case: a full previous window packed at its end.
  const auto p = quota(10, 10 * kSecond, WindowAlgorithm::sliding);
  WindowState st{};
  std::vector<Micros> admitted;
  for (Micros t = 0; t < 60 * kSecond; t += 50'000)
    if (window_try_acquire(st, p, 1, t).admitted) admitted.push_back(t);
  std::size_t worst = 0;
  for (std::size_t i = 0, j = 0; j < admitted.size(); ++j) {
    while (admitted[j] - admitted[i] >= p.period_us) ++i;
    worst = std::max(worst, j - i + 1);
  }
  EXPECT_LE(worst, static_cast<std::size_t>(2 * p.limit - 1));
  EXPECT_GE(admitted.size(), 55u);  // and it does admit about limit per period over time
}

TEST(Window, RollForgetsOlderWindows) {
  const auto p = quota(5, kSecond);
  WindowState st{3, 4, 2};
  roll(st, p, 4 * kSecond + 1);
  EXPECT_EQ(st.window, 4);
  EXPECT_EQ(st.previous, 4);
  EXPECT_EQ(st.current, 0);
  roll(st, p, 9 * kSecond);
  EXPECT_EQ(st.previous, 0);
  EXPECT_EQ(window_ttl_us(st, p, 9 * kSecond), kSecond);
  EXPECT_EQ(window_ttl_us(st, quota(5, kSecond, WindowAlgorithm::sliding), 9 * kSecond), 2 * kSecond);
}

}  // namespace
}  // namespace tollgate::limiter
