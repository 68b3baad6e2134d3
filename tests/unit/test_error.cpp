// Errc and the remora error category.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <system_error>

#include "remora/error.hpp"

namespace {

using remora::Errc;

constexpr int kFirst = static_cast<int>(Errc::invalid_handle);
constexpr int kLast = static_cast<int>(Errc::no_memory);

TEST(ErrorCategory, NameIsRemora) {
  EXPECT_STREQ(remora::remora_category().name(), "remora");
  EXPECT_EQ(remora::make_error_code(Errc::timeout).category().name(), std::string("remora"));
}

TEST(ErrorCategory, IsOneObject) {
  EXPECT_EQ(&remora::remora_category(), &remora::remora_category());
  EXPECT_EQ(remora::make_error_code(Errc::privileges).category(), remora::remora_category());
}

TEST(ErrorCategory, EveryValueHasItsOwnMessage) {
  ASSERT_EQ(kFirst, 1) << "zero must stay success";
  std::set<std::string> seen;
  const std::string unknown = remora::remora_category().message(kLast + 100);
  for (int v = kFirst; v <= kLast; ++v) {
    std::string m = remora::remora_category().message(v);
    EXPECT_FALSE(m.empty()) << v;
    EXPECT_NE(m, unknown) << "value " << v << " falls through to the unknown message";
    EXPECT_TRUE(seen.insert(m).second) << "value " << v << " repeats message '" << m << "'";
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kLast - kFirst + 1));
}

TEST(ErrorCategory, UnknownValueStillHasAMessage) {
  EXPECT_FALSE(remora::remora_category().message(kLast + 100).empty());
}

TEST(ErrorCode, ErrcConvertsImplicitly) {
  std::error_code ec = Errc::queue_full;  // is_error_code_enum
  EXPECT_EQ(ec.value(), static_cast<int>(Errc::queue_full));
  EXPECT_EQ(&ec.category(), &remora::remora_category());
  EXPECT_TRUE(ec == Errc::queue_full);
  EXPECT_FALSE(ec == Errc::timeout);
  EXPECT_TRUE(static_cast<bool>(ec));
}

TEST(ErrorCode, DistinctFromGenericErrnoWithSameValue) {
  std::error_code ours = Errc::invalid_handle;
  std::error_code generic(static_cast<int>(Errc::invalid_handle), std::generic_category());
  EXPECT_NE(ours, generic);
}

TEST(ErrorCode, MessageMatchesCategory) {
  for (int v = kFirst; v <= kLast; ++v) {
    std::error_code ec = remora::make_error_code(static_cast<Errc>(v));
    EXPECT_EQ(ec.message(), remora::remora_category().message(v));
  }
}

}  // namespace
