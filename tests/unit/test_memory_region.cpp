// MemoryRegion: registration, keys, descriptors, handle lifetime.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <utility>

#include "unit_support.hpp"

namespace {

using namespace unit;

class MemoryRegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric = MUST(Fabric::open({}));
    zone = MUST(fabric.create_zone());
    buf.assign(1 << 16, 0);
  }
  std::vector<std::uint8_t> buf;
  Fabric fabric;
  ProtectionZone zone;
};

TEST_F(MemoryRegionTest, RegistrationAndDescriptor) {
  {  // ReportsWhatWasRegistered
    const Access a = Access::local_read | Access::remote_read;
    auto mr = MUST(zone.register_memory(buf.data() + 128, 1000, a));
    EXPECT_TRUE(mr.valid());
    EXPECT_EQ(mr.address(), buf.data() + 128);
    EXPECT_EQ(mr.length(), 1000u);
    EXPECT_EQ(mr.access(), a);
    EXPECT_FALSE(mr.persistent());
  }
  {  // PersistentFlagIsKept
    auto mr = MUST(zone.register_memory(buf.data(), 4096, Access::all, true));
    EXPECT_TRUE(mr.persistent());
    auto rr = MUST(mr.remote());
    EXPECT_TRUE(rr.persistent());
  }
  {  // RemoteDescriptorMatchesRegion
    auto mr = MUST(zone.register_memory(buf.data() + 64, 2048, Access::local_write | Access::remote_write));
    auto rr = MUST(mr.remote());
    EXPECT_EQ(rr.address(), reinterpret_cast<std::uint64_t>(buf.data() + 64));
    EXPECT_EQ(rr.length(), 2048u);
    EXPECT_EQ(rr.key(), mr.key());
    EXPECT_EQ(rr.access(), Access::remote_write) << "descriptor carries only remote privileges";
    EXPECT_FALSE(rr.persistent());

    auto both = MUST(zone.register_memory(buf.data() + 4096, 64, Access::all));
    EXPECT_EQ(MUST(both.remote()).access(), kRemote);
  }
}

TEST_F(MemoryRegionTest, KeyAndDescriptorNeedARemotePrivilege) {
  {  // KeyOnlyWithARemotePrivilege
    auto local = MUST(zone.register_memory(buf.data(), 4096, kLocal));
    EXPECT_EQ(local.key(), 0u);
    auto rd = MUST(zone.register_memory(buf.data() + 4096, 4096, Access::remote_read));
    EXPECT_NE(rd.key(), 0u);
    auto wr = MUST(zone.register_memory(buf.data() + 8192, 4096, Access::remote_write | Access::local_read));
    EXPECT_NE(wr.key(), 0u);
    EXPECT_NE(rd.key(), wr.key());
  }
  {  // RemoteWithoutRemoteAccessIsPrivileges
    for (Access a : {Access::local_read, Access::local_write, kLocal}) {
      auto mr = MUST(zone.register_memory(buf.data(), 4096, a));
      EXPECT_ERR(mr.remote(), Errc::privileges);
    }
  }
}

TEST_F(MemoryRegionTest, KeysAreDistinctAndNotSequential) {
  constexpr int kN = 32;
  std::vector<MemoryRegion> regions;
  std::vector<std::uint64_t> keys;
  for (int i = 0; i < kN; ++i) {
    regions.push_back(
        MUST(zone.register_memory(buf.data() + i * 1024, 1024, Access::remote_write | Access::local_read)));
    keys.push_back(regions.back().key());
  }
  std::set<std::uint64_t> distinct(keys.begin(), keys.end());
  EXPECT_EQ(distinct.size(), keys.size()) << "two regions share a key";
  EXPECT_EQ(distinct.count(0), 0u);
  // A guessable key generator (counter, fixed stride) shows as consecutive
  // keys that differ by a small amount. Random 64-bit keys differ by ~2^63.
  int close_pairs = 0;
  std::set<std::uint64_t> strides;
  for (int i = 1; i < kN; ++i) {
    std::uint64_t d = keys[i] > keys[i - 1] ? keys[i] - keys[i - 1] : keys[i - 1] - keys[i];
    strides.insert(keys[i] - keys[i - 1]);
    if (d < (1ull << 20)) ++close_pairs;
  }
  EXPECT_EQ(close_pairs, 0) << "consecutive keys differ by less than 2^20, e.g. " << keys[0] << ", " << keys[1];
  EXPECT_GT(strides.size(), 1u) << "keys advance by a constant stride";
}

