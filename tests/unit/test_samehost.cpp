// The same-host direct path (docs/design.md, "Same-host direct path"): with
// REMORA_SAMEHOST=1 an initiator whose peer zone is in a process of this
// host places RMA writes and reads itself (process_vm_writev/readv) after
// checking key, bounds and privilege against the peer's region table. Both
// zones of a Pair live in this process: pidfd_getfd and process_vm_* on our
// own pid exercise the real path.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "core/impl.hpp"
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

std::string why_not(const Endpoint& ep) {
  detail::MutexLock lock(ep.impl()->mu);
  return ep.impl()->direct_why_not;
}

class SameHost : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("REMORA_SAMEHOST", "1", 1);  // read when a zone is created
    p = std::make_unique<Pair>();
    ASSERT_TRUE(direct_ready(p->iep)) << "the initiator never mapped the target's table: " << why_not(p->iep);
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

TEST(SameHostOff, WithoutTheVariableEverythingGoesOverTheTransport) {
  ::unsetenv("REMORA_SAMEHOST");
  Pair p;
  Segment s(p.lmr, 0, 64);
  ASSERT_OK(p.iep.write({&s, 1}, p.rr, 0, 1));
  auto c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status);
  EXPECT_EQ(direct_ops(p.iep), 0u);
  EXPECT_FALSE(direct_ready(p.iep, kQuiet));
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
  EXPECT_FALSE(detail::direct::Peer::open(pid, fd, table->nonce() ^ 1, me.boot_hash, me.pidns, why));
  EXPECT_NE(why.find("nonce"), std::string::npos) << why;
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::open(pid, fd, 0, me.boot_hash, me.pidns, why));
  EXPECT_NE(why.find("nonce"), std::string::npos) << why;
  why.clear();
  EXPECT_TRUE(detail::direct::Peer::open(pid, fd, table->nonce(), me.boot_hash, me.pidns, why)) << why;
  // Another host or pid namespace: refused before anything is opened.
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::open(pid, fd, table->nonce(), me.boot_hash ^ 1, me.pidns, why));
  EXPECT_NE(why.find("another host"), std::string::npos) << why;
  why.clear();
  EXPECT_FALSE(detail::direct::Peer::open(pid, fd, table->nonce(), me.boot_hash, me.pidns ^ 1, why));
  EXPECT_NE(why.find("pid namespace"), std::string::npos) << why;
}

}  // namespace
