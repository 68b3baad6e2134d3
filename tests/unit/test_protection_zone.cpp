// ProtectionZone: file-backed persistent regions (map_file), memory the
// library allocates (allocate) and handle checks.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <limits>

#include "unit_support.hpp"

namespace {

using namespace unit;
namespace fs = std::filesystem;

class ProtectionZoneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "remora-unit-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
    fabric = MUST(Fabric::open({}));
    zone = MUST(fabric.create_zone());
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  fs::path dir;
  Fabric fabric;
  ProtectionZone zone;
};

TEST_F(ProtectionZoneTest, MapFileCreatesOrGrowsTheFile) {
  {  // MapFileCreatesAndSizesTheFile
    const auto path = dir / "pool";
    ASSERT_FALSE(fs::exists(path));
    auto mr = MUST(zone.map_file(path.string(), 1 << 20, Access::all));
    ASSERT_TRUE(fs::exists(path));
    EXPECT_EQ(fs::file_size(path), 1u << 20);
    EXPECT_TRUE(mr.valid());
    EXPECT_NE(mr.address(), nullptr);
    EXPECT_EQ(mr.length(), 1u << 20);
    EXPECT_EQ(mr.access(), Access::all);
    EXPECT_TRUE(mr.persistent());
    EXPECT_NE(mr.key(), 0u);
    auto rr = MUST(mr.remote());
    EXPECT_TRUE(rr.persistent());
    EXPECT_EQ(rr.address(), reinterpret_cast<std::uint64_t>(mr.address()));
  }
  {  // MapFileGrowsAShortFile
    const auto path = dir / "short";
    {
      int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0644);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::write(fd, "abc", 3), 3);
      ::close(fd);
    }
    auto mr = MUST(zone.map_file(path.string(), 8192, Access::local_read | Access::local_write));
    EXPECT_EQ(fs::file_size(path), 8192u);
    EXPECT_EQ(std::memcmp(mr.address(), "abc", 3), 0) << "existing contents are mapped";
  }
}

TEST_F(ProtectionZoneTest, PersistedBytesReachTheFile) {
  {  // PersistWritesTheBytesToTheFile
    const auto path = dir / "persist";
    auto mr = MUST(zone.map_file(path.string(), 65536, Access::all));
    auto* p = static_cast<char*>(mr.address());
    std::memcpy(p + 5000, "durable bytes", 13);
    EXPECT_OK(mr.persist(4096, 4096));
    EXPECT_OK(mr.persist(0, mr.length()));
    EXPECT_OK(mr.persist(mr.length(), 0));
    // Read the file through a different descriptor.
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char got[13] = {};
    ASSERT_EQ(::pread(fd, got, sizeof got, 5000), 13);
    ::close(fd);
    EXPECT_EQ(std::memcmp(got, "durable bytes", 13), 0);
  }
  {  // ContentsSurviveReopen
    const auto path = dir / "reopen";
    {
      auto mr = MUST(zone.map_file(path.string(), 4096, Access::all));
      std::memcpy(mr.address(), "kept", 4);
      MUST(mr.persist(0, 4));
    }
    auto mr = MUST(zone.map_file(path.string(), 4096, Access::all));
    EXPECT_EQ(std::memcmp(mr.address(), "kept", 4), 0);
  }
}

TEST_F(ProtectionZoneTest, PersistChecksRegionAndRange) {
  {  // PersistOnNonPersistentRegionIsNotSupported
    std::vector<std::uint8_t> buf(4096);
    auto mr = MUST(zone.register_memory(buf.data(), buf.size(), Access::all));
    EXPECT_FALSE(mr.persistent());
    EXPECT_ERR(mr.persist(0, 64), Errc::not_supported);
  }
  {  // PersistOutOfRangeIsInvalidArgument
    auto mr = MUST(zone.map_file((dir / "range").string(), 8192, Access::all));
    constexpr auto kMax = std::numeric_limits<std::size_t>::max();
    EXPECT_ERR(mr.persist(8193, 0), Errc::invalid_argument);
    EXPECT_ERR(mr.persist(8000, 193), Errc::invalid_argument);
    EXPECT_ERR(mr.persist(0, 8193), Errc::invalid_argument);
    EXPECT_ERR(mr.persist(1, kMax), Errc::invalid_argument);
    EXPECT_ERR(mr.persist(kMax, 2), Errc::invalid_argument);
    EXPECT_OK(mr.persist(8000, 192));
  }
  {  // PersistentRegisteredMemoryPersists
    std::vector<std::uint8_t> buf(4096);
    auto mr = MUST(zone.register_memory(buf.data(), buf.size(), Access::all, true));
    EXPECT_TRUE(mr.persistent());
    EXPECT_OK(mr.persist(0, 4096));  // harmless on anonymous memory
    EXPECT_ERR(mr.persist(4000, 97), Errc::invalid_argument);
  }
}

