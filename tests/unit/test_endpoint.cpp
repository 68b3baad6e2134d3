// Endpoint: the synchronous checks (docs/design.md, "Checks at post time"),
// each on an otherwise valid operation of a connected pair, and what must not
// happen when a check fails (no completion, no target change, still connected).
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "unit_support.hpp"

namespace {

using namespace unit;

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

class EndpointChecks : public ::testing::Test {
 protected:
  void SetUp() override { p = std::make_unique<Pair>(); }

  /// Nothing was sent: no completion at either side, target memory as it was,
  /// the endpoint still connected and usable.
  void expect_nothing_sent() {
    auto got = drain_for(p->icq);
    EXPECT_TRUE(got.empty()) << "initiator completions after a refused post: " << describe(got);
    auto tgot = p->tcq.poll(std::span<Completion>(tbuf_));
    EXPECT_EQ(tgot, 0u) << "target completion after a refused post";
    EXPECT_TRUE(p->target_untouched()) << "target memory changed after a refused post";
    EXPECT_EQ(p->iep.state(), EndpointState::connected);
    expect_still_works();
  }

  /// A valid write at the last 8 bytes of the target completes successfully.
  void expect_still_works() {
    auto src = pattern(8, 0x31);
    std::memcpy(p->local_mem.data(), src.data(), 8);
    Segment s(p->lmr, 0, 8);
    ASSERT_OK(p->iep.write({&s, 1}, p->rr, p->rr.length() - 8, 0xC0FFEE));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].cookie, 0xC0FFEEu);
    EXPECT_FALSE(c[0].status) << c[0].status.message();
    EXPECT_EQ(std::memcmp(p->target_mem.data() + p->target_mem.size() - 8, src.data(), 8), 0);
    std::fill(p->target_mem.end() - 8, p->target_mem.end(), Pair::kTargetFill);
  }

  std::unique_ptr<Pair> p;
  Completion tbuf_[4];
};

TEST_F(EndpointChecks, SegmentOutsideItsRegion) {
  {  // SegmentOutsideItsRegion
    auto& ep = p->iep;
    const auto base = reinterpret_cast<std::uintptr_t>(p->lmr.address());
    Segment tail(p->lmr, 4000, 200);                                                     // runs past the end
    Segment before = Segment::at(p->lmr, reinterpret_cast<const void*>(base - 8), 16);   // starts before
    Segment after = Segment::at(p->lmr, reinterpret_cast<const void*>(base + 4096), 1);  // starts at the end
    Segment huge =
        Segment::at(p->lmr, reinterpret_cast<const void*>(base + 16), std::numeric_limits<std::size_t>::max());
    Segment ok(p->lmr, 0, 16);
    for (const Segment& bad : {tail, before, after, huge}) {
      EXPECT_ERR(ep.write({&bad, 1}, p->rr, 0, 1), Errc::invalid_argument);
      EXPECT_ERR(ep.write_imm({&bad, 1}, p->rr, 0, 5, 1), Errc::invalid_argument);
      EXPECT_ERR(ep.read({&bad, 1}, p->rr, 0, 2), Errc::invalid_argument);
      EXPECT_ERR(ep.send({&bad, 1}, 3), Errc::invalid_argument);
      EXPECT_ERR(ep.send_imm({&bad, 1}, 9, 3), Errc::invalid_argument);
      EXPECT_ERR(ep.recv({&bad, 1}, 4), Errc::invalid_argument);
      // A bad entry after a good one in a gather list.
      Segment two[2] = {ok, bad};
      EXPECT_ERR(ep.write(two, p->rr, 0, 5), Errc::invalid_argument);
    }
    expect_nothing_sent();
  }
  {  // SegmentExactlyFillingTheRegionIsAccepted
    Segment whole(p->lmr, 0, p->lmr.length());
    ASSERT_OK(p->iep.write({&whole, 1}, p->rr, 0, 7));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].status);
    EXPECT_EQ(c[0].length, p->lmr.length());
  }
}

