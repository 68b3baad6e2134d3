// Same-host message rings (docs/design.md, "Same-host message rings"): once
// both ends of a connection took each other's direct offer, sends are
// placed in the peer's inbox (a memfd ring) instead of going over tcp. Both
// zones of a Pair live in this process: pidfd_getfd on our own pid and the
// shared mappings exercise the real path.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "core/impl.hpp"
#include "unit_support.hpp"

namespace {

using namespace unit;

/// `ep` may place sends in its peer's inbox, and the peer in its own.
bool rings_set(const Endpoint& ep) {
  detail::MutexLock lock(ep.impl()->mu);
  return ep.impl()->outbox && ep.impl()->inbox_taken;
}

/// Wait until rings_set(ep) (the offers travel in band after the
/// connection is established).
bool ring_ready(const Endpoint& ep, std::chrono::milliseconds timeout = kWait) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (rings_set(ep)) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
}

std::uint64_t ring_sent(const Endpoint& ep) { return ep.impl()->ring_sent.load(); }
std::uint64_t ring_taken(const Endpoint& ep) { return ep.impl()->ring_taken.load(); }

class Rings : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("REMORA_SAMEHOST", "1", 1);
    PairOptions o;
    o.target_size = o.local_size = 64 * 1024;
    o.target.max_recv = 32;  // a ring of 32 slots at the target
    p = std::make_unique<Pair>(o);
    ASSERT_TRUE(ring_ready(p->iep)) << "the initiator never got the target's ring";
    ASSERT_TRUE(ring_ready(p->tep)) << "the target never got the initiator's ring";
  }
  void TearDown() override { ::unsetenv("REMORA_SAMEHOST"); }
  std::unique_ptr<Pair> p;
};

// Sends with and without immediate data, from gather lists, arrive in
// order with their bytes, lengths and immediate data, and complete at the
// sender in order; none went over the transport.
TEST_F(Rings, SendsArriveInOrderWithTheirBytesAndImmediateData) {
  constexpr int kN = 40;  // more than the ring's 32 slots: it wraps
  for (int i = 0; i < kN; ++i) {
    Segment r(p->tmr, 1024 * static_cast<std::size_t>(i % 32), 1024);
    if (i >= 32) break;
    ASSERT_OK(p->tep.recv({&r, 1}, 1000 + i));
  }
  std::vector<Completion> got;
  for (int i = 0; i < kN; ++i) {
    const std::size_t len = 10 + 17 * static_cast<std::size_t>(i);
    const auto src = pattern(len, static_cast<std::uint8_t>(i));
    std::memcpy(p->local_mem.data() + 2048 * static_cast<std::size_t>(i % 16), src.data(), len);
    const std::size_t first = len / 3;
    Segment g[2] = {Segment(p->lmr, 2048 * static_cast<std::size_t>(i % 16), first),
                    Segment(p->lmr, 2048 * static_cast<std::size_t>(i % 16) + first, len - first)};
    if (i % 2)
      ASSERT_OK(p->iep.send_imm(g, 0xA000u + static_cast<std::uint32_t>(i), static_cast<std::uint64_t>(i)));
    else
      ASSERT_OK(p->iep.send(g, static_cast<std::uint64_t>(i)));
    // Each buffer is reused 16 sends later: wait for its send to complete.
    if (i % 16 == 15) {
      auto c = collect(p->icq, 16);
      got.insert(got.end(), c.begin(), c.end());
    }
    if (i == 31) {
      // The target reposts the 8 receives the last sends need.
      auto t = collect(p->tcq, 32);
      ASSERT_EQ(t.size(), 32u) << describe(t);
      for (int k = 0; k < 32; ++k) {
        EXPECT_EQ(t[k].cookie, 1000u + k);
        EXPECT_FALSE(t[k].status) << describe(t[k]);
        EXPECT_EQ(t[k].length, 10u + 17u * k);
        EXPECT_EQ(t[k].has_imm, k % 2 == 1);
        if (k % 2) {
          EXPECT_EQ(t[k].imm, 0xA000u + k);
        }
        EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 1024 * k, pattern(10 + 17 * k, k).data(), 10 + 17 * k))
            << "message " << k;
      }
      for (int k = 32; k < kN; ++k) {
        Segment r(p->tmr, 1024 * static_cast<std::size_t>(k - 32), 1024);
        ASSERT_OK(p->tep.recv({&r, 1}, 1000 + k));
      }
    }
  }
  auto c = collect(p->icq, kN - got.size());
  got.insert(got.end(), c.begin(), c.end());
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kN)) << describe(got);
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(got[i].cookie, static_cast<std::uint64_t>(i));
    EXPECT_FALSE(got[i].status) << describe(got[i]);
  }
  auto t = collect(p->tcq, kN - 32);
  ASSERT_EQ(t.size(), static_cast<std::size_t>(kN - 32)) << describe(t);
  for (int k = 32; k < kN; ++k) {
    EXPECT_EQ(t[k - 32].cookie, 1000u + k);
    EXPECT_EQ(t[k - 32].length, 10u + 17u * k);
    EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 1024 * (k - 32), pattern(10 + 17 * k, k).data(), 10 + 17 * k));
  }
  EXPECT_EQ(ring_sent(p->iep), static_cast<std::uint64_t>(kN));
  EXPECT_EQ(ring_taken(p->tep), static_cast<std::uint64_t>(kN));
}

// A message longer than the posted receive: length_error at the receiver,
// as over the transport.
TEST_F(Rings, LengthRulesAreTheTransportsOnes) {
  Segment r(p->tmr, 0, 8);
  ASSERT_OK(p->tep.recv({&r, 1}, 1));
  Segment s(p->lmr, 0, 100);
  ASSERT_OK(p->iep.send({&s, 1}, 2));
  auto t = collect(p->tcq, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, make_error_code(Errc::length_error)) << describe(t[0]);
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status);
  EXPECT_EQ(ring_sent(p->iep), 1u);
}

// A message that arrives before any receive is posted is held, and the
// sender's send completes (it was handled), as over the transport.
TEST_F(Rings, AMessageWithoutAReceiveIsHeldAndTheSendCompletes) {
  const auto src = pattern(300, 9);
  std::memcpy(p->local_mem.data(), src.data(), src.size());
  Segment s(p->lmr, 0, 300);
  ASSERT_OK(p->iep.send({&s, 1}, 5));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status);
  Segment r(p->tmr, 0, 512);
  ASSERT_OK(p->tep.recv({&r, 1}, 6));
  auto t = collect(p->tcq, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].length, 300u);
  EXPECT_EQ(0, std::memcmp(p->target_mem.data(), src.data(), 300));
  EXPECT_EQ(ring_sent(p->iep), 1u);
}

