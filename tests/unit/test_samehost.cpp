// The same-host direct path (docs/design.md, "Same-host direct path"): with
// REMORA_SAMEHOST=1 an initiator whose peer zone is in a process of this
// host places RMA writes and reads itself (process_vm_writev/readv) after
// checking key, bounds and privilege against the peer's region table. Both
// zones of a Pair live in this process: pidfd_getfd and process_vm_* on our
// own pid exercise the real path.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/direct/copier.hpp"
#include "core/direct/fault_guard.hpp"
#include "core/impl.hpp"
#include "cpu_time.hpp"  // tools/
#include "smaps.hpp"     // tools/
#include "unit_support.hpp"

namespace {

using namespace unit;

/// Operations the endpoint placed by the direct path.
std::uint64_t direct_ops(const Endpoint& ep) { return ep.impl()->direct_ops.load(); }

/// Wait until the endpoint mapped its peer's table (the peer's offer arrives
/// in band after the connection is established).
bool direct_ready(const Endpoint& ep, std::chrono::milliseconds timeout = kWait) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      detail::MutexLock lock(ep.impl()->mu);
      if (ep.impl()->direct_peer) return true;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
}

/// Of those, the ones copied through the initiator's own mapping of the region.
std::uint64_t mapped_ops(const Endpoint& ep) { return ep.impl()->direct_mapped_ops.load(); }

/// Regions of the peer the endpoint holds mapped now.
std::size_t peer_mappings(const Endpoint& ep) {
  detail::MutexLock lock(ep.impl()->mu);
  return ep.impl()->direct_peer ? ep.impl()->direct_peer->mappings() : 0;
}

/// The permissions ("rw-s", "r--s", ...) of every mapping of this process of
/// a memory file named `name` ("/memfd:NAME (deleted)" in /proc/self/maps),
/// by start address.
std::map<std::uintptr_t, std::string> memfd_mappings(const std::string& name) {
  std::map<std::uintptr_t, std::string> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:" + name + " ") == std::string::npos) continue;
    std::istringstream in(line);
    std::string range, perms;
    in >> range >> perms;
    out[std::stoull(range.substr(0, range.find('-')), nullptr, 16)] = perms;
  }
  return out;
}

std::string why_not(const Endpoint& ep) {
  detail::MutexLock lock(ep.impl()->mu);
  return ep.impl()->direct_why_not;
}

class SameHost : public ::testing::Test {
 protected:
  void SetUp() override {
    // On by default; "1" so that a REMORA_SAMEHOST=0 around the test run
    // does not turn it off (read when a zone is created).
    ::setenv("REMORA_SAMEHOST", "1", 1);
    p = std::make_unique<Pair>();
    ASSERT_TRUE(direct_ready(p->iep)) << "the initiator never mapped the target's table: " << why_not(p->iep);
    // The message rings are offered in band after the tables: wait until
    // both offers are answered, so that no descriptor or mapping of theirs
    // changes during the test (bounded: without rings there is nothing).
    auto settled = [&] {
      // One endpoint's lock at a time, as the library takes them.
      auto look = [](const Endpoint& ep, bool& answered, bool& has_inbox, bool& has_outbox) {
        detail::MutexLock lock(ep.impl()->mu);
        answered = !ep.impl()->inbox || ep.impl()->inbox->fd() < 0;
        has_inbox = ep.impl()->inbox != nullptr;
        has_outbox = ep.impl()->outbox != nullptr;
      };
      bool ia = false, ii = false, io = false, ta = false, ti = false, to = false;
      look(p->iep, ia, ii, io);
      look(p->tep, ta, ti, to);
      return ia && ta && (!ti || io) && (!ii || to);
    };
    for (auto until = std::chrono::steady_clock::now() + 2s; !settled() && std::chrono::steady_clock::now() < until;)
      std::this_thread::sleep_for(1ms);
  }
  void TearDown() override { ::unsetenv("REMORA_SAMEHOST"); }

  /// A region of `access` in the target zone, inside guard pages of 0xA5.
  struct Guarded {
    std::vector<std::uint8_t> mem;
    MemoryRegion mr;
    RemoteRegion rr;
    bool guards_intact() const {
      return std::all_of(mem.begin(), mem.begin() + 4096, [](std::uint8_t b) { return b == 0xA5; }) &&
             std::all_of(mem.end() - 4096, mem.end(), [](std::uint8_t b) { return b == 0xA5; });
    }
    bool pristine() const {
      return std::all_of(mem.begin(), mem.end(), [](std::uint8_t b) { return b == 0xA5; });
    }
  };
  /// `mr`: a shareable 4 KiB region of the target zone, into which the
  /// initiator wrote the first 8 bytes of its buffer (completed); `fill` is
  /// written there first unless it is negative. Whether the write went
  /// through a mapping is the caller's to check. Call it inside
  /// ASSERT_NO_FATAL_FAILURE: its assertions end the test.
  void written_shareable(MemoryRegion& mr, int fill = -1) {
    mr = MUST(p->tz.allocate(4096, Access::all));
    if (fill >= 0) std::memset(p->local_mem.data(), fill, 8);
    Segment s(p->lmr, 0, 8);
    ASSERT_OK(p->iep.write({&s, 1}, MUST(mr.remote()), 0, 1));
    ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  }
  std::unique_ptr<Guarded> guarded(Access access) {
    auto g = std::make_unique<Guarded>();
    g->mem.assign(3 * 4096, 0xA5);
    g->mr = MUST(p->tz.register_memory(g->mem.data() + 4096, 4096, access));
    g->rr = MUST(g->mr.remote());
    return g;
  }

  /// The one completion of a refused operation, then the endpoint's end.
  void expect_refused(std::uint64_t cookie, Opcode op) {
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].cookie, cookie);
    EXPECT_EQ(c[0].op, op);
    EXPECT_EQ(c[0].status, make_error_code(Errc::remote_access)) << describe(c[0]);
    EXPECT_EQ(p->iep.state(), EndpointState::error);
    EXPECT_EQ(MUST(p->iep.next_event(kWait)).type, ConnectionEventType::lost);
    // The target sees its connection end, as when it refuses over tcp.
    auto ev = MUST(p->tep.next_event(kWait));
    EXPECT_TRUE(ev.type == ConnectionEventType::lost || ev.type == ConnectionEventType::disconnected)
        << to_string(ev.type);
  }

  std::unique_ptr<Pair> p;
};

TEST_F(SameHost, WritesAndReadsArePlacedDirectlyWithGatherAndScatter) {
  auto src = pattern(300, 3);
  std::memcpy(p->local_mem.data(), src.data(), src.size());
  Segment w[3] = {Segment(p->lmr, 0, 100), Segment(p->lmr, 100, 50), Segment(p->lmr, 150, 150)};
  ASSERT_OK(p->iep.write(w, p->rr, 1000, 7));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].cookie, 7u);
  EXPECT_EQ(c[0].op, Opcode::write);
  EXPECT_EQ(c[0].length, 300u);
  EXPECT_EQ(direct_ops(p->iep), 1u) << "the write went over the transport: " << why_not(p->iep);
  EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 1000, src.data(), src.size()));
  for (std::size_t i = 0; i < p->target_mem.size(); ++i) {
    if (i < 1000 || i >= 1300) {
      ASSERT_EQ(p->target_mem[i], Pair::kTargetFill) << "byte " << i;
    }
  }

  // Read it back into three segments, out of order in local memory.
  Segment r[3] = {Segment(p->lmr, 3000, 10), Segment(p->lmr, 2000, 190), Segment(p->lmr, 2500, 100)};
  ASSERT_OK(p->iep.read(r, p->rr, 1000, 8));
  c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].op, Opcode::read);
  EXPECT_EQ(c[0].length, 300u);
  EXPECT_EQ(direct_ops(p->iep), 2u);
  EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 3000, src.data(), 10));
  EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 2000, src.data() + 10, 190));
  EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 2500, src.data() + 200, 100));

  // Unsignalled: placed, nothing reported; a signalled one after it is.
  ASSERT_OK(p->iep.write({&w[0], 1}, p->rr, 0, 9, PostFlags::unsignalled));
  ASSERT_OK(p->iep.write({&w[1], 1}, p->rr, 200, 10));
  c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].cookie, 10u);
  EXPECT_TRUE(drain_for(p->icq).empty());
  EXPECT_EQ(direct_ops(p->iep), 4u);
  EXPECT_EQ(0, std::memcmp(p->target_mem.data(), src.data(), 100));

  // Everything else still works over the connection, in order with them.
  ASSERT_OK(p->iep.atomic_write(p->rr, 2048, 0x1122334455667788ull, 11));
  ASSERT_OK(p->iep.flush(p->rr, 0, 4096, FlushType::visibility, 12));
  c = collect(p->icq, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_FALSE(c[0].status || c[1].status) << describe(c);
  std::uint64_t v = 0;
  std::memcpy(&v, p->target_mem.data() + 2048, 8);
  EXPECT_EQ(v, 0x1122334455667788ull);
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST_F(SameHost, ForgedKeyIsRefusedAndWritesNothing) {
  auto g = guarded(Access::all);
  RemoteRegion forged(g->rr.address(), g->rr.length(), g->rr.key() ^ 0x5a5a5a5aull, g->rr.access(), false);
  std::memset(p->local_mem.data(), 0x77, 256);
  Segment s(p->lmr, 0, 256);
  ASSERT_OK(p->iep.write({&s, 1}, forged, 0, 21, PostFlags::unsignalled));
  EXPECT_EQ(direct_ops(p->iep), 1u) << "the direct path did not decide";
  expect_refused(21, Opcode::write);
  EXPECT_TRUE(g->pristine());
  EXPECT_TRUE(p->target_untouched());
}

TEST_F(SameHost, OutOfRangeIsRefusedAndWritesNothing) {
  auto g = guarded(Access::all);
  // The descriptor claims the guard page after the region; the write
  // straddles the real end.
  RemoteRegion forged(g->rr.address(), g->rr.length() + 4096, g->rr.key(), g->rr.access(), false);
  std::memset(p->local_mem.data(), 0x77, 4096);
  Segment s(p->lmr, 0, 4096);
  ASSERT_OK(p->iep.write({&s, 1}, forged, 2048, 22));
  EXPECT_EQ(direct_ops(p->iep), 1u);
  expect_refused(22, Opcode::write);
  EXPECT_TRUE(g->pristine());
}

TEST_F(SameHost, ForgedBaseIsRefusedAndReadsNothing) {
  auto g = guarded(Access::all);
  std::memset(g->mem.data() + 4096, 0x11, 4096);
  // One page early: offset 0 names the guard before the region.
  RemoteRegion forged(g->rr.address() - 4096, g->rr.length() + 4096, g->rr.key(), g->rr.access(), false);
  Segment d(p->lmr, 0, 4096);
  ASSERT_OK(p->iep.read({&d, 1}, forged, 0, 23));
  expect_refused(23, Opcode::read);
  EXPECT_TRUE(std::all_of(p->local_mem.begin(), p->local_mem.end(), [](std::uint8_t b) { return b == 0; }))
      << "a refused read placed data";
}

TEST_F(SameHost, MissingPrivilegeIsRefused) {
  {
    auto ro = guarded(Access::remote_read);
    RemoteRegion forged(ro->rr.address(), ro->rr.length(), ro->rr.key(), kRemote, false);
    std::memset(p->local_mem.data(), 0x77, 64);
    Segment s(p->lmr, 0, 64);
    ASSERT_OK(p->iep.write({&s, 1}, forged, 0, 24));
    EXPECT_EQ(direct_ops(p->iep), 1u);
    expect_refused(24, Opcode::write);
    EXPECT_TRUE(ro->pristine()) << "a region without remote_write was written";
  }
  p = std::make_unique<Pair>();
  ASSERT_TRUE(direct_ready(p->iep));
  {
    auto wo = guarded(Access::remote_write);
    RemoteRegion forged(wo->rr.address(), wo->rr.length(), wo->rr.key(), kRemote, false);
    Segment d(p->lmr, 0, 64);
    ASSERT_OK(p->iep.read({&d, 1}, forged, 0, 25));
    EXPECT_EQ(direct_ops(p->iep), 1u);
    expect_refused(25, Opcode::read);
    EXPECT_TRUE(std::all_of(p->local_mem.begin(), p->local_mem.begin() + 64, [](std::uint8_t b) { return b == 0; }));
  }
}

TEST_F(SameHost, DeregisteredRegionIsRefused) {
  p->tmr.close();
  std::memset(p->local_mem.data(), 0x01, 64);
  Segment s(p->lmr, 0, 64);
  ASSERT_OK(p->iep.write({&s, 1}, p->rr, 0, 26));
  EXPECT_EQ(direct_ops(p->iep), 1u);
  expect_refused(26, Opcode::write);
  EXPECT_TRUE(p->target_untouched());
}

TEST_F(SameHost, NothingLandsAfterDeregistrationReturns) {
  // A writer keeps writing into a region while the owner deregisters it:
  // once close() returned, no byte of it may change any more.
  for (int round = 0; round < 5; ++round) {
    if (round > 0) {
      p = std::make_unique<Pair>();
      ASSERT_TRUE(direct_ready(p->iep));
    }
    std::vector<std::uint8_t> mem(65536, 0);
    auto mr = MUST(p->tz.register_memory(mem.data(), mem.size(), Access::remote_write));
    auto rr = MUST(mr.remote());
    std::memset(p->local_mem.data(), 0xAB, p->local_mem.size());
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> ok{0};
    std::thread writer([&] {
      Segment s(p->lmr, 0, p->local_mem.size());
      for (std::uint64_t i = 0; !stop.load(); ++i) {
        if (!p->iep.write({&s, 1}, rr, (i * 4096) % mem.size(), i).ok()) break;
        auto c = collect(p->icq, 1);
        if (c.size() != 1 || c[0].status) break;
        ok.fetch_add(1);
      }
    });
    const auto until = std::chrono::steady_clock::now() + kWait;
    while (ok.load() < 20 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    mr.close();
    // From here on nothing may write `mem`.
    std::memset(mem.data(), 0, mem.size());
    std::this_thread::sleep_for(20ms);
    stop = true;
    writer.join();
    EXPECT_GE(ok.load(), 20u);
    EXPECT_GE(direct_ops(p->iep), ok.load());
    EXPECT_TRUE(std::all_of(mem.begin(), mem.end(), [](std::uint8_t b) { return b == 0; }))
        << "round " << round << ": a byte landed after deregistration returned";
  }
}

// ---- regions whose memory can be shared (allocate, map_file) ----

TEST_F(SameHost, RegisteredMemoryIsNotMapped) {
  // Memory the caller registered is not a file the library knows: cross-
  // memory attach, never the mapped path.
  Segment s(p->lmr, 0, 64);
  ASSERT_OK(p->iep.write({&s, 1}, p->rr, 0, 1));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  EXPECT_EQ(direct_ops(p->iep), 1u);
  EXPECT_EQ(mapped_ops(p->iep), 0u);
  EXPECT_EQ(peer_mappings(p->iep), 0u);
}

TEST_F(SameHost, AllocatedRegionIsWrittenAndReadThroughTheMapping) {
  auto mr = MUST(p->tz.allocate(3 * 4096, Access::all));
  auto rr = MUST(mr.remote());
  auto* t = static_cast<std::uint8_t*>(mr.address());
  auto src = pattern(3000, 5);
  std::memcpy(p->local_mem.data(), src.data(), src.size());
  // Gather, across a page boundary of the region.
  Segment w[3] = {Segment(p->lmr, 0, 1000), Segment(p->lmr, 1000, 1), Segment(p->lmr, 1001, 1999)};
  ASSERT_OK(p->iep.write(w, rr, 3000, 1));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].length, 3000u);
  EXPECT_EQ(direct_ops(p->iep), 1u) << why_not(p->iep);
  EXPECT_EQ(mapped_ops(p->iep), 1u) << "the write did not go through the mapping";
  EXPECT_EQ(peer_mappings(p->iep), 1u);
  EXPECT_EQ(0, std::memcmp(t + 3000, src.data(), src.size()));
  EXPECT_TRUE(std::all_of(t, t + 3000, [](std::uint8_t b) { return b == 0; }));
  EXPECT_TRUE(std::all_of(t + 6000, t + 3 * 4096, [](std::uint8_t b) { return b == 0; }));

  // Scatter, out of order in local memory; the last byte of the region.
  t[3 * 4096 - 1] = 0x99;
  Segment r[3] = {Segment(p->lmr, 3900, 10), Segment(p->lmr, 3300, 500), Segment(p->lmr, 3200, 91)};
  ASSERT_OK(p->iep.read(r, rr, 3 * 4096 - 601, 2));
  c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].length, 601u);
  EXPECT_EQ(mapped_ops(p->iep), 2u);
  EXPECT_EQ(peer_mappings(p->iep), 1u) << "the second transfer mapped the region again";
  EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 3900, t + 3 * 4096 - 601, 10));
  EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 3300, t + 3 * 4096 - 591, 500));
  EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 3200, t + 3 * 4096 - 91, 91));
  EXPECT_EQ(p->local_mem[3290], 0x99);

  // Still checked: past the region's end is refused, nothing written.
  std::vector<std::uint8_t> before(t, t + 3 * 4096);
  RemoteRegion forged(rr.address(), rr.length() + 4096, rr.key(), rr.access(), false);
  ASSERT_OK(p->iep.write({&w[0], 1}, forged, 3 * 4096 - 10, 3));
  expect_refused(3, Opcode::write);
  EXPECT_EQ(direct_ops(p->iep), 3u);
  EXPECT_EQ(0, std::memcmp(before.data(), t, before.size()));
}

TEST_F(SameHost, MapFileRegionIsWrittenAndReadThroughTheMapping) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "remora-samehost-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const fs::path path = fs::path(tmpl) / "region";
  {
    auto mr = MUST(p->tz.map_file(path.string(), 10000, Access::all));
    auto rr = MUST(mr.remote());
    auto src = pattern(2500, 7);
    std::memcpy(p->local_mem.data(), src.data(), src.size());
    Segment w[2] = {Segment(p->lmr, 0, 2000), Segment(p->lmr, 2000, 500)};
    ASSERT_OK(p->iep.write(w, rr, 7000, 1));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].status) << describe(c[0]);
    EXPECT_EQ(mapped_ops(p->iep), 1u) << "the write did not go through the mapping: " << why_not(p->iep);
    EXPECT_EQ(0, std::memcmp(static_cast<std::uint8_t*>(mr.address()) + 7000, src.data(), src.size()));
    Segment r[2] = {Segment(p->lmr, 3000, 100), Segment(p->lmr, 2900, 100)};
    ASSERT_OK(p->iep.read(r, rr, 7000, 2));
    c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].status) << describe(c[0]);
    EXPECT_EQ(mapped_ops(p->iep), 2u);
    EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 3000, src.data(), 100));
    EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 2900, src.data() + 100, 100));
    // A PERSISTENT flush still goes to the target, which writes the pages back.
    ASSERT_OK(p->iep.flush(rr, 7000, 2500, FlushType::persistent, 3));
    c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].status) << describe(c[0]);
  }
  // In the file itself.
  std::vector<char> file(10000);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, file.data(), file.size(), 0), static_cast<ssize_t>(file.size()));
  ::close(fd);
  auto src = pattern(2500, 7);
  EXPECT_EQ(0, std::memcmp(file.data() + 7000, src.data(), src.size()));
  std::error_code ec;
  fs::remove_all(tmpl, ec);
}

