// CompletionQueue: poll, wait, the readiness file descriptor.
#include <thread>

#include "unit_support.hpp"

namespace {

using namespace unit;

TEST(CompletionQueue, EmptyQueue) {
  {  // PollOnEmptyReturnsZero
    auto fabric = MUST(Fabric::open({}));
    auto zone = MUST(fabric.create_zone());
    auto cq = MUST(zone.create_cq());
    EXPECT_TRUE(cq.valid());
    Completion c[4];
    EXPECT_EQ(cq.poll(c), 0u);
    EXPECT_EQ(cq.poll(std::span<Completion>()), 0u);
    EXPECT_EQ(cq.size(), 0u);
  }
  {  // PollOnEmptyConnectedQueueReturnsZero
    Pair p;
    Completion c[4];
    EXPECT_EQ(p.icq.poll(c), 0u);
    EXPECT_EQ(p.tcq.poll(c), 0u);
  }
  {  // WaitTimesOut
    Pair p;
    Completion c[4];
    EXPECT_ERR(p.icq.wait(c, 50ms), Errc::timeout);
    EXPECT_ERR(p.icq.wait(c, 0ms), Errc::timeout);
    auto fabric = MUST(Fabric::open({}));
    auto zone = MUST(fabric.create_zone());
    auto lonely = MUST(zone.create_cq());
    EXPECT_ERR(lonely.wait(c, 30ms), Errc::timeout);
  }
  {  // WaitWithNoRoomIsInvalidArgument
    Pair p;
    EXPECT_ERR(p.icq.wait(std::span<Completion>(), 10ms), Errc::invalid_argument);
  }
}

TEST(CompletionQueue, WaitReturnsWhenACompletionArrives) {
  {  // WaitReturnsWhenACompletionArrives
    Pair p;
    Completion c[4];
    ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, 5));
    auto n = p.icq.wait(c, kWait);
    ASSERT_TRUE(n.ok()) << n.error().message();
    ASSERT_EQ(*n, 1u);
    EXPECT_EQ(c[0].cookie, 5u);
  }
  {  // WaitForeverReturnsWhenACompletionArrives
    Pair p;
    std::thread poster([&] {
      std::this_thread::sleep_for(50ms);
      (void)p.iep.flush(p.rr, 0, 8, FlushType::visibility, 6);
    });
    Completion c[1];
    auto n = p.icq.wait(c, std::chrono::milliseconds(-1));
    poster.join();
    ASSERT_TRUE(n.ok()) << n.error().message();
    EXPECT_EQ(c[0].cookie, 6u);
  }
}

TEST(CompletionQueue, PollTakesAtMostTheSpan) {
  Pair p;
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, 10 + i));
  // Let all three arrive, then take them two and one.
  for (int i = 0; i < 500 && p.icq.size() < 3; ++i) std::this_thread::sleep_for(2ms);
  ASSERT_EQ(p.icq.size(), 3u);
  Completion c[2];
  ASSERT_EQ(p.icq.poll(c), 2u);
  EXPECT_EQ(c[0].cookie, 10u);
  EXPECT_EQ(c[1].cookie, 11u);
  EXPECT_EQ(p.icq.size(), 1u);
  ASSERT_EQ(p.icq.poll(c), 1u);
  EXPECT_EQ(c[0].cookie, 12u);
  EXPECT_EQ(p.icq.poll(c), 0u);
}