// Zones without progress threads: the test decides when each side runs, so
// it can hold messages in the ring.
class RingsDriven : public ::testing::Test {
 public:
  void SetUp() override {
    ::setenv("REMORA_SAMEHOST", "1", 1);
    // A zone taking writes makes its rings larger than max_recv slots
    // (RingWritesDriven); the send tests want a ring of max_recv slots.
    if (ring_writes) ::setenv("REMORA_RING_WRITES", "1", 1);
    fabric = MUST(Fabric::open());
    ZoneOptions zo;
    zo.progress_thread = false;
    tz = MUST(fabric.create_zone(zo));
    iz = MUST(fabric.create_zone(zo));
    ::unsetenv("REMORA_RING_WRITES");
    tcq = MUST(tz.create_cq());
    icq = MUST(iz.create_cq());
    tmem.assign(mem_size, 0);
    imem.assign(mem_size, 0);
    tmr = MUST(tz.register_memory(tmem.data(), tmem.size(), Access::all));
    imr = MUST(iz.register_memory(imem.data(), imem.size(), kLocal));
    rr = MUST(tmr.remote());
    lis = MUST(tz.listen("127.0.0.1", 0));
    EndpointOptions to;
    to.send_cq = &tcq;
    to.max_recv = 4;  // a ring of 4 slots at the target
    EndpointOptions io;
    io.send_cq = &icq;
    tep = MUST(tz.create_endpoint(to));
    iep = MUST(iz.create_endpoint(io));
    ASSERT_OK(iep.connect("127.0.0.1", lis.port()));
    auto req = next_request_driven(lis, tz, iz);
    ASSERT_TRUE(req.ok()) << "no connection request";
    ASSERT_OK(req->accept(tep));
    for (int i = 0; i < 5000 && !(rings_set(iep) && rings_set(tep)); ++i) settle(1);
    ASSERT_TRUE(rings_set(iep) && rings_set(tep)) << "the rings were never set up";
    ASSERT_EQ(MUST(iep.next_event(0ms)).type, ConnectionEventType::established);
    ASSERT_EQ(MUST(tep.next_event(0ms)).type, ConnectionEventType::established);
  }
  void TearDown() override { ::unsetenv("REMORA_SAMEHOST"); }
  void settle(int rounds = 50) {
    for (int i = 0; i < rounds; ++i) {
      (void)tz.progress();
      (void)iz.progress();
      std::this_thread::sleep_for(1ms);
    }
  }
  /// Every completion of `cq` the zones make within `rounds` rounds.
  std::vector<Completion> take(CompletionQueue& cq, std::size_t n, int rounds = 2000) {
    std::vector<Completion> out;
    for (int i = 0; i < rounds && out.size() < n; ++i) {
      settle(1);
      Completion buf[16];
      const std::size_t n = cq.poll(buf);
      out.insert(out.end(), buf, buf + n);
    }
    return out;
  }
  bool ring_writes = false;  // the zones take and send writes over the rings
  std::size_t mem_size = 64 * 1024;
  Fabric fabric;
  ProtectionZone tz, iz;
  CompletionQueue tcq, icq;
  std::vector<std::uint8_t> tmem, imem;
  MemoryRegion tmr, imr;
  RemoteRegion rr;
  Listener lis;
  Endpoint tep, iep;
};

// A zone its user drives (no progress thread): ProtectionZone::progress
// moves the peer's part of a split transfer (docs/design.md, "The peer moves
// half") and counts it as work done, so a loop that polls while there is
// work (the agent's linger is one) keeps polling through a stream of large
// transfers.
TEST_F(RingsDriven, AUserDrivenZoneCountsThePeersPartItMovesAsWork) {
  auto takes_pulls = [&] {
    detail::MutexLock lock(iep.impl()->mu);
    return iep.impl()->outbox && iep.impl()->outbox_takes_pulls;
  };
  for (int i = 0; i < 5000 && !takes_pulls(); ++i) settle(1);
  ASSERT_TRUE(takes_pulls()) << "the target's ring never said it takes parts";
  // Nothing else pending: a look finds no work.
  settle();
  EXPECT_EQ(MUST(tz.progress()), 0u);

  const auto src = pattern(32 * 1024, 9);
  detail::MutexLock lock(iep.impl()->mu);
  detail::EndpointImpl& ep = *iep.impl();
  std::atomic<std::uint64_t> offered{0};
  unsigned share = detail::direct::FarHand::kHalfShare;
  detail::PullHand hand(*ep.outbox, *ep.direct_peer, offered, share);
  const std::uint64_t key = rr.key();
  iovec r{tmem.data() + 4096, src.size()}, s{const_cast<std::uint8_t*>(src.data()), src.size()};
  ASSERT_TRUE(hand.offer(true, &key, &r, 1, &s, 1, nullptr));
  EXPECT_GE(MUST(tz.progress()), 1u) << "the part moved was not counted";
  EXPECT_EQ(tep.impl()->pulls_moved_for_peer.load(), 1u);
  EXPECT_EQ(hand.finish(), static_cast<ssize_t>(src.size()));
  EXPECT_FALSE(hand.taken_back());
  EXPECT_EQ(0, std::memcmp(tmem.data() + 4096, src.data(), src.size()));
}

// A full ring holds the sender's later sends back (deferred, in order) until
// the receiver takes messages; nothing is lost or reordered.
TEST_F(RingsDriven, AFullRingHoldsLaterSendsBackInOrder) {
  for (int i = 0; i < 10; ++i) {
    imem[i] = static_cast<std::uint8_t>(0x40 + i);
    Segment s(imr, static_cast<std::size_t>(i), 1);
    ASSERT_OK(iep.send({&s, 1}, static_cast<std::uint64_t>(i)));
  }
  // Only the initiator runs: four messages fill the target's ring.
  for (int i = 0; i < 20; ++i) (void)iz.progress();
  EXPECT_EQ(ring_sent(iep), 4u);
  Completion buf[16];
  EXPECT_EQ(icq.poll(buf), 0u) << "a send completed before the target handled it";
  // The target posts its receives four at a time (its max_recv).
  std::vector<Completion> t;
  for (int i = 0; i < 10; i += 4) {
    for (int k = i; k < std::min(i + 4, 10); ++k) {
      Segment r(tmr, static_cast<std::size_t>(k), 1);
      ASSERT_OK(tep.recv({&r, 1}, 100 + static_cast<std::uint64_t>(k)));
    }
    auto got = take(tcq, static_cast<std::size_t>(std::min(4, 10 - i)));
    t.insert(t.end(), got.begin(), got.end());
  }
  ASSERT_EQ(t.size(), 10u) << describe(t);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(t[i].cookie, 100u + i);
    EXPECT_EQ(tmem[i], 0x40 + i) << i;
  }
  auto c = take(icq, 10);
  ASSERT_EQ(c.size(), 10u) << describe(c);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(c[i].cookie, static_cast<std::uint64_t>(i));
  EXPECT_EQ(ring_sent(iep), 10u);
}