// A file region's file cut short under the initiator's mapping (by its
// owner, or anyone who may write it): the initiator's copy faults on the
// pages gone. Caught (src/core/direct/fault_guard.hpp): the write is refused,
// as a range the region does not hold, and this process goes on.
class SameHostCutFile : public SameHost {
 protected:
  void SetUp() override {
    // (ThreadSanitizer ends the process by a fault's SIGBUS even with a
    // handler installed: test_fault_guard.cpp.)
    if (kUnderThreadSanitizer)
      GTEST_SKIP() << "ThreadSanitizer does not pass a fault's SIGBUS to the program's handler";
    SameHost::SetUp();
    namespace fs = std::filesystem;
    dir = (fs::temp_directory_path() / "remora-samehost-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir.data()), nullptr);
    path = (fs::path(dir) / "region").string();
    mr = MUST(p->tz.map_file(path, kLen, Access::all));
    rr = MUST(mr.remote());
    // Mapped by a first write, then the file cut to its first page.
    std::memset(p->local_mem.data(), 0x5a, 4096);
    Segment s(p->lmr, 0, 100);
    ASSERT_OK(p->iep.write({&s, 1}, rr, 0, 1));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_FALSE(c[0].status) << describe(c[0]);
    ASSERT_EQ(mapped_ops(p->iep), 1u) << "the write did not go through the mapping: " << why_not(p->iep);
    ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  }
  void TearDown() override {
    if (kUnderThreadSanitizer) return;
    mr = MemoryRegion();
    SameHost::TearDown();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  static constexpr std::size_t kLen = 512 * 1024;
  std::string dir, path;
  MemoryRegion mr;
  RemoteRegion rr;
};

TEST_F(SameHostCutFile, AWriteToPagesCutFromTheFileIsRefusedAndTheProcessGoesOn) {
  const std::size_t caught = detail::direct::faults_caught();
  Segment s(p->lmr, 0, 100);
  ASSERT_OK(p->iep.write({&s, 1}, rr, 8192, 2));
  expect_refused(2, Opcode::write);
  EXPECT_GE(detail::direct::faults_caught(), caught + 1);
}

TEST_F(SameHostCutFile, ASplitWriteAcrossTheCutIsRefusedAndTheProcessGoesOn) {
  std::vector<std::uint8_t> big(300 * 1024, 0x3c);
  auto lmr = MUST(p->iz.register_memory(big.data(), big.size(), kLocal));
  Segment s(lmr, 0, big.size());  // split over two threads, past the file's end after its first page
  ASSERT_GE(big.size(), detail::direct::kSplitBytes);
  ASSERT_OK(p->iep.write({&s, 1}, rr, 0, 2));
  expect_refused(2, Opcode::write);
}

TEST_F(SameHostCutFile, AnAtomicWriteToAPageCutFromTheFileIsRefusedAndTheProcessGoesOn) {
  const std::size_t caught = detail::direct::faults_caught();
  ASSERT_OK(p->iep.atomic_write(rr, 8192, 42, 2));
  expect_refused(2, Opcode::atomic_write);
  EXPECT_EQ(detail::direct::faults_caught(), caught + 1);
}

TEST_F(SameHostCutFile, AReadFromPagesCutFromTheFileIsRefusedAndTheProcessGoesOn) {
  Segment s(p->lmr, 0, 100);
  ASSERT_OK(p->iep.read({&s, 1}, rr, 8192, 2));
  expect_refused(2, Opcode::read);
}

TEST_F(SameHost, ReadOnlyRegionIsMappedReadOnlyAndRefusesWrites) {
  auto mr = MUST(p->tz.allocate(4096, Access::local_read | Access::local_write | Access::remote_read));
  auto rr = MUST(mr.remote());
  auto* t = static_cast<std::uint8_t*>(mr.address());
  std::memset(t, 0x3c, 4096);
  const auto before = memfd_mappings("remora-region");
  Segment d(p->lmr, 0, 4096);
  ASSERT_OK(p->iep.read({&d, 1}, rr, 0, 1));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(mapped_ops(p->iep), 1u);
  EXPECT_TRUE(std::all_of(p->local_mem.begin(), p->local_mem.end(), [](std::uint8_t b) { return b == 0x3c; }));
  // The initiator's mapping (the one the read added) is read-only: the MMU,
  // not only the check, keeps it from writing. The owner's is read-write.
  const auto after = memfd_mappings("remora-region");
  ASSERT_EQ(after.size(), before.size() + 1) << "the read made no mapping of its own";
  EXPECT_EQ(after.at(reinterpret_cast<std::uintptr_t>(t)), "rw-s");
  for (const auto& [start, perms] : after) {
    if (before.count(start) != 0) continue;
    EXPECT_EQ(perms, "r--s") << "the peer's mapping of a region without remote_write";
  }
  // A descriptor claiming remote_write: refused, nothing written.
  std::memset(p->local_mem.data(), 0x77, 64);
  RemoteRegion forged(rr.address(), rr.length(), rr.key(), kRemote, false);
  Segment s(p->lmr, 0, 64);
  ASSERT_OK(p->iep.write({&s, 1}, forged, 0, 2));
  expect_refused(2, Opcode::write);
  EXPECT_EQ(direct_ops(p->iep), 2u);
  EXPECT_TRUE(std::all_of(t, t + 4096, [](std::uint8_t b) { return b == 0x3c; })) << "a read-only region was written";
}

TEST_F(SameHost, WriteOnlyRegionRefusesReads) {
  // Mapped read-write (it must be, to be written); the check before every
  // copy refuses the read.
  auto mr = MUST(p->tz.allocate(4096, Access::local_read | Access::local_write | Access::remote_write));
  auto rr = MUST(mr.remote());
  Segment s(p->lmr, 0, 64);
  std::memset(p->local_mem.data(), 0x21, 64);
  ASSERT_OK(p->iep.write({&s, 1}, rr, 0, 1));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  EXPECT_EQ(mapped_ops(p->iep), 1u);
  std::memset(static_cast<std::uint8_t*>(mr.address()) + 64, 0x55, 64);
  RemoteRegion forged(rr.address(), rr.length(), rr.key(), kRemote, false);
  Segment d(p->lmr, 1000, 64);
  ASSERT_OK(p->iep.read({&d, 1}, forged, 64, 2));
  expect_refused(2, Opcode::read);
  EXPECT_TRUE(
      std::all_of(p->local_mem.begin() + 1000, p->local_mem.begin() + 1064, [](std::uint8_t b) { return b == 0; }));
}

TEST_F(SameHost, AtomicWriteToASharedRegionIsAnAtomicStore) {
  auto mr = MUST(p->tz.allocate(8192, Access::all));
  auto rr = MUST(mr.remote());
  ASSERT_OK(p->iep.atomic_write(rr, 4104, 0xfeedfacecafebeefull, 1));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].op, Opcode::atomic_write);
  EXPECT_EQ(mapped_ops(p->iep), 1u) << "the atomic write went over the connection";
  std::uint64_t v = 0;
  std::memcpy(&v, static_cast<std::uint8_t*>(mr.address()) + 4104, 8);
  EXPECT_EQ(v, 0xfeedfacecafebeefull);
  // To registered memory: over the connection, as before.
  ASSERT_OK(p->iep.atomic_write(p->rr, 8, 5, 2));
  c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(mapped_ops(p->iep), 1u);
  std::memcpy(&v, p->target_mem.data() + 8, 8);
  EXPECT_EQ(v, 5u);
  // Without remote_write: the target's agent answers, remote_access.
  auto ro = MUST(p->tz.allocate(4096, Access::local_read | Access::remote_read));
  auto rro = MUST(ro.remote());
  RemoteRegion forged(rro.address(), rro.length(), rro.key(), kRemote, false);
  ASSERT_OK(p->iep.atomic_write(forged, 0, 7, 3));
  c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, make_error_code(Errc::remote_access)) << describe(c[0]);
  EXPECT_EQ(mapped_ops(p->iep), 1u);
  std::memcpy(&v, ro.address(), 8);
  EXPECT_EQ(v, 0u);
}

TEST_F(SameHost, MappingsAreBoundedAndRevokedOnesDropped) {
  std::vector<MemoryRegion> regions;
  const auto tw = std::chrono::steady_clock::now();
  Segment s(p->lmr, 0, 8);
  std::memset(p->local_mem.data(), 0x61, 8);
  const std::size_t n = detail::direct::Peer::kMaxMappings + 6;
  for (std::size_t i = 0; i < n; ++i) {
    regions.push_back(MUST(p->tz.allocate(4096, Access::all)));
    ASSERT_OK(p->iep.write({&s, 1}, MUST(regions.back().remote()), 8 * (i % 512), i));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_FALSE(c[0].status) << describe(c[0]);
    EXPECT_LE(peer_mappings(p->iep), detail::direct::Peer::kMaxMappings);
  }
  EXPECT_EQ(mapped_ops(p->iep), n);
  fprintf(stderr, "DBG writes %.3f ms\n",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tw).count());
  EXPECT_EQ(peer_mappings(p->iep), detail::direct::Peer::kMaxMappings);
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_EQ(static_cast<std::uint8_t*>(regions[i].address())[8 * (i % 512)], 0x61) << i;
  // Deregistered regions: their mappings go at the next miss.
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < n - 1; ++i) {
    auto a = std::chrono::steady_clock::now();
    regions[i].close();
    fprintf(stderr, "%.2f ", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  fprintf(stderr, "DBG closes %.3f ms\n",
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  auto fresh = MUST(p->tz.allocate(4096, Access::all));
  ASSERT_OK(p->iep.write({&s, 1}, MUST(fresh.remote()), 0, 1000));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  EXPECT_EQ(peer_mappings(p->iep), 2u) << "the mappings of deregistered regions stayed";
}

/// The writer loop of NothingLandsAfterDeregistrationReturns on a shareable
/// region; `check` is called after close() returned and reports whether the
/// memory still holds only zeros after a while.
void deregister_under_writes(Pair& p, MemoryRegion& mr, std::size_t len, const std::function<void()>& zero,
                             const std::function<bool()>& all_zero) {
  auto rr = MUST(mr.remote());
  std::memset(p.local_mem.data(), 0xAB, p.local_mem.size());
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ok{0};
  std::thread writer([&] {
    Segment s(p.lmr, 0, p.local_mem.size());
    for (std::uint64_t i = 0; !stop.load(); ++i) {
      if (!p.iep.write({&s, 1}, rr, (i * 4096) % (len - p.local_mem.size() + 1), i).ok()) break;
      auto c = collect(p.icq, 1);
      if (c.size() != 1 || c[0].status) break;
      ok.fetch_add(1);
    }
  });
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (ok.load() < 20 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  mr.close();
  zero();  // from here on nothing may write the memory
  std::this_thread::sleep_for(20ms);
  stop = true;
  writer.join();
  EXPECT_GE(ok.load(), 20u);
  EXPECT_GE(mapped_ops(p.iep), ok.load());
  EXPECT_TRUE(all_zero()) << "a byte landed after deregistration returned";
}

TEST_F(SameHost, NothingLandsInASharedRegionAfterDeregistrationReturns) {
  // Writes of 1 MiB into 4 MiB, so that close() often comes in the middle of
  // a copy: without the in-flight protocol, bytes of that copy land after it.
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(round);
    PairOptions o;
    o.local_size = 1 << 20;
    p = std::make_unique<Pair>(o);
    ASSERT_TRUE(direct_ready(p->iep));
    constexpr std::size_t len = 4 << 20;
    if (round % 2 == 1) {
      // map_file: the file outlives the region; look at it with pread.
      char path[] = "/tmp/remora-samehost-dereg-XXXXXX";
      const int tmp = ::mkstemp(path);
      ASSERT_GE(tmp, 0);
      auto mr = MUST(p->tz.map_file(path, len, Access::remote_write | Access::local_write));
      const std::vector<std::uint8_t> zeros(len, 0);
      deregister_under_writes(
          *p, mr, len, [&] { ASSERT_EQ(::pwrite(tmp, zeros.data(), len, 0), static_cast<ssize_t>(len)); },
          [&] {
            std::vector<std::uint8_t> now(len, 1);
            return ::pread(tmp, now.data(), len, 0) == static_cast<ssize_t>(len) && now == zeros;
          });
      ::close(tmp);
      ::unlink(path);
      continue;
    }
    // allocate: deregistration empties the region's memory file, so a copy
    // still landing after it returned would fault in the initiator (this
    // process) rather than write. The test keeps the file open and looks
    // that it stays empty: a late write cannot have extended it.
    auto mr = MUST(p->tz.allocate(len, Access::remote_write | Access::local_write));
    const int fd = ::dup(mr.impl()->fd);
    ASSERT_GE(fd, 0);
    auto file_size = [fd] {
      struct stat st {};
      return ::fstat(fd, &st) == 0 ? static_cast<long long>(st.st_size) : -1;
    };
    deregister_under_writes(
        *p, mr, len, [] {}, [&] { return file_size() == 0; });
    ::close(fd);
  }
}

// A write with immediate data: the data is placed directly, the note that
// makes the target's completion follows on the connection, and the
// initiator's completion comes with the target's acknowledgement of it.
TEST_F(SameHost, AWriteWithImmediateDataIsPlacedDirectlyAndNotedOnTheConnection) {
  Segment r(p->tmr, 0, 0);
  ASSERT_OK(p->tep.recv({&r, 1}, 100));
  const auto src = pattern(3000, 5);
  std::memcpy(p->local_mem.data(), src.data(), src.size());
  Segment w[2] = {Segment(p->lmr, 0, 1000), Segment(p->lmr, 1000, 2000)};
  ASSERT_OK(p->iep.write_imm(w, p->rr, 500, 0xBEEF, 7));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].cookie, 7u);
  EXPECT_EQ(c[0].op, Opcode::write);
  EXPECT_EQ(direct_ops(p->iep), 1u) << why_not(p->iep);
  auto t = collect(p->tcq, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_FALSE(t[0].status) << describe(t[0]);
  EXPECT_EQ(t[0].cookie, 100u);
  EXPECT_EQ(t[0].op, Opcode::recv_write_imm);
  EXPECT_TRUE(t[0].has_imm);
  EXPECT_EQ(t[0].imm, 0xBEEFu);
  EXPECT_EQ(t[0].length, 3000u);
  EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 500, src.data(), src.size()));
  EXPECT_EQ(p->target_mem[499], Pair::kTargetFill);
  EXPECT_EQ(p->target_mem[3500], Pair::kTargetFill);
  // Acknowledged, nothing is in flight: the next write goes direct again.
  Segment one(p->lmr, 0, 8);
  ASSERT_OK(p->iep.write({&one, 1}, p->rr, 0, 8));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  EXPECT_EQ(direct_ops(p->iep), 2u);
}

// A flush posted with nothing in flight is checked against the table and
// completed by the initiator: every earlier write is placed already. A
// failed check is the target's refusal.
TEST_F(SameHost, AFlushIsCheckedAndCompletedByTheInitiator) {
  Segment s(p->lmr, 0, 64);
  ASSERT_OK(p->iep.write({&s, 1}, p->rr, 0, 1));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  const std::uint64_t before = direct_ops(p->iep);
  // Not the range of the latest write: the transport would ask the target.
  ASSERT_OK(p->iep.flush(p->rr, 1000, 64, FlushType::visibility, 2));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].op, Opcode::flush);
  EXPECT_EQ(direct_ops(p->iep), before + 1) << why_not(p->iep);
  // Out of the region's range: refused, and the connection ends.
  RemoteRegion forged(p->rr.address(), p->rr.length() + 4096, p->rr.key(), p->rr.access(), false);
  ASSERT_OK(p->iep.flush(forged, p->rr.length(), 64, FlushType::visibility, 3));
  expect_refused(3, Opcode::flush);
}

// A PERSISTENT flush of a file region the initiator has mapped runs the
// owner's write-back step (msync of the covering pages) on the initiator's
// own mapping of the same file. A persistent region of ordinary memory is
// written back by its owner, over the connection.
TEST_F(SameHost, APersistentFlushOfAMappedFileIsWrittenBackByTheInitiator) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "remora-samehost-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  {
    auto mr = MUST(p->tz.map_file((fs::path(tmpl) / "region").string(), 3 * 4096, Access::all));
    auto rr = MUST(mr.remote());
    ASSERT_TRUE(rr.persistent());
    Segment s(p->lmr, 0, 100);
    ASSERT_OK(p->iep.write({&s, 1}, rr, 5000, 1));
    ASSERT_OK(p->iep.flush(rr, 5000, 100, FlushType::persistent, 2));
    auto c = collect(p->icq, 2);
    ASSERT_EQ(c.size(), 2u);
    for (const auto& x : c) EXPECT_FALSE(x.status) << describe(x);
    EXPECT_EQ(mapped_ops(p->iep), 2u) << "the write and the flush through the mapping: " << why_not(p->iep);
    // Heap memory declared persistent: cross-memory attach for the write,
    // the owner's agent for the flush.
    std::vector<std::uint8_t> heap(4096);
    auto hmr = MUST(p->tz.register_memory(heap.data(), heap.size(), Access::all, true));
    auto hrr = MUST(hmr.remote());
    ASSERT_OK(p->iep.write({&s, 1}, hrr, 0, 3));
    ASSERT_EQ(collect(p->icq, 1).size(), 1u);
    const std::uint64_t before = direct_ops(p->iep);
    ASSERT_OK(p->iep.flush(hrr, 0, 100, FlushType::persistent, 4));
    c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].status) << describe(c[0]);
    EXPECT_EQ(direct_ops(p->iep), before) << "the initiator cannot write back the owner's heap";
  }
  fs::remove_all(tmpl);
}

