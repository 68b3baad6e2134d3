// Result<T> and Result<void>.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <system_error>

#include "remora/result.hpp"

namespace {

using remora::Errc;
using remora::Result;

TEST(Result, HoldsValue) {
  Result<int> r = 42;
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_FALSE(r.error());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
}

TEST(Result, HoldsError) {
  Result<int> r = Errc::length_error;
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.error(), remora::make_error_code(Errc::length_error));
}

TEST(Result, FromErrorCode) {
  Result<std::string> r = std::error_code(Errc::malformed);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error(), Errc::malformed);
}

TEST(Result, ValueOnErrorThrowsSystemErrorWithTheCode) {
  Result<int> r = Errc::timeout;
  try {
    (void)r.value();
    FAIL() << "value() of a failed Result did not throw";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), remora::make_error_code(Errc::timeout));
  }
  EXPECT_THROW((void)*r, std::system_error);
  const Result<int>& cr = r;
  EXPECT_THROW((void)cr.value(), std::system_error);
}

TEST(Result, ArrowOnErrorThrows) {
  Result<std::string> r = Errc::invalid_state;
  EXPECT_THROW((void)r->size(), std::system_error);
}

TEST(Result, RvalueValueOnErrorThrows) {
  EXPECT_THROW((void)Result<std::string>(Errc::no_memory).value(), std::system_error);
}

TEST(Result, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

TEST(Result, ArrowReachesMembers) {
  Result<std::string> r = std::string("abc");
  EXPECT_EQ(r->size(), 3u);
}

TEST(ResultVoid, DefaultIsSuccess) {
  Result<void> r;
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(r.error());
  EXPECT_NO_THROW(r.value());
}

TEST(ResultVoid, ErrorThrowsOnValue) {
  Result<void> r = Errc::zone_mismatch;
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.error(), Errc::zone_mismatch);
  try {
    r.value();
    FAIL() << "value() of a failed Result<void> did not throw";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), remora::make_error_code(Errc::zone_mismatch));
  }
}

}  // namespace