TEST(CompletionQueue, FdReadableWhileCompletionsAreQueuedOrTheTransportHasWork) {
  // On the transport: with the same-host direct path the peer's offer may
  // still be arriving right after connecting (transport work, so the fd is
  // rightly readable while the test expects a quiet queue).
  PairOptions o;
  o.fabric.same_host = false;
  Pair p(o);
  const int fd = p.icq.fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(fd, p.icq.fd()) << "fd is stable";
  EXPECT_FALSE(readable(fd, 0)) << "readable while empty";
  Completion c[4];
  // Wake on the fd until the completion is there: the fd wakes for the
  // transport too, and progress() makes the completion on this thread (or
  // the zone's agent did, which also raises the fd).
  auto until_queued = [&](std::size_t want) {
    const auto until = std::chrono::steady_clock::now() + kWait;
    while (p.icq.progress() < want && std::chrono::steady_clock::now() < until)
      (void)readable(fd, static_cast<int>(kWait.count()));
    return p.icq.size();
  };

  ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, 1));
  ASSERT_TRUE(readable(fd, static_cast<int>(kWait.count()))) << "not readable with a completion on its way";
  ASSERT_EQ(until_queued(1), 1u);
  EXPECT_TRUE(readable(fd, 0)) << "not readable with a completion queued";
  EXPECT_TRUE(readable(fd, 0)) << "poll(2) must not consume readiness";
  ASSERT_EQ(p.icq.poll(c), 1u);
  EXPECT_EQ(p.icq.progress(), 0u);
  EXPECT_FALSE(readable(fd, 0)) << "readable after the only completion was taken and nothing is pending";

  // Two queued, one taken: still readable; the second taken: not.
  ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, 2));
  ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, 3));
  ASSERT_EQ(until_queued(2), 2u);
  ASSERT_EQ(p.icq.poll(std::span<Completion>(c, 1)), 1u);
  EXPECT_TRUE(readable(fd, 0)) << "not readable with one completion left";
  ASSERT_EQ(p.icq.poll(c), 1u);
  EXPECT_EQ(p.icq.progress(), 0u);
  EXPECT_FALSE(readable(fd, 0));
}

TEST(CompletionQueue, ASleeperMakesTheCompletionsItWaitsFor) {
  // Round trips over the transport: the same-host direct path would
  // complete each flush when it is posted.
  PairOptions o;
  o.fabric.same_host = false;
  Pair p(o);
  const int fd = p.icq.fd();
  ASSERT_GE(fd, 0);
  Completion c[4];
  // Sleep on the fd until progress() made a completion on this thread.
  auto until_progress = [&] {
    const auto until = std::chrono::steady_clock::now() + kWait;
    while (p.icq.progress() == 0 && std::chrono::steady_clock::now() < until)
      (void)readable(fd, static_cast<int>(kWait.count()));
    return p.icq.poll(c);
  };
  {
    const auto asleep = p.icq.sleeper();
    // The agent notices the sleeper when it next looks at the endpoint (the
    // first completions may still be its own): round trips until one is
    // left to this thread, which on a loaded machine can take a while.
    // Without sleepers the agent makes every one of them.
    bool left_to_us = false;
    for (std::uint64_t i = 0; i < 40 && !left_to_us; ++i) {
      ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, i));
      ASSERT_TRUE(readable(fd, static_cast<int>(kWait.count()))) << "the transport did not wake the sleeper";
      std::this_thread::sleep_for(25ms);  // room for the agent to (wrongly) act
      left_to_us = p.icq.size() == 0;
      ASSERT_EQ(until_progress(), 1u);
      EXPECT_EQ(c[0].cookie, i);
    }
    EXPECT_TRUE(left_to_us) << "the agent made every completion while a thread slept on the queue";
  }
  // Dropped: the agent drives the endpoint again, with nobody polling
  // (size() does not drive).
  ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, 8));
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (p.icq.size() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(p.icq.size(), 1u) << "the agent did not take the endpoint back";
  ASSERT_EQ(p.icq.poll(c), 1u);
  EXPECT_EQ(c[0].cookie, 8u);
  // An invalid queue's sleeper is empty and harmless.
  { const auto none = CompletionQueue().sleeper(); }
}