// Memory the program mapped from a file itself (as a librpma server maps its
// pmem file with pmem2) and registered with register_memory: the initiator
// maps the file too and copies with memcpy. Only a page-aligned range of one
// shared, writable (for remote write) mapping of a file that still has its
// name qualifies; anything else is reached by cross-memory attach.
TEST_F(SameHost, AFileTheProgramMappedAndRegisteredIsMappedByThePeer) {
  constexpr std::size_t kLen = 4 * 4096;
  char path[] = "/tmp/remora-samehost-usermap-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, kLen), 0);
  auto* mem = static_cast<std::uint8_t*>(::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(mem, MAP_FAILED);
  const auto src = pattern(64, 9);
  std::memcpy(p->local_mem.data(), src.data(), src.size());
  Segment s(p->lmr, 0, src.size());
  std::uint64_t cookie = 0;
  // Write 64 bytes at `off` of region `mr`; true when it was copied through a
  // mapping of the peer's.
  auto write_mapped = [&](MemoryRegion& mr, std::uint64_t off) {
    const std::uint64_t before = mapped_ops(p->iep), direct_before = direct_ops(p->iep);
    EXPECT_TRUE(p->iep.write({&s, 1}, MUST(mr.remote()), off, ++cookie).ok());
    auto c = collect(p->icq, 1);
    EXPECT_EQ(c.size(), 1u);
    if (c.size() == 1) {
      EXPECT_FALSE(c[0].status) << describe(c[0]);
    }
    EXPECT_EQ(direct_ops(p->iep), direct_before + 1) << why_not(p->iep);
    return mapped_ops(p->iep) == before + 1;
  };
  auto open_fds = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  // Pages 1 and 2 of the file: a file offset of one page.
  auto mr = MUST(p->tz.register_memory(mem + 4096, 2 * 4096, Access::all));
  EXPECT_TRUE(write_mapped(mr, 100));
  std::vector<std::uint8_t> back(src.size());
  ASSERT_EQ(::pread(fd, back.data(), back.size(), 4096 + 100), static_cast<ssize_t>(back.size()));
  EXPECT_EQ(back, src) << "the write did not land at the file offset of the registered range";
  EXPECT_EQ(peer_mappings(p->iep), 1u);
  // Read back through the mapping too.
  Segment r(p->lmr, 1024, src.size());
  const std::uint64_t before = mapped_ops(p->iep);
  ASSERT_OK(p->iep.read({&r, 1}, MUST(mr.remote()), 100, ++cookie));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  EXPECT_EQ(mapped_ops(p->iep), before + 1);
  EXPECT_EQ(0, std::memcmp(p->local_mem.data() + 1024, src.data(), src.size()));

  // Another range of the same file: mapped too, through the zone's
  // descriptor of the file, which is not opened again.
  const std::size_t fds_before = open_fds();
  auto page0 = MUST(p->tz.register_memory(mem, 4096, Access::all));
  EXPECT_TRUE(write_mapped(page0, 0));
  EXPECT_EQ(open_fds(), fds_before) << "one descriptor per file, not per region";
  page0.close();
  // Not on a page: cross-memory attach.
  auto unaligned = MUST(p->tz.register_memory(mem + 64, 512, Access::all));
  EXPECT_FALSE(write_mapped(unaligned, 0));
  // A read-only mapping granting remote write: the peer could not map the
  // file writable as the owner has it, so cross-memory attach (which finds
  // the page read-only too and leaves the write to the transport).
  auto* ro = static_cast<std::uint8_t*>(::mmap(nullptr, kLen, PROT_READ, MAP_SHARED, fd, 0));
  ASSERT_NE(ro, MAP_FAILED);
  auto ro_remote_read = MUST(p->tz.register_memory(ro, 4096, Access::local_read | Access::remote_read));
  {
    // Only remote read granted: mapped (read-only) for reads.
    const std::uint64_t b = mapped_ops(p->iep);
    ASSERT_OK(p->iep.read({&r, 1}, MUST(ro_remote_read.remote()), 100, ++cookie));
    ASSERT_EQ(collect(p->icq, 1).size(), 1u);
    EXPECT_EQ(mapped_ops(p->iep), b + 1);
  }
  // A private mapping of the same file: not shared, not mapped.
  auto* priv = static_cast<std::uint8_t*>(::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
  ASSERT_NE(priv, MAP_FAILED);
  auto private_mr = MUST(p->tz.register_memory(priv, 4096, Access::all));
  EXPECT_FALSE(write_mapped(private_mr, 0));
  // Its file removed: no name to open it by.
  ASSERT_EQ(::unlink(path), 0);
  auto unnamed = MUST(p->tz.register_memory(mem + 3 * 4096, 4096, Access::all));
  EXPECT_FALSE(write_mapped(unnamed, 0));
  // Every region closed before the memory is unmapped.
  mr.close();
  unaligned.close();
  ro_remote_read.close();
  private_mr.close();
  unnamed.close();
  ::munmap(priv, kLen);
  ::munmap(ro, kLen);
  ::munmap(mem, kLen);
  ::close(fd);
}

/// The revocation requests `ep` sent, and whether its peer answered its
/// direct offer, taking it.
std::uint64_t revokes_sent(const Endpoint& ep) {
  detail::MutexLock lock(ep.impl()->mu);
  return ep.impl()->revokes_sent;
}
bool offer_taken(const Endpoint& ep, std::chrono::milliseconds timeout = kWait) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    {
      detail::MutexLock lock(ep.impl()->mu);
      if (ep.impl()->offer_answered) return ep.impl()->peer_maps_regions;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
}

/// Lines of /proc/self/maps naming `path`.
std::size_t file_mappings(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0) ++n;
  return n;
}

// A file region (map_file) cannot be emptied as an allocated one is: the
// peer itself unmaps it, asked by the owner, and the owner's close waits for
// its answer, so nothing of the file stays mapped at the peer once the
// deregistration returns.
TEST_F(SameHost, DeregisteringAFileRegionUnmapsItAtThePeerBeforeItReturns) {
  char path[] = "/tmp/remora-samehost-revoke-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto mr = MUST(p->tz.map_file(path, 2 * 4096, Access::all));
  std::memset(p->local_mem.data(), 0x7E, 64);
  Segment s(p->lmr, 0, 64);
  ASSERT_OK(p->iep.write({&s, 1}, MUST(mr.remote()), 4096, 1));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  ASSERT_EQ(mapped_ops(p->iep), 1u) << why_not(p->iep);
  EXPECT_EQ(peer_mappings(p->iep), 1u);
  EXPECT_EQ(file_mappings(path), 2u) << "the owner's mapping and the peer's";
  const std::uint64_t asked = revokes_sent(p->tep);
  mr.close();
  EXPECT_EQ(revokes_sent(p->tep), asked + 1);
  EXPECT_EQ(peer_mappings(p->iep), 0u) << "the peer still holds a mapping of the deregistered region";
  EXPECT_EQ(file_mappings(path), 0u) << "the file is still mapped after its region was deregistered";
  // Still served: the connection is untouched, and a region made now is
  // mapped afresh.
  auto again = MUST(p->tz.map_file(path, 2 * 4096, Access::all));
  ASSERT_OK(p->iep.write({&s, 1}, MUST(again.remote()), 0, 2));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(mapped_ops(p->iep), 2u);
  EXPECT_EQ(static_cast<std::uint8_t*>(again.address())[0], 0x7E);
  again.close();
  ::unlink(path);
}

// The peer's user drives its queue but is not polling (here: it holds a
// Sleeper and never sleeps, so the peer's agent leaves the connection to it
// for good). Deregistering a shareable region rings the peer agent's
// doorbell after the request: the agent reads it at once and answers, so the
// mapping is gone when close() returns. Without the doorbell the request
// waited for the user and close() gave up after its 1 s bound.
TEST_F(SameHost, APeerWhoseUserDrivesItsQueueButDoesNotPollAnswersARevocation) {
  MemoryRegion r;
  ASSERT_NO_FATAL_FAILURE(written_shareable(r));
  ASSERT_EQ(peer_mappings(p->iep), 1u);
  {
    detail::MutexLock lock(p->iep.impl()->mu);
    ASSERT_TRUE(p->iep.impl()->direct_peer->has_doorbell()) << "the target could not open the initiator's doorbell";
  }
  const auto asleep = p->icq.sleeper();
  ASSERT_TRUE(p->icq.impl()->slept_on());
  // Two sweeps of the initiator's agent after the Sleeper: the first one
  // that started after it left the connection to the user (the agent no
  // longer listens to its transport queue).
  auto& agent = *p->iz.impl()->agent;
  const std::uint64_t swept = agent.sweeps();
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (agent.sweeps() < swept + 2) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the agent stopped sweeping";
    std::this_thread::sleep_for(1ms);
  }
  const std::uint64_t rings = agent.doorbells();
  const std::uint64_t asked = revokes_sent(p->tep);
  r.close();
  EXPECT_EQ(revokes_sent(p->tep), asked + 1);
  EXPECT_EQ(peer_mappings(p->iep), 0u) << "the request waited for the user: the mapping outlived close()";
  EXPECT_GT(agent.doorbells(), rings);
  // One ring, one look: the peer's write is read out of the doorbell, which
  // would otherwise wake the agent (and count a ring) on every turn.
  std::this_thread::sleep_for(20ms);
  const std::uint64_t settled = agent.doorbells();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(agent.doorbells(), settled) << "the doorbell kept the agent awake";
}

/// A connected pair whose target and initiator zones have the same-host
/// path on or off each (REMORA_SAMEHOST, read when a zone is created).
struct MixedPair {
  MixedPair(bool target_direct, bool initiator_direct) {
    ::setenv("REMORA_SAMEHOST", target_direct ? "1" : "0", 1);
    tz = MUST(fabric.create_zone());
    ::setenv("REMORA_SAMEHOST", initiator_direct ? "1" : "0", 1);
    iz = MUST(fabric.create_zone());
    ::unsetenv("REMORA_SAMEHOST");
    tcq = MUST(tz.create_cq());
    icq = MUST(iz.create_cq());
    lis = MUST(tz.listen("127.0.0.1", 0));
    EndpointOptions to, io;
    to.send_cq = &tcq;
    io.send_cq = &icq;
    tep = MUST(tz.create_endpoint(to));
    iep = MUST(iz.create_endpoint(io));
    MUST(iep.connect("127.0.0.1", lis.port()));
    auto req = MUST(lis.next_request(kWait));
    MUST(req.accept(tep));
    if (MUST(iep.next_event(kWait)).type != ConnectionEventType::established ||
        MUST(tep.next_event(kWait)).type != ConnectionEventType::established)
      throw std::runtime_error("the pair did not connect");
  }
  Fabric fabric = MUST(Fabric::open({}));
  ProtectionZone tz, iz;
  CompletionQueue tcq, icq;
  Listener lis;
  Endpoint tep, iep;
};

// Only a peer that took the zone's offer (it maps the zone's table) is asked
// to revoke: a deregistration towards a peer whose path is off costs no
// message and no wait.
TEST(SameHostRevoke, APeerThatDidNotTakeTheOfferIsNotAsked) {
  MixedPair p(true, false);
  auto& tz = p.tz;
  auto& tep = p.tep;
  {
    // Answered "not taken" (wait for the answer, then look).
    const auto until = std::chrono::steady_clock::now() + kWait;
    for (;;) {
      {
        detail::MutexLock lock(tep.impl()->mu);
        if (tep.impl()->offer_answered) break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "the offer was never answered";
      std::this_thread::sleep_for(1ms);
    }
  }
  EXPECT_FALSE(offer_taken(tep, 0ms));
  auto mr = MUST(tz.allocate(4096, Access::all));
  mr.close();
  EXPECT_EQ(revokes_sent(tep), 0u);
  ASSERT_OK(tep.disconnect());
  EXPECT_EQ(revokes_sent(tep), 0u);
}

// A zone with the path off offers nothing, so its peer maps nothing of it:
// closing its connections asks nothing either.
TEST(SameHostRevoke, AZoneWithThePathOffNeverAsks) {
  MixedPair p(false, true);
  auto& tep = p.tep;
  ASSERT_OK(tep.disconnect());
  EXPECT_EQ(revokes_sent(tep), 0u);
}

// Every connection towards one peer zone shares one mapping of its table,
// one pidfd and one cache of region mappings: a second direct connection
// costs no more than its socket, and the peer is let go with the last one.
TEST_F(SameHost, ConnectionsTowardsOnePeerShareOnePeer) {
  ASSERT_TRUE(direct_ready(p->tep)) << why_not(p->tep);
  const std::size_t before = detail::direct::Peer::open_count();
  ASSERT_GE(before, 2u) << "each side of the pair maps the other's table";
  EndpointOptions o;
  o.send_cq = &p->tcq;
  auto t2 = MUST(p->tz.create_endpoint(o));
  o.send_cq = &p->icq;
  auto i2 = MUST(p->iz.create_endpoint(o));
  MUST(i2.connect("127.0.0.1", p->lis.port()));
  MUST(MUST(p->lis.next_request(kWait)).accept(t2));
  ASSERT_EQ(MUST(i2.next_event(kWait)).type, ConnectionEventType::established);
  ASSERT_EQ(MUST(t2.next_event(kWait)).type, ConnectionEventType::established);
  ASSERT_TRUE(direct_ready(i2)) << why_not(i2);
  ASSERT_TRUE(direct_ready(t2)) << why_not(t2);
  EXPECT_EQ(detail::direct::Peer::open_count(), before);
  {
    detail::MutexLock a(p->iep.impl()->mu);
    detail::MutexLock b(i2.impl()->mu);
    EXPECT_EQ(p->iep.impl()->direct_peer.get(), i2.impl()->direct_peer.get());
  }
  // Both place their writes directly, through one mapping of the region.
  auto mr = MUST(p->tz.allocate(4096, Access::all));
  const auto rr = MUST(mr.remote());
  Segment s(p->lmr, 0, 8);
  ASSERT_OK(p->iep.write({&s, 1}, rr, 0, 1));
  ASSERT_OK(i2.write({&s, 1}, rr, 8, 2));
  ASSERT_EQ(collect(p->icq, 2).size(), 2u);
  EXPECT_EQ(mapped_ops(p->iep), 1u);
  EXPECT_EQ(mapped_ops(i2), 1u);
  EXPECT_EQ(peer_mappings(i2), 1u);
  // The second connection closed: the peer stays for the first.
  i2.close();
  t2.close();
  EXPECT_EQ(detail::direct::Peer::open_count(), before);
  p->iep.close();
  p->tep.close();
  EXPECT_EQ(detail::direct::Peer::open_count(), before - 2);
}

// A connection that ends (here the target closes it) lets go of the peer:
// nothing of the peer's zone stays mapped in the initiator.
TEST_F(SameHost, AnEndedConnectionLeavesNothingOfThePeerMapped) {
  MemoryRegion mr;
  ASSERT_NO_FATAL_FAILURE(written_shareable(mr));
  ASSERT_EQ(mapped_ops(p->iep), 1u);
  // The owner's mapping and the initiator's.
  EXPECT_EQ(memfd_mappings("remora-region").size(), 2u);
  // Each zone's own table and each side's mapping of the other's (the
  // target maps the initiator's when the initiator's offer arrived).
  ASSERT_TRUE(direct_ready(p->tep)) << why_not(p->tep);
  const std::size_t tables = memfd_mappings("remora-regions").size();
  EXPECT_EQ(tables, 4u);
  // Closed by the target: the initiator lets go before the target's close
  // returns (it is asked, and answers), not when it sees the disconnection.
  p->tep.close();
  EXPECT_FALSE(direct_ready(p->iep, 0ms));
  EXPECT_EQ(memfd_mappings("remora-region").size(), 1u) << "the initiator still maps the target's region";
  // Neither side maps the other's table any more (each keeps its own).
  EXPECT_EQ(memfd_mappings("remora-regions").size(), tables - 2);
  EXPECT_EQ(MUST(p->iep.next_event(kWait)).type, ConnectionEventType::disconnected);
}

TEST_F(SameHost, ADisconnectingTargetIsUnmappedAtTheInitiatorBeforeDisconnectReturns) {
  MemoryRegion mr;
  ASSERT_NO_FATAL_FAILURE(written_shareable(mr));
  ASSERT_EQ(mapped_ops(p->iep), 1u);
  EXPECT_EQ(memfd_mappings("remora-region").size(), 2u);
  const std::uint64_t asked = revokes_sent(p->tep);
  ASSERT_OK(p->tep.disconnect());
  {
    // Asked, and answered before disconnect returned.
    detail::MutexLock lock(p->tep.impl()->mu);
    EXPECT_EQ(p->tep.impl()->revokes_sent, asked + 1);
    EXPECT_EQ(p->tep.impl()->revokes_answered, asked + 1);
  }
  EXPECT_FALSE(direct_ready(p->iep, 0ms));
  EXPECT_EQ(memfd_mappings("remora-region").size(), 1u) << "the initiator still maps the target's region";
  EXPECT_EQ(MUST(p->iep.next_event(kWait)).type, ConnectionEventType::disconnected);
}

// Deregistering a region from ProtectionZone::allocate takes its pages from
// every peer's mapping before it returns: an initiator that still holds the
// mapping (dropped at its next miss) reaches nothing through it.
TEST_F(SameHost, DeregisteringAnAllocatedRegionTakesItsPagesFromThePeer) {
  MemoryRegion mr;
  ASSERT_NO_FATAL_FAILURE(written_shareable(mr, 0x5C));
  ASSERT_EQ(mapped_ops(p->iep), 1u);
  const void* at = nullptr;
  {
    detail::MutexLock lock(p->iep.impl()->mu);
    ASSERT_TRUE(p->iep.impl()->direct_peer);
    at = p->iep.impl()->direct_peer->newest_mapping();
  }
  ASSERT_NE(at, nullptr);
  // Read through the initiator's mapping as a process would (EFAULT, not a
  // signal, where nothing backs it).
  auto read_through = [at](std::uint8_t* out) {
    iovec local{out, 8};
    iovec remote{const_cast<void*>(at), 8};
    return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
  };
  std::uint8_t got[8] = {};
  ASSERT_EQ(read_through(got), 8);
  EXPECT_EQ(got[0], 0x5C);
  mr = MemoryRegion();  // deregistered, and its memory freed
  EXPECT_EQ(peer_mappings(p->iep), 0u) << "the peer still holds a mapping of the deregistered region";
  errno = 0;
  EXPECT_EQ(read_through(got), -1) << "the region's pages are still reachable through the peer's mapping";
  EXPECT_EQ(errno, EFAULT);
}

/// Pair `p` with the path off: a write and a write into an allocated region
/// go over the transport, and the initiator never maps the peer's table.
void expect_all_over_the_transport(Pair& p) {
  Segment s(p.lmr, 0, 64);
  ASSERT_OK(p.iep.write({&s, 1}, p.rr, 0, 1));
  auto c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status);
  EXPECT_EQ(direct_ops(p.iep), 0u);
  EXPECT_FALSE(direct_ready(p.iep, kQuiet));
  EXPECT_NE(why_not(p.iep).find("off"), std::string::npos) << why_not(p.iep);
  // Nor a shareable region.
  auto mr = MUST(p.tz.allocate(4096, Access::all));
  ASSERT_OK(p.iep.write({&s, 1}, MUST(mr.remote()), 0, 2));
  c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status);
  EXPECT_EQ(mapped_ops(p.iep), 0u);
}