TEST_F(EndpointChecks, TooManySegments) {
  auto& ep = p->iep;
  const std::size_t n = ep.max_segments();
  ASSERT_GE(n, 1u);
  ASSERT_LE(n * 16 + 16, p->lmr.length());
  std::vector<Segment> segs;
  for (std::size_t i = 0; i <= n; ++i) segs.emplace_back(p->lmr, i * 16, 8);
  std::span<const Segment> over(segs.data(), n + 1);
  EXPECT_ERR(ep.write(over, p->rr, 0, 1), Errc::invalid_argument);
  EXPECT_ERR(ep.read(over, p->rr, 0, 2), Errc::invalid_argument);
  EXPECT_ERR(ep.send(over, 3), Errc::invalid_argument);
  EXPECT_ERR(ep.recv(over, 4), Errc::invalid_argument);
  expect_nothing_sent();

  // Exactly max_segments() is a valid gather list, placed in order.
  for (std::size_t i = 0; i < n; ++i) std::memset(p->local_mem.data() + i * 16, int(0x40 + i), 8);
  ASSERT_OK(ep.write(std::span<const Segment>(segs.data(), n), p->rr, 256, 5));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << c[0].status.message();
  EXPECT_EQ(c[0].length, n * 8);
  for (std::size_t i = 0; i < n * 8; ++i) ASSERT_EQ(p->target_mem[256 + i], 0x40 + i / 8) << "gathered byte " << i;
}

TEST_F(EndpointChecks, RegionOfAnotherZone) {
  auto& ep = p->iep;
  // p->tmr belongs to the target zone and has every privilege.
  Segment foreign(p->tmr, 0, 8);
  Segment ok(p->lmr, 0, 8);
  Segment mixed[2] = {ok, foreign};
  EXPECT_ERR(ep.write({&foreign, 1}, p->rr, 0, 1), Errc::zone_mismatch);
  EXPECT_ERR(ep.write(mixed, p->rr, 0, 1), Errc::zone_mismatch);
  EXPECT_ERR(ep.read({&foreign, 1}, p->rr, 0, 2), Errc::zone_mismatch);
  EXPECT_ERR(ep.send({&foreign, 1}, 3), Errc::zone_mismatch);
  EXPECT_ERR(ep.recv({&foreign, 1}, 4), Errc::zone_mismatch);
  expect_nothing_sent();
}

TEST_F(EndpointChecks, SourceWithoutLocalRead) {
  std::vector<std::uint8_t> mem(256, 1);
  auto wo = MUST(p->iz.register_memory(mem.data(), mem.size(), Access::local_write));
  Segment s(wo, 0, 64);
  EXPECT_ERR(p->iep.write({&s, 1}, p->rr, 0, 1), Errc::privileges);
  EXPECT_ERR(p->iep.write_imm({&s, 1}, p->rr, 0, 7, 1), Errc::privileges);
  EXPECT_ERR(p->iep.send({&s, 1}, 2), Errc::privileges);
  EXPECT_ERR(p->iep.send_imm({&s, 1}, 7, 2), Errc::privileges);
  expect_nothing_sent();
  // The same region is a valid read destination.
  ASSERT_OK(p->iep.read({&s, 1}, p->rr, 0, 3));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status);
  EXPECT_EQ(mem[0], Pair::kTargetFill);
}

TEST_F(EndpointChecks, DestinationWithoutLocalWrite) {
  std::vector<std::uint8_t> mem(256, 1);
  auto ro = MUST(p->iz.register_memory(mem.data(), mem.size(), Access::local_read));
  Segment s(ro, 0, 64);
  EXPECT_ERR(p->iep.read({&s, 1}, p->rr, 0, 1), Errc::privileges);
  EXPECT_ERR(p->iep.recv({&s, 1}, 2), Errc::privileges);
  expect_nothing_sent();
  EXPECT_EQ(mem[0], 1) << "read destination without local_write was written";
}

TEST_F(EndpointChecks, RemoteDescriptorWithoutRemotePrivilege) {
  {  // RemoteDescriptorWithoutRemoteWrite
    std::vector<std::uint8_t> mem(256, 0x55);
    auto r_only = MUST(p->tz.register_memory(mem.data(), mem.size(), Access::remote_read));
    auto rr = MUST(r_only.remote());
    Segment s(p->lmr, 0, 8);
    EXPECT_ERR(p->iep.write({&s, 1}, rr, 0, 1), Errc::privileges);
    EXPECT_ERR(p->iep.write_imm({&s, 1}, rr, 0, 3, 1), Errc::privileges);
    EXPECT_ERR(p->iep.atomic_write(rr, 0, 0x1234, 2), Errc::privileges);
    expect_nothing_sent();
    EXPECT_EQ(mem[0], 0x55);
    // Reading it is fine.
    ASSERT_OK(p->iep.read({&s, 1}, rr, 0, 3));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].status);
    EXPECT_EQ(p->local_mem[0], 0x55);
  }
  {  // RemoteDescriptorWithoutRemoteRead
    std::vector<std::uint8_t> mem(256, 0x66);
    auto w_only = MUST(p->tz.register_memory(mem.data(), mem.size(), Access::remote_write));
    auto rr = MUST(w_only.remote());
    Segment s(p->lmr, 0, 8);
    p->local_mem[0] = 0;
    EXPECT_ERR(p->iep.read({&s, 1}, rr, 0, 1), Errc::privileges);
    expect_nothing_sent();
    EXPECT_NE(p->local_mem[0], 0x66);
  }
}

