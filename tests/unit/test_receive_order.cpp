// Receive completion order across connections that share one receive queue.
//
// A sender that waits for a send's completion before it sends on another
// connection must find the receiver's completions in that order (on RC
// hardware the receive completion is written before the acknowledgement
// that completes the send). Programs such as dapltest check exactly this.
#include <atomic>
#include <thread>

#include "unit_support.hpp"

namespace {

using namespace unit;

constexpr int kConnections = 4;
constexpr int kMessages = 400;  // per round
constexpr int kRounds = 5;

struct Fixture {
  std::vector<std::uint8_t> in_mem = std::vector<std::uint8_t>(kMessages * 8, 0);
  std::vector<std::uint8_t> out_mem = std::vector<std::uint8_t>(kMessages * 8, 0);
  Fabric fabric = MUST(Fabric::open({}));
  ProtectionZone rz = MUST(fabric.create_zone());  // receiver
  ProtectionZone sz = MUST(fabric.create_zone());  // sender
  CompletionQueue rcq = MUST(rz.create_cq());
  CompletionQueue scq = MUST(sz.create_cq());
  MemoryRegion in = MUST(rz.register_memory(in_mem.data(), in_mem.size(), kLocal | kRemote));
  MemoryRegion out = MUST(sz.register_memory(out_mem.data(), out_mem.size(), kLocal));
  RemoteRegion in_remote = MUST(in.remote());
  Listener lis = MUST(rz.listen("127.0.0.1", 0));
  std::vector<Endpoint> receivers, senders;

  Fixture() {
    for (int i = 0; i < kConnections; ++i) {
      receivers.push_back(
          MUST(rz.create_endpoint({.send_cq = &rcq, .max_recv = kMessages / kConnections + 8, .max_message = 64})));
      senders.push_back(MUST(sz.create_endpoint({.send_cq = &scq})));
      MUST(senders.back().connect("127.0.0.1", lis.port()));
      auto req = MUST(lis.next_request(kWait));
      MUST(req.accept(receivers.back()));
      EXPECT_EQ(MUST(senders.back().next_event(kWait)).type, ConnectionEventType::established);
      EXPECT_EQ(MUST(receivers.back().next_event(kWait)).type, ConnectionEventType::established);
    }
  }
};

// Message m goes on connection (m * 3) % kConnections, so consecutive
// messages change connection in an order unrelated to the endpoints' order.
int connection_of(int m) { return (m * 3) % kConnections; }

/// Send message m (its index in 8 bytes, or as immediate data of an RDMA
/// write) and wait for the send's completion before the next one.
void send_all(Fixture& f, bool write_imm) {
  for (int m = 0; m < kMessages; ++m) {
    std::memcpy(f.out_mem.data() + m * 8, &m, sizeof m);
    Segment seg(f.out, static_cast<std::size_t>(m) * 8, 8);
    Endpoint& ep = f.senders[static_cast<std::size_t>(connection_of(m))];
    if (write_imm)
      ASSERT_OK(ep.write_imm({&seg, 1}, f.in_remote, static_cast<std::uint64_t>(m) * 8, static_cast<std::uint32_t>(m),
                             static_cast<std::uint64_t>(m)));
    else
      ASSERT_OK(ep.send({&seg, 1}, static_cast<std::uint64_t>(m)));
    auto done = collect(f.scq, 1);
    ASSERT_EQ(done.size(), 1u);
    ASSERT_FALSE(done[0].status) << describe(done[0]);
    ASSERT_EQ(done[0].cookie, static_cast<std::uint64_t>(m));
  }
}

void run_round(Fixture& f, bool write_imm, bool concurrent) {
  // Receives: the message of index m lands in slot m of the inbox.
  for (int m = 0; m < kMessages; ++m) {
    Segment seg(f.in, static_cast<std::size_t>(m) * 8, 8);
    ASSERT_OK(f.receivers[static_cast<std::size_t>(connection_of(m))].recv({&seg, 1}, static_cast<std::uint64_t>(m)));
  }
  std::vector<Completion> got;
  std::atomic<bool> sending{true};
  std::thread taker;
  if (concurrent)
    taker = std::thread([&] {
      const auto deadline = std::chrono::steady_clock::now() + 4 * kWait;
      while (got.size() < static_cast<std::size_t>(kMessages) && std::chrono::steady_clock::now() < deadline) {
        Completion buf[16];
        std::size_t n = f.rcq.poll(buf);
        got.insert(got.end(), buf, buf + n);
        if (n == 0 && !sending) std::this_thread::yield();
      }
    });
  send_all(f, write_imm);
  sending = false;
  if (concurrent)
    taker.join();
  else
    got = collect(f.rcq, kMessages);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kMessages));
  for (int m = 0; m < kMessages; ++m) {
    const Completion& c = got[static_cast<std::size_t>(m)];
    ASSERT_FALSE(c.status) << describe(c);
    ASSERT_EQ(c.cookie, static_cast<std::uint64_t>(m)) << "receive completions out of sending order at position " << m;
    if (write_imm) {
      EXPECT_EQ(c.op, Opcode::recv_write_imm);
      EXPECT_EQ(c.imm, static_cast<std::uint32_t>(m));
    } else {
      int seen = -1;
      std::memcpy(&seen, f.in_mem.data() + m * 8, sizeof seen);
      EXPECT_EQ(seen, m);
    }
  }
}

/// Rounds of: post every receive up front, run the sender, and take the
/// receive completions, either while the sender runs (`concurrent`: a user
/// thread driving the endpoints in its own order) or only afterwards (the
/// agent did it).
void run(bool write_imm, bool concurrent) {
  Fixture f;
  for (int round = 0; round < kRounds && !::testing::Test::HasFailure(); ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    run_round(f, write_imm, concurrent);
  }
}

TEST(ReceiveOrder, SendsAcrossConnectionsSharingAQueueTakenConcurrently) { run(false, true); }
TEST(ReceiveOrder, SendsAcrossConnectionsSharingAQueueTakenAfterwards) { run(false, false); }
TEST(ReceiveOrder, WritesWithImmediateAcrossConnectionsTakenConcurrently) { run(true, true); }

}  // namespace