// ---- large transfers on two threads (src/core/direct/copier.hpp) ----

/// Split transfers, whoever moved the second part: this process's helper,
/// the caller (taken back), or the peer (docs/design.md, "The peer moves
/// half").
std::uint64_t splits() {
  return detail::direct::copies_helped() + detail::direct::copies_taken_back() + detail::direct::copies_moved_by_peer();
}

/// A write of `len` bytes (from a local region of that size, two segments
/// cut off the middle) at `offset` into the target's region `rr`, whose
/// bytes there are at `t` + 4096 in this process with a guard page of 0xA5
/// each side (from `t`), then a read of it back into other local memory:
/// every byte where it belongs, both placed directly, through the
/// initiator's mapping when `mapped`. Returns the transfers split
/// meanwhile.
std::uint64_t write_and_read_guarded(Pair& p, std::size_t len, const RemoteRegion& rr, std::uint64_t offset,
                                     const std::uint8_t* t, bool mapped, unsigned seed) {
  auto src = pattern(len, seed);
  std::vector<std::uint8_t> back(len, 0);
  auto smr = MUST(p.iz.register_memory(src.data(), len, Access::local_read | Access::local_write));
  auto bmr = MUST(p.iz.register_memory(back.data(), len, Access::local_read | Access::local_write));
  const std::uint64_t before = splits(), ops = direct_ops(p.iep), maps = mapped_ops(p.iep);
  Segment w[2] = {Segment(smr, 0, len / 3), Segment(smr, len / 3, len - len / 3)};
  EXPECT_OK(p.iep.write(w, rr, offset, 1));
  Segment r(bmr, 0, len);
  EXPECT_OK(p.iep.read({&r, 1}, rr, offset, 2));
  auto c = collect(p.icq, 2);
  EXPECT_EQ(c.size(), 2u);
  for (const auto& one : c) EXPECT_FALSE(one.status) << describe(one);
  EXPECT_EQ(direct_ops(p.iep), ops + 2) << why_not(p.iep);
  EXPECT_EQ(mapped_ops(p.iep), maps + (mapped ? 2 : 0)) << (mapped ? "not through the mapping" : "mapped");
  EXPECT_EQ(0, std::memcmp(t + 4096, src.data(), len));
  EXPECT_EQ(back, src);
  EXPECT_TRUE(std::all_of(t, t + 4096, [](std::uint8_t b) { return b == 0xA5; }));
  EXPECT_TRUE(std::all_of(t + 4096 + len, t + len + 2 * 4096, [](std::uint8_t b) { return b == 0xA5; }));
  return splits() - before;
}

/// write_and_read_guarded into a registered (not shareable) region of the
/// target: cross-memory attach.
std::uint64_t write_and_read_large(Pair& p, std::size_t len) {
  std::vector<std::uint8_t> far(len + 2 * 4096, 0xA5);
  auto fmr = MUST(p.tz.register_memory(far.data() + 4096, len, Access::all));
  return write_and_read_guarded(p, len, MUST(fmr.remote()), 0, far.data(), false, 9);
}

/// The same into a region the target's zone allocated, one page into it:
/// through the initiator's mapping.
std::uint64_t write_and_read_mapped(Pair& p, std::size_t len) {
  auto fmr = MUST(p.tz.allocate(len + 2 * 4096, Access::all));
  auto* t = static_cast<std::uint8_t*>(fmr.address());
  std::memset(t, 0xA5, len + 2 * 4096);
  return write_and_read_guarded(p, len, MUST(fmr.remote()), 4096, t, true, 11);
}

TEST(SameHostCopier, LargeCopiesThroughAMappingAreSplitOverTwoThreads) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  ::unsetenv("REMORA_COPY_HELPER");
  Pair p;
  ::unsetenv("REMORA_SAMEHOST");
  ASSERT_TRUE(direct_ready(p.iep)) << why_not(p.iep);
  EXPECT_EQ(write_and_read_mapped(p, 1024 * 1024), 2u);
  EXPECT_EQ(write_and_read_mapped(p, detail::direct::kSplitBytes + 100), 2u);
  // Below the size one memcpy on the caller's thread.
  EXPECT_EQ(write_and_read_mapped(p, detail::direct::kSplitBytes - 64), 0u);
}

TEST(SameHostCopier, TheEnvironmentKeepsCopiesThroughAMappingOnOneThread) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  ::setenv("REMORA_COPY_HELPER", "0", 1);
  Pair p;
  ::unsetenv("REMORA_SAMEHOST");
  ::unsetenv("REMORA_COPY_HELPER");
  ASSERT_TRUE(direct_ready(p.iep)) << why_not(p.iep);
  EXPECT_EQ(write_and_read_mapped(p, 1024 * 1024), 0u);
}

TEST(SameHostCopier, LargeWritesAndReadsAreSplitOverTwoThreads) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  ::unsetenv("REMORA_COPY_HELPER");
  Pair p;
  ::unsetenv("REMORA_SAMEHOST");
  ASSERT_TRUE(direct_ready(p.iep)) << why_not(p.iep);
  EXPECT_EQ(write_and_read_large(p, 256 * 1024), 2u);
  // Below the size it is one call.
  EXPECT_EQ(write_and_read_large(p, detail::direct::kSplitBytes / 2), 0u);
}

TEST(SameHostCopier, TheEnvironmentTurnsTheHelperOff) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  ::setenv("REMORA_COPY_HELPER", "0", 1);
  Pair p;
  ::unsetenv("REMORA_SAMEHOST");
  ::unsetenv("REMORA_COPY_HELPER");
  ASSERT_TRUE(direct_ready(p.iep)) << why_not(p.iep);
  EXPECT_EQ(write_and_read_large(p, 256 * 1024), 0u);
}

TEST(SameHostCopier, AnUnknownValueIsReportedAndLeavesItOn) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  ::setenv("REMORA_COPY_HELPER", "sometimes", 1);
  ::testing::internal::CaptureStderr();
  auto p = std::make_unique<Pair>();
  const bool ready = direct_ready(p->iep);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("REMORA_SAMEHOST");
  ::unsetenv("REMORA_COPY_HELPER");
  EXPECT_NE(err.find("REMORA_COPY_HELPER=\"sometimes\""), std::string::npos) << err;
  ASSERT_TRUE(ready) << why_not(p->iep);
  EXPECT_EQ(write_and_read_large(*p, 256 * 1024), 2u);
}

// ---- huge pages for regions reached by cross-memory attach ----

using remora::tools::anon_huge_bytes;

/// An anonymous private mapping with `pages` whole huge pages from `at` (a
/// huge-page boundary), each byte from `untouched` on written (so in 4 KiB
/// pages where the kernel's default is not "always"), unmapped at the end.
struct HugeArea {
  HugeArea(std::size_t huge, std::size_t pages, bool no_huge_pages = false, std::size_t untouched = 0)
      : len((pages + 1) * huge), size(pages * huge), untouched(untouched) {
    raw = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::runtime_error("mmap of " + std::to_string(len) + " bytes failed");
    at = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(raw) + huge - 1) & ~(huge - 1));
    if (no_huge_pages) ::madvise(at, size, MADV_NOHUGEPAGE);
    for (std::size_t i = untouched; i < size; ++i) at[i] = byte_at(i);
  }
  ~HugeArea() { ::munmap(raw, len); }
  HugeArea(const HugeArea&) = delete;
  HugeArea& operator=(const HugeArea&) = delete;
  static std::uint8_t byte_at(std::size_t i) { return static_cast<std::uint8_t>(i * 7 + i / 4096); }
  /// Every byte of the whole huge pages as written, except those in
  /// [skip, skip_end) from `at`.
  bool intact(std::size_t skip = 0, std::size_t skip_end = 0) const {
    for (std::size_t i = 0; i < size; ++i)
      if ((i < skip || i >= skip_end) && at[i] != (i < untouched ? 0 : byte_at(i))) return false;
    return true;
  }
  void* raw = nullptr;
  std::size_t len = 0, size = 0, untouched = 0;
  std::uint8_t* at = nullptr;
};

/// Empty when this kernel moves anonymous 4 KiB pages into a huge page on
/// request (madvise MADV_COLLAPSE, Linux 6.1 on, refused where transparent
/// huge pages are "never"), asked directly on a scratch area; else why not.
std::string huge_pages_unavailable() {
  const std::size_t huge = detail::direct::huge_page_size();
  if (huge == 0) return "this kernel has no transparent huge pages";
  HugeArea scratch(huge, 1);
  if (anon_huge_bytes(scratch.at) != 0) return "fresh memory is in huge pages already (transparent huge pages: always)";
  if (::madvise(scratch.at, huge, 25 /* MADV_COLLAPSE */) != 0)
    return std::string("the kernel refuses MADV_COLLAPSE: ") + std::strerror(errno);
  if (anon_huge_bytes(scratch.at) != huge) return "MADV_COLLAPSE made no huge page";
  return {};
}

/// A pair with 64 KiB of local memory, the path on, and REMORA_HUGEPAGES
/// set to `hugepages` (or unset: null) while its zones are made.
std::unique_ptr<Pair> huge_pages_pair(const char* hugepages) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  if (hugepages != nullptr)
    ::setenv("REMORA_HUGEPAGES", hugepages, 1);
  else
    ::unsetenv("REMORA_HUGEPAGES");
  PairOptions o;
  o.local_size = 64 * 1024;
  auto p = std::make_unique<Pair>(o);
  ::unsetenv("REMORA_SAMEHOST");
  ::unsetenv("REMORA_HUGEPAGES");
  return p;
}

/// The huge-page tests: skipped, with the reason, where the kernel cannot
/// move memory into huge pages on request; `huge` is its huge page size.
class SameHostHugePages : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = huge_pages_unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
  const std::size_t huge = detail::direct::huge_page_size();
};

TEST_F(SameHostHugePages, RegistrationMovesTheWholeHugePagesOfARegionIntoHugePages) {
  auto p = huge_pages_pair(nullptr);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  // Three huge pages; the region starts half-way into the first and ends
  // half-way into the third: only the second is whole inside it.
  HugeArea area(huge, 3);
  ASSERT_EQ(anon_huge_bytes(area.at), 0u);
  auto mr = MUST(p->tz.register_memory(area.at + huge / 2, 2 * huge, Access::all));
  const auto& job = mr.impl()->huge;
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->covered(), huge);
  ASSERT_TRUE(job->wait(10s)) << "the huge-page thread did not get to it";
  EXPECT_EQ(job->error(), 0) << std::strerror(job->error());
  EXPECT_EQ(job->moved(), huge);
  EXPECT_EQ(anon_huge_bytes(area.at), huge) << "not exactly the one whole huge page";
  EXPECT_TRUE(area.intact()) << "the contents changed";
  // A same-host write across the boundary of the huge page lands, and only
  // there.
  std::memset(p->local_mem.data(), 0x5A, 64 * 1024);
  const std::size_t at = huge - 32 * 1024;  // from the area's start
  const std::uint64_t ops = direct_ops(p->iep);
  Segment s(p->lmr, 0, 64 * 1024);
  ASSERT_OK(p->iep.write({&s, 1}, MUST(mr.remote()), at - huge / 2, 1));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(direct_ops(p->iep), ops + 1) << "not placed by the direct path";
  EXPECT_TRUE(std::all_of(area.at + at, area.at + at + 64 * 1024, [](std::uint8_t b) { return b == 0x5A; }));
  EXPECT_TRUE(area.intact(at, at + 64 * 1024));
}

TEST_F(SameHostHugePages, TheEnvironmentTurnsThemOff) {
  auto p = huge_pages_pair("0");
  HugeArea area(huge, 2);
  auto mr = MUST(p->tz.register_memory(area.at, 2 * huge, Access::all));
  EXPECT_EQ(mr.impl()->huge, nullptr);
  EXPECT_EQ(anon_huge_bytes(area.at), 0u);
}

TEST_F(SameHostHugePages, OnlyRegionsSameHostPeersReachByCrossMemoryAttach) {
  auto p = huge_pages_pair(nullptr);
  {
    // Local access only: no peer reaches it.
    HugeArea area(huge, 1);
    auto mr = MUST(p->tz.register_memory(area.at, huge, Access::local_read | Access::local_write));
    EXPECT_EQ(mr.impl()->huge, nullptr);
    EXPECT_EQ(anon_huge_bytes(area.at), 0u);
  }
  {
    // No whole huge page inside: the pages around it are not the region's.
    HugeArea area(huge, 2);
    auto mr = MUST(p->tz.register_memory(area.at + 4096, 2 * huge - 8192, Access::all));
    EXPECT_EQ(mr.impl()->huge, nullptr);
    EXPECT_EQ(anon_huge_bytes(area.at), 0u);
    EXPECT_TRUE(area.intact());
  }
  {
    // Memory shared with peers through a descriptor: mapped, not attached.
    auto mr = MUST(p->tz.allocate(huge, Access::all));
    EXPECT_EQ(mr.impl()->huge, nullptr);
  }
  {
    // A zone with the path off.
    ::setenv("REMORA_SAMEHOST", "0", 1);
    auto zone = MUST(p->fabric.create_zone());
    ::unsetenv("REMORA_SAMEHOST");
    HugeArea area(huge, 1);
    auto mr = MUST(zone.register_memory(area.at, huge, Access::all));
    EXPECT_EQ(mr.impl()->huge, nullptr);
    EXPECT_EQ(anon_huge_bytes(area.at), 0u);
  }
}

TEST_F(SameHostHugePages, TheProgramsOwnNoHugePageAdviceHolds) {
  auto p = huge_pages_pair(nullptr);
  HugeArea area(huge, 2, /*no_huge_pages=*/true);
  auto mr = MUST(p->tz.register_memory(area.at, 2 * huge, Access::all));
  const auto& job = mr.impl()->huge;
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->wait(10s));
  // Both huge pages refused.
  EXPECT_EQ(job->error(), EINVAL) << std::strerror(job->error());
  EXPECT_EQ(job->moved(), 0u);
  EXPECT_EQ(anon_huge_bytes(area.at), 0u);
  EXPECT_TRUE(area.intact());
}

TEST_F(SameHostHugePages, AHugePageTheKernelRefusesDoesNotStopTheRest) {
  auto p = huge_pages_pair(nullptr);
  // The program said no huge page for the first one only: the kernel
  // refuses it, and the second is still moved.
  HugeArea area(huge, 2);
  ASSERT_EQ(::madvise(area.at, huge, MADV_NOHUGEPAGE), 0) << std::strerror(errno);
  auto mr = MUST(p->tz.register_memory(area.at, 2 * huge, Access::all));
  const auto& job = mr.impl()->huge;
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->wait(10s)) << "a refusal is for good: the job ends";
  EXPECT_EQ(job->error(), EINVAL) << std::strerror(job->error());
  EXPECT_EQ(job->moved(), huge);
  EXPECT_EQ(job->waiting(), 0u);
  EXPECT_EQ(anon_huge_bytes(area.at), 0u);
  EXPECT_EQ(anon_huge_bytes(area.at + huge), huge);
  EXPECT_TRUE(area.intact());
}

TEST_F(SameHostHugePages, AnUntouchedHugePageIsMovedOnceAPeerWritesIntoIt) {
  auto p = huge_pages_pair(nullptr);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  // Three huge pages, the first never touched (memory registered before it
  // is written, as fio's librpma server does): nothing to move there yet.
  HugeArea area(huge, 3, /*no_huge_pages=*/false, /*untouched=*/huge);
  auto mr = MUST(p->tz.register_memory(area.at, 3 * huge, Access::all));
  const std::shared_ptr<detail::direct::HugePageJob> job = mr.impl()->huge;
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->wait_passes(1, 10s)) << "the huge-page thread did not get to it";
  EXPECT_FALSE(job->ended()) << "the untouched huge page was given up";
  EXPECT_EQ(job->error(), 0) << std::strerror(job->error());
  EXPECT_EQ(job->moved(), 2 * huge);
  EXPECT_EQ(job->waiting(), huge);
  EXPECT_EQ(anon_huge_bytes(area.at), 2 * huge);
  // A peer writes 64 KiB into it, by cross-memory attach: the next look
  // finds its pages and moves it.
  std::memset(p->local_mem.data(), 0x5A, 64 * 1024);
  const std::size_t at = huge / 4;
  Segment s(p->lmr, 0, 64 * 1024);
  ASSERT_OK(p->iep.write({&s, 1}, MUST(mr.remote()), at, 1));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  ASSERT_TRUE(job->wait(10s)) << "the touched huge page was not looked at again";
  EXPECT_EQ(job->error(), 0) << std::strerror(job->error());
  EXPECT_EQ(job->moved(), 3 * huge);
  EXPECT_EQ(job->waiting(), 0u);
  EXPECT_EQ(anon_huge_bytes(area.at), 3 * huge);
  EXPECT_TRUE(std::all_of(area.at + at, area.at + at + 64 * 1024, [](std::uint8_t b) { return b == 0x5A; }));
  EXPECT_TRUE(area.intact(at, at + 64 * 1024));
}

TEST_F(SameHostHugePages, DeregistrationEndsAJobWaitingForATouch) {
  auto p = huge_pages_pair(nullptr);
  HugeArea area(huge, 2, /*no_huge_pages=*/false, /*untouched=*/2 * huge);
  auto mr = MUST(p->tz.register_memory(area.at, 2 * huge, Access::all));
  const std::shared_ptr<detail::direct::HugePageJob> job = mr.impl()->huge;
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->wait_passes(1, 10s));
  EXPECT_EQ(job->waiting(), 2 * huge);
  mr.close();
  ASSERT_TRUE(job->wait(10s)) << "the job went on after close()";
  EXPECT_EQ(job->waiting(), 0u);
  // Memory touched after the close stays in the pages it has.
  area.at[0] = 0;
  area.at[huge] = 0;
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(job->moved(), 0u);
  EXPECT_EQ(anon_huge_bytes(area.at), 0u);
}

TEST_F(SameHostHugePages, MemoryUnmappedUnderARegionEndsTheJob) {
  auto p = huge_pages_pair(nullptr);
  HugeArea area(huge, 2, /*no_huge_pages=*/false, /*untouched=*/2 * huge);
  auto mr = MUST(p->tz.register_memory(area.at, 2 * huge, Access::all));
  const std::shared_ptr<detail::direct::HugePageJob> job = mr.impl()->huge;
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->wait_passes(1, 10s));
  // The program unmaps the memory of a region it did not deregister (a bug
  // of the program's): the next look finds the range gone and ends the job.
  ASSERT_EQ(::munmap(area.at + huge, huge), 0) << std::strerror(errno);
  ASSERT_TRUE(job->wait(10s)) << "the job went on over unmapped memory";
  EXPECT_EQ(job->error(), ENOMEM) << std::strerror(job->error());
  EXPECT_EQ(job->moved(), 0u);
}