TEST_F(EndpointChecks, FlushArgumentChecks) {
  {  // FlushNeedsSomeRemotePrivilege
    RemoteRegion none(p->rr.address(), p->rr.length(), p->rr.key(), Access::none, false);
    EXPECT_ERR(p->iep.flush(none, 0, 64, FlushType::visibility, 1), Errc::privileges);
    expect_nothing_sent();
  }
  {  // InvalidFlushType
    EXPECT_ERR(p->iep.flush(p->rr, 0, 8, static_cast<FlushType>(9), 1), Errc::invalid_argument);
    expect_nothing_sent();
  }
}

TEST_F(EndpointChecks, RemoteRangePastTheDescriptor) {
  auto& ep = p->iep;
  const std::uint64_t len = p->rr.length();
  Segment s16(p->lmr, 0, 16);
  Segment s1(p->lmr, 0, 1);
  EXPECT_ERR(ep.write({&s16, 1}, p->rr, len - 8, 1), Errc::length_error);
  EXPECT_ERR(ep.write({&s1, 1}, p->rr, len, 1), Errc::length_error);
  EXPECT_ERR(ep.write({&s1, 1}, p->rr, len + 1, 1), Errc::length_error);
  EXPECT_ERR(ep.write({&s16, 1}, p->rr, kMax64 - 4, 1), Errc::length_error);  // offset + length wraps
  EXPECT_ERR(ep.write_imm({&s16, 1}, p->rr, len - 8, 1, 1), Errc::length_error);
  EXPECT_ERR(ep.read({&s16, 1}, p->rr, len - 15, 2), Errc::length_error);
  EXPECT_ERR(ep.read({&s16, 1}, p->rr, kMax64, 2), Errc::length_error);
  EXPECT_ERR(ep.atomic_write(p->rr, len, 1, 3), Errc::length_error);
  EXPECT_ERR(ep.atomic_write(p->rr, len + 8, 1, 3), Errc::length_error);
  EXPECT_ERR(ep.flush(p->rr, 0, len + 1, FlushType::visibility, 4), Errc::length_error);
  EXPECT_ERR(ep.flush(p->rr, len - 10, 11, FlushType::visibility, 4), Errc::length_error);
  EXPECT_ERR(ep.flush(p->rr, 8, kMax64, FlushType::visibility, 4), Errc::length_error);
  // A descriptor shorter than the region bounds the range, not the region.
  RemoteRegion shorter(p->rr.address(), 64, p->rr.key(), p->rr.access(), false);
  EXPECT_ERR(ep.write({&s16, 1}, shorter, 56, 5), Errc::length_error);
  expect_nothing_sent();

  // The last bytes of the range are fine.
  ASSERT_OK(ep.write({&s16, 1}, p->rr, len - 16, 6));
  ASSERT_OK(ep.atomic_write(p->rr, len - 8, 1, 7));
  ASSERT_OK(ep.flush(p->rr, 0, len, FlushType::visibility, 8));
  auto c = collect(p->icq, 3);
  ASSERT_EQ(c.size(), 3u) << describe(c);
  for (auto& x : c) EXPECT_FALSE(x.status) << describe(x);
}

TEST_F(EndpointChecks, AtomicWriteMisaligned) {
  for (std::uint64_t off = 1; off < 8; ++off)
    EXPECT_ERR(p->iep.atomic_write(p->rr, off, 1, off), Errc::invalid_argument);
  EXPECT_ERR(p->iep.atomic_write(p->rr, 100, 1, 9), Errc::invalid_argument);
  expect_nothing_sent();
  ASSERT_OK(p->iep.atomic_write(p->rr, 16, 0x0102030405060708ull, 10));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status);
  std::uint64_t v;
  std::memcpy(&v, p->target_mem.data() + 16, 8);
  EXPECT_EQ(v, 0x0102030405060708ull);
}

TEST_F(EndpointChecks, PersistentFlushToNonPersistentRegion) {
  ASSERT_FALSE(p->rr.persistent());
  EXPECT_ERR(p->iep.flush(p->rr, 0, 64, FlushType::persistent, 77), Errc::not_supported);
  EXPECT_ERR(p->iep.flush(p->rr, 0, p->rr.length(), FlushType::persistent, 78, PostFlags::unsignalled),
             Errc::not_supported);
  expect_nothing_sent();
  // Visibility is fine on the same region.
  ASSERT_OK(p->iep.flush(p->rr, 0, 64, FlushType::visibility, 79));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].cookie, 79u);
  EXPECT_EQ(c[0].op, Opcode::flush);
  EXPECT_FALSE(c[0].status);
}