// Shorter than a page: mapped (and the file grown) to the page, the region
// keeps the length asked for, and persisting it works.
TEST_F(ProtectionZoneTest, MapFileOfLessThanAPage) {
  const auto path = dir / "tiny";
  auto mr = MUST(zone.map_file(path.string(), 8, Access::all));
  EXPECT_EQ(mr.length(), 8u);
  EXPECT_TRUE(mr.persistent());
  std::memcpy(mr.address(), "8 bytes!", 8);
  EXPECT_OK(mr.persist(0, 8));
  EXPECT_ERR(mr.persist(0, 9), Errc::invalid_argument);
  EXPECT_EQ(std::filesystem::file_size(path) % static_cast<std::uintmax_t>(sysconf(_SC_PAGESIZE)), 0u);
}

TEST_F(ProtectionZoneTest, MapFileErrors) {
  {  // MapFileRejectsBadArguments
    EXPECT_ERR(zone.map_file("", 4096, Access::all), Errc::invalid_argument);
    EXPECT_ERR(zone.map_file((dir / "zero").string(), 0, Access::all), Errc::invalid_argument);
    EXPECT_ERR(zone.map_file((dir / "none").string(), 4096, Access::none), Errc::invalid_argument);
  }
  {  // MapFileInMissingDirectoryFails
    auto r = zone.map_file((dir / "no" / "such" / "dir" / "f").string(), 4096, Access::all);
    EXPECT_FALSE(r.ok());
  }
}

// allocate: zero-filled, page-aligned memory of at least the length asked
// for, registered with the access asked for, usable locally.
TEST_F(ProtectionZoneTest, AllocateGivesZeroedPageAlignedRegisteredMemory) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  for (std::size_t len : {std::size_t{1}, std::size_t{4096}, std::size_t{10000}, std::size_t{1} << 20}) {
    auto mr = MUST(zone.allocate(len, Access::all));
    ASSERT_TRUE(mr.valid());
    EXPECT_EQ(mr.length(), len);
    EXPECT_EQ(mr.access(), Access::all);
    EXPECT_FALSE(mr.persistent());
    ASSERT_NE(mr.address(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(mr.address()) % page, 0u);
    auto* b = static_cast<std::uint8_t*>(mr.address());
    EXPECT_TRUE(std::all_of(b, b + len, [](std::uint8_t x) { return x == 0; })) << len;
    // Written and read back locally, to the end of the last page.
    const std::size_t span = (len + page - 1) / page * page;
    std::memset(b, 0x5c, span);
    EXPECT_TRUE(std::all_of(b, b + span, [](std::uint8_t x) { return x == 0x5c; }));
    EXPECT_NE(mr.key(), 0u);
    auto rr = MUST(mr.remote());
    EXPECT_EQ(rr.address(), reinterpret_cast<std::uint64_t>(mr.address()));
    EXPECT_EQ(rr.length(), len);
    EXPECT_EQ(rr.access(), kRemote);
    mr.close();
    EXPECT_FALSE(mr.valid());
  }
  // Local access only: registered, no remote descriptor.
  auto local = MUST(zone.allocate(100, kLocal));
  EXPECT_EQ(local.key(), 0u);
  EXPECT_ERR(local.remote(), Errc::privileges);
  // Two allocations are two distinct memories.
  auto a = MUST(zone.allocate(4096, Access::all));
  auto b = MUST(zone.allocate(4096, Access::all));
  EXPECT_NE(a.address(), b.address());
  std::memset(a.address(), 1, 4096);
  EXPECT_EQ(static_cast<std::uint8_t*>(b.address())[0], 0u);
}