// An operation that goes by the transport (a write with immediate data,
// which consumes a receive too) waits behind sends still on the ring: the
// receiver sees the send first, as it was posted first. And a send behind
// the transport's operation goes by the transport, after it.
TEST_F(RingsDriven, TheReceiverSeesOneOrderAcrossTheRingAndTheTransport) {
  Segment s(imr, 0, 16);
  ASSERT_OK(iep.send({&s, 1}, 1));
  Segment w(imr, 0, 8);
  ASSERT_OK(iep.write_imm({&w, 1}, rr, 4096, 77, 2));
  ASSERT_OK(iep.send({&s, 1}, 3));
  for (int i = 0; i < 20; ++i) (void)iz.progress();
  EXPECT_EQ(ring_sent(iep), 1u) << "only the first send may be on the ring before it is acknowledged";
  {
    detail::MutexLock lock(iep.impl()->mu);
    EXPECT_EQ(iep.impl()->deferred.size(), 2u) << "the write and the send must wait behind the send on the ring";
    EXPECT_EQ(iep.impl()->in_flight, 1u);
  }
  for (int i = 0; i < 3; ++i) {
    Segment r(tmr, 64 * static_cast<std::size_t>(i), 64);
    ASSERT_OK(tep.recv({&r, 1}, 100 + static_cast<std::uint64_t>(i)));
  }
  auto t = take(tcq, 3);
  ASSERT_EQ(t.size(), 3u) << describe(t);
  EXPECT_EQ(t[0].op, Opcode::recv);
  EXPECT_EQ(t[1].op, Opcode::recv_write_imm);
  EXPECT_EQ(t[1].imm, 77u);
  EXPECT_EQ(t[2].op, Opcode::recv);
  auto c = take(icq, 3);
  ASSERT_EQ(c.size(), 3u) << describe(c);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].cookie, static_cast<std::uint64_t>(i + 1));
    EXPECT_FALSE(c[i].status) << describe(c[i]);
  }
}

// A write posted behind a send on the ring waits until the send is
// acknowledged, then is placed by the direct path, not sent over the
// transport (fio's librpma_gpspm engine posts a write and a send per I/O:
// all its writes went over tcp). So does a flush behind it.
TEST_F(RingsDriven, AWriteBehindASendOnTheRingIsPlacedDirectlyOnceTheSendIsAcknowledged) {
  Segment s(imr, 0, 16);
  ASSERT_OK(iep.send({&s, 1}, 1));
  for (std::size_t i = 0; i < 4096; ++i) imem[1024 + i] = static_cast<std::uint8_t>(i * 7);
  Segment w(imr, 1024, 4096);
  ASSERT_OK(iep.write({&w, 1}, rr, 8192, 2));
  ASSERT_OK(iep.flush(rr, 0, 16384, FlushType::visibility, 3));
  for (int i = 0; i < 20; ++i) (void)iz.progress();
  EXPECT_EQ(ring_sent(iep), 1u);
  {
    detail::MutexLock lock(iep.impl()->mu);
    EXPECT_EQ(iep.impl()->deferred.size(), 2u) << "the write and the flush must wait behind the send on the ring";
  }
  const std::uint64_t direct_before = iep.impl()->direct_ops.load();
  Segment r(tmr, 0, 64);
  ASSERT_OK(tep.recv({&r, 1}, 100));
  ASSERT_EQ(take(tcq, 1).size(), 1u);
  auto c = take(icq, 3);
  ASSERT_EQ(c.size(), 3u) << describe(c);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].cookie, static_cast<std::uint64_t>(i + 1));
    EXPECT_FALSE(c[i].status) << describe(c[i]);
  }
  EXPECT_EQ(iep.impl()->direct_ops.load(), direct_before + 2) << "the write or the flush went over the transport";
  EXPECT_TRUE(std::equal(tmem.begin() + 8192, tmem.begin() + 8192 + 4096, imem.begin() + 1024));
}