TEST_F(EndpointChecks, PersistentFlushToPersistentRegions) {
  // Declared persistent at registration ...
  std::vector<std::uint8_t> mem(4096, 0);
  auto declared = MUST(p->tz.register_memory(mem.data(), mem.size(), Access::all, true));
  auto rd = MUST(declared.remote());
  ASSERT_TRUE(rd.persistent());
  // ... and mapped by Remora from a file.
  std::string path = ::testing::TempDir() + "remora-unit-flush-" + std::to_string(::getpid());
  auto mapped = MUST(p->tz.map_file(path, 8192, Access::all));
  auto rm = MUST(mapped.remote());
  Segment s(p->lmr, 0, 32);
  std::memset(p->local_mem.data(), 0x5A, 32);
  ASSERT_OK(p->iep.write({&s, 1}, rm, 100, 1));
  ASSERT_OK(p->iep.flush(rm, 0, 8192, FlushType::persistent, 2));
  ASSERT_OK(p->iep.flush(rd, 0, 4096, FlushType::persistent, 3));
  auto c = collect(p->icq, 3);
  ASSERT_EQ(c.size(), 3u) << describe(c);
  for (auto& x : c) EXPECT_FALSE(x.status) << describe(x);
  EXPECT_EQ(static_cast<const std::uint8_t*>(mapped.address())[100], 0x5A);
  mapped.close();
  ::unlink(path.c_str());
}

TEST_F(EndpointChecks, SendLargerThanPeerMaxMessage) {
  PairOptions o;
  o.target.max_message = 1024;
  o.initiator.max_message = 2048;
  p = std::make_unique<Pair>(o);
  EXPECT_EQ(p->iep.peer_max_message(), 1024u);
  EXPECT_EQ(p->tep.peer_max_message(), 2048u);

  Segment big(p->lmr, 0, 1025);
  EXPECT_ERR(p->iep.send({&big, 1}, 1), Errc::length_error);
  EXPECT_ERR(p->iep.send_imm({&big, 1}, 5, 1), Errc::length_error);
  Segment halves[2] = {Segment(p->lmr, 0, 512), Segment(p->lmr, 1024, 513)};
  EXPECT_ERR(p->iep.send(halves, 2), Errc::length_error);
  expect_nothing_sent();

  // Exactly the peer's maximum arrives whole.
  auto data = pattern(1024, 3);
  std::memcpy(p->local_mem.data(), data.data(), data.size());
  std::vector<std::uint8_t> in(2048, 0);
  auto rmr = MUST(p->tz.register_memory(in.data(), in.size(), Access::local_write));
  Segment rs(rmr, 0, in.size());
  ASSERT_OK(p->tep.recv({&rs, 1}, 50));
  Segment fit(p->lmr, 0, 1024);
  ASSERT_OK(p->iep.send({&fit, 1}, 51));
  auto rc = collect(p->tcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].cookie, 50u);
  EXPECT_FALSE(rc[0].status) << rc[0].status.message();
  EXPECT_EQ(rc[0].length, 1024u);
  EXPECT_EQ(std::memcmp(in.data(), data.data(), 1024), 0);
  auto sc = collect(p->icq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].cookie, 51u);
}

TEST_F(EndpointChecks, UnconnectedEndpointIsInvalidState) {
  EndpointOptions o;
  o.send_cq = &p->icq;
  auto ep = MUST(p->iz.create_endpoint(o));
  EXPECT_EQ(ep.state(), EndpointState::unconnected);
  Segment s(p->lmr, 0, 8);
  EXPECT_ERR(ep.write({&s, 1}, p->rr, 0, 1), Errc::invalid_state);
  EXPECT_ERR(ep.write_imm({&s, 1}, p->rr, 0, 1, 1), Errc::invalid_state);
  EXPECT_ERR(ep.read({&s, 1}, p->rr, 0, 2), Errc::invalid_state);
  EXPECT_ERR(ep.send({&s, 1}, 3), Errc::invalid_state);
  EXPECT_ERR(ep.send_imm({&s, 1}, 1, 3), Errc::invalid_state);
  EXPECT_ERR(ep.atomic_write(p->rr, 0, 1, 4), Errc::invalid_state);
  EXPECT_ERR(ep.flush(p->rr, 0, 8, FlushType::visibility, 5), Errc::invalid_state);
  EXPECT_EQ(ep.peer_max_message(), 0u);
  expect_nothing_sent();
}