TEST_F(MemoryRegionTest, KeysOfOtherRegistrationsDiffer) {
  {  // KeysDistinctAcrossZones
    auto other = MUST(fabric.create_zone());
    auto a = MUST(zone.register_memory(buf.data(), 4096, Access::remote_read));
    auto b = MUST(other.register_memory(buf.data(), 4096, Access::remote_read));
    EXPECT_NE(a.key(), b.key());
  }
  {  // SameMemoryRegisteredTwiceGetsTwoKeys
    auto a = MUST(zone.register_memory(buf.data(), 4096, Access::remote_read));
    auto b = MUST(zone.register_memory(buf.data(), 4096, Access::remote_read));
    EXPECT_NE(a.key(), b.key());
    a.close();
    EXPECT_TRUE(b.valid());
    EXPECT_OK(b.remote());
  }
}

TEST_F(MemoryRegionTest, SyncChecksItsRangeAndHandle) {
  // Coherent memory (tcp): the calls succeed over the region and refuse a
  // range past its end or a closed region, as documented.
  auto mr = MUST(zone.register_memory(buf.data(), 4096, Access::all));
  EXPECT_OK(mr.sync_rdma_write(0, 4096));
  EXPECT_OK(mr.sync_rdma_read(4000, 96));
  EXPECT_OK(mr.sync_rdma_write(4096, 0));
  EXPECT_ERR(mr.sync_rdma_write(4000, 97), Errc::invalid_argument);
  EXPECT_ERR(mr.sync_rdma_read(4097, 0), Errc::invalid_argument);
  EXPECT_ERR(mr.sync_rdma_write(1, static_cast<std::size_t>(-1)), Errc::invalid_argument);
  mr.close();
  EXPECT_ERR(mr.sync_rdma_write(0, 8), Errc::invalid_handle);
  EXPECT_ERR(mr.sync_rdma_read(0, 8), Errc::invalid_handle);
  MemoryRegion none;
  EXPECT_ERR(none.sync_rdma_read(0, 8), Errc::invalid_handle);
}