TEST(CompletionQueue, FdClearedByWaitAndRaisedByFlushedPosts) {
  // Each block first lets the connection's in-band set-up (the same-host
  // offers, which travel after `established`) finish: its messages would
  // make the descriptor readable.
  {  // FdTakenByWaitIsCleared
    Pair p;
    const int fd = p.icq.fd();
    EXPECT_TRUE(drain_for(p.icq, 100ms).empty());
    ASSERT_OK(p.iep.flush(p.rr, 0, 8, FlushType::visibility, 1));
    Completion c[4];
    auto n = p.icq.wait(c, kWait);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(p.icq.progress(), 0u);
    EXPECT_FALSE(readable(fd, 0));
  }
  {  // FdRaisedBySynchronousFlushedCompletion
    Pair p;
    const int fd = p.icq.fd();
    EXPECT_TRUE(drain_for(p.icq, 100ms).empty());
    ASSERT_OK(p.iep.disconnect());
    EXPECT_FALSE(readable(fd, 0));
    Segment s(p.lmr, 0, 8);
    ASSERT_OK(p.iep.write({&s, 1}, p.rr, 0, 9));
    EXPECT_TRUE(readable(fd, 0));
    Completion c[2];
    auto n = p.icq.wait(c, kWait);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(c[0].status, make_error_code(Errc::flushed));
    EXPECT_FALSE(readable(fd, 0));
  }
}

TEST(CompletionQueue, SharedBySendAndReceive) {
  // The target uses one queue for both; receives and its own sends show up
  // there, told apart by opcode.
  Pair p;
  std::vector<std::uint8_t> rx(256);
  auto rxmr = MUST(p.tz.register_memory(rx.data(), rx.size(), Access::local_write | Access::local_read));
  Segment rs(rxmr, 0, 128);
  ASSERT_OK(p.tep.recv({&rs, 1}, 70));
  Segment s(p.lmr, 0, 16);
  ASSERT_OK(p.iep.send({&s, 1}, 71));
  auto t = collect(p.tcq, 1);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].op, Opcode::recv);
  EXPECT_EQ(t[0].cookie, 70u);
  auto sent = collect(p.icq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].op, Opcode::send);

  // A separate receive queue on the initiator.
  EndpointOptions o;
  o.send_cq = &p.icq;
  auto rcq = MUST(p.iz.create_cq());
  o.recv_cq = &rcq;
  auto iep2 = MUST(p.iz.create_endpoint(o));
  EndpointOptions to;
  to.send_cq = &p.tcq;
  auto tep2 = MUST(p.tz.create_endpoint(to));
  ASSERT_OK(iep2.connect("127.0.0.1", p.lis.port()));
  auto req = MUST(p.lis.next_request(kWait));
  ASSERT_OK(req.accept(tep2));
  ASSERT_EQ(MUST(iep2.next_event(kWait)).type, ConnectionEventType::established);
  ASSERT_EQ(MUST(tep2.next_event(kWait)).type, ConnectionEventType::established);
  Segment ir(p.lmr, 1024, 64);
  ASSERT_OK(iep2.recv({&ir, 1}, 80));
  Segment ts(rxmr, 0, 16);
  ASSERT_OK(tep2.send({&ts, 1}, 81));
  auto rc = collect(rcq, 1);
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].cookie, 80u);
  EXPECT_EQ(rc[0].endpoint_id, iep2.id());
  EXPECT_TRUE(drain_for(p.icq, 50ms).empty()) << "receive reported on the send queue";
  auto sc = collect(p.tcq, 1);
  ASSERT_EQ(sc.size(), 1u) << describe(sc);
  EXPECT_EQ(sc[0].cookie, 81u);
  EXPECT_EQ(sc[0].op, Opcode::send);
}