TEST_F(EndpointChecks, ConnectPendingEndpointIsInvalidState) {
  EndpointOptions o;
  o.send_cq = &p->icq;
  auto ep = MUST(p->iz.create_endpoint(o));
  ASSERT_OK(ep.connect("127.0.0.1", p->lis.port()));
  // Nobody accepts yet, so the endpoint cannot be connected.
  auto req = MUST(p->lis.next_request(kWait));
  EXPECT_EQ(ep.state(), EndpointState::connect_pending);
  Segment s(p->lmr, 0, 8);
  EXPECT_ERR(ep.write({&s, 1}, p->rr, 0, 1), Errc::invalid_state);
  EXPECT_ERR(ep.atomic_write(p->rr, 0, 1, 4), Errc::invalid_state);
  EXPECT_ERR(ep.connect("127.0.0.1", p->lis.port()), Errc::invalid_state);
  EXPECT_OK(req.reject());
  auto ev = MUST(ep.next_event(kWait));
  EXPECT_EQ(ev.type, ConnectionEventType::rejected);
  expect_nothing_sent();
}

TEST_F(EndpointChecks, PostAfterDisconnectCompletesAtOnceAsFlushed) {
  auto& ep = p->iep;
  ASSERT_OK(ep.disconnect());
  EXPECT_EQ(ep.state(), EndpointState::disconnected);
  Segment s(p->lmr, 0, 8);
  struct Case {
    std::uint64_t cookie;
    Opcode op;
  };
  std::vector<Case> cases;
  auto post_one = [&](Result<void> r, std::uint64_t cookie, Opcode op) {
    EXPECT_TRUE(r.ok()) << to_string(op) << ": " << r.error().message();
    // "At once": already queued when the post returns, without waiting.
    Completion c[2];
    std::size_t n = p->icq.poll(c);
    ASSERT_EQ(n, 1u) << "no immediate completion for " << to_string(op);
    EXPECT_EQ(c[0].cookie, cookie);
    EXPECT_EQ(c[0].op, op);
    EXPECT_EQ(c[0].status, make_error_code(Errc::flushed)) << c[0].status.message();
    EXPECT_EQ(c[0].endpoint_id, ep.id());
  };
  post_one(ep.write({&s, 1}, p->rr, 0, 101), 101, Opcode::write);
  post_one(ep.write_imm({&s, 1}, p->rr, 0, 1, 102), 102, Opcode::write);
  post_one(ep.read({&s, 1}, p->rr, 0, 103), 103, Opcode::read);
  post_one(ep.send({&s, 1}, 104), 104, Opcode::send);
  post_one(ep.atomic_write(p->rr, 0, 1, 105), 105, Opcode::atomic_write);
  post_one(ep.flush(p->rr, 0, 8, FlushType::visibility, 106), 106, Opcode::flush);
  post_one(ep.recv({&s, 1}, 107), 107, Opcode::recv);
  // Unsignalled posts fail too, so they are reported.
  post_one(ep.write({&s, 1}, p->rr, 0, 108, PostFlags::unsignalled), 108, Opcode::write);
  // The synchronous checks still run first.
  Segment bad(p->lmr, 4090, 100);
  EXPECT_ERR(ep.write({&bad, 1}, p->rr, 0, 109), Errc::invalid_argument);
  EXPECT_ERR(ep.atomic_write(p->rr, 3, 1, 110), Errc::invalid_argument);
  EXPECT_TRUE(drain_for(p->icq).empty());
  EXPECT_TRUE(p->target_untouched());
  EXPECT_OK(ep.disconnect());  // safe twice
}

TEST_F(EndpointChecks, DisconnectFlushesOutstandingReceivesAndTellsThePeer) {
  Segment s(p->lmr, 0, 64);
  ASSERT_OK(p->iep.recv({&s, 1}, 900));
  ASSERT_OK(p->iep.recv({&s, 1}, 901));
  ASSERT_OK(p->iep.disconnect());
  auto c = collect(p->icq, 2, 1000ms);
  ASSERT_EQ(c.size(), 2u) << describe(c);
  EXPECT_EQ(c[0].cookie, 900u);
  EXPECT_EQ(c[1].cookie, 901u);
  for (auto& x : c) {
    EXPECT_EQ(x.op, Opcode::recv);
    EXPECT_EQ(x.status, make_error_code(Errc::flushed));
  }
  auto own = MUST(p->iep.next_event(kWait));
  EXPECT_EQ(own.type, ConnectionEventType::disconnected);
  auto peer = MUST(p->tep.next_event(kWait));
  EXPECT_EQ(peer.type, ConnectionEventType::disconnected) << "peer saw " << to_string(peer.type);
  EXPECT_EQ(p->tep.state(), EndpointState::disconnected);
  // The target may post and gets flushed completions too.
  Segment ts(p->tmr, 0, 8);
  ASSERT_OK(p->tep.write({&ts, 1}, p->rr, 0, 5));
  auto tc = collect(p->tcq, 1, 1000ms);
  ASSERT_EQ(tc.size(), 1u);
  EXPECT_EQ(tc[0].status, make_error_code(Errc::flushed));
}

