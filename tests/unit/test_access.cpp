// Access flags and their helpers.
#include <gtest/gtest.h>

#include <cstdint>

#include "remora/access.hpp"

namespace {

using remora::Access;
using remora::has;

std::uint32_t bits(Access a) { return static_cast<std::uint32_t>(a); }

TEST(Access, BitsAreDistinctAndAllIsTheirUnion) {
  const Access each[] = {Access::local_read, Access::local_write, Access::remote_read, Access::remote_write};
  std::uint32_t seen = 0;
  for (Access a : each) {
    EXPECT_NE(bits(a), 0u);
    EXPECT_EQ(bits(a) & (bits(a) - 1), 0u) << "not a single bit";
    EXPECT_EQ(seen & bits(a), 0u) << "bit reused";
    seen |= bits(a);
  }
  EXPECT_EQ(seen, bits(Access::all));
  EXPECT_EQ(bits(Access::none), 0u);
}

TEST(Access, OrAndCombine) {
  Access rw = Access::local_read | Access::remote_write;
  EXPECT_EQ(bits(rw), bits(Access::local_read) | bits(Access::remote_write));
  EXPECT_EQ(rw & Access::remote_write, Access::remote_write);
  EXPECT_EQ(rw & Access::remote_read, Access::none);
  EXPECT_EQ(Access::all & Access::local_write, Access::local_write);
}

TEST(Access, HasNeedsEveryWantedBit) {
  Access rw = Access::local_read | Access::remote_write;
  EXPECT_TRUE(has(rw, Access::local_read));
  EXPECT_TRUE(has(rw, Access::remote_write));
  EXPECT_TRUE(has(rw, rw));
  EXPECT_FALSE(has(rw, Access::remote_read));
  EXPECT_FALSE(has(rw, Access::local_read | Access::local_write)) << "one of two bits is not enough";
  EXPECT_TRUE(has(Access::all, Access::remote_read | Access::local_write));
  EXPECT_FALSE(has(Access::none, Access::local_read));
  EXPECT_TRUE(has(Access::none, Access::none));
  EXPECT_TRUE(has(rw, Access::none));
}

TEST(Access, UsableInConstantExpressions) {
  static_assert(has(Access::all, Access::remote_read));
  static_assert(!has(Access::local_read, Access::local_write));
  static_assert((Access::local_read | Access::local_write) != Access::all);
  SUCCEED();
}

}  // namespace
