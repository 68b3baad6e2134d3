// RemoteRegion: the serialized descriptor and what parse() refuses.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "remora/error.hpp"
#include "remora/remote_region.hpp"

namespace {

using remora::Access;
using remora::Errc;
using remora::RemoteRegion;

constexpr Access kRW = Access::remote_read | Access::remote_write;

RemoteRegion sample() { return RemoteRegion(0x00007f0012345000ull, 1u << 20, 0x0123456789abcdefull, kRW, true); }

void expect_malformed(const std::vector<std::uint8_t>& bytes, const char* what) {
  auto r = RemoteRegion::parse(bytes);
  EXPECT_FALSE(r.ok()) << what << ": accepted";
  EXPECT_EQ(r.error(), remora::make_error_code(Errc::malformed)) << what << ": " << r.error().message();
}

TEST(RemoteRegion, SerializedSizeIsFixed) {
  EXPECT_EQ(sample().serialize().size(), RemoteRegion::kSerializedSize);
  EXPECT_EQ(RemoteRegion().serialize().size(), RemoteRegion::kSerializedSize);
  EXPECT_EQ(RemoteRegion::kSerializedSize, 40u);
}

TEST(RemoteRegion, RoundTripKeepsEveryField) {
  const RemoteRegion cases[] = {
      sample(),
      RemoteRegion(0x1000, 64, 1, Access::remote_read, false),
      RemoteRegion(0x2000, 8, 0xffffffffffffffffull, Access::remote_write, false),
      RemoteRegion(0x3000, 4096, 42, Access::none, true),
      RemoteRegion(0, 0, 0, Access::none, false),
      RemoteRegion(std::numeric_limits<std::uint64_t>::max() - 99, 50, 7, kRW, false),
  };
  for (const auto& in : cases) {
    auto bytes = in.serialize();
    auto out = RemoteRegion::parse(bytes);
    ASSERT_TRUE(out.ok()) << out.error().message();
    EXPECT_EQ(out->address(), in.address());
    EXPECT_EQ(out->length(), in.length());
    EXPECT_EQ(out->key(), in.key());
    EXPECT_EQ(out->access(), in.access());
    EXPECT_EQ(out->persistent(), in.persistent());
    EXPECT_TRUE(*out == in);
    EXPECT_EQ(out->serialize(), bytes) << "serialize(parse(x)) != x";
  }
}

TEST(RemoteRegion, DifferentDescriptorsSerializeDifferently) {
  auto a = sample();
  RemoteRegion b(a.address(), a.length(), a.key(), a.access(), false);
  RemoteRegion c(a.address(), a.length(), a.key(), Access::remote_read, true);
  RemoteRegion d(a.address(), a.length(), a.key() ^ 1, a.access(), true);
  EXPECT_NE(a.serialize(), b.serialize());
  EXPECT_NE(a.serialize(), c.serialize());
  EXPECT_NE(a.serialize(), d.serialize());
  EXPECT_FALSE(a == b);
}

TEST(RemoteRegion, ParseRejectsWrongSize) {
  auto good = sample().serialize();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, RemoteRegion::kSerializedSize - 1,
                        RemoteRegion::kSerializedSize + 1, std::size_t{80}}) {
    std::vector<std::uint8_t> b(n, 0);
    if (n > 0) std::memcpy(b.data(), good.data(), std::min(n, good.size()));
    expect_malformed(b, "size");
  }
}

TEST(RemoteRegion, ParseRejectsBadMagic) {
  for (std::size_t i = 0; i < 4; ++i) {
    auto b = sample().serialize();
    b[i] ^= 0x20;
    expect_malformed(b, "magic");
  }
}

TEST(RemoteRegion, ParseRejectsBadVersion) {
  auto good = sample().serialize();
  for (std::uint8_t v : {std::uint8_t{0}, static_cast<std::uint8_t>(good[4] + 1), std::uint8_t{0xff}}) {
    auto b = good;
    b[4] = v;
    expect_malformed(b, "version");
  }
}

TEST(RemoteRegion, ParseRejectsUnknownFlagBits) {
  // The known flags are read, write, persistent; every other bit is unknown.
  auto all_known = sample().serialize();
  const std::uint8_t known = all_known[5];
  ASSERT_EQ(__builtin_popcount(known), 3) << "sample() sets exactly the three known flags";
  int rejected = 0;
  for (int bit = 0; bit < 8; ++bit) {
    const auto m = static_cast<std::uint8_t>(1u << bit);
    if (known & m) continue;
    auto b = all_known;
    b[5] |= m;
    expect_malformed(b, "flag bit");
    ++rejected;
  }
  EXPECT_EQ(rejected, 5);
}

TEST(RemoteRegion, ParseRejectsNonzeroReservedBytes) {
  auto good = sample().serialize();
  // Header reserved u16 at 6..7 and trailing reserved u64 at 32..39.
  for (std::size_t i : {6, 7, 32, 33, 36, 39}) {
    auto b = good;
    b[i] = 1;
    expect_malformed(b, "reserved");
  }
}

TEST(RemoteRegion, ParseRejectsWrappingRange) {
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  expect_malformed(RemoteRegion(kMax - 10, 20, 1, kRW, false).serialize(), "wrap");
  expect_malformed(RemoteRegion(kMax, kMax, 1, kRW, false).serialize(), "wrap");
  expect_malformed(RemoteRegion(1ull << 63, 1ull << 63 | 1, 1, kRW, false).serialize(), "wrap");
  // Just below the top still parses.
  EXPECT_TRUE(RemoteRegion::parse(RemoteRegion(kMax - 100, 100, 1, kRW, false).serialize()).ok());
}

TEST(RemoteRegion, DefaultIsEmpty) {
  RemoteRegion r;
  EXPECT_EQ(r.address(), 0u);
  EXPECT_EQ(r.length(), 0u);
  EXPECT_EQ(r.key(), 0u);
  EXPECT_EQ(r.access(), Access::none);
  EXPECT_FALSE(r.persistent());
}

}  // namespace