TEST_F(EndpointChecks, CloseTellsThePeer) {
  p->iep.close();
  auto ev = MUST(p->tep.next_event(kWait));
  EXPECT_EQ(ev.type, ConnectionEventType::disconnected) << to_string(ev.type);
  EXPECT_EQ(p->tep.state(), EndpointState::disconnected);
}

TEST_F(EndpointChecks, QueueFullAtMaxOutstanding) {
  PairOptions o;
  // On the transport: the same-host direct path completes the large write
  // when it is posted, so it would never keep its slot busy.
  o.fabric.same_host = false;
  o.initiator.max_outstanding = 2;
  o.target_size = 8 << 20;
  o.local_size = 8 << 20;
  p = std::make_unique<Pair>(o);
  Segment big(p->lmr, 0, p->lmr.length());
  bool seen = false;
  std::size_t posted = 0;
  for (int attempt = 0; attempt < 10 && !seen; ++attempt) {
    // A large write keeps the queue busy; the fenced flush behind it waits
    // for it, so both slots stay taken while the third post is tried.
    ASSERT_OK(p->iep.write({&big, 1}, p->rr, 0, 1000 + attempt));
    ASSERT_OK(p->iep.flush(p->rr, 0, 64, FlushType::visibility, 2000 + attempt, PostFlags::fence));
    posted += 2;
    auto third = p->iep.flush(p->rr, 0, 64, FlushType::visibility, 3000 + attempt);
    if (third.ok()) {
      ++posted;
    } else {
      EXPECT_EQ(third.error(), make_error_code(Errc::queue_full)) << third.error().message();
      seen = true;
      // Still full on a second try, and for other kinds of operation.
      Segment s(p->lmr, 0, 8);
      auto w = p->iep.write({&s, 1}, p->rr, 0, 4000);
      auto a = p->iep.atomic_write(p->rr, 0, 1, 4001);
      if (w.ok()) {
        ++posted;
      } else {
        EXPECT_EQ(w.error(), make_error_code(Errc::queue_full));
      }
      if (a.ok()) {
        ++posted;
      } else {
        EXPECT_EQ(a.error(), make_error_code(Errc::queue_full));
      }
    }
    auto c = collect(p->icq, posted);
    ASSERT_EQ(c.size(), posted) << describe(c);
    for (auto& x : c) EXPECT_FALSE(x.status) << describe(x);
    posted = 0;
  }
  EXPECT_TRUE(seen) << "queue_full never reported with 2 slots and 3 back-to-back posts";
  // After the completions are taken, both slots are free again.
  ASSERT_OK(p->iep.flush(p->rr, 0, 8, FlushType::visibility, 1));
  ASSERT_OK(p->iep.flush(p->rr, 0, 8, FlushType::visibility, 2));
  EXPECT_EQ(collect(p->icq, 2).size(), 2u);
}

TEST_F(EndpointChecks, RecvQueueFullAtMaxRecv) {
  PairOptions o;
  o.initiator.max_recv = 2;
  p = std::make_unique<Pair>(o);
  Segment s(p->lmr, 0, 64);
  ASSERT_OK(p->iep.recv({&s, 1}, 1));
  ASSERT_OK(p->iep.recv({&s, 1}, 2));
  EXPECT_ERR(p->iep.recv({&s, 1}, 3), Errc::queue_full);
}

TEST_F(EndpointChecks, FailedChecksDoNotConsumeSlots) {
  PairOptions o;
  o.initiator.max_outstanding = 1;
  p = std::make_unique<Pair>(o);
  Segment bad(p->lmr, 4090, 100);
  for (int i = 0; i < 5; ++i) {
    EXPECT_ERR(p->iep.write({&bad, 1}, p->rr, 0, 1), Errc::invalid_argument);
    EXPECT_ERR(p->iep.atomic_write(p->rr, 4, 1, 1), Errc::invalid_argument);
    EXPECT_ERR(p->iep.flush(p->rr, 0, 64, FlushType::persistent, 1), Errc::not_supported);
  }
  expect_still_works();
  expect_still_works();
}