// An answer completes after the send it answers, as on RC hardware, where
// the send's acknowledgement comes before the answer's receive (librpma's
// 12scch example checks it): one poll that finds both reports the send
// first. `by_transport`: the send goes by the transport (a write with
// immediate data is in flight ahead of it) and the answer by the ring.
void answer_comes_after_the_send(RingsDriven& t, bool by_transport) {
  Segment r(t.imr, 64, 8);
  ASSERT_OK(t.iep.recv({&r, 1}, 50));
  Segment tr(t.tmr, 0, 8);
  ASSERT_OK(t.tep.recv({&tr, 1}, 60));
  if (by_transport) {
    Segment w(t.imr, 0, 8);
    ASSERT_OK(t.iep.write_imm({&w, 1}, t.rr, 4096, 1, 1));
    Segment tw(t.tmr, 16, 8);
    ASSERT_OK(t.tep.recv({&tw, 1}, 61));
  }
  Segment s(t.imr, 0, 8);
  ASSERT_OK(t.iep.send({&s, 1}, 2));
  EXPECT_EQ(ring_sent(t.iep), by_transport ? 0u : 1u);
  // Only the target runs until it has the message, then answers.
  std::vector<Completion> got;
  for (int i = 0; i < 2000 && got.size() < (by_transport ? 2u : 1u); ++i) {
    (void)t.tz.progress();
    Completion buf[4];
    const std::size_t n = t.tcq.poll(buf);
    got.insert(got.end(), buf, buf + n);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(got.size(), by_transport ? 2u : 1u) << describe(got);
  Segment a(t.tmr, 32, 8);
  ASSERT_OK(t.tep.send({&a, 1}, 70));
  EXPECT_EQ(ring_sent(t.tep), 1u) << "the answer must go by the ring";
  std::vector<Completion> c;
  for (int i = 0; i < 2000 && c.size() < (by_transport ? 3u : 2u); ++i) {
    Completion buf[4];
    const std::size_t n = t.icq.poll(buf);
    c.insert(c.end(), buf, buf + n);
    if (n == 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(c.size(), by_transport ? 3u : 2u) << describe(c);
  std::size_t at = 0;
  if (by_transport) {
    EXPECT_EQ(c[at].op, Opcode::write) << describe(c);
    ++at;
  }
  EXPECT_EQ(c[at].op, Opcode::send) << "the answer was reported before the send it answers: " << describe(c);
  EXPECT_EQ(c[at + 1].op, Opcode::recv) << describe(c);
}

TEST_F(RingsDriven, AnAnswerOnTheRingCompletesAfterTheSendOnTheRing) { answer_comes_after_the_send(*this, false); }

TEST_F(RingsDriven, AnAnswerOnTheRingCompletesAfterTheSendByTheTransport) { answer_comes_after_the_send(*this, true); }

// The answer goes by the transport (the target has a write with immediate
// data in flight ahead of it), the send it answers went by the ring: the
// send still completes first.
TEST_F(RingsDriven, AnAnswerByTheTransportCompletesAfterTheSendOnTheRing) {
  std::vector<std::uint8_t> landing(64, 0);
  auto lmr = MUST(iz.register_memory(landing.data(), landing.size(), Access::all));
  Segment r1(imr, 64, 8), r2(imr, 128, 8);
  ASSERT_OK(iep.recv({&r1, 1}, 50));
  ASSERT_OK(iep.recv({&r2, 1}, 51));
  Segment tr(tmr, 0, 8);
  ASSERT_OK(tep.recv({&tr, 1}, 60));
  Segment s(imr, 0, 8);
  ASSERT_OK(iep.send({&s, 1}, 2));
  EXPECT_EQ(ring_sent(iep), 1u);
  std::vector<Completion> got;
  for (int i = 0; i < 2000 && got.empty(); ++i) {
    (void)tz.progress();
    Completion buf[4];
    const std::size_t n = tcq.poll(buf);
    got.insert(got.end(), buf, buf + n);
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(got.size(), 1u) << describe(got);
  Segment w(tmr, 8, 8);
  ASSERT_OK(tep.write_imm({&w, 1}, MUST(lmr.remote()), 0, 5, 69));
  Segment a(tmr, 32, 8);
  ASSERT_OK(tep.send({&a, 1}, 70));
  EXPECT_EQ(ring_sent(tep), 0u) << "the answer must go by the transport";
  // Only the target's transport runs until both are in the initiator's
  // socket; then one initiator progress at a time.
  for (int i = 0; i < 50; ++i) {
    (void)tz.progress();
    std::this_thread::sleep_for(1ms);
  }
  std::vector<Completion> c;
  for (int i = 0; i < 2000 && c.size() < 3; ++i) {
    Completion buf[4];
    const std::size_t n = icq.poll(buf);
    c.insert(c.end(), buf, buf + n);
    if (n == 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(c.size(), 3u) << describe(c);
  EXPECT_EQ(c[0].op, Opcode::send) << "an answer was reported before the send it answers: " << describe(c);
  EXPECT_EQ(c[1].op, Opcode::recv_write_imm) << describe(c);
  EXPECT_EQ(c[2].op, Opcode::recv) << describe(c);
}

// Messages the sender put on the ring before it disconnected are delivered
// before the receiver reports the disconnection.
TEST_F(RingsDriven, MessagesOnTheRingArriveBeforeTheDisconnection) {
  Segment s(imr, 0, 16);
  for (int i = 0; i < 3; ++i) ASSERT_OK(iep.send({&s, 1}, static_cast<std::uint64_t>(i)));
  for (int i = 0; i < 20; ++i) (void)iz.progress();
  EXPECT_EQ(ring_sent(iep), 3u);
  ASSERT_OK(iep.disconnect());
  for (int i = 0; i < 3; ++i) {
    Segment r(tmr, 64 * static_cast<std::size_t>(i), 64);
    ASSERT_OK(tep.recv({&r, 1}, 100 + static_cast<std::uint64_t>(i)));
  }
  auto t = take(tcq, 3);
  ASSERT_EQ(t.size(), 3u) << describe(t);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(t[i].status) << describe(t[i]);
  settle(100);
  auto ev = tep.next_event(0ms);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, ConnectionEventType::disconnected);
}

// The end of the connection handled before the endpoint was progressed (the
// transport's shutdown event read first): the messages on the ring are
// still delivered, before the end is reported.
TEST_F(RingsDriven, AnEndHandledFirstStillDeliversTheRing) {
  Segment s(imr, 0, 16);
  for (int i = 0; i < 3; ++i) ASSERT_OK(iep.send({&s, 1}, static_cast<std::uint64_t>(i)));
  EXPECT_EQ(ring_sent(iep), 3u);
  for (int i = 0; i < 3; ++i) {
    Segment r(tmr, 64 * static_cast<std::size_t>(i), 64);
    ASSERT_OK(tep.recv({&r, 1}, 100 + static_cast<std::uint64_t>(i)));
  }
  std::uint64_t gen = 0;
  {
    detail::MutexLock lock(tep.impl()->mu);
    gen = tep.impl()->conn_gen;
  }
  remora::backend::CmEvent ev;
  ev.kind = remora::backend::CmEvent::shutdown;
  tep.impl()->on_cm_event(ev, gen);
  EXPECT_EQ(ring_taken(tep), 3u);
  Completion buf[8];
  ASSERT_EQ(tcq.poll(buf), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(buf[i].cookie, 100u + i);
    EXPECT_FALSE(buf[i].status) << describe(buf[i]);
  }
  auto end = tep.next_event(0ms);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->type, ConnectionEventType::lost);
}

// Something in the ring that is not a user message breaks the protocol:
// the receiver ends the connection (lost), nothing is delivered.
TEST_F(RingsDriven, AnythingButAUserMessageOnTheRingEndsTheConnection) {
  Segment r(tmr, 0, 64);
  ASSERT_OK(tep.recv({&r, 1}, 1));
  {
    detail::MutexLock lock(iep.impl()->mu);
    const std::uint8_t junk[8] = {};
    remora::backend::Iov v{const_cast<std::uint8_t*>(junk), sizeof junk, nullptr};
    ASSERT_TRUE(iep.impl()->outbox->put({&v, 1}, sizeof junk, detail::wire::data(detail::wire::ctl_request)));
  }
  settle(100);
  EXPECT_EQ(tep.state(), EndpointState::error);
  auto ev = tep.next_event(0ms);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, ConnectionEventType::lost);
  auto t = take(tcq, 1, 50);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].status, make_error_code(Errc::flushed)) << describe(t[0]);
}

// A ring offer whose geometry is no ring (a slot count whose product with
// the stride wraps around, one over the 4 MiB bound, a count that is not a
// power of two, a zero nonce) is refused before anything is opened or
// mapped.
TEST_F(RingsDriven, AnOfferOfNoRingIsRefusedBeforeAnythingIsMapped) {
  detail::MutexLock lock(iep.impl()->mu);
  ASSERT_TRUE(iep.impl()->direct_peer);
  const std::shared_ptr<const detail::direct::Peer> peer = iep.impl()->direct_peer;
  struct Bad {
    std::size_t slots, slot_size;
    std::uint64_t nonce;
  };
  for (const Bad& b : {Bad{std::size_t{1} << 58, 16, 1}, Bad{128, 65536, 1}, Bad{3, 64, 1}, Bad{4, 0, 1},
                       Bad{4, (std::size_t{1} << 20) + 1, 1}, Bad{4, 64, 0}}) {
    std::string why;
    EXPECT_FALSE(detail::direct::Outbox::open(peer, 0, 1, b.nonce, b.slots, b.slot_size, why))
        << b.slots << " slots of " << b.slot_size;
    EXPECT_EQ(why, "malformed ring offer");
  }
}

/// An inbox of four 64-byte slots, with its ring also mapped here as a
/// sender would map it: the test writes the header and the first slot.
struct MappedInbox {
  static constexpr std::size_t kBytes = sizeof(detail::direct::RingHeader) + 4 * 128;
  std::shared_ptr<detail::direct::Inbox> in;
  void* map = MAP_FAILED;
  detail::direct::RingHeader* h = nullptr;
  detail::direct::RingSlot* slot0 = nullptr;
  /// Call inside ASSERT_NO_FATAL_FAILURE.
  void make() {
    std::string why;
    in = detail::direct::Inbox::create(4, 64, why);
    ASSERT_TRUE(in) << why;
    map = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, in->fd(), 0);
    ASSERT_NE(map, MAP_FAILED);
    h = static_cast<detail::direct::RingHeader*>(map);
    slot0 = reinterpret_cast<detail::direct::RingSlot*>(static_cast<char*>(map) + sizeof *h);
  }
  ~MappedInbox() {
    if (map != MAP_FAILED) ::munmap(map, kBytes);
  }
};

