// Fabric: opening a provider and creating zones.
#include "unit_support.hpp"

namespace {

using namespace unit;

TEST(Fabric, OpenInfoAndHandles) {
  {  // OpensTcpOnLoopback
    auto f = MUST(Fabric::open({}));
    EXPECT_TRUE(f.valid());
    EXPECT_EQ(f.info().provider, "tcp");
    EXPECT_GE(f.info().max_segments, 1u);
    EXPECT_GT(f.info().max_message, 0u);
  }
  {  // InvalidFabricIsInvalidHandle
    Fabric f;
    EXPECT_FALSE(f.valid());
    EXPECT_ERR(f.create_zone(), Errc::invalid_handle);
    EXPECT_TRUE(f.info().provider.empty());
  }
  {  // ZoneKeepsFabricAlive
    auto f = MUST(Fabric::open({}));
    auto z = MUST(f.create_zone());
    f.close();
    EXPECT_FALSE(f.valid());
    std::vector<std::uint8_t> mem(64);
    EXPECT_OK(z.register_memory(mem.data(), mem.size(), Access::all));
    EXPECT_OK(z.create_cq());
  }
}

TEST(Fabric, UnknownProviderIsNotSupported) {
  FabricOptions o;
  o.provider = "no-such-provider";
  EXPECT_ERR(Fabric::open(o), Errc::not_supported);
}

}  // namespace
