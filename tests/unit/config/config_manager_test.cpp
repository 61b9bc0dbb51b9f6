#include <gtest/gtest.h>

#include "support/fake_source.hpp"
#include "tollgate/config/config_manager.hpp"

namespace tollgate::config {
namespace {

using testing::FakeSource;

struct Fixture {
  std::shared_ptr<FakeSource> source = std::make_shared<FakeSource>();
  SnapshotHolder snaps;
  SwitchState sw{SwitchMode::enforce, "file"};
  ConfigManager mgr{source, snaps, sw, std::chrono::milliseconds(1000)};
};

TEST(ConfigManager, LoadsAndSwapsASnapshot) {
  Fixture f;
  f.source->rows = {FakeSource::row(1, "/a", 5), FakeSource::row(2, "/b", 0)};
  const ReloadResult r = f.mgr.reload();
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.version, 1u);
  auto snap = f.snaps.get();
  ASSERT_TRUE(snap);
  EXPECT_NE(snap->match("/x/a"), nullptr);
  ASSERT_EQ(snap->rejected.size(), 1u);  // the bad row is listed, the good one applies
  EXPECT_EQ(f.mgr.status().rejected_rows, 1u);
  EXPECT_TRUE(f.mgr.status().healthy);
}

TEST(ConfigManager, UnchangedFingerprintSkipsTheLoad) {
  Fixture f;
  f.source->rows = {FakeSource::row(1, "/a", 5)};
  ASSERT_TRUE(f.mgr.reload().ok);
  EXPECT_EQ(f.source->loads, 1);
  f.source->rows = {FakeSource::row(1, "/a", 9)};
  const ReloadResult same = f.mgr.poll_once();  // fingerprint unchanged: nothing is read
  EXPECT_TRUE(same.ok);
  EXPECT_FALSE(same.changed);
  EXPECT_EQ(f.source->loads, 1);
  EXPECT_DOUBLE_EQ(f.snaps.get()->rules[0].rate_limit, 5);
  f.source->fp = "v2";
  const ReloadResult changed = f.mgr.poll_once();
  EXPECT_TRUE(changed.changed);
  EXPECT_EQ(f.source->loads, 2);
  EXPECT_DOUBLE_EQ(f.snaps.get()->rules[0].rate_limit, 9);
  f.source->rows = {FakeSource::row(1, "/a", 11)};
  ASSERT_TRUE(f.mgr.reload().ok);  // forced: reads even with the same fingerprint
  EXPECT_DOUBLE_EQ(f.snaps.get()->rules[0].rate_limit, 11);
}

TEST(ConfigManager, FailedLoadKeepsTheLastGoodSnapshot) {
  Fixture f;
  f.source->rows = {FakeSource::row(1, "/a", 5)};
  ASSERT_TRUE(f.mgr.reload().ok);
  const auto before = f.snaps.get();
  f.source->failure = "server has gone away";
  const ReloadResult r = f.mgr.reload();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "server has gone away");
  EXPECT_EQ(f.snaps.get(), before);
  const SourceStatus st = f.mgr.status();
  EXPECT_FALSE(st.healthy);
  EXPECT_EQ(st.last_error, "server has gone away");
  EXPECT_EQ(st.loads_failed, 1u);
  f.source->failure.clear();
  EXPECT_TRUE(f.mgr.reload().ok);
  EXPECT_TRUE(f.mgr.status().healthy);
  EXPECT_EQ(f.mgr.status().last_error, "");
}

TEST(ConfigManager, FollowsTheFleetSwitch) {
  Fixture f;
  f.source->fleet_switch = SwitchRecord{SwitchMode::off, "ops", 1234, 0, SwitchMode::enforce};
  ASSERT_TRUE(f.mgr.reload().ok);
  EXPECT_FALSE(f.sw.enabled());
  const SwitchInfo info = f.sw.info();
  EXPECT_EQ(info.changed_by, "ops");
  EXPECT_EQ(info.changed_at_ms, 1234);
  EXPECT_EQ(info.source, "mysql");
}

TEST(ConfigManager, FallbackIsReplacedByTheFirstGoodLoad) {
  Fixture f;
  f.mgr.install(validate_rows({FakeSource::row(1, "/fallback", 1)}), "file-fallback:x", true);
  EXPECT_TRUE(f.mgr.status().using_fallback);
  EXPECT_NE(f.snaps.get()->match("/fallback"), nullptr);
  f.source->rows = {FakeSource::row(1, "/real", 1)};
  ASSERT_TRUE(f.mgr.reload().ok);
  EXPECT_FALSE(f.mgr.status().using_fallback);
  EXPECT_EQ(f.snaps.get()->match("/fallback"), nullptr);
  EXPECT_GT(f.snaps.get()->version, 1u);
}

}  // namespace
}  // namespace tollgate::config