// The inbox refuses counts and lengths no Remora sender writes.
TEST(RingInbox, CountsAndLengthsOutOfRangeAreRefused) {
  MappedInbox mi;
  ASSERT_NO_FATAL_FAILURE(mi.make());
  auto& in = mi.in;
  auto* h = mi.h;
  auto* slot0 = mi.slot0;
  using Next = detail::direct::Inbox::Next;
  std::span<const std::uint8_t> msg;
  std::uint64_t data = 0;
  EXPECT_EQ(in->next(msg, data), Next::none);
  slot0->len.store(65);  // longer than a slot
  slot0->data.store(42);
  h->tail.store(1);
  EXPECT_EQ(in->next(msg, data), Next::broken);
  slot0->len.store(64);
  ASSERT_EQ(in->next(msg, data), Next::message);
  EXPECT_EQ(msg.size(), 64u);
  EXPECT_EQ(data, 42u);
  in->pop();
  EXPECT_EQ(h->head.load(), 1u);
  EXPECT_EQ(in->next(msg, data), Next::none);
  h->tail.store(1 + 5);  // more than the ring's four slots published
  EXPECT_EQ(in->next(msg, data), Next::broken);
}

// A consumer (the agent, a completion queue) looks at every inbox only when
// the zone's count of rung bells moved; otherwise at those it found busy and
// those whose sender does not count. Each step below would report the
// inbox were every inbox looked at on every call.
TEST(RingWatch, AnIdleInboxWhoseSenderCountsIsLookedAtAgainOnlyWhenTheCountMoves) {
  MappedInbox mi;
  ASSERT_NO_FATAL_FAILURE(mi.make());
  auto& in = mi.in;
  auto* h = mi.h;
  auto* slot0 = mi.slot0;
  detail::direct::RingWatch w;
  const int key_storage = 0;
  const void* key = &key_storage;
  w.add(key, in);
  std::vector<const void*> busy;
  auto look = [&](std::uint64_t rung, bool all = false) {
    busy.clear();
    w.look(rung, all, busy);
    return busy.size() == 1 && busy[0] == key;
  };
  // A sender that does not count (yet): looked at on every call.
  EXPECT_FALSE(look(0));
  EXPECT_EQ(w.looks(), 1u);
  slot0->len.store(8);
  h->tail.store(1);  // published without a count
  EXPECT_TRUE(look(0)) << "an inbox whose sender does not count was not looked at";
  std::span<const std::uint8_t> msg;
  std::uint64_t data = 0;
  ASSERT_EQ(in->next(msg, data), detail::direct::Inbox::Next::message);
  in->pop();
  // It counts from now on: seen idle, it is left alone while the count
  // stands still.
  h->sender.store(detail::direct::kSenderCounts);
  EXPECT_FALSE(look(0));
  EXPECT_EQ(w.looks(), 0u);
  h->tail.store(2);  // as a sender would publish, but without its count
  EXPECT_FALSE(look(0)) << "an idle inbox whose sender counts was looked at with the count unchanged";
  // The count moved: every inbox is looked at, and a busy one again on the
  // next call, until it is seen idle.
  EXPECT_TRUE(look(1));
  EXPECT_TRUE(look(1)) << "a busy inbox was not looked at again";
  ASSERT_EQ(in->next(msg, data), detail::direct::Inbox::Next::message);
  in->pop();
  EXPECT_FALSE(look(1));
  EXPECT_EQ(w.looks(), 0u);
  // A rung bell alone makes it busy too; `all` looks whatever the count.
  h->bell.store(1);
  EXPECT_FALSE(look(1));
  EXPECT_TRUE(look(1, true));
  in->quiet_bell();
  EXPECT_FALSE(look(1, true));
  // Removed: never reported again.
  h->tail.store(3);
  w.remove(key);
  EXPECT_FALSE(look(2));
  EXPECT_TRUE(w.empty());
}

// The sender says it counts before its first message, and bumps the count
// in the receiving zone's table whenever it rings the receiver's bell.
TEST_F(Rings, TheSenderCountsTheBellsItRingsInTheReceiversZone) {
  std::shared_ptr<detail::direct::Inbox> target_inbox;
  {
    detail::MutexLock lock(p->tep.impl()->mu);
    target_inbox = p->tep.impl()->inbox;
  }
  ASSERT_TRUE(target_inbox);
  EXPECT_TRUE(target_inbox->sender_counts());
  const std::uint64_t before = p->tz.impl()->rings_rung();
  Segment r(p->tmr, 0, 8);
  ASSERT_OK(p->tep.recv({&r, 1}, 1));
  Segment s(p->lmr, 0, 8);
  const std::uint64_t sent = ring_sent(p->iep);
  ASSERT_OK(p->iep.send({&s, 1}, 2));
  ASSERT_EQ(collect(p->icq, 1).size(), 1u);
  ASSERT_EQ(collect(p->tcq, 1).size(), 1u);
  ASSERT_EQ(ring_sent(p->iep), sent + 1) << "the send did not go by the ring";
  EXPECT_GT(p->tz.impl()->rings_rung(), before) << "a send into an empty inbox rang no bell the zone counted";
}

// The ring's memory file is sealed at its size: a peer holding the
// descriptor cannot shrink it under the owner.
TEST(RingInbox, TheRingCannotBeShrunk) {
  std::string why;
  auto in = detail::direct::Inbox::create(4, 64, why);
  ASSERT_TRUE(in) << why;
  EXPECT_NE(::ftruncate(in->fd(), 0), 0);
}