TEST(EndpointHandles, DefaultConstructedEndpointIsInvalidHandle) {
  Endpoint ep;
  EXPECT_FALSE(ep.valid());
  EXPECT_EQ(ep.id(), 0u);
  EXPECT_EQ(ep.max_segments(), 0u);
  EXPECT_EQ(ep.peer_max_message(), 0u);
  EXPECT_EQ(ep.event_fd(), -1);
  RemoteRegion rr(0x1000, 4096, 1, kRemote, true);
  EXPECT_ERR(ep.write({}, rr, 0, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.write_imm({}, rr, 0, 1, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.read({}, rr, 0, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.send({}, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.send_imm({}, 1, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.recv({}, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.atomic_write(rr, 0, 1, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.flush(rr, 0, 8, FlushType::visibility, 1), Errc::invalid_handle);
  EXPECT_ERR(ep.connect("127.0.0.1", 1), Errc::invalid_handle);
  EXPECT_ERR(ep.connect_and_wait("127.0.0.1", 1, {}, 10ms), Errc::invalid_handle);
  EXPECT_ERR(ep.next_event(1ms), Errc::invalid_handle);
  EXPECT_ERR(ep.disconnect(), Errc::invalid_handle);
  ep.close();
}

TEST_F(EndpointChecks, ClosedAndMovedFromEndpointsAreInvalidHandle) {
  Segment s(p->lmr, 0, 8);
  Endpoint moved = std::move(p->iep);
  EXPECT_FALSE(p->iep.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_ERR(p->iep.write({&s, 1}, p->rr, 0, 1), Errc::invalid_handle);
  EXPECT_ERR(p->iep.atomic_write(p->rr, 0, 1, 1), Errc::invalid_handle);
  EXPECT_EQ(moved.state(), EndpointState::connected);
  moved.close();
  EXPECT_FALSE(moved.valid());
  EXPECT_ERR(moved.write({&s, 1}, p->rr, 0, 1), Errc::invalid_handle);
  EXPECT_ERR(moved.flush(p->rr, 0, 8, FlushType::visibility, 1), Errc::invalid_handle);
  moved.close();  // twice is fine
  EXPECT_TRUE(drain_for(p->icq).empty());
  EXPECT_TRUE(p->target_untouched());
}

TEST_F(EndpointChecks, ClosedOrMissingRegionInASegmentIsInvalidHandle) {
  std::vector<std::uint8_t> mem(64);
  auto mr = MUST(p->iz.register_memory(mem.data(), mem.size(), kLocal));
  Segment s(mr, 0, 8);
  mr.close();
  EXPECT_ERR(p->iep.write({&s, 1}, p->rr, 0, 1), Errc::invalid_handle);
  EXPECT_ERR(p->iep.read({&s, 1}, p->rr, 0, 1), Errc::invalid_handle);
  EXPECT_ERR(p->iep.send({&s, 1}, 1), Errc::invalid_handle);
  EXPECT_ERR(p->iep.recv({&s, 1}, 1), Errc::invalid_handle);
  auto mr2 = MUST(p->iz.register_memory(mem.data(), mem.size(), kLocal));
  Segment s2(mr2, 0, 8);
  MemoryRegion taken = std::move(mr2);
  EXPECT_ERR(p->iep.write({&s2, 1}, p->rr, 0, 1), Errc::invalid_handle);
  Segment null_region;
  null_region.address = mem.data();
  null_region.length = 8;
  EXPECT_ERR(p->iep.write({&null_region, 1}, p->rr, 0, 1), Errc::invalid_handle);
  expect_nothing_sent();
}

TEST(EndpointHandles, DefaultConstructedCompletionQueue) {
  CompletionQueue cq;
  EXPECT_FALSE(cq.valid());
  Completion c[2];
  EXPECT_EQ(cq.poll(c), 0u);
  EXPECT_ERR(cq.wait(c, 1ms), Errc::invalid_handle);
  EXPECT_EQ(cq.fd(), -1);
  EXPECT_EQ(cq.size(), 0u);

  auto fabric = MUST(Fabric::open({}));
  auto zone = MUST(fabric.create_zone());
  auto good = MUST(zone.create_cq());
  EndpointOptions o;
  EXPECT_ERR(zone.create_endpoint(o), Errc::invalid_handle) << "no send_cq";
  o.send_cq = &cq;
  EXPECT_ERR(zone.create_endpoint(o), Errc::invalid_handle) << "invalid send_cq";
  o.send_cq = &good;
  o.recv_cq = &cq;
  EXPECT_ERR(zone.create_endpoint(o), Errc::invalid_handle) << "invalid recv_cq";
  CompletionQueue moved = std::move(good);
  o.recv_cq = nullptr;
  EXPECT_ERR(zone.create_endpoint(o), Errc::invalid_handle) << "moved-from send_cq";
  o.send_cq = &moved;
  EXPECT_OK(zone.create_endpoint(o));
}

TEST(EndpointCreate, ChecksOptionsQueuesAndIds) {
  {  // CompletionQueueOfAnotherZone
    auto fabric = MUST(Fabric::open({}));
    auto a = MUST(fabric.create_zone());
    auto b = MUST(fabric.create_zone());
    auto cqa = MUST(a.create_cq());
    auto cqb = MUST(b.create_cq());
    EndpointOptions o;
    o.send_cq = &cqb;
    EXPECT_ERR(a.create_endpoint(o), Errc::zone_mismatch);
    o.send_cq = &cqa;
    o.recv_cq = &cqb;
    EXPECT_ERR(a.create_endpoint(o), Errc::zone_mismatch);
    o.recv_cq = &cqa;
    EXPECT_OK(a.create_endpoint(o));
  }
  {  // BadOptions
    auto fabric = MUST(Fabric::open({}));
    auto zone = MUST(fabric.create_zone());
    auto cq = MUST(zone.create_cq());
    auto with = [&](auto mutate) {
      EndpointOptions o;
      o.send_cq = &cq;
      mutate(o);
      return zone.create_endpoint(o);
    };
    EXPECT_ERR(with([](EndpointOptions& o) { o.max_outstanding = 0; }), Errc::invalid_argument);
    EXPECT_ERR(with([](EndpointOptions& o) { o.max_outstanding = 1u << 30; }), Errc::invalid_argument);
    EXPECT_ERR(with([](EndpointOptions& o) { o.max_recv = 0; }), Errc::invalid_argument);
    EXPECT_ERR(with([](EndpointOptions& o) { o.max_recv = 1u << 30; }), Errc::invalid_argument);
    EXPECT_ERR(with([](EndpointOptions& o) { o.max_message = 0; }), Errc::invalid_argument);
    EXPECT_ERR(with([](EndpointOptions& o) { o.max_message = 1u << 31; }), Errc::invalid_argument);
    EXPECT_OK(with([](EndpointOptions& o) {
      o.max_outstanding = 1;
      o.max_recv = 1;
      o.max_message = 4096;
    }));
    EXPECT_OK(with([](EndpointOptions&) {}));
  }
  {  // EndpointsHaveDistinctIds
    auto fabric = MUST(Fabric::open({}));
    auto zone = MUST(fabric.create_zone());
    auto cq = MUST(zone.create_cq());
    EndpointOptions o;
    o.send_cq = &cq;
    auto a = MUST(zone.create_endpoint(o));
    auto b = MUST(zone.create_endpoint(o));
    EXPECT_NE(a.id(), 0u);
    EXPECT_NE(a.id(), b.id());
    EXPECT_EQ(a.state(), EndpointState::unconnected);
    EXPECT_GE(a.max_segments(), 1u);
    EXPECT_OK(a.disconnect()) << "disconnect is safe in any state";
    EXPECT_GE(a.event_fd(), 0);
  }
}

namespace {
// This thread's voluntary context switches so far (each time it slept).
long voluntary_switches() {
  std::ifstream f("/proc/thread-self/status");
  std::string key;
  long value = -1;
  while (f >> key) {
    if (key == "voluntary_ctxt_switches:") {
      f >> value;
      break;
    }
  }
  return value;
}
}  // namespace

TEST(Events, ZeroTimeoutLooksWithoutSleeping) {
  // next_event(0ms) and next_request(0ms) are what a polling loop calls:
  // a timed wait on an already expired deadline still put the thread to
  // sleep and woke it (about 80 us per call here). Counted in voluntary
  // context switches, not in time.
  Pair p;
  ASSERT_GE(voluntary_switches(), 0) << "no /proc/thread-self/status";
  constexpr int kCalls = 200;
  const long before = voluntary_switches();
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_ERR(p.iep.next_event(0ms), Errc::timeout);
    EXPECT_ERR(p.lis.next_request(0ms), Errc::timeout);
  }
  const long slept = voluntary_switches() - before;
  EXPECT_LT(slept, kCalls / 4) << "the thread slept " << slept << " times in " << 2 * kCalls << " zero-timeout calls";
}

}  // namespace