TEST_F(SameHostHugePages, AChildAfterForkHasItsOwnThreadAndLeavesTheParentsJobs) {
  if (kUnderThreadSanitizer) GTEST_SKIP() << "ThreadSanitizer stops a child of a threaded process that starts a thread";
  using detail::direct::HugePageJob;
  // A job of the parent's, waiting for its untouched huge pages.
  HugeArea waiting(huge, 2, /*no_huge_pages=*/false, /*untouched=*/2 * huge);
  const std::shared_ptr<HugePageJob> job = HugePageJob::start(waiting.at, 2 * huge);
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->wait_passes(1, 10s));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // No gtest here: the exit status says how it went. The parent's job is
    // cancelled (its thread is not in this process, nor is its lock to be
    // taken), and a job of the child's own is made by a thread of its own.
    ::alarm(20);
    job->cancel();
    HugeArea touched(huge, 1);
    const std::shared_ptr<HugePageJob> own = HugePageJob::start(touched.at, huge);
    if (own == nullptr) ::_exit(2);
    if (!own->wait(10s)) ::_exit(3);
    ::_exit(own->moved() == huge && anon_huge_bytes(touched.at) == huge && touched.intact() ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no job in the child; 3: its job was never made; 4: not moved";
  // The child's cancel was its own: the parent's job still waits.
  EXPECT_FALSE(job->ended());
  job->cancel();
  EXPECT_TRUE(job->wait(10s));
}

TEST_F(SameHostHugePages, DeregistrationStopsTheMove) {
  auto p = huge_pages_pair(nullptr);
  // 32 huge pages, each a millisecond or more to move: the region is closed
  // long before the thread is through them, unless this thread was
  // descheduled between the two calls for that long (a loaded machine):
  // then another area is tried.
  for (int attempt = 0; attempt < 3; ++attempt) {
    HugeArea area(huge, 32);
    auto mr = MUST(p->tz.register_memory(area.at, 32 * huge, Access::all));
    const std::shared_ptr<detail::direct::HugePageJob> job = mr.impl()->huge;
    ASSERT_NE(job, nullptr);
    mr.close();
    ASSERT_TRUE(job->wait(10s)) << "the job went on after close()";
    // At most the huge page being made when close() came was finished.
    const std::size_t moved = job->moved();
    if (moved == job->covered()) continue;  // all moved before the close
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(anon_huge_bytes(area.at), moved) << "huge pages made after the job ended";
    EXPECT_TRUE(area.intact());
    return;
  }
  ADD_FAILURE() << "in 3 tries, every huge page was moved although the region was closed at once";
}

// ---- writes posted back to back, placed by one call ----

std::uint64_t batched(const Endpoint& ep) { return ep.impl()->direct_batched.load(); }

/// A connected pair with `size` bytes on each side (64 KiB unless said),
/// the path on.
std::unique_ptr<Pair> gathering_pair(std::size_t size = 64 * 1024) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  PairOptions o;
  o.target_size = size;
  o.local_size = size;
  auto p = std::make_unique<Pair>(o);
  ::unsetenv("REMORA_SAMEHOST");
  return p;
}

/// Let a look the initiator's agent was asked for by an earlier batch
/// (within 2 ms of its first write, Agent::look_by) come and go before the
/// next batch is posted. A look leaves a batch younger than 2 ms to its
/// user (EndpointImpl::gather_look_due), but a round slow to post (a
/// sanitizer, a loaded machine) can make its batch that old before the
/// poll; before that rule, such rounds fell into step with the looks and
/// never made a whole batch. (Bounded at 2 s; then 2 ms for the turn that
/// took the look to end.)
void let_agent_look(Pair& p) {
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (p.iz.impl()->agent->looks_due() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(2ms);
}

/// Post `n` 4 KiB writes of `fill` from local page i to target page i
/// (cookies from `cookie0`), right after a poll, which claims the queue:
/// this thread polls it.
void post_pages(Pair& p, int n, std::uint8_t fill, std::uint64_t cookie0) {
  std::memset(p.local_mem.data(), fill, p.local_mem.size());
  let_agent_look(p);
  Completion none[1];
  (void)p.icq.poll(none);
  for (int i = 0; i < n; ++i) {
    const auto page = static_cast<std::uint64_t>(i) * 4096;
    Segment seg(p.lmr, page, 4096);
    EXPECT_OK(p.iep.write({&seg, 1}, p.rr, page, cookie0 + static_cast<std::uint64_t>(i)));
  }
}

/// post_pages, then their completions, in posting order: true when all of
/// them went in one batch (the posting thread may be descheduled between
/// two posts for longer than the agent waits).
bool post_batch(Pair& p, int n, std::uint8_t fill, std::uint64_t cookie0) {
  const std::uint64_t before = batched(p.iep);
  post_pages(p, n, fill, cookie0);
  auto c = collect(p.icq, static_cast<std::size_t>(n));
  EXPECT_EQ(c.size(), static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < c.size(); ++i) {
    EXPECT_FALSE(c[i].status) << describe(c[i]);
    EXPECT_EQ(c[i].cookie, cookie0 + i) << "completions out of posting order";
  }
  return batched(p.iep) == before + static_cast<std::uint64_t>(n);
}

/// The target's first `bytes` hold `fill` and the rest is as the pair made
/// it (Pair::kTargetFill): the writes up to there landed, nothing beyond.
::testing::AssertionResult target_written_up_to(const Pair& p, std::size_t bytes, std::uint8_t fill) {
  const auto end = p.target_mem.begin() + static_cast<std::ptrdiff_t>(bytes);
  if (!std::all_of(p.target_mem.begin(), end, [&](std::uint8_t v) { return v == fill; }))
    return ::testing::AssertionFailure() << "the first " << bytes << " bytes do not all hold the written value";
  if (!std::all_of(end, p.target_mem.end(), [](std::uint8_t v) { return v == Pair::kTargetFill; }))
    return ::testing::AssertionFailure() << "bytes past the first " << bytes << " were written";
  return ::testing::AssertionSuccess();
}

/// The pause on gathering a late batch set (EndpointImpl::note_gather_wait),
/// in ms, and when it ends (steady clock, ns).
std::pair<std::int64_t, std::int64_t> gather_pause(const Endpoint& ep) {
  detail::MutexLock lock(ep.impl()->mu);
  return {ep.impl()->gather_off_for / 1'000'000, ep.impl()->gather_off_until};
}

std::uint64_t late_batches(const Endpoint& ep) { return ep.impl()->gathers_late.load(); }

TEST(SameHostGather, WritesPostedBackToBackWhileAUserPollsArePlacedByOneCall) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  bool one_batch = false;
  for (int round = 0; round < 20 && !one_batch; ++round) {
    const auto fill = static_cast<std::uint8_t>(0x10 + round);
    one_batch = post_batch(*p, 8, fill, 100 + 10 * static_cast<std::uint64_t>(round));
    EXPECT_TRUE(target_written_up_to(*p, 8 * 4096, fill));
  }
  EXPECT_TRUE(one_batch) << "in 20 rounds, 8 writes posted back to back never went in one batch";
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

/// Polls `cq` until `n` completions came (at most 10 s), each a success.
void poll_for(CompletionQueue& cq, std::size_t n) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  std::size_t got = 0;
  while (got < n && std::chrono::steady_clock::now() < until) {
    Completion c[16];
    const std::size_t k = cq.poll(std::span<Completion>(c, std::min<std::size_t>(16, n - got)));
    for (std::size_t i = 0; i < k; ++i) EXPECT_FALSE(c[i].status) << describe(c[i]);
    got += k;
  }
  ASSERT_EQ(got, n) << "completions missing after 10 s of polling";
}

TEST(SameHostGather, OneWritePerPollIsPlacedAtOnce) {
  // A latency loop: one write, then polls until it completed. Gathering
  // would only hold each write until the poll right after it: once the
  // program posted one write per poll, its next write is placed by the call
  // that posts it, and a burst after that is gathered again.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  Segment seg(p->lmr, 0, 4096);
  for (std::uint64_t i = 0; i < 4; ++i) {
    ASSERT_OK(p->iep.write({&seg, 1}, p->rr, 0, i));
    poll_for(p->icq, 1);
  }
  for (std::uint64_t i = 0; i < 3; ++i) {
    const std::uint64_t ops = direct_ops(p->iep);
    ASSERT_OK(p->iep.write({&seg, 1}, p->rr, 0, 10 + i));
    EXPECT_EQ(direct_ops(p->iep), ops + 1) << "a write posted after one per poll waited for the next poll";
    poll_for(p->icq, 1);
  }
  // Eight back to back: all but the first go in one batch.
  bool batch = false;
  for (int round = 0; round < 20 && !batch; ++round) {
    let_agent_look(*p);
    Completion none[1];
    (void)p->icq.poll(none);  // claims the queue again
    const std::uint64_t before = batched(p->iep);
    for (std::uint64_t i = 0; i < 8; ++i) ASSERT_OK(p->iep.write({&seg, 1}, p->rr, 0, 100 + i));
    poll_for(p->icq, 8);
    batch = batched(p->iep) >= before + 7;
  }
  EXPECT_TRUE(batch) << "in 20 rounds, writes posted back to back after a latency loop never went in one batch";
}

TEST(SameHostGather, WritesOfAThreadThatDoesNotPollAreGatheredForTheThreadThatDoes) {
  // One thread posts, another reaps: the poster never polls, so its writes,
  // one at a time, still wait for the reaper's next poll, which places them
  // (on the reaper's time, not the poster's). Only a thread's own polls
  // tell it posts one write per poll.
  // A poll claims the queue for 1 ms, and the agent places a gathered
  // write 2 ms after it at the latest: a round whose write came more than
  // 0.9 ms after the poll (a loaded machine, a sanitizer) says nothing
  // either way, nor does one posted while gathering is paused (a reaper
  // whose poll came 1 ms or more after the write before: late batches), and
  // another round is made (4 that say something, for at most 10 s: under
  // ThreadSanitizer with other tests running, starting the poller's thread
  // took longer than 0.9 ms in each of 40 rounds once).
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  Segment seg(p->lmr, 0, 4096);
  int told = 0;
  std::uint64_t rounds = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (std::uint64_t i = 0; told < 4 && std::chrono::steady_clock::now() < until; ++i, ++rounds) {
    let_agent_look(*p);
    const auto polled = std::chrono::steady_clock::now();
    std::thread([&] {
      Completion none[1];
      (void)p->icq.poll(none);  // claims the queue
    }).join();
    const std::uint64_t ops = direct_ops(p->iep);
    const bool paused = std::chrono::steady_clock::now().time_since_epoch().count() < gather_pause(p->iep).second;
    ASSERT_OK(p->iep.write({&seg, 1}, p->rr, 0, i));
    const std::uint64_t placed = direct_ops(p->iep);
    if (std::chrono::steady_clock::now() - polled < 900us && !paused) {
      ++told;
      EXPECT_EQ(placed, ops) << "write " << i << " was placed by the thread that posted it";
    }
    std::thread([&] { poll_for(p->icq, 1); }).join();
    EXPECT_EQ(direct_ops(p->iep), ops + 1);
  }
  EXPECT_GT(told, 0) << "in " << rounds << " rounds (10 s), no write came within 0.9 ms of the poll before it";
}

TEST(SameHostGather, WritesOfABatchArePlacedInPostingOrder) {
  // Eight writes to the same bytes, each with its own fill: the last one
  // posted is what stays (one call copies the ranges in order).
  // Rounds until the writes went in a batch (the poster may be descheduled
  // for longer than the agent waits, under a sanitizer or load); the last
  // write posted must stay in every round.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 8; ++i) std::memset(p->local_mem.data() + i * 4096, 0x40 + i + round, 4096);
    const auto last = static_cast<std::uint8_t>(0x47 + round);
    let_agent_look(*p);
    Completion none[1];
    (void)p->icq.poll(none);
    const std::uint64_t before = batched(p->iep);
    for (int i = 0; i < 8; ++i) {
      Segment seg(p->lmr, static_cast<std::uint64_t>(i) * 4096, 4096);
      ASSERT_OK(p->iep.write({&seg, 1}, p->rr, 0, static_cast<std::uint64_t>(i)));
    }
    ASSERT_EQ(collect(p->icq, 8).size(), 8u);
    EXPECT_TRUE(std::all_of(p->target_mem.begin(), p->target_mem.begin() + 4096, [&](std::uint8_t b) {
      return b == last;
    })) << "the last write posted was not placed last";
    if (batched(p->iep) > before) return;
  }
  ADD_FAILURE() << "in 20 rounds, no batch: the order was not tested";
}

/// Rounds (at most 20) of eight writes of `kLen` bytes posted back to back
/// right after a poll, write i from local block i to target offset `to(i)`
/// (each round its own fill), until one round went in one batch: true then.
/// Every round's writes must complete in posting order and leave what one
/// call in posting order leaves: each byte as the last write to it put it.
/// The target: the pair's region, or `rr` whose bytes are `target` here.
template <typename To>
bool large_batch(Pair& p, To to, const RemoteRegion* rr = nullptr, std::span<const std::uint8_t> target = {},
                 std::size_t kLen = 64 * 1024) {
  if (rr == nullptr) {
    rr = &p.rr;
    target = p.target_mem;
  }
  for (int round = 0; round < 20; ++round) {
    for (std::size_t i = 0; i < 8; ++i)
      std::memset(p.local_mem.data() + i * kLen, static_cast<int>(0x30 + round * 8 + i), kLen);
    let_agent_look(p);
    Completion none[1];
    (void)p.icq.poll(none);
    const std::uint64_t before = batched(p.iep);
    for (std::size_t i = 0; i < 8; ++i) {
      Segment seg(p.lmr, i * kLen, kLen);
      EXPECT_OK(p.iep.write({&seg, 1}, *rr, to(i), i));
    }
    auto c = collect(p.icq, 8);
    EXPECT_EQ(c.size(), 8u);
    for (std::size_t i = 0; i < c.size(); ++i) {
      EXPECT_FALSE(c[i].status) << describe(c[i]);
      EXPECT_EQ(c[i].cookie, i) << "completions out of posting order";
    }
    std::vector<int> last(target.size(), -1);
    for (std::size_t i = 0; i < 8; ++i) std::fill_n(last.begin() + static_cast<std::ptrdiff_t>(to(i)), kLen, int(i));
    std::size_t wrong = 0, first_wrong = 0;
    for (std::size_t x = 0; x < last.size(); ++x)
      if (last[x] >= 0 && target[x] != static_cast<std::uint8_t>(0x30 + round * 8 + last[x]) && wrong++ == 0)
        first_wrong = x;
    EXPECT_EQ(wrong, 0u) << "round " << round << ": byte " << first_wrong << " is not what write " << last[first_wrong]
                         << " (the last posted to it) put there";
    if (batched(p.iep) == before + 8) return true;
  }
  return false;
}