// Rings hold at most a quarter of the open-file limit in descriptors (each
// inbox its bell, each outbox the peer's): on the same host, 10,000
// connections used to need three descriptors each and ran out of them
// (the provider failed to connect). Connections beyond the rings' share
// still connect and carry their messages, over the transport; an inbox the
// peer refused gives its bell back at once.
TEST(RingBudget, ConnectionsBeyondTheRingsShareOfDescriptorsSendOverTheTransport) {
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_GE(old.rlim_cur, 256u) << "this test lowers the open-file limit to 256";
  ::setenv("REMORA_SAMEHOST", "1", 1);
  struct Restore {
    rlimit lim;
    ~Restore() {
      ::setrlimit(RLIMIT_NOFILE, &lim);
      ::unsetenv("REMORA_SAMEHOST");
    }
  } restore{old};
  constexpr int kConns = 24;
  PairOptions o;
  o.connect = false;
  o.target_size = o.local_size = kConns * 64;
  Pair p(o);
  rlimit low = old;
  low.rlim_cur = 256;  // the rings may hold 64 descriptors: 16 connections' worth in this process
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  ASSERT_EQ(detail::direct::ring_fd_cap(), 64u);
  ASSERT_EQ(detail::direct::ring_fds_held(), 0u);
  std::vector<Endpoint> tep(kConns), iep(kConns);
  EndpointOptions eo;
  eo.max_recv = 4;
  for (int i = 0; i < kConns; ++i) {
    eo.send_cq = &p.tcq;
    tep[i] = MUST(p.tz.create_endpoint(eo));
    eo.send_cq = &p.icq;
    iep[i] = MUST(p.iz.create_endpoint(eo));
    ASSERT_OK(iep[i].connect("127.0.0.1", p.lis.port()));
    auto req = MUST(p.lis.next_request(kWait));
    ASSERT_OK(req.accept(tep[i]));
    ASSERT_EQ(MUST(iep[i].next_event(kWait)).type, ConnectionEventType::established) << "connection " << i;
    ASSERT_EQ(MUST(tep[i].next_event(kWait)).type, ConnectionEventType::established) << "connection " << i;
    EXPECT_LE(detail::direct::ring_fds_held(), detail::direct::ring_fd_cap());
  }
  // Every offer answered: each end took the other's direct offer, and its
  // own ring was taken or is gone.
  auto settled = [](const Endpoint& ep) {
    detail::MutexLock lock(ep.impl()->mu);
    return ep.impl()->direct_peer && (ep.impl()->inbox_taken || !ep.impl()->inbox);
  };
  const auto until = std::chrono::steady_clock::now() + kWait;
  for (int i = 0; i < kConns; ++i)
    while (!settled(iep[i]) || !settled(tep[i])) {
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "connection " << i << "'s ring offers never settled";
      std::this_thread::sleep_for(1ms);
    }
  // What the rings hold is what the endpoints hold: a bell per inbox and
  // per outbox (the memfds were closed on the answers).
  std::size_t held = 0;
  for (auto* eps : {&iep, &tep})
    for (const auto& ep : *eps) {
      detail::MutexLock lock(ep.impl()->mu);
      held += (ep.impl()->inbox ? 1u : 0u) + (ep.impl()->outbox ? 1u : 0u);
    }
  EXPECT_EQ(detail::direct::ring_fds_held(), held);
  EXPECT_LE(held, 64u);
  // One message on every connection.
  for (int i = 0; i < kConns; ++i) {
    Segment r(p.tmr, 64 * static_cast<std::size_t>(i), 64);
    ASSERT_OK(tep[i].recv({&r, 1}, static_cast<std::uint64_t>(i)));
  }
  for (int i = 0; i < kConns; ++i) {
    const auto src = pattern(64, static_cast<std::uint8_t>(i));
    std::memcpy(p.local_mem.data() + 64 * static_cast<std::size_t>(i), src.data(), 64);
    Segment s(p.lmr, 64 * static_cast<std::size_t>(i), 64);
    ASSERT_OK(iep[i].send({&s, 1}, static_cast<std::uint64_t>(i)));
  }
  auto sent = collect(p.icq, kConns);
  ASSERT_EQ(sent.size(), static_cast<std::size_t>(kConns)) << describe(sent);
  for (const auto& c : sent) EXPECT_FALSE(c.status) << describe(c);
  auto got = collect(p.tcq, kConns);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kConns)) << describe(got);
  for (const auto& c : got) {
    EXPECT_FALSE(c.status) << describe(c);
    EXPECT_EQ(c.length, 64u);
  }
  for (int i = 0; i < kConns; ++i)
    EXPECT_EQ(0, std::memcmp(p.target_mem.data() + 64 * i, pattern(64, static_cast<std::uint8_t>(i)).data(), 64))
        << "connection " << i;
  int on_rings = 0;
  for (int i = 0; i < kConns; ++i) on_rings += ring_sent(iep[i]) > 0 ? 1 : 0;
  EXPECT_GT(on_rings, 0) << "no connection got a ring";
  EXPECT_LT(on_rings, kConns) << "every connection got a ring: the rings held more than their share";
}

// The passive side may take the active side's direct offer, and offer its
// ring, before it handled its own established event, which is when it sends
// its direct offer (a busy agent looks at connection management on every
// 64th turn only, at traffic on every turn). The active side then gets the
// ring offer before it can reach the peer's memory: it keeps the offer and
// answers it once the direct offer is handled. It used to refuse it, and
// about a quarter of 1,000 connections into one same-host target went
// without a ring one way.
TEST(RingOffer, ARingOfferBeforeThePeersDirectOfferIsTakenOnceThatCame) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  struct Unset {
    ~Unset() { ::unsetenv("REMORA_SAMEHOST"); }
  } unset;
  Fabric fabric = MUST(Fabric::open());
  ZoneOptions zo;
  zo.progress_thread = false;  // the test orders the two sides' work
  ProtectionZone tz = MUST(fabric.create_zone(zo)), iz = MUST(fabric.create_zone(zo));
  CompletionQueue tcq = MUST(tz.create_cq()), icq = MUST(iz.create_cq());
  Listener lis = MUST(tz.listen("127.0.0.1", 0));
  EndpointOptions to, io;
  to.send_cq = &tcq;
  to.max_recv = 4;
  io.send_cq = &icq;
  io.max_recv = 4;
  Endpoint tep = MUST(tz.create_endpoint(to)), iep = MUST(iz.create_endpoint(io));
  ASSERT_OK(iep.connect("127.0.0.1", lis.port()));
  auto req = next_request_driven(lis, tz, iz);
  ASSERT_TRUE(req.ok()) << "no connection request";
  ASSERT_OK(req->accept(tep));
  // The target's provider completes the handshake (its connection-management
  // progress, without reading the events), the initiator runs (its
  // established event, its direct offer), and at the target only the
  // endpoint's traffic is handled (a poll of its queue drives the endpoint,
  // not connection management): it takes the direct offer and offers its
  // ring while its own established event waits.
  auto offered = [&] {
    detail::MutexLock lock(tep.impl()->mu);
    return tep.impl()->inbox != nullptr;
  };
  auto side_steps = [&] {
    {
      std::shared_lock<std::shared_mutex> transport(tz.impl()->transport_mu);
      (void)tz.impl()->domain->cm_try_wait();
    }
    (void)iz.progress();
    Completion c[4];
    (void)tcq.poll(c);
    std::this_thread::sleep_for(1ms);
  };
  for (int i = 0; i < 5000 && !offered(); ++i) side_steps();
  ASSERT_TRUE(offered()) << "the target never offered its ring before its established event";
  for (int i = 0; i < 20; ++i) side_steps();  // the initiator gets the offer
  {
    detail::MutexLock lock(iep.impl()->mu);
    EXPECT_TRUE(iep.impl()->early_ring_offer.has_value()) << "the offer was answered before the direct offer came";
  }
  EXPECT_EQ(tep.state(), EndpointState::connect_pending);
  EXPECT_FALSE(rings_set(tep)) << "answered before the initiator could reach the target";
  // Now everything runs: the target's established event, its direct offer,
  // and then the answer to its ring offer.
  for (int i = 0; i < 5000 && !(rings_set(iep) && rings_set(tep)); ++i) {
    (void)tz.progress();
    (void)iz.progress();
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(rings_set(iep)) << "the initiator cannot send on the target's ring";
  EXPECT_TRUE(rings_set(tep)) << "the target cannot send on the initiator's ring";
}

// ---- writes over the ring (docs/design.md, "Same-host message rings": "Writes over the ring") ----

std::uint64_t ring_writes_sent(const Endpoint& ep) { return ep.impl()->ring_writes_sent.load(); }
std::uint64_t ring_writes_taken(const Endpoint& ep) { return ep.impl()->ring_writes_taken.load(); }
std::uint64_t direct_ops(const Endpoint& ep) { return ep.impl()->direct_ops.load(); }