TEST_F(ProtectionZoneTest, AllocateErrors) {
  EXPECT_ERR(zone.allocate(0, Access::all), Errc::invalid_argument);
  EXPECT_ERR(zone.allocate(4096, Access::none), Errc::invalid_argument);
  EXPECT_ERR(zone.allocate(4096, static_cast<Access>(0x8000)), Errc::invalid_argument);
  EXPECT_ERR(zone.allocate(std::numeric_limits<std::size_t>::max(), Access::all), Errc::invalid_argument);
  ProtectionZone z;
  EXPECT_ERR(z.allocate(4096, Access::all), Errc::invalid_handle);
}

// An allocated region is a target like any other: RMA writes, reads and the
// atomic write reach it over the connection.
TEST(ProtectionZoneAllocate, RemoteAccessOverTheConnection) {
  Pair p;
  auto mr = MUST(p.tz.allocate(8192, Access::all));
  auto rr = MUST(mr.remote());
  auto src = pattern(3000, 9);
  std::memcpy(p.local_mem.data(), src.data(), src.size());
  Segment w[2] = {Segment(p.lmr, 0, 1000), Segment(p.lmr, 1000, 2000)};
  ASSERT_OK(p.iep.write(w, rr, 5000, 1));
  auto c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  auto* t = static_cast<std::uint8_t*>(mr.address());
  EXPECT_EQ(0, std::memcmp(t + 5000, src.data(), src.size()));
  EXPECT_TRUE(std::all_of(t, t + 5000, [](std::uint8_t x) { return x == 0; }));
  EXPECT_TRUE(std::all_of(t + 8000, t + 8192, [](std::uint8_t x) { return x == 0; }));

  std::memset(t + 100, 0x42, 64);
  Segment r(p.lmr, 3500, 64);
  ASSERT_OK(p.iep.read({&r, 1}, rr, 100, 2));
  c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_TRUE(
      std::all_of(p.local_mem.begin() + 3500, p.local_mem.begin() + 3564, [](std::uint8_t x) { return x == 0x42; }));

  ASSERT_OK(p.iep.atomic_write(rr, 4096, 0x0102030405060708ull, 3));
  c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  std::uint64_t v = 0;
  std::memcpy(&v, t + 4096, 8);
  EXPECT_EQ(v, 0x0102030405060708ull);

  // Out of the region's range: refused as for any region.
  ASSERT_OK(p.iep.write({&w[0], 1}, RemoteRegion(rr.address(), 16384, rr.key(), rr.access(), false), 8000, 4));
  c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, make_error_code(Errc::remote_access)) << describe(c[0]);
}

TEST_F(ProtectionZoneTest, HandlesAndIds) {
  {  // InvalidZoneIsInvalidHandle
    ProtectionZone z;
    EXPECT_ERR(z.map_file((dir / "x").string(), 4096, Access::all), Errc::invalid_handle);
    EXPECT_ERR(z.create_cq(), Errc::invalid_handle);
    EXPECT_ERR(z.listen("127.0.0.1", 0), Errc::invalid_handle);
    EXPECT_EQ(z.id(), 0u);
    CompletionQueue cq = MUST(zone.create_cq());
    EndpointOptions o;
    o.send_cq = &cq;
    EXPECT_ERR(z.create_endpoint(o), Errc::invalid_handle);
  }
  {  // ZonesHaveDistinctIds
    auto other = MUST(fabric.create_zone());
    EXPECT_NE(zone.id(), 0u);
    EXPECT_NE(other.id(), 0u);
    EXPECT_NE(zone.id(), other.id());
  }
  {  // ClosedRegionOfFileUnmaps
    auto mr = MUST(zone.map_file((dir / "closed").string(), 4096, Access::all));
    mr.close();
    mr.close();
    EXPECT_FALSE(mr.valid());
    EXPECT_ERR(mr.persist(0, 1), Errc::invalid_handle);
  }
}

}  // namespace
