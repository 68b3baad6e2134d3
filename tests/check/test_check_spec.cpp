// tests/check/test_check_spec.cpp - remora-check's switch and report
// machinery: the spec syntax (REMORA_CHECK, FabricOptions::check), the
// stderr line of a finding, and what a fabric reports under the checks.
#include <gtest/gtest.h>

#include <cstdlib>

#include "check/check.hpp"
#include "remora/remora.hpp"

namespace check = remora::detail::check;

namespace {

check::Config parsed(const char* spec) {
  check::Config c;
  EXPECT_TRUE(check::parse(spec, c).ok()) << spec;
  return c;
}

bool refused(const char* spec) {
  check::Config c;
  auto r = check::parse(spec, c);
  return !r && r.error() == remora::make_error_code(remora::Errc::invalid_argument);
}

TEST(CheckSpec, Words) {
  EXPECT_FALSE(parsed("").any());
  EXPECT_FALSE(parsed("off").any());
  auto r = parsed("reuse");
  EXPECT_TRUE(r.reuse);
  EXPECT_FALSE(r.strict || r.crash || r.noncoherent);
  auto s = parsed("strict");
  EXPECT_TRUE(s.reuse && s.strict);
  auto a = parsed("all");
  EXPECT_TRUE(a.reuse && a.crash && a.noncoherent);
  EXPECT_FALSE(a.strict);
  auto c = parsed("crash_at=all,crash_dir=/tmp/x,report=/tmp/r.json,exitcode=7");
  EXPECT_TRUE(c.crash);
  EXPECT_EQ(c.crash_at, -1);
  EXPECT_EQ(c.crash_dir, "/tmp/x");
  EXPECT_EQ(c.report, "/tmp/r.json");
  EXPECT_EQ(c.exit_code, 7);
  EXPECT_EQ(parsed("crash=3").crash_at, 3);
  EXPECT_EQ(parsed("crash_at=random").crash_at, -2);
  EXPECT_EQ(parsed("crash,crash_at=end").crash_at, 0);
  auto k = parsed("all,coherent");
  EXPECT_TRUE(k.coherent && k.noncoherent);  // make() turns noncoherent off
  EXPECT_FALSE(parsed("all").coherent);
}

TEST(CheckSpec, RefusesWhatItDoesNotKnow) {
  EXPECT_TRUE(refused("reuse,bogus"));
  EXPECT_TRUE(refused("crash_at=0"));
  EXPECT_TRUE(refused("crash_at=soon"));
  EXPECT_TRUE(refused("exitcode=300"));
  EXPECT_TRUE(refused("report="));
}

TEST(CheckReport, LineNamesCookieRegionAndRange) {
  check::Finding f;
  f.check = "reuse";
  f.message = "write: gather memory changed before the completion";
  f.has_cookie = true;
  f.cookie = 0x2a;
  f.endpoint = 7;
  f.region = "key=0x10@0x1000";
  f.offset = 100;
  f.length = 8;
  EXPECT_EQ(check::format_line(f),
            "remora-check: reuse: write: gather memory changed before the completion [cookie=0x2a endpoint=7 "
            "region=key=0x10@0x1000 range=100+8]");
  f.has_cookie = false;
  f.endpoint = 0;
  EXPECT_NE(check::format_line(f).find("[cookie=unknown region="), std::string::npos);
}

TEST(CheckFabric, BadSpecIsRefusedAndNoncoherentReportsRequiresSync) {
  ::unsetenv("REMORA_CHECK");
  auto bad = remora::Fabric::open({.provider = "tcp", .address = "127.0.0.1", .check = "reuse,nonsense"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), remora::make_error_code(remora::Errc::invalid_argument));
  auto plain = remora::Fabric::open({.provider = "tcp", .address = "127.0.0.1"});
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->info().requires_sync);
  auto nc = remora::Fabric::open({.provider = "tcp", .address = "127.0.0.1", .check = "noncoherent,exitcode=0"});
  ASSERT_TRUE(nc.ok());
  EXPECT_TRUE(nc->info().requires_sync);
  // A program with no sync call (librpma's face) keeps check 1 off.
  auto kept = remora::Fabric::open({.provider = "tcp", .address = "127.0.0.1", .check = "all,coherent,exitcode=0"});
  ASSERT_TRUE(kept.ok());
  EXPECT_FALSE(kept->info().requires_sync);
  // The environment turns checking on for a program that asks for nothing.
  ::setenv("REMORA_CHECK", "noncoherent,exitcode=0", 1);
  auto env = remora::Fabric::open({.provider = "tcp", .address = "127.0.0.1"});
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->info().requires_sync);
  auto env_kept = remora::Fabric::open({.provider = "tcp", .address = "127.0.0.1", .check = "coherent"});
  ::unsetenv("REMORA_CHECK");
  ASSERT_TRUE(env_kept.ok());
  EXPECT_FALSE(env_kept->info().requires_sync);
}

TEST(CheckReport, FindingsAreCounted) {
  ASSERT_TRUE(check::make("reuse,exitcode=0").ok());  // arms the summary; leaves the exit status alone
  const auto before = check::findings();
  check::Finding f;
  f.check = "reuse";
  f.message = "a finding made by the test";
  check::report(f);
  EXPECT_EQ(check::findings(), before + 1);
}

}  // namespace