TEST_F(MemoryRegionTest, RegisterErrors) {
  {  // RegisterRejectsBadArguments
    EXPECT_ERR(zone.register_memory(nullptr, 4096, Access::all), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(buf.data(), 0, Access::all), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(buf.data(), 4096, Access::none), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(buf.data(), 4096, static_cast<Access>(0x10)), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(buf.data(), 4096, static_cast<Access>(0x80000001u)), Errc::invalid_argument);
  }
  {  // RegisterRejectsRangesNoProviderWould: wrapping, or not mapped
    auto* top = reinterpret_cast<void*>(UINTPTR_MAX - 4095);
    EXPECT_ERR(zone.register_memory(top, 8192, Access::all), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(buf.data(), SIZE_MAX, Access::all), Errc::invalid_argument);
    const long page = sysconf(_SC_PAGESIZE);
    void* m = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    auto* p = static_cast<std::uint8_t*>(m);
    ASSERT_EQ(munmap(p + page, page), 0);  // a hole in the middle
    EXPECT_ERR(zone.register_memory(p, 3 * page, Access::all), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(p + page + 8, 16, Access::remote_write), Errc::invalid_argument);
    EXPECT_OK(zone.register_memory(p, page, Access::all));  // the mapped pages still register
    auto tail = MUST(zone.register_memory(p + 2 * page, page, Access::remote_write));
    EXPECT_EQ(tail.length(), static_cast<std::size_t>(page));
    tail.close();
    munmap(p, page);
    munmap(p + 2 * page, page);
  }
  {  // RegisterRefusesWriteAccessToMemoryThisProcessCannotWrite
    const long page = sysconf(_SC_PAGESIZE);
    void* m = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    auto* p = static_cast<std::uint8_t*>(m);
    ASSERT_EQ(mprotect(p + page, page, PROT_READ), 0);  // the second page read-only
    EXPECT_ERR(zone.register_memory(p, 2 * page, Access::remote_write), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(p + page, 8, Access::local_write), Errc::invalid_argument);
    EXPECT_ERR(zone.register_memory(p + page, 8, Access::all), Errc::invalid_argument);
    EXPECT_OK(zone.register_memory(p, 2 * page, Access::local_read | Access::remote_read));
    EXPECT_OK(zone.register_memory(p, page, Access::all));  // the writable page
    ASSERT_EQ(mprotect(p + page, page, PROT_NONE), 0);
    EXPECT_ERR(zone.register_memory(p, 2 * page, Access::all), Errc::invalid_argument);
    munmap(p, 2 * page);
  }
  {  // RegisterOnInvalidZoneIsInvalidHandle
    ProtectionZone none;
    EXPECT_FALSE(none.valid());
    EXPECT_ERR(none.register_memory(buf.data(), 4096, Access::all), Errc::invalid_handle);
    ProtectionZone moved = std::move(zone);
    EXPECT_ERR(zone.register_memory(buf.data(), 4096, Access::all), Errc::invalid_handle);  // NOLINT(use-after-move)
    EXPECT_OK(moved.register_memory(buf.data(), 4096, Access::all));
  }
}

TEST_F(MemoryRegionTest, ClosedMovedFromAndDefaultRegionsAreInvalidHandle) {
  {  // ClosedRegionIsInvalidHandle
    auto mr = MUST(zone.register_memory(buf.data(), 4096, Access::all, true));
    mr.close();
    EXPECT_FALSE(mr.valid());
    EXPECT_ERR(mr.remote(), Errc::invalid_handle);
    EXPECT_ERR(mr.persist(0, 16), Errc::invalid_handle);
    EXPECT_EQ(mr.key(), 0u);
    EXPECT_EQ(mr.address(), nullptr);
    EXPECT_EQ(mr.length(), 0u);
  }
  {  // MovedFromRegionIsInvalidHandle
    auto mr = MUST(zone.register_memory(buf.data(), 4096, Access::all, true));
    const auto key = mr.key();
    MemoryRegion other = std::move(mr);
    EXPECT_FALSE(mr.valid());  // NOLINT(bugprone-use-after-move)
    EXPECT_ERR(mr.remote(), Errc::invalid_handle);
    EXPECT_ERR(mr.persist(0, 16), Errc::invalid_handle);
    EXPECT_TRUE(other.valid());
    EXPECT_EQ(other.key(), key);
    EXPECT_OK(other.remote());
  }
  {  // DefaultRegionIsInvalid
    MemoryRegion mr;
    EXPECT_FALSE(mr.valid());
    EXPECT_ERR(mr.remote(), Errc::invalid_handle);
    EXPECT_ERR(mr.persist(0, 1), Errc::invalid_handle);
    mr.close();
  }
}

TEST_F(MemoryRegionTest, CloseTwiceIsSafeAndRegionKeepsZoneAlive) {
  {  // CloseTwiceIsSafe
    auto mr = MUST(zone.register_memory(buf.data(), 4096, Access::all));
    mr.close();
    mr.close();
    EXPECT_FALSE(mr.valid());
    // The zone still works afterwards.
    auto again = MUST(zone.register_memory(buf.data(), 4096, Access::all));
    EXPECT_TRUE(again.valid());
  }
  {  // RegionKeepsZoneAlive
    auto mr = MUST(zone.register_memory(buf.data(), 4096, Access::all));
    zone.close();
    EXPECT_FALSE(zone.valid());
    EXPECT_TRUE(mr.valid());
    EXPECT_OK(mr.remote());
    mr.close();
  }
}

}  // namespace