/// A same-host pair with agents, 2 MiB on each side, whose zones see
/// REMORA_RING_WRITES = `target_env` and `initiator_env` when they are made
/// (null: unset).
std::unique_ptr<Pair> ring_write_pair(const char* target_env = "1", const char* initiator_env = "1") {
  auto set = [](const char* v) {
    if (v != nullptr)
      ::setenv("REMORA_RING_WRITES", v, 1);
    else
      ::unsetenv("REMORA_RING_WRITES");
  };
  ::setenv("REMORA_SAMEHOST", "1", 1);
  set(target_env);
  PairOptions o;
  o.target_size = o.local_size = 2 << 20;
  o.between_zones = [&] { set(initiator_env); };
  auto p = std::make_unique<Pair>(o);
  ::unsetenv("REMORA_SAMEHOST");
  ::unsetenv("REMORA_RING_WRITES");
  return p;
}

/// Write `len` bytes of a pattern from `p`'s local memory, as a gather list
/// of three segments cut at uneven places, to `at` in the target's memory;
/// wait for the completion and check the bytes and the bytes around them.
void write_three_segments(Pair& p, std::size_t at, std::size_t len, std::uint8_t seed) {
  const auto src = pattern(len, seed);
  std::memcpy(p.local_mem.data(), src.data(), len);
  const std::size_t a = len / 3 + 1, b = len / 2 + 7;
  Segment w[3] = {Segment(p.lmr, 0, a), Segment(p.lmr, a, b - a), Segment(p.lmr, b, len - b)};
  ASSERT_OK(p.iep.write(w, p.rr, at, seed));
  auto c = collect(p.icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(c[0].cookie, seed);
  EXPECT_EQ(0, std::memcmp(p.target_mem.data() + at, src.data(), len)) << len << " bytes at " << at;
  EXPECT_EQ(p.target_mem[at - 1], Pair::kTargetFill) << "a byte before the write changed";
  EXPECT_EQ(p.target_mem[at + len], Pair::kTargetFill) << "a byte after the write changed";
}

// A write of 16 KiB or more into memory the initiator cannot map goes over
// the ring, in pieces when it is longer than a slot, and lands exactly:
// from a gather list, at an odd offset, of an odd length.
TEST(RingWrites, AWriteOf16KiBOrMoreGoesOverTheRingAndLandsExactly) {
  auto p = ring_write_pair();
  ASSERT_TRUE(ring_ready(p->iep) && ring_ready(p->tep)) << "no rings";
  const std::uint64_t direct = direct_ops(p->iep);
  ASSERT_NO_FATAL_FAILURE(write_three_segments(*p, 4097, 16384, 3));
  EXPECT_EQ(ring_writes_sent(p->iep), 1u);
  EXPECT_EQ(ring_writes_taken(p->tep), 1u);
  // 1 MiB less 5 bytes: 16 pieces.
  ASSERT_NO_FATAL_FAILURE(write_three_segments(*p, 100003, (1 << 20) - 5, 4));
  EXPECT_EQ(ring_writes_sent(p->iep), 2u);
  EXPECT_EQ(ring_writes_taken(p->tep), 1u + 16u);
  EXPECT_EQ(direct_ops(p->iep), direct) << "a ring write counted as a direct one";
  // One byte less than 16 KiB: placed directly, as before.
  ASSERT_NO_FATAL_FAILURE(write_three_segments(*p, 1200003, 16383, 5));
  EXPECT_EQ(ring_writes_sent(p->iep), 2u);
  EXPECT_EQ(direct_ops(p->iep), direct + 1);
}

// The writes the ring does not carry: into a region the initiator maps (a
// memcpy there), with immediate data (its note travels on the connection),
// and any write unless both zones said REMORA_RING_WRITES=1 (unset: off).
TEST(RingWrites, WhatTheRingDoesNotCarryIsPlacedAsBefore) {
  {
    auto p = ring_write_pair();
    ASSERT_TRUE(ring_ready(p->iep) && ring_ready(p->tep)) << "no rings";
    auto shared = MUST(p->tz.allocate(64 * 1024, Access::all));
    Segment s(p->lmr, 0, 64 * 1024);
    ASSERT_OK(p->iep.write({&s, 1}, MUST(shared.remote()), 0, 1));
    ASSERT_OK(p->iep.write_imm({&s, 1}, p->rr, 0, 77, 2));
    Segment r(p->tmr, 0, 8);
    ASSERT_OK(p->tep.recv({&r, 1}, 3));
    auto c = collect(p->icq, 2);
    ASSERT_EQ(c.size(), 2u);
    for (const auto& one : c) EXPECT_FALSE(one.status) << describe(one);
    ASSERT_EQ(collect(p->tcq, 1).size(), 1u);
    EXPECT_EQ(ring_writes_sent(p->iep), 0u);
  }
  for (const auto& [target, initiator] :
       {std::pair<const char*, const char*>{nullptr, nullptr}, {"0", "1"}, {"1", nullptr}, {"1", "off"}}) {
    auto p = ring_write_pair(target, initiator);
    ASSERT_TRUE(ring_ready(p->iep) && ring_ready(p->tep)) << "no rings";
    const std::uint64_t direct = direct_ops(p->iep);
    ASSERT_NO_FATAL_FAILURE(write_three_segments(*p, 64, 256 * 1024, 6));
    EXPECT_EQ(ring_writes_sent(p->iep), 0u)
        << "target " << (target ? target : "unset") << ", initiator " << (initiator ? initiator : "unset");
    EXPECT_EQ(direct_ops(p->iep), direct + 1);
  }
}

// Writes the target's table refuses are refused as before (remote_access,
// the connection ends), never put on the ring.
TEST(RingWrites, ARefusedWriteNeverGoesOnTheRing) {
  auto p = ring_write_pair();
  ASSERT_TRUE(ring_ready(p->iep) && ring_ready(p->tep)) << "no rings";
  // A range the target did not grant (the local check of the remote range
  // passes: the peer may have said more than its table allows).
  const RemoteRegion forged(p->rr.address(), 2 * p->rr.length(), p->rr.key(), Access::all, false);
  Segment s(p->lmr, 0, 64 * 1024);
  ASSERT_OK(p->iep.write({&s, 1}, forged, p->target_mem.size() - 1000, 1));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, make_error_code(Errc::remote_access)) << describe(c[0]);
  EXPECT_EQ(ring_writes_sent(p->iep), 0u);
  EXPECT_TRUE(p->target_untouched());
}

class RingWritesDriven : public RingsDriven {
 public:
  RingWritesDriven() {
    ring_writes = true;
    mem_size = 4 << 20;
  }
  /// Fill `n` bytes of the initiator's memory at `at` with `seed`'s pattern.
  void fill(std::size_t at, std::size_t n, std::uint8_t seed) {
    const auto src = pattern(n, seed);
    std::memcpy(imem.data() + at, src.data(), n);
  }
  std::size_t deferred() {
    detail::MutexLock lock(iep.impl()->mu);
    return iep.impl()->deferred.size();
  }
};