// Every receive buffer of a connection taken by a burst, with an
// acknowledgement right behind it: libfabric 1.17's tcp provider reads the
// acknowledgement's header and parks it until a buffer is posted again, and
// as it has no payload nothing in the socket shows it any more. The poll that
// handled the burst (and posted the buffers again) calls the transport once
// more, so the send the acknowledgement completes is there at once; before,
// it came only after a sleep (the waiter's 20 ms slice, or the agent's
// sweep). Zones without progress threads, so that only the test's polls
// move anything.
TEST(CompletionQueue, AnAcknowledgementBehindABurstThatTookEveryReceiveBufferCompletesInTheSamePoll) {
  FabricOptions fo;
  fo.same_host = false;  // the transport's own behaviour, no same-host offers
  auto fabric = MUST(Fabric::open(fo));
  ZoneOptions zo;
  zo.progress_thread = false;
  auto tz = MUST(fabric.create_zone(zo));
  auto iz = MUST(fabric.create_zone(zo));
  auto tcq = MUST(tz.create_cq());
  auto isq = MUST(iz.create_cq());
  auto irq = MUST(iz.create_cq());
  std::vector<std::uint8_t> tmem(4096, 0), imem(4096, 0);
  auto tmr = MUST(tz.register_memory(tmem.data(), tmem.size(), kLocal));
  auto imr = MUST(iz.register_memory(imem.data(), imem.size(), kLocal));
  EndpointOptions io;
  io.send_cq = &isq;
  io.recv_cq = &irq;
  io.max_recv = 8;  // all posted from the start, never more
  EndpointOptions to;
  to.send_cq = &tcq;
  auto lis = MUST(tz.listen("127.0.0.1", 0));
  auto tep = MUST(tz.create_endpoint(to));
  auto iep = MUST(iz.create_endpoint(io));
  auto settle = [&] {
    for (int i = 0; i < 200; ++i) {
      (void)tz.progress();
      (void)iz.progress();
      std::this_thread::sleep_for(1ms);
    }
  };
  ASSERT_OK(iep.connect("127.0.0.1", lis.port()));
  auto req = next_request_driven(lis, tz, iz);
  ASSERT_TRUE(req.ok()) << "no connection request";
  ASSERT_OK(req->accept(tep));
  settle();
  ASSERT_EQ(MUST(iep.next_event(0ms)).type, ConnectionEventType::established);
  ASSERT_EQ(MUST(tep.next_event(0ms)).type, ConnectionEventType::established);

  // The initiator sends one message; the target, before it handles that,
  // sends eight (all the initiator's buffers), then handles it: its
  // acknowledgement follows the eight on the wire.
  Segment tr(tmr, 0, 64);
  ASSERT_OK(tep.recv({&tr, 1}, 1));
  Segment is(imr, 0, 16);
  ASSERT_OK(iep.send({&is, 1}, 2));
  std::this_thread::sleep_for(50ms);  // in the target's socket, not handled
  for (std::uint64_t i = 0; i < 8; ++i) {
    Segment ts(tmr, 1024 + 16 * i, 16);
    ASSERT_OK(tep.send({&ts, 1}, 10 + i));
  }
  auto got = collect(tcq, 1);
  ASSERT_EQ(got.size(), 1u) << describe(got);
  EXPECT_EQ(got[0].cookie, 1u) << "the initiator's message, received";
  std::this_thread::sleep_for(100ms);  // the eight and the acknowledgement reach the initiator's socket

  // One poll: it takes the eight messages (held: no receive is posted),
  // posts the buffers again, and reads the acknowledgement behind them.
  Completion c[4];
  ASSERT_EQ(isq.poll(c), 1u) << "the acknowledgement stayed parked in the provider";
  EXPECT_EQ(c[0].cookie, 2u);
  EXPECT_EQ(c[0].op, Opcode::send);
  EXPECT_FALSE(c[0].status) << c[0].status.message();
  // The eight are all there for receives posted now.
  for (std::uint64_t i = 0; i < 8; ++i) {
    Segment ir(imr, 2048 + 16 * i, 16);
    ASSERT_OK(iep.recv({&ir, 1}, 20 + i));
  }
  auto rcv = collect(irq, 8);
  EXPECT_EQ(rcv.size(), 8u) << describe(rcv);
}

}  // namespace