TEST(SameHostGather, LargeDisjointWritesOfABatchArePlacedByTwoThreads) {
  // Eight 64 KiB writes to eight blocks (512 KiB, past kSplitBytes): the
  // batch is cut by address, the two sides moved at once by this thread and
  // the helper (copier.hpp, write_ranges).
  auto p = gathering_pair(8 * 64 * 1024);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  const std::uint64_t before = splits();
  EXPECT_TRUE(large_batch(*p, [](std::size_t i) { return (7 - i) * 64 * 1024; }))
      << "in 20 rounds, eight writes posted back to back never went in one batch";
  EXPECT_GT(splits(), before) << "a batch of eight 64 KiB writes to disjoint blocks was not split";
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST(SameHostGather, LargeWritesOfABatchIntoTheSameBytesLeaveTheLastPosted) {
  // Four writes each into two blocks: split too, each byte moved by one
  // thread, the writes to it in posting order.
  auto p = gathering_pair(8 * 64 * 1024);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  const std::uint64_t before = splits();
  EXPECT_TRUE(large_batch(*p, [](std::size_t i) { return (i % 2) * 64 * 1024; }))
      << "in 20 rounds, eight writes posted back to back never went in one batch";
  EXPECT_GT(splits(), before);
}

TEST(SameHostGather, ABatchWhereALaterWriteCoversAnEarlierOnesLastBytesIsOneCall) {
  // Each write starts half-way into the one before: its body covers the
  // last bytes of the one before, which placed last would stay on top.
  auto p = gathering_pair(8 * 64 * 1024);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  const std::uint64_t before = splits();
  EXPECT_TRUE(large_batch(*p, [](std::size_t i) { return i * 32 * 1024; }))
      << "in 20 rounds, eight writes posted back to back never went in one batch";
  EXPECT_EQ(splits(), before) << "the batch was split";
}

TEST(SameHostGather, WritesOfOneMiBPostedBackToBackArePlacedInOneSplitBatch) {
  // Eight 1 MiB writes, each past kSplitBytes on its own, are gathered too
  // (up to 16 MiB): the two processes (or this thread and the helper) split
  // the eight once, not each write (bench/README.md, "Large writes
  // gathered"). Into disjoint blocks, then four writes each into two blocks.
  constexpr std::size_t kMiB = 1024 * 1024;
  auto p = gathering_pair(8 * kMiB);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::uint64_t before = splits();
  EXPECT_TRUE(large_batch(
      *p, [](std::size_t i) { return (7 - i) * kMiB; }, nullptr, {}, kMiB))
      << "in 20 rounds, eight 1 MiB writes posted back to back never went in one batch";
  EXPECT_GT(splits(), before) << "a batch of eight 1 MiB writes to disjoint blocks was not split";
  before = splits();
  EXPECT_TRUE(large_batch(
      *p, [](std::size_t i) { return (i % 2) * kMiB; }, nullptr, {}, kMiB))
      << "in 20 rounds, eight 1 MiB writes into two blocks never went in one batch";
  EXPECT_GT(splits(), before);
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

/// Writes of `len` bytes, one at a time (each polled for), `count` of
/// them, each with its own fill, from the pair's local memory into `rr`,
/// whose bytes are `target` here: false at the first whose bytes did not
/// all land.
bool writes_one_at_a_time(Pair& p, const RemoteRegion& rr, std::span<const std::uint8_t> target, std::size_t len,
                          int count) {
  for (int i = 0; i < count; ++i) {
    const auto fill = static_cast<std::uint8_t>(0x20 + i);
    std::memset(p.local_mem.data(), fill, len);
    Segment seg(p.lmr, 0, len);
    EXPECT_OK(p.iep.write({&seg, 1}, rr, 0, static_cast<std::uint64_t>(i)));
    poll_for(p.icq, 1);
    if (!std::all_of(target.begin(), target.begin() + static_cast<std::ptrdiff_t>(len),
                     [&](std::uint8_t b) { return b == fill; }))
      return false;
  }
  return true;
}

TEST(SameHostSplit, AStreamOfLargeWritesTriesThemWholeTooAndEveryByteLands) {
  // After its first kWarm split, an endpoint moves kTrial large transfers
  // whole and times them (split_choice.hpp), then keeps to the faster way.
  constexpr std::size_t kLen = 512 * 1024;
  auto p = gathering_pair(kLen);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  constexpr int kCount = static_cast<int>(detail::direct::SplitChoice::kWarm + detail::direct::SplitChoice::kTrial);
  EXPECT_TRUE(writes_one_at_a_time(*p, p->rr, p->target_mem, kLen, kCount));
  const auto whole = p->iep.impl()->chose_whole.load(), split = p->iep.impl()->chose_split.load();
  EXPECT_GE(split, detail::direct::SplitChoice::kWarm);
  EXPECT_GE(whole, detail::direct::SplitChoice::kTrial - 1) << "no large write was tried whole";
  EXPECT_EQ(whole + split, static_cast<std::uint64_t>(kCount));
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST(SameHostSplit, LargeCopiesThroughAMappingAreAlwaysSplit) {
  // Timing both ways lost a fifth of 1 MiB copies through a mapping: such
  // copies are split over this process's helper thread as before.
  constexpr std::size_t kLen = 512 * 1024;
  auto p = gathering_pair(kLen);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  MemoryRegion mr = MUST(p->tz.allocate(kLen, Access::all));
  RemoteRegion rr = MUST(mr.remote());
  const std::uint64_t before = splits();
  EXPECT_TRUE(
      writes_one_at_a_time(*p, rr, {static_cast<const std::uint8_t*>(mr.address()), kLen}, kLen,
                           static_cast<int>(detail::direct::SplitChoice::kWarm + detail::direct::SplitChoice::kTrial)));
  EXPECT_EQ(p->iep.impl()->chose_whole.load(), 0u);
  EXPECT_EQ(p->iep.impl()->chose_split.load(), 0u) << "a copy through a mapping went through the choice";
  EXPECT_GE(splits(), before + detail::direct::SplitChoice::kWarm + detail::direct::SplitChoice::kTrial);
}

TEST(SameHostGather, TheEnvironmentKeepsLargeBatchesOnOneThread) {
  ::setenv("REMORA_COPY_HELPER", "0", 1);
  auto p = gathering_pair(8 * 64 * 1024);
  ::unsetenv("REMORA_COPY_HELPER");
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  const std::uint64_t before = splits();
  EXPECT_TRUE(large_batch(*p, [](std::size_t i) { return i * 64 * 1024; }))
      << "in 20 rounds, eight writes posted back to back never went in one batch";
  EXPECT_EQ(splits(), before) << "REMORA_COPY_HELPER=0, and a batch was split";
}

/// A gathering pair (8 x 64 KiB) and a target region of 8 x 64 KiB that the
/// target's zone allocated (shareable: the initiator maps it).
struct MappedTarget {
  std::unique_ptr<Pair> p = gathering_pair(8 * 64 * 1024);
  MemoryRegion mr = MUST(p->tz.allocate(8 * 64 * 1024, Access::all));
  RemoteRegion rr = MUST(mr.remote());
  std::span<const std::uint8_t> bytes() const { return {static_cast<const std::uint8_t*>(mr.address()), mr.length()}; }
};

TEST(SameHostGather, LargeWritesIntoAMappedRegionAreGatheredAndCopiedByTwoThreads) {
  // A memcpy through a mapping has no system call to share, but eight
  // 64 KiB writes (512 KiB) posted back to back are copied as one list,
  // cut by address over this thread and the helper (write_ranges with
  // kThisProcess), as one long write is.
  MappedTarget m;
  ASSERT_TRUE(direct_ready(m.p->iep)) << why_not(m.p->iep);
  const std::uint64_t before = splits(), maps = mapped_ops(m.p->iep);
  EXPECT_TRUE(large_batch(
      *m.p, [](std::size_t i) { return (7 - i) * 64 * 1024; }, &m.rr, m.bytes()))
      << "in 20 rounds, eight writes into a mapped region never went in one batch";
  EXPECT_GT(splits(), before) << "a batch of eight 64 KiB writes through the mapping was not split";
  EXPECT_GE(mapped_ops(m.p->iep), maps + 8) << "the writes did not go through the mapping";
  EXPECT_EQ(m.p->iep.state(), EndpointState::connected);
}

TEST(SameHostGather, LargeWritesOfABatchIntoTheSameBytesOfAMappedRegionLeaveTheLastPosted) {
  MappedTarget m;
  ASSERT_TRUE(direct_ready(m.p->iep)) << why_not(m.p->iep);
  const std::uint64_t before = splits();
  EXPECT_TRUE(large_batch(
      *m.p, [](std::size_t i) { return (i % 2) * 64 * 1024; }, &m.rr, m.bytes()))
      << "in 20 rounds, eight writes into a mapped region never went in one batch";
  EXPECT_GT(splits(), before);
}

TEST(SameHostGather, ABatchAlternatingMappedAndRegisteredTargetsPlacesEachWhereItBelongs) {
  // Runs of one: the mapped writes copied through the mapping, the others
  // by cross-memory attach, completing in posting order.
  MappedTarget m;
  ASSERT_TRUE(direct_ready(m.p->iep)) << why_not(m.p->iep);
  constexpr std::size_t kLen = 64 * 1024;
  const std::uint64_t maps = mapped_ops(m.p->iep);
  bool one_batch = false;
  for (int round = 0; round < 20 && !one_batch; ++round) {
    for (std::size_t i = 0; i < 8; ++i)
      std::memset(m.p->local_mem.data() + i * kLen, static_cast<int>(0x30 + round * 8 + i), kLen);
    let_agent_look(*m.p);
    Completion none[1];
    (void)m.p->icq.poll(none);
    const std::uint64_t before = batched(m.p->iep);
    for (std::size_t i = 0; i < 8; ++i) {
      Segment seg(m.p->lmr, i * kLen, kLen);
      EXPECT_OK(m.p->iep.write({&seg, 1}, i % 2 == 0 ? m.rr : m.p->rr, i * kLen, i));
    }
    auto c = collect(m.p->icq, 8);
    ASSERT_EQ(c.size(), 8u);
    for (std::size_t i = 0; i < 8; ++i) {
      EXPECT_FALSE(c[i].status) << describe(c[i]);
      EXPECT_EQ(c[i].cookie, i) << "completions out of posting order";
      const std::uint8_t* at = (i % 2 == 0 ? m.bytes().data() : m.p->target_mem.data()) + i * kLen;
      EXPECT_TRUE(std::all_of(at, at + kLen, [&](std::uint8_t b) { return b == 0x30 + round * 8 + i; }))
          << "write " << i << " of round " << round << " is not where it belongs";
    }
    one_batch = batched(m.p->iep) == before + 8;
  }
  EXPECT_TRUE(one_batch) << "in 20 rounds, the eight writes never went in one batch";
  EXPECT_GE(mapped_ops(m.p->iep), maps + 4);
}

TEST(SameHostGather, SmallWritesAndReadsOfAMappedRegionAreNotGathered) {
  // Under 64 KiB a batch of writes through a mapping gained nothing on two
  // threads, and reads little for twice the CPU (bench/README.md): each is
  // copied when posted.
  MappedTarget m;
  ASSERT_TRUE(direct_ready(m.p->iep)) << why_not(m.p->iep);
  const std::uint64_t before = batched(m.p->iep), maps = mapped_ops(m.p->iep);
  for (int round = 0; round < 3; ++round) {
    let_agent_look(*m.p);
    Completion none[1];
    (void)m.p->icq.poll(none);
    for (std::uint64_t i = 0; i < 8; ++i) {
      Segment seg(m.p->lmr, i * 32768, 32768);
      EXPECT_OK(m.p->iep.write({&seg, 1}, m.rr, i * 32768, i));
    }
    for (std::uint64_t i = 0; i < 8; ++i) {
      Segment seg(m.p->lmr, i * 64 * 1024, 64 * 1024);
      EXPECT_OK(m.p->iep.read({&seg, 1}, m.rr, i * 64 * 1024, 8 + i));
    }
    ASSERT_EQ(collect(m.p->icq, 16).size(), 16u);
  }
  EXPECT_EQ(batched(m.p->iep), before) << "writes under 64 KiB or reads through a mapping were gathered";
  EXPECT_EQ(mapped_ops(m.p->iep), maps + 48) << "not all went through the mapping";
}

TEST(SameHostGather, TheEnvironmentKeepsWritesIntoAMappedRegionUngathered) {
  // REMORA_COPY_HELPER=0: no second thread to split a batch with, so large
  // writes through a mapping are copied when posted, as before.
  ::setenv("REMORA_COPY_HELPER", "0", 1);
  MappedTarget m;
  ::unsetenv("REMORA_COPY_HELPER");
  ASSERT_TRUE(direct_ready(m.p->iep)) << why_not(m.p->iep);
  const std::uint64_t before = batched(m.p->iep), splits_before = splits();
  EXPECT_FALSE(large_batch(
      *m.p, [](std::size_t i) { return i * 64 * 1024; }, &m.rr, m.bytes()));
  EXPECT_EQ(batched(m.p->iep), before);
  EXPECT_EQ(splits(), splits_before);
}

TEST(SameHostGather, PollsAfterAWaitStillGather) {
  // A program that polls and now and then sleeps in wait() (post_batch
  // collects with wait()) claims the queue with each poll, as one that only
  // polls does: its writes still go in batches after the first wait.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  int batches = 0;
  for (int round = 0; round < 20 && batches < 3; ++round)
    batches += post_batch(*p, 8, static_cast<std::uint8_t>(round + 1), 10 * static_cast<std::uint64_t>(round)) ? 1 : 0;
  EXPECT_EQ(batches, 3) << "polls after a wait() gathered nothing";
}

TEST(SameHostGather, AQueueWhoseDescriptorTheProgramTookIsNotGatheredFor) {
  // A program that took the descriptor may sleep on it in code of its own
  // right after a poll: its writes are placed at post time.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  ASSERT_GE(p->icq.fd(), 0);
  const std::uint64_t ops = direct_ops(p->iep);
  for (int round = 0; round < 3; ++round)
    (void)post_batch(*p, 8, static_cast<std::uint8_t>(round + 1), 10 * static_cast<std::uint64_t>(round));
  EXPECT_EQ(batched(p->iep), 0u);
  EXPECT_EQ(direct_ops(p->iep) - ops, 24u);
}

/// Six 4 KiB writes (or reads) posted back to back right after a poll,
/// local page i with target page i, the fourth with a forged key: the first
/// three complete, the fourth fails as the target's refusal does, the last
/// two are flushed, and the connection has ended.
void post_six_with_a_forged_fourth(Pair& p, bool write, const RemoteRegion* target = nullptr,
                                   std::uint64_t len = 4096) {
  const RemoteRegion& real = target != nullptr ? *target : p.rr;
  RemoteRegion forged(real.address(), real.length(), real.key() ^ 0x5a5a, real.access(), false);
  Completion none[1];
  (void)p.icq.poll(none);
  for (int i = 0; i < 6; ++i) {
    const auto at = static_cast<std::uint64_t>(i) * len;
    Segment seg(p.lmr, at, len);
    const RemoteRegion& rr = i == 3 ? forged : real;
    ASSERT_OK(write ? p.iep.write({&seg, 1}, rr, at, static_cast<std::uint64_t>(i))
                    : p.iep.read({&seg, 1}, rr, at, static_cast<std::uint64_t>(i)));
  }
  auto c = collect(p.icq, 6);
  ASSERT_EQ(c.size(), 6u) << describe(c);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_FALSE(c[i].status) << describe(c[i]);
  EXPECT_EQ(c[3].status, make_error_code(Errc::remote_access)) << describe(c[3]);
  EXPECT_EQ(c[4].status, make_error_code(Errc::flushed)) << describe(c[4]);
  EXPECT_EQ(c[5].status, make_error_code(Errc::flushed)) << describe(c[5]);
  EXPECT_EQ(p.iep.state(), EndpointState::error);
}

TEST(SameHostGather, ARefusedWriteInABatchEndsTheConnectionAndNothingAfterItLands) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::memset(p->local_mem.data(), 0x5c, p->local_mem.size());
  post_six_with_a_forged_fourth(*p, /*write=*/true);
  EXPECT_TRUE(target_written_up_to(*p, 3 * 4096, 0x5c)) << "the writes before the refused one, and none after it";
}

TEST(SameHostGather, ARefusedWriteAfterMappedOnesInABatchEndsTheConnectionAndNothingAfterItLands) {
  // Three 64 KiB writes copied through the mapping as one list, then one
  // with a forged key: refused as over tcp, the two after it flushed.
  MappedTarget m;
  ASSERT_TRUE(direct_ready(m.p->iep)) << why_not(m.p->iep);
  std::memset(m.p->local_mem.data(), 0x5d, m.p->local_mem.size());
  const std::uint64_t maps = mapped_ops(m.p->iep);
  post_six_with_a_forged_fourth(*m.p, /*write=*/true, &m.rr, 64 * 1024);
  const auto t = m.bytes();
  EXPECT_TRUE(std::all_of(t.begin(), t.begin() + 3 * 64 * 1024, [](std::uint8_t b) { return b == 0x5d; }))
      << "the writes before the refused one did not all land";
  EXPECT_TRUE(std::all_of(t.begin() + 3 * 64 * 1024, t.end(), [](std::uint8_t b) { return b == 0; }))
      << "bytes of the refused write or of those after it landed";
  EXPECT_EQ(mapped_ops(m.p->iep), maps + 3);
}

TEST(SameHostGather, AFlushOrAFencedWriteComesAfterTheGatheredWrites) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::memset(p->local_mem.data(), 0x61, p->local_mem.size());
  Completion none[1];
  (void)p->icq.poll(none);
  Segment a(p->lmr, 0, 4096), b(p->lmr, 4096, 4096);
  ASSERT_OK(p->iep.write({&a, 1}, p->rr, 0, 1));
  ASSERT_OK(p->iep.write({&b, 1}, p->rr, 4096, 2));
  // Outside the latest write's range: not completed locally.
  ASSERT_OK(p->iep.flush(p->rr, 0, 8192, FlushType::visibility, 3));
  std::memset(p->local_mem.data() + 8192, 0x62, 4096);
  Segment f(p->lmr, 8192, 4096);
  ASSERT_OK(p->iep.write({&a, 1}, p->rr, 8192, 4));
  ASSERT_OK(p->iep.write({&f, 1}, p->rr, 8192, 5, PostFlags::fence));
  auto c = collect(p->icq, 5);
  ASSERT_EQ(c.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_FALSE(c[i].status) << describe(c[i]);
    EXPECT_EQ(c[i].cookie, i + 1);
  }
  EXPECT_TRUE(
      std::all_of(p->target_mem.begin(), p->target_mem.begin() + 8192, [](std::uint8_t v) { return v == 0x61; }));
  EXPECT_TRUE(std::all_of(p->target_mem.begin() + 8192, p->target_mem.begin() + 12288, [](std::uint8_t v) {
    return v == 0x62;
  })) << "the fenced write was placed before the write gathered ahead of it";
}

std::uint64_t flushes_joined(const Endpoint& ep) { return ep.impl()->flushes_joined.load(); }

TEST(SameHostGather, VisibilityFlushesJoinTheGatheredWritesAndCompleteAfterThem) {
  // A write then a VISIBILITY flush, three times (fio's librpma engines post
  // that per I/O): the flushes no longer place the writes before them one by
  // one; they join the batch, and complete once the writes before them are
  // placed. One flush lies inside the latest write (completed locally over
  // the transport), one beyond it (checked against the table).
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  bool joined = false;
  for (int round = 0; round < 20 && !joined; ++round) {
    const auto fill = static_cast<std::uint8_t>(0x20 + round);
    std::memset(p->local_mem.data(), fill, p->local_mem.size());
    let_agent_look(*p);
    const std::uint64_t batched_before = batched(p->iep), joined_before = flushes_joined(p->iep);
    Completion none[1];
    (void)p->icq.poll(none);
    Segment a(p->lmr, 0, 4096), b(p->lmr, 4096, 4096), c(p->lmr, 8192, 4096);
    ASSERT_OK(p->iep.write({&a, 1}, p->rr, 0, 1, PostFlags::unsignalled));
    ASSERT_OK(p->iep.flush(p->rr, 0, 4096, FlushType::visibility, 2));
    ASSERT_OK(p->iep.write({&b, 1}, p->rr, 4096, 3, PostFlags::unsignalled));
    ASSERT_OK(p->iep.flush(p->rr, 0, 8192, FlushType::visibility, 4));
    ASSERT_OK(p->iep.write({&c, 1}, p->rr, 8192, 5));
    ASSERT_OK(p->iep.flush(p->rr, 8192, 4096, FlushType::visibility, 6));
    auto done = collect(p->icq, 4);
    ASSERT_EQ(done.size(), 4u) << describe(done);
    const std::uint64_t cookies[] = {2, 4, 5, 6};
    for (std::size_t i = 0; i < 4; ++i) {
      EXPECT_FALSE(done[i].status) << describe(done[i]);
      EXPECT_EQ(done[i].cookie, cookies[i]) << "completions out of posting order";
    }
    EXPECT_TRUE(target_written_up_to(*p, 3 * 4096, fill));
    joined = batched(p->iep) == batched_before + 3 && flushes_joined(p->iep) == joined_before + 3;
  }
  EXPECT_TRUE(joined) << "in 20 rounds, writes and flushes posted in turn never went in one batch";
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

/// Right after a poll: writes of local pages 0 and 1 to target pages 0
/// and 1 (cookies 1, 2), a flush of the first `len` bytes of `fr` of
/// `type` (cookie 3), a write of page 2 to target page 2 (cookie 4); then
/// their completions into `done` (call inside ASSERT_NO_FATAL_FAILURE: a
/// post that fails ends the test).
void flush_between_writes(Pair& p, const RemoteRegion& fr, std::uint64_t len, FlushType type,
                          std::vector<Completion>& done) {
  Completion none[1];
  (void)p.icq.poll(none);
  Segment a(p.lmr, 0, 4096), b(p.lmr, 4096, 4096), c(p.lmr, 8192, 4096);
  ASSERT_OK(p.iep.write({&a, 1}, p.rr, 0, 1));
  ASSERT_OK(p.iep.write({&b, 1}, p.rr, 4096, 2));
  ASSERT_OK(p.iep.flush(fr, 0, len, type, 3));
  ASSERT_OK(p.iep.write({&c, 1}, p.rr, 8192, 4));
  done = collect(p.icq, 4);
}

TEST(SameHostGather, ARefusedFlushPlacesTheWritesBeforeItAndNothingAfterIt) {
  // A flush is checked when it is posted, before anything gathered is
  // placed: one the table refuses does not join. The writes before it are
  // placed, it fails as the target's refusal does, and the write after it
  // is flushed without landing.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::memset(p->local_mem.data(), 0x5d, p->local_mem.size());
  RemoteRegion forged(p->rr.address(), p->rr.length(), p->rr.key() ^ 0x5a5a, p->rr.access(), false);
  std::vector<Completion> done;
  ASSERT_NO_FATAL_FAILURE(flush_between_writes(*p, forged, 8192, FlushType::visibility, done));
  ASSERT_EQ(done.size(), 4u) << describe(done);
  EXPECT_FALSE(done[0].status) << describe(done[0]);
  EXPECT_FALSE(done[1].status) << describe(done[1]);
  EXPECT_EQ(done[2].status, make_error_code(Errc::remote_access)) << describe(done[2]);
  EXPECT_EQ(done[3].status, make_error_code(Errc::flushed)) << describe(done[3]);
  EXPECT_EQ(flushes_joined(p->iep), 0u);
  EXPECT_EQ(p->iep.state(), EndpointState::error);
  EXPECT_TRUE(target_written_up_to(*p, 8192, 0x5d)) << "the writes before the refused flush, and none after it";
}

TEST(SameHostGather, WritesPostedOnePerPollWhileCompletionsWaitAreGathered) {
  // fio's librpma engines by default: 8 I/Os in flight, each a write and a
  // VISIBILITY flush (the flush signalled), one completion reaped per poll
  // and one I/O posted after it. A poll that finds a completion queued
  // drives nothing, so the I/O posted after it would have waited anyway:
  // it is gathered, and the I/Os posted after the next polls join it until
  // a poll finds the queue empty and places them together. Nothing here
  // posts two writes between polls, which is what gathered writes before.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  auto post_io = [&](std::uint64_t i) {
    const std::uint64_t page = (i % 16) * 4096;
    p->local_mem[page] = static_cast<std::uint8_t>(i);
    Segment seg(p->lmr, page, 4096);
    EXPECT_OK(p->iep.write({&seg, 1}, p->rr, page, 2 * i, PostFlags::unsignalled));
    EXPECT_OK(p->iep.flush(p->rr, page, 4096, FlushType::visibility, 2 * i + 1));
  };
  constexpr std::uint64_t kDepth = 8, kIos = 400;
  for (std::uint64_t i = 0; i < kDepth; ++i) post_io(i);
  const std::uint64_t batched_before = batched(p->iep), joined_before = flushes_joined(p->iep);
  const auto until = std::chrono::steady_clock::now() + 20s;
  std::uint64_t next = 0;  // the I/O whose completion comes next
  while (next < kIos && std::chrono::steady_clock::now() < until) {
    Completion one[1];
    if (p->icq.poll(one) == 0) continue;
    EXPECT_FALSE(one[0].status) << describe(one[0]);
    EXPECT_EQ(one[0].cookie, 2 * next + 1) << "completions out of posting order";
    if (next + kDepth < kIos) post_io(next + kDepth);
    ++next;
  }
  ASSERT_EQ(next, kIos) << "completions missing after 20 s";
  for (std::uint64_t i = kIos - 16; i < kIos; ++i)
    EXPECT_EQ(p->target_mem[(i % 16) * 4096], static_cast<std::uint8_t>(i));
  // Most I/Os went in batches (the agent places a batch 2 ms after its
  // first write, which on a slow machine may cut some short).
  const std::uint64_t writes = kIos - kDepth;
  EXPECT_GE(batched(p->iep) - batched_before, writes / 2) << "writes posted one per poll were placed one by one";
  EXPECT_GE(flushes_joined(p->iep) - joined_before, writes / 2);
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST(SameHostGather, WritesAreStillPlacedWhenTheUserStopsPolling) {
  // Posted right after a poll, then no poll: the agent places them (within
  // kGatherBound of 2 ms; bounded here at 2 s), and completes the flush
  // that joined them.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  post_pages(*p, 3, 0x71, 0);
  ASSERT_OK(p->iep.flush(p->rr, 0, 3 * 4096, FlushType::visibility, 3));
  ASSERT_FALSE(::testing::Test::HasFailure()) << "a write was not posted";
  auto landed = [&] {
    // The bytes another thread (the agent) writes: read as atomics.
    for (std::size_t i = 0; i < 3 * 4096; ++i)
      if (std::atomic_ref<std::uint8_t>(p->target_mem[i]).load(std::memory_order_acquire) != 0x71) return false;
    return true;
  };

  const auto until = std::chrono::steady_clock::now() + 2s;
  while (!landed() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(landed()) << "writes posted right before the user stopped polling never landed";
  auto c = collect(p->icq, 4);
  ASSERT_EQ(c.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(c[i].status) << describe(c[i]);
    EXPECT_EQ(c[i].cookie, i);
  }
}

/// post_pages, then no poll until the writes landed (the agent placed them;
/// bounded at 2 s), then their completions.
void post_and_wait_on_memory(Pair& p, int n, std::uint8_t fill, std::uint64_t cookie0) {
  post_pages(p, n, fill, cookie0);
  const auto last = static_cast<std::size_t>(n) * 4096 - 1;
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (std::atomic_ref<std::uint8_t>(p.target_mem[last]).load(std::memory_order_acquire) != fill &&
         std::chrono::steady_clock::now() < until) {
  }
  EXPECT_TRUE(target_written_up_to(p, static_cast<std::size_t>(n) * 4096, fill));
  EXPECT_EQ(collect(p.icq, static_cast<std::size_t>(n)).size(), static_cast<std::size_t>(n));
}

/// Sleep until the pause on gathering (if any) has ended.
void wait_out_pause(const Pair& p) {
  while (std::chrono::steady_clock::now().time_since_epoch().count() < gather_pause(p.iep).second)
    std::this_thread::sleep_for(1ms);
}

/// What a round of post_and_wait_on_memory (two writes) did to the pause.
enum class Round {
  late,      ///< gathered, and the agent found the batch late (note_gather_wait)
  in_time,   ///< gathered, and placed within kGatherLate: the pause ended
  not_held,  ///< not gathered (the posting thread was descheduled past its
             ///< poll's 1 ms claim): placed as posted, the pause untouched
};

Round wait_on_memory_round(Pair& p, std::uint8_t fill, std::uint64_t cookie0) {
  const std::uint64_t before = batched(p.iep), late = late_batches(p.iep);
  post_and_wait_on_memory(p, 2, fill, cookie0);
  if (batched(p.iep) != before + 2) return Round::not_held;
  return late_batches(p.iep) == late + 1 ? Round::late : Round::in_time;
}

/// Rounds of wait_on_memory_round until `rounds` late batches in a row
/// (at most 40 rounds or 20 s): a round the machine disturbed (not held,
/// or placed in time by an agent that looked early) says nothing about the
/// doubling; each late one must double the pause (10 ms first), and one
/// placed in time must end it. A round not held may still have had one of
/// its writes gathered and found late (the second was posted after the
/// poll's claim ran out), which doubles the pause unseen: the first late
/// round after it may find any doubling of 10 ms, and the rounds after it
/// must double that. False when the rounds ran out.
bool late_rounds_in_a_row(Pair& p, int rounds) {
  int in_row = 0;
  bool seen = true;  // no round since the pause was last known to be off was disturbed
  std::int64_t pause = 0;
  const auto until = std::chrono::steady_clock::now() + 20s;
  for (int round = 0; round < 40 && in_row < rounds && std::chrono::steady_clock::now() < until; ++round) {
    wait_out_pause(p);
    switch (wait_on_memory_round(p, static_cast<std::uint8_t>(0x30 + round),
                                 1000 + 10 * static_cast<std::uint64_t>(round))) {
      case Round::late: {
        const std::int64_t now = gather_pause(p.iep).first;
        if (in_row > 0 || seen) {
          EXPECT_EQ(now, in_row > 0 ? 2 * pause : 10) << "late batch " << in_row + 1;
        } else {
          bool doubling = false;
          for (std::int64_t d = 10; d <= now && !doubling; d *= 2) doubling = d == now;
          EXPECT_TRUE(doubling) << "late batch after a disturbed round: pause " << now << " ms";
        }
        pause = now;
        ++in_row;
        break;
      }
      case Round::in_time:
        in_row = 0;
        seen = true;
        EXPECT_EQ(gather_pause(p.iep).first, 0) << "a batch placed in time left the pause on";
        break;
      case Round::not_held:
        in_row = 0;
        seen = false;
        break;
    }
  }
  return in_row == rounds;
}

TEST(SameHostGather, ABatchLeftWaitingForAPollPausesGathering) {
  // A program that posts writes and then waits on something other than its
  // completion queue (memory the peer writes, say) had every batch wait for
  // the agent's look (2 ms). The first such batch pauses gathering: the
  // writes after it are placed as they are posted.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  ASSERT_TRUE(late_rounds_in_a_row(*p, 1)) << "no batch was found late";
  const std::uint64_t before = direct_ops(p->iep);

  Completion none[1];
  (void)p->icq.poll(none);
  std::memset(p->local_mem.data(), 0x32, 2 * 4096);
  for (std::uint64_t i = 0; i < 2; ++i) {
    Segment seg(p->lmr, i * 4096, 4096);
    ASSERT_OK(p->iep.write({&seg, 1}, p->rr, i * 4096, 10 + i));
  }
  const std::uint64_t placed = direct_ops(p->iep) - before;
  if (std::chrono::steady_clock::now().time_since_epoch().count() >= gather_pause(p->iep).second)
    GTEST_SKIP() << "the writes were posted after the 10 ms pause had ended (a slow machine)";
  EXPECT_EQ(placed, 2u) << "writes posted during the pause were gathered";
  EXPECT_TRUE(target_written_up_to(*p, 2 * 4096, 0x32));
  EXPECT_EQ(collect(p->icq, 2).size(), 2u);
}

TEST(SameHostGather, ALookDueWhileAYoungerBatchWaitsLeavesItToTheUser) {
  // A batch asks the agent to look at the endpoint 2 ms after its first
  // write (Agent::look_by), in case its user stops polling; the user's poll
  // placed it long before. When the look comes due while a younger batch is
  // being gathered, that batch is its user's: the agent leaves it alone and
  // looks again once it is 2 ms old (EndpointImpl::gather_look_due).
  // Progressing the endpoint then, as it did, took the endpoint's lock from
  // the posting user and placed part of a batch.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  detail::EndpointImpl* ep = p->iep.impl().get();
  const std::int64_t bound = std::chrono::nanoseconds(detail::kGatherBound).count();
  auto now_ns = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  bool seen = false;
  for (int round = 0; round < 20 && !seen; ++round) {
    const auto fill = static_cast<std::uint8_t>(0x60 + round);
    const std::uint64_t cookie = 1000 + 10 * static_cast<std::uint64_t>(round);
    // Batch A asks the look and is placed by the poll right after it.
    if (!post_batch(*p, 2, fill, cookie)) continue;
    const std::int64_t look = ep->gather_look_at.load();
    if (look == 0 || now_ns() > look - 600'000) continue;  // no look asked, or too late to gather before it
    // Batch B, gathered 0.5 ms before the look comes due, and not polled for.
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(look - 500'000)));
    // The poll claims the queue for 1 ms from a time no earlier than
    // `claimed`: until then only a look would place B.
    const std::int64_t claimed = now_ns();
    Completion none[1];
    (void)p->icq.poll(none);
    for (std::uint64_t i = 0; i < 2; ++i) {
      Segment seg(p->lmr, i * 4096, 4096);
      ASSERT_OK(p->iep.write({&seg, 1}, p->rr, i * 4096, cookie + 2 + i));
    }
    const std::int64_t since = ep->gather_since.load();
    bool placed_young = false, asked_again = false;
    if (since != 0 && since < look) {
      // While the claim lasts: the look comes due and goes, B stays.
      while (now_ns() < claimed + 900'000 && !asked_again) {
        const std::int64_t s = ep->gather_since.load();
        asked_again = ep->gather_look_at.load() == since + bound;
        if (s != since) {
          placed_young = now_ns() < since + bound;
          break;
        }
        std::this_thread::sleep_for(20us);
      }
      EXPECT_FALSE(placed_young) << "the agent's look placed a batch gathered after it was asked, "
                                 << (now_ns() - since) / 1000 << " us after its first write";
      seen = asked_again && ep->gather_since.load() == since;
    }
    // B is placed without a poll (the look asked again, or the agent's
    // sweep once the claim ended), at most a bound and a sweep later.
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (ep->gather_since.load() != 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(ep->gather_since.load(), 0) << "a gathered batch nobody polled for was not placed in 2 s";
    EXPECT_EQ(collect(p->icq, 2).size(), 2u);
    EXPECT_TRUE(target_written_up_to(*p, 2 * 4096, fill));
  }
  EXPECT_TRUE(seen) << "in 20 rounds the look never came due while a younger batch waited";
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST(SameHostGather, EachLateBatchDoublesThePauseAndABatchPlacedInTimeEndsIt) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  ASSERT_TRUE(late_rounds_in_a_row(*p, 2)) << "no two batches in a row were found late";
  // 20 ms, or a later doubling when a disturbed round came first (checked
  // round by round in late_rounds_in_a_row).
  ASSERT_GE(gather_pause(p->iep).first, 20);
  // A batch its user places by polling right after posting: the doubling
  // ends. (A round whose poll came late, the thread descheduled, is tried
  // again.)
  bool in_time = false;
  for (int round = 0; round < 10 && !in_time; ++round) {
    wait_out_pause(*p);
    const std::uint64_t late = late_batches(p->iep);
    const bool one_batch =
        post_batch(*p, 2, static_cast<std::uint8_t>(0x50 + round), 100 + 10 * static_cast<std::uint64_t>(round));
    in_time = one_batch && late_batches(p->iep) == late;
  }
  ASSERT_TRUE(in_time) << "in 10 rounds no batch was gathered and placed by the user's poll";
  EXPECT_EQ(gather_pause(p->iep).first, 0);
}

TEST(SameHostGather, WritesGatheredBeforeADisconnectAreWritten) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  post_pages(*p, 3, 0x73, 0);
  ASSERT_OK(p->iep.flush(p->rr, 0, 3 * 4096, FlushType::visibility, 3));
  ASSERT_FALSE(::testing::Test::HasFailure()) << "a write was not posted";
  ASSERT_OK(p->iep.disconnect());
  EXPECT_TRUE(
      std::all_of(p->target_mem.begin(), p->target_mem.begin() + 3 * 4096, [](std::uint8_t b) { return b == 0x73; }));
  auto c = collect(p->icq, 4);
  ASSERT_EQ(c.size(), 4u);
  for (const auto& one : c) EXPECT_FALSE(one.status) << describe(one);
}

TEST(SameHostGather, APersistentFlushDoesNotJoinTheGatheredWrites) {
  // Only the owner can write back its heap: a PERSISTENT flush of it goes
  // over the transport, after the writes gathered before it are placed, and
  // the writes after it wait for it.
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::vector<std::uint8_t> heap(4096);
  auto hmr = MUST(p->tz.register_memory(heap.data(), heap.size(), Access::all, true));
  auto hrr = MUST(hmr.remote());
  std::memset(p->local_mem.data(), 0x6b, p->local_mem.size());
  std::vector<Completion> done;
  ASSERT_NO_FATAL_FAILURE(flush_between_writes(*p, hrr, 4096, FlushType::persistent, done));
  ASSERT_EQ(done.size(), 4u) << describe(done);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(done[i].status) << describe(done[i]);
    EXPECT_EQ(done[i].cookie, i + 1);
  }
  EXPECT_EQ(flushes_joined(p->iep), 0u) << "a PERSISTENT flush joined the batch";
  EXPECT_TRUE(target_written_up_to(*p, 3 * 4096, 0x6b));
}

/// The zone's table holds kCapacity regions; one registered after it is full
/// is left out, and the initiator cannot check a write to it: the write goes
/// over the transport, where the target checks it, never refused for want
/// of an entry. In a batch, it and every write after it go that way, in
/// posting order, and the writes before it are placed directly. With
/// `flushes`, a VISIBILITY flush after the first two writes joins the batch
/// and completes with them; one after the last write goes over the
/// transport behind it.
void left_out_region_in_a_batch(bool flushes) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::vector<std::uint8_t> filler(4096, 0);
  std::vector<MemoryRegion> fill;
  fill.reserve(detail::direct::kCapacity);
  for (std::size_t i = 0; i < detail::direct::kCapacity; ++i)
    fill.push_back(MUST(p->tz.register_memory(filler.data(), filler.size(), Access::remote_write)));
  std::vector<std::uint8_t> out_mem(3 * 4096, 0xA5);
  auto out_mr = MUST(p->tz.register_memory(out_mem.data() + 4096, 4096, Access::all));
  ASSERT_EQ(out_mr.impl()->direct_slot, -1) << "the table took more than kCapacity regions";
  const RemoteRegion out = MUST(out_mr.remote());

  const std::size_t posts = flushes ? 7 : 5;
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (int round = 0; round < 100 && std::chrono::steady_clock::now() < until; ++round) {
    const auto fill_byte = static_cast<std::uint8_t>(0x30 + round % 64);
    std::memset(p->local_mem.data(), fill_byte, p->local_mem.size());
    const std::uint64_t ops = direct_ops(p->iep), by_transport = p->iep.impl()->gathered_by_transport.load(),
                        in_batches = batched(p->iep), joined = flushes_joined(p->iep);
    let_agent_look(*p);
    Completion none[1];
    (void)p->icq.poll(none);
    // Two pages, the left-out region, then two writes to the same page:
    // the later one (0xC3) must stay.
    std::uint64_t cookie = 0;
    Segment a(p->lmr, 0, 4096), b(p->lmr, 4096, 4096);
    ASSERT_OK(p->iep.write({&a, 1}, p->rr, 0, ++cookie));
    ASSERT_OK(p->iep.write({&b, 1}, p->rr, 4096, ++cookie));
    if (flushes) {
      ASSERT_OK(p->iep.flush(p->rr, 0, 8192, FlushType::visibility, ++cookie));
    }
    ASSERT_OK(p->iep.write({&a, 1}, out, 0, ++cookie));
    std::memset(p->local_mem.data() + 8192, 0xC3, 4096);
    Segment c(p->lmr, 8192, 4096);
    ASSERT_OK(p->iep.write({&a, 1}, p->rr, 8192, ++cookie));
    ASSERT_OK(p->iep.write({&c, 1}, p->rr, 8192, ++cookie));
    if (flushes) {
      ASSERT_OK(p->iep.flush(p->rr, 8192, 4096, FlushType::visibility, ++cookie));
    }
    auto done = collect(p->icq, posts);
    ASSERT_EQ(done.size(), posts) << describe(done);
    for (std::size_t i = 0; i < posts; ++i) {
      EXPECT_FALSE(done[i].status) << describe(done[i]);
      EXPECT_EQ(done[i].cookie, i + 1);
    }
    EXPECT_EQ(p->iep.state(), EndpointState::connected);
    EXPECT_TRUE(std::all_of(p->target_mem.begin(), p->target_mem.begin() + 8192,
                            [&](std::uint8_t v) { return v == fill_byte; }));
    EXPECT_TRUE(
        std::all_of(out_mem.begin() + 4096, out_mem.begin() + 8192, [&](std::uint8_t v) { return v == fill_byte; }));
    EXPECT_TRUE(std::all_of(out_mem.begin(), out_mem.begin() + 4096, [](std::uint8_t v) { return v == 0xA5; }));
    EXPECT_TRUE(std::all_of(out_mem.end() - 4096, out_mem.end(), [](std::uint8_t v) { return v == 0xA5; }));
    EXPECT_TRUE(std::all_of(p->target_mem.begin() + 8192, p->target_mem.begin() + 12288, [](std::uint8_t v) {
      return v == 0xC3;
    })) << "a write over the transport was placed before one posted ahead of it";
    // The case tested: all five writes in one batch (the poster was not
    // descheduled for longer than its poll's claim), every one of them
    // either placed in it or sent on by it. Then the write to the left-out
    // region and the two after it went over the transport, and only the
    // first two were placed directly (and the flush after them).
    const std::uint64_t sent_on = p->iep.impl()->gathered_by_transport.load() - by_transport;
    if (batched(p->iep) - in_batches + sent_on == 5) {
      EXPECT_EQ(sent_on, 3u) << "writes after the left-out region were placed directly";
      EXPECT_EQ(direct_ops(p->iep) - ops, flushes ? 3u : 2u);
      EXPECT_EQ(flushes_joined(p->iep) - joined, flushes ? 1u : 0u);
      return;
    }
  }
  ADD_FAILURE() << "in 100 rounds, the five writes never went in one batch";
}

TEST(SameHostGather, WritesToARegionTheTableLeftOutGoOverTheTransportInPostingOrder) {
  left_out_region_in_a_batch(false);
}

TEST(SameHostGather, FlushesAfterAWriteToARegionTheTableLeftOutFollowItOverTheTransport) {
  left_out_region_in_a_batch(true);
}

TEST(SameHostGather, TheEnvironmentTurnsItOff) {
  ::setenv("REMORA_GATHER_WRITES", "0", 1);
  auto p = gathering_pair();
  ::unsetenv("REMORA_GATHER_WRITES");
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  for (int round = 0; round < 3; ++round) (void)post_batch(*p, 8, static_cast<std::uint8_t>(round + 1), 10 * round);
  EXPECT_EQ(batched(p->iep), 0u);
  EXPECT_EQ(direct_ops(p->iep), 24u);
}

// ---- reads posted back to back, moved by one call ----

/// Rounds (at most 20) of `n` reads of `len` bytes posted back to back
/// right after a poll, read i from target offset `from(i)` into local offset
/// `to(i)` (the target filled again each round, byte x of it
/// `fill(round, x)`; the local memory 0x11), until one round went in one
/// batch: true then. Every round's reads must complete in posting order
/// and leave what one call in posting order leaves: each local byte as the
/// last read into it put it, and every other as it was.
template <typename From, typename To>
bool read_batch(Pair& p, std::size_t n, std::size_t len, From from, To to) {
  auto fill = [](int round, std::size_t x) { return static_cast<std::uint8_t>((x / 4096) * 7 + x % 251 + round); };
  for (int round = 0; round < 20; ++round) {
    for (std::size_t x = 0; x < p.target_mem.size(); ++x) p.target_mem[x] = fill(round, x);
    std::memset(p.local_mem.data(), 0x11, p.local_mem.size());
    let_agent_look(p);
    Completion none[1];
    (void)p.icq.poll(none);
    const std::uint64_t before = batched(p.iep);
    for (std::size_t i = 0; i < n; ++i) {
      Segment seg(p.lmr, to(i), len);
      EXPECT_OK(p.iep.read({&seg, 1}, p.rr, from(i), 100 + i));
    }
    auto c = collect(p.icq, n);
    EXPECT_EQ(c.size(), n);
    for (std::size_t i = 0; i < c.size(); ++i) {
      EXPECT_FALSE(c[i].status) << describe(c[i]);
      EXPECT_EQ(c[i].cookie, 100 + i) << "completions out of posting order";
      EXPECT_EQ(c[i].op, Opcode::read);
    }
    std::vector<std::ptrdiff_t> source(p.local_mem.size(), -1);  // the target byte each local byte holds
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t b = 0; b < len; ++b) source[to(i) + b] = static_cast<std::ptrdiff_t>(from(i) + b);
    std::size_t wrong = 0, first_wrong = 0;
    for (std::size_t x = 0; x < source.size(); ++x) {
      const std::uint8_t want = source[x] < 0 ? 0x11 : fill(round, static_cast<std::size_t>(source[x]));
      if (p.local_mem[x] != want && wrong++ == 0) first_wrong = x;
    }
    EXPECT_EQ(wrong, 0u) << "round " << round << ": local byte " << first_wrong << " is not what the last read into it "
                         << "brought (or was touched by none)";
    if (batched(p.iep) == before + n) return true;
  }
  return false;
}

TEST(SameHostGather, ReadsPostedBackToBackWhileAUserPollsAreMovedByOneCall) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  const std::uint64_t ops = direct_ops(p->iep);
  EXPECT_TRUE(read_batch(
      *p, 8, 4096, [](std::size_t i) { return (7 - i) * 4096; }, [](std::size_t i) { return i * 4096; }))
      << "in 20 rounds, 8 reads posted back to back never went in one batch";
  EXPECT_GT(direct_ops(p->iep), ops);
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST(SameHostGather, ReadsOfABatchIntoTheSameBytesLeaveTheLastPosted) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  EXPECT_TRUE(read_batch(
      *p, 8, 4096, [](std::size_t i) { return i * 4096; }, [](std::size_t) { return 4096; }))
      << "in 20 rounds, 8 reads posted back to back never went in one batch";
}

TEST(SameHostGather, LargeReadsOfABatchAreMovedByTwoThreads) {
  // Eight 64 KiB reads (512 KiB, past kSplitBytes): the batch is cut where
  // the bytes land here, the two sides moved at once (copier.hpp,
  // read_ranges); into disjoint blocks, and four reads each into two blocks.
  auto p = gathering_pair(8 * 64 * 1024);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  constexpr std::size_t kLen = 64 * 1024;
  std::uint64_t before = splits();
  EXPECT_TRUE(read_batch(
      *p, 8, kLen, [](std::size_t i) { return i * kLen; }, [](std::size_t i) { return (7 - i) * kLen; }))
      << "in 20 rounds, eight reads posted back to back never went in one batch";
  EXPECT_GT(splits(), before) << "a batch of eight 64 KiB reads into disjoint blocks was not split";
  before = splits();
  EXPECT_TRUE(read_batch(
      *p, 8, kLen, [](std::size_t i) { return i * kLen; }, [](std::size_t i) { return (i % 2) * kLen; }))
      << "in 20 rounds, eight reads posted back to back never went in one batch";
  EXPECT_GT(splits(), before) << "a batch of eight 64 KiB reads into two blocks was not split";
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST(SameHostGather, ReadsOfOneMiBPostedBackToBackAreMovedInOneSplitBatch) {
  constexpr std::size_t kMiB = 1024 * 1024;
  auto p = gathering_pair(8 * kMiB);
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  const std::uint64_t before = splits();
  EXPECT_TRUE(read_batch(
      *p, 8, kMiB, [](std::size_t i) { return i * kMiB; }, [](std::size_t i) { return (7 - i) * kMiB; }))
      << "in 20 rounds, eight 1 MiB reads posted back to back never went in one batch";
  EXPECT_GT(splits(), before) << "a batch of eight 1 MiB reads was not split";
  EXPECT_EQ(p->iep.state(), EndpointState::connected);
}

TEST(SameHostGather, ARefusedReadInABatchEndsTheConnectionAndNothingAfterItLands) {
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::memset(p->target_mem.data(), 0x6d, p->target_mem.size());
  post_six_with_a_forged_fourth(*p, /*write=*/false);
  EXPECT_TRUE(std::all_of(p->local_mem.begin(), p->local_mem.begin() + 3 * 4096, [](std::uint8_t b) {
    return b == 0x6d;
  })) << "a read before the refused one did not land";
  EXPECT_TRUE(std::all_of(p->local_mem.begin() + 3 * 4096, p->local_mem.end(), [](std::uint8_t b) { return b == 0; }))
      << "a read from the refused one on landed";
}

TEST(SameHostGather, ReadsAndWritesPostedBackToBackKeepTheirOrder) {
  // Writes of 0x21 to pages 0-3, then reads of pages 0-3, then writes of
  // 0x22 to them, then reads again, all back to back: each read finds the
  // writes posted before it and none after (a batch holds one kind; the
  // other kind places it first).
  auto p = gathering_pair();
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  std::memset(p->local_mem.data(), 0x21, 4 * 4096);
  std::memset(p->local_mem.data() + 4 * 4096, 0x22, 4 * 4096);
  Completion none[1];
  (void)p->icq.poll(none);
  std::uint64_t cookie = 0;
  for (std::uint64_t fill_block : {0, 4}) {
    for (std::uint64_t i = 0; i < 4; ++i) {
      Segment seg(p->lmr, (fill_block + i) * 4096, 4096);
      ASSERT_OK(p->iep.write({&seg, 1}, p->rr, i * 4096, cookie++));
    }
    for (std::uint64_t i = 0; i < 4; ++i) {
      Segment seg(p->lmr, (8 + fill_block + i) * 4096, 4096);
      ASSERT_OK(p->iep.read({&seg, 1}, p->rr, i * 4096, cookie++));
    }
  }
  auto c = collect(p->icq, 16);
  ASSERT_EQ(c.size(), 16u) << describe(c);
  for (std::size_t i = 0; i < c.size(); ++i) {
    EXPECT_FALSE(c[i].status) << describe(c[i]);
    EXPECT_EQ(c[i].cookie, i) << "completions out of posting order";
  }
  auto holds = [&](std::size_t page, std::uint8_t v) {
    return std::all_of(p->local_mem.begin() + static_cast<std::ptrdiff_t>(page * 4096),
                       p->local_mem.begin() + static_cast<std::ptrdiff_t>((page + 4) * 4096),
                       [v](std::uint8_t b) { return b == v; });
  };
  EXPECT_TRUE(holds(8, 0x21)) << "the first reads did not find the writes before them, or found those after";
  EXPECT_TRUE(holds(12, 0x22)) << "the second reads did not find the writes before them";
}

TEST(SameHostGather, TheEnvironmentTurnsItOffForReadsToo) {
  ::setenv("REMORA_GATHER_WRITES", "0", 1);
  auto p = gathering_pair();
  ::unsetenv("REMORA_GATHER_WRITES");
  ASSERT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
  EXPECT_FALSE(read_batch(
      *p, 8, 4096, [](std::size_t i) { return i * 4096; }, [](std::size_t i) { return i * 4096; }));
  EXPECT_EQ(batched(p->iep), 0u);
}

TEST(SameHostSwitch, OnWithoutAnySetting) {
  ::unsetenv("REMORA_SAMEHOST");
  Pair p;
  ASSERT_TRUE(direct_ready(p.iep)) << why_not(p.iep);
  Segment s(p.lmr, 0, 64);
  ASSERT_OK(p.iep.write({&s, 1}, p.rr, 0, 1));
  ASSERT_EQ(collect(p.icq, 1).size(), 1u);
  EXPECT_EQ(direct_ops(p.iep), 1u);
}

TEST(SameHostSwitch, TheProgramTurnsItOff) {
  ::unsetenv("REMORA_SAMEHOST");
  PairOptions o;
  o.fabric.same_host = false;
  Pair p(o);
  expect_all_over_the_transport(p);
}

TEST(SameHostSwitch, TheEnvironmentTurnsItOff) {
  for (const char* off : {"0", "off", "no", "false"}) {
    SCOPED_TRACE(off);
    ::setenv("REMORA_SAMEHOST", off, 1);
    Pair p;
    expect_all_over_the_transport(p);
  }
  ::unsetenv("REMORA_SAMEHOST");
}

TEST(SameHostSwitch, AnUnknownValueIsReportedAndLeavesItOn) {
  ::setenv("REMORA_SAMEHOST", "maybe", 1);
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Pair> p;
  EXPECT_NO_THROW(p = std::make_unique<Pair>());
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("REMORA_SAMEHOST");
  EXPECT_NE(err.find("REMORA_SAMEHOST=\"maybe\""), std::string::npos) << err;
  ASSERT_TRUE(p);
  EXPECT_TRUE(direct_ready(p->iep)) << why_not(p->iep);
}

}  // namespace

namespace {

// An offer names a pid and a descriptor: a peer could name another process
// of this host and its table. The table's nonce, which only a reader of the
// table knows, must match the offer's, or the table is refused.
TEST(SameHostOffer, ATableWhoseNonceIsNotTheOfferedOneIsRefused) {
  std::string why;
  auto table = detail::direct::Table::create(why);
  ASSERT_TRUE(table) << why;
  ASSERT_NE(table->nonce(), 0u);
  const auto& me = detail::direct::identity();
  const auto pid = static_cast<std::uint64_t>(::getpid());
  const auto fd = static_cast<std::uint64_t>(table->fd());
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::get(pid, fd, table->nonce() ^ 1, me.boot_hash, me.pidns, why));
  EXPECT_NE(why.find("nonce"), std::string::npos) << why;
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::get(pid, fd, 0, me.boot_hash, me.pidns, why));
  EXPECT_NE(why.find("nonce"), std::string::npos) << why;
  why.clear();
  EXPECT_TRUE(detail::direct::Peer::get(pid, fd, table->nonce(), me.boot_hash, me.pidns, why)) << why;
  // Another host or pid namespace: refused before anything is opened.
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::get(pid, fd, table->nonce(), me.boot_hash ^ 1, me.pidns, why));
  EXPECT_NE(why.find("another host"), std::string::npos) << why;
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::get(pid, fd, table->nonce(), me.boot_hash, me.pidns ^ 1, why));
  EXPECT_NE(why.find("pid namespace"), std::string::npos) << why;
}