// A ring write completes only once the target copied it: until the target
// runs, nothing is in its memory and nothing completes.
TEST_F(RingWritesDriven, AWriteCompletesOnlyOnceTheTargetCopiedIt) {
  fill(0, 64 * 1024, 1);
  Segment s(imr, 0, 64 * 1024);
  ASSERT_OK(iep.write({&s, 1}, rr, 4096, 1));
  for (int i = 0; i < 20; ++i) (void)iz.progress();
  EXPECT_EQ(ring_writes_sent(iep), 1u);
  Completion buf[4];
  EXPECT_EQ(icq.poll(buf), 0u) << "the write completed before the target took it";
  EXPECT_TRUE(std::all_of(tmem.begin(), tmem.end(), [](std::uint8_t b) { return b == 0; }));
  auto c = take(icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_TRUE(std::equal(imem.begin(), imem.begin() + 64 * 1024, tmem.begin() + 4096));
}

// Writes that do not fit in the ring's free slots wait (deferred) and go
// once the target took earlier ones; overlapping writes leave the bytes of
// the last one posted; a read and a flush behind them see them all.
TEST_F(RingWritesDriven, WritesBeyondTheRingWaitAndLandInPostingOrderBeforeAReadBehindThem) {
  constexpr std::size_t kMiB = 1 << 20;
  fill(0, kMiB, 1);
  fill(kMiB, kMiB, 2);
  fill(2 * kMiB, kMiB / 2, 3);
  Segment a(imr, 0, kMiB), b(imr, kMiB, kMiB), c3(imr, 2 * kMiB, kMiB / 2);
  ASSERT_OK(iep.write({&a, 1}, rr, 0, 1));          // [0, 1 MiB)
  ASSERT_OK(iep.write({&b, 1}, rr, kMiB / 2, 2));   // [512 KiB, 1.5 MiB)
  ASSERT_OK(iep.write({&c3, 1}, rr, kMiB / 4, 3));  // [256 KiB, 768 KiB)
  Segment back(imr, 2 * kMiB + kMiB / 2, kMiB + kMiB / 2);
  ASSERT_OK(iep.read({&back, 1}, rr, 0, 4));
  ASSERT_OK(iep.flush(rr, 0, kMiB, FlushType::visibility, 5));
  for (int i = 0; i < 20; ++i) (void)iz.progress();
  // Sixteen pieces each, 32 slots: two writes fit, the rest waits.
  EXPECT_EQ(ring_writes_sent(iep), 2u);
  EXPECT_EQ(deferred(), 3u);
  auto c = take(icq, 5);
  ASSERT_EQ(c.size(), 5u) << describe(c);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c[i].cookie, i + 1) << "completions out of posting order";
    EXPECT_FALSE(c[i].status) << describe(c[i]);
  }
  EXPECT_EQ(ring_writes_sent(iep), 3u);
  std::vector<std::uint8_t> want(kMiB + kMiB / 2);
  std::memcpy(want.data(), imem.data(), kMiB);
  std::memcpy(want.data() + kMiB / 2, imem.data() + kMiB, kMiB);
  std::memcpy(want.data() + kMiB / 4, imem.data() + 2 * kMiB, kMiB / 2);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), tmem.begin())) << "not the last posted write's bytes";
  EXPECT_TRUE(std::equal(want.begin(), want.end(), imem.begin() + 2 * kMiB + kMiB / 2)) << "the read passed a write";
}

// The target checks each ring write again against its table: a region
// deregistered after the initiator checked it, but before the target took
// the write, gets nothing; the connection ends (as a remote access error
// ends it) and the write fails.
TEST_F(RingWritesDriven, ARegionDeregisteredBeforeTheTargetTookTheWriteGetsNothing) {
  std::vector<std::uint8_t> far(64 * 1024, 0x11);
  auto fmr = MUST(tz.register_memory(far.data(), far.size(), Access::all));
  fill(0, 32 * 1024, 7);
  Segment s(imr, 0, 32 * 1024);
  ASSERT_OK(iep.write({&s, 1}, MUST(fmr.remote()), 0, 1));
  for (int i = 0; i < 20; ++i) (void)iz.progress();
  ASSERT_EQ(ring_writes_sent(iep), 1u);
  fmr = MemoryRegion();  // deregistered
  auto c = take(icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].status) << "the write succeeded into a deregistered region";
  EXPECT_TRUE(std::all_of(far.begin(), far.end(), [](std::uint8_t b) { return b == 0x11; }));
  EXPECT_EQ(ring_writes_taken(tep), 0u);
  EXPECT_EQ(tep.state(), EndpointState::error);
}

/// Put a ring write of `len` bytes (0x99) for `addr` under `key` straight
/// into the initiator's outbox, `cut` bytes of the message left off its end,
/// as a broken or hostile peer could; let both sides run; the target must
/// end the connection with nothing written.
void expect_refused_at_target(RingWritesDriven& t, std::uint64_t key, std::uint64_t addr, std::size_t len,
                              std::size_t cut = 0) {
  detail::wire::RingWrite head{key, addr};
  std::vector<std::uint8_t> msg(sizeof head + len, 0x99);
  std::memcpy(msg.data(), &head, sizeof head);
  {
    detail::MutexLock lock(t.iep.impl()->mu);
    remora::backend::Iov v{msg.data(), msg.size() - cut, nullptr};
    ASSERT_TRUE(t.iep.impl()->outbox->put({&v, 1}, msg.size() - cut, detail::wire::data(detail::wire::ring_write, 1)));
  }
  t.settle(100);
  EXPECT_EQ(t.tep.state(), EndpointState::error);
  auto ev = t.tep.next_event(0ms);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->type, ConnectionEventType::lost);
  EXPECT_TRUE(std::all_of(t.tmem.begin(), t.tmem.end(), [](std::uint8_t x) { return x == 0; }));
  EXPECT_EQ(ring_writes_taken(t.tep), 0u);
}

// What a broken or hostile peer could put in the ring as a write, which the
// target checks again: an unknown key, a range outside the region, a region
// without remote write, a message shorter than its header.
TEST_F(RingWritesDriven, ARingWriteUnderAnUnknownKeyEndsTheConnection) {
  expect_refused_at_target(*this, rr.key() ^ 0x5a5a5a5a, rr.address(), 64);
}

TEST_F(RingWritesDriven, ARingWritePastTheRegionEndsTheConnection) {
  expect_refused_at_target(*this, rr.key(), rr.address() + tmem.size() - 32, 64);
}

TEST_F(RingWritesDriven, ARingWriteBeforeTheRegionEndsTheConnection) {
  expect_refused_at_target(*this, rr.key(), rr.address() - 8, 64);
}

TEST_F(RingWritesDriven, ARingWriteIntoARegionWithoutRemoteWriteEndsTheConnection) {
  std::vector<std::uint8_t> ro(8192, 0x22);
  auto romr = MUST(tz.register_memory(ro.data(), ro.size(), Access::remote_read | Access::local_read));
  const RemoteRegion r = MUST(romr.remote());
  expect_refused_at_target(*this, r.key(), r.address(), 64);
  EXPECT_TRUE(std::all_of(ro.begin(), ro.end(), [](std::uint8_t x) { return x == 0x22; }));
}

TEST_F(RingWritesDriven, ARingWriteShorterThanItsHeaderEndsTheConnection) {
  expect_refused_at_target(*this, rr.key(), rr.address(), 0, 8);
}
}  // namespace