// An initiator maps a peer's table and rings only when their size is sealed
// (docs/design.md, "A file cut short under a mapping"): a peer cutting
// them short would raise SIGBUS here at the next look past the new end.
TEST(SameHostOffer, AnOfferedTableOrRingWhoseSizeIsNotSealedIsRefused) {
  std::string why;
  auto table = detail::direct::Table::create(why);
  ASSERT_TRUE(table) << why;
  auto sealed = [](int fd) {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & F_SEAL_SHRINK) != 0 && (seals & F_SEAL_GROW) != 0;
  };
  EXPECT_TRUE(sealed(table->fd()));
  // A copy of a file, in a memory file whose size is not sealed (yet).
  auto copy_of = [](int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return -1;
    std::vector<char> bytes(static_cast<std::size_t>(st.st_size));
    const int out = ::memfd_create("remora-test-unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (out < 0 || ::pread(fd, bytes.data(), bytes.size(), 0) != st.st_size ||
        ::pwrite(out, bytes.data(), bytes.size(), 0) != st.st_size) {
      if (out >= 0) ::close(out);
      return -1;
    }
    return out;
  };
  const int table_copy = copy_of(table->fd());
  ASSERT_GE(table_copy, 0);
  const auto& me = detail::direct::identity();
  const auto pid = static_cast<std::uint64_t>(::getpid());
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::get(pid, static_cast<std::uint64_t>(table_copy), table->nonce(), me.boot_hash,
                                         me.pidns, why));
  EXPECT_NE(why.find("not sealed"), std::string::npos) << why;
  // Sealed, the same file is taken.
  ASSERT_EQ(::fcntl(table_copy, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  why.clear();
  const std::shared_ptr<const detail::direct::Peer> peer = detail::direct::Peer::get(
      pid, static_cast<std::uint64_t>(table_copy), table->nonce(), me.boot_hash, me.pidns, why);
  ASSERT_TRUE(peer) << why;
  // A ring the same way.
  auto in = detail::direct::Inbox::create(4, 64, why);
  ASSERT_TRUE(in) << why;
  EXPECT_TRUE(sealed(in->fd()));
  const int ring_copy = copy_of(in->fd());
  ASSERT_GE(ring_copy, 0);
  why.clear();
  EXPECT_FALSE(detail::direct::Outbox::open(peer, ring_copy, in->bell_fd(), in->nonce(), 4, 64, why));
  EXPECT_NE(why.find("not sealed"), std::string::npos) << why;
  ASSERT_EQ(::fcntl(ring_copy, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  why.clear();
  EXPECT_TRUE(detail::direct::Outbox::open(peer, ring_copy, in->bell_fd(), in->nonce(), 4, 64, why)) << why;
  ::close(ring_copy);
  ::close(table_copy);
}

// The host's stolen CPU time, which the benchmarks report next to their
// figures (tools/cpu_time.hpp): /proc/stat's first line, eight fields summed.
TEST(HostTicks, TheCpuLineIsSummedAndItsEighthFieldIsTheSteal) {
  const auto t = remora::tools::parse_host_ticks("cpu  100 5 50 1000 10 1 2 30 7 0\ncpu0 50 2 25 500 5 0 1 15 0 0\n");
  EXPECT_EQ(t.total, 1198u);  // guest time (the ninth field) is inside user already
  EXPECT_EQ(t.steal, 30u);
}

TEST(HostTicks, ALineWithoutStealOrNotTheCpuLineGivesNothing) {
  for (const char* text : {"cpu  100 5 50 1000 10 1 2\n", "cpu0 100 5 50 1000 10 1 2 30\n", "",
                           "cpu  1 2 x 4 5 6 7 8\n", "intr 100 5 50 1000 10 1 2 30\n"}) {
    const auto t = remora::tools::parse_host_ticks(text);
    EXPECT_EQ(t.total, 0u) << text;
    EXPECT_EQ(t.steal, 0u) << text;
  }
}

TEST(HostTicks, StealIsAShareOfTheTicksBetweenTwoReadings) {
  using remora::tools::HostTicks;
  EXPECT_DOUBLE_EQ(remora::tools::steal_percent(HostTicks{1000, 10}, HostTicks{1200, 60}), 25.0);
  EXPECT_DOUBLE_EQ(remora::tools::steal_percent(HostTicks{1000, 10}, HostTicks{1200, 10}), 0.0);
  // No tick passed, unknown readings, a counter that went back: not known.
  EXPECT_LT(remora::tools::steal_percent(HostTicks{1000, 10}, HostTicks{1000, 10}), 0);
  EXPECT_LT(remora::tools::steal_percent(HostTicks{}, HostTicks{}), 0);
  EXPECT_LT(remora::tools::steal_percent(HostTicks{1000, 10}, HostTicks{1200, 5}), 0);
  // This host's /proc/stat.
  const HostTicks now = remora::tools::host_ticks();
  EXPECT_GT(now.total, 0u);
  EXPECT_LE(now.steal, now.total);
}

}  // namespace
