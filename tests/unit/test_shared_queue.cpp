// Connections of one zone share the tcp provider's completion queues
// (src/fabric/ofi_backend.cpp, OfiQueue): what each connection costs, and
// that every completion still reaches its own connection, also while other
// connections of the same queue come and go.
#include <dirent.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/impl.hpp"
#include "unit_support.hpp"

namespace {

using namespace unit;

// Open descriptors of this process.
std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// kConns connections from one initiator zone into one target zone, every
// target endpoint on the one target queue `tcq`, every initiator endpoint on
// `icq`.
class SharedQueue : public ::testing::Test {
 protected:
  static constexpr int kConns = 12;
  static constexpr std::size_t kChunk = 256;

  static PairOptions options() {
    PairOptions o;
    o.target_size = o.local_size = kConns * kChunk;
    o.connect = false;  // the connections are this fixture's own
    o.fabric.busy_poll = busy_agents;
    if (busy_agents) o.fabric.same_host = false;  // all traffic through the transport queues
    return o;
  }
  // Set by SharedQueueBusyAgents for its tests.
  static inline bool busy_agents = false;

  void connect_all() {
    for (int i = 0; i < kConns; ++i) {
      EndpointOptions o;
      o.send_cq = &tcq;
      tep[i] = MUST(tz.create_endpoint(o));
      o.send_cq = &icq;
      iep[i] = MUST(iz.create_endpoint(o));
      MUST(iep[i].connect("127.0.0.1", lis.port()));
      auto req = MUST(lis.next_request(kWait));
      MUST(req.accept(tep[i]));
      ASSERT_EQ(MUST(iep[i].next_event(kWait)).type, ConnectionEventType::established);
      ASSERT_EQ(MUST(tep[i].next_event(kWait)).type, ConnectionEventType::established);
    }
  }

  // The fabric, zones, queues, regions and listener of unit_support's Pair.
  Pair p{options()};
  std::vector<std::uint8_t>& target_mem = p.target_mem;
  std::vector<std::uint8_t>& local_mem = p.local_mem;
  ProtectionZone &tz = p.tz, &iz = p.iz;
  CompletionQueue &tcq = p.tcq, &icq = p.icq;
  MemoryRegion &tmr = p.tmr, &lmr = p.lmr;
  RemoteRegion& rr = p.rr;
  Listener& lis = p.lis;
  Endpoint tep[kConns], iep[kConns];
};

// With a completion queue per connection, the tcp provider spent four
// descriptors on every connection (the socket and the queue's wait objects),
// eight per connected pair in one process. Shared, a connection costs its
// socket, and each queue its few wait objects.
TEST_F(SharedQueue, AConnectionCostsItsSocketNotAQueue) {
  const std::size_t before = open_fds();
  connect_all();
  ASSERT_FALSE(HasFatalFailure());
  // Same-host rings are set up in band after the connection is established:
  // the count waits for them (bounded: without the path there are none).
  auto rings_settled = [&] {
    for (const Endpoint* side : {tep, iep})
      for (int i = 0; i < kConns; ++i) {
        detail::MutexLock lock(side[i].impl()->mu);
        const auto& in = side[i].impl()->inbox;
        if (!in || in->fd() >= 0 || !side[i].impl()->outbox) return false;
      }
    return true;
  };
  for (auto until = std::chrono::steady_clock::now() + 2s;
       !rings_settled() && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(1ms);
  const std::size_t after = open_fds();
  // Same-host message rings (both ends are processes of this host) cost
  // descriptors of their own, counted apart: each inbox its bell (and its
  // memory file until the peer answered the offer), each outbox the peer's
  // bell.
  std::size_t rings = 0;
  for (const Endpoint* side : {tep, iep}) {
    for (int i = 0; i < kConns; ++i) {
      detail::MutexLock lock(side[i].impl()->mu);
      const auto& in = side[i].impl()->inbox;
      if (in) rings += 1 + (in->fd() >= 0 ? 1 : 0);
      if (side[i].impl()->outbox) rings += 1;
    }
  }
  // Both ends are in this process: 2 sockets per pair, plus a handful for
  // the two zones' queues.
  EXPECT_LE(after - before - rings, 2u * kConns + 8u) << "descriptors for " << kConns << " connected pairs";
}

// Writes with immediate data arrive at the target as the write and a note
// (an empty message) on the connection: each consumes a receive of its own
// endpoint and reports that endpoint, however many connections share the
// target's transport queue.
TEST_F(SharedQueue, EachWriteWithImmediateReachesItsOwnEndpoint) {
  connect_all();
  ASSERT_FALSE(HasFatalFailure());
  for (int i = 0; i < kConns; ++i) {
    Segment r(tmr, 0, 0);
    ASSERT_OK(tep[i].recv({&r, 1}, 1000 + i));
  }
  for (int i = 0; i < kConns; ++i) {
    std::memset(local_mem.data() + i * kChunk, i + 1, kChunk);
    Segment s(lmr, i * kChunk, kChunk);
    ASSERT_OK(iep[i].write_imm({&s, 1}, rr, i * kChunk, 0xA000u + static_cast<std::uint32_t>(i), 2000 + i));
  }
  auto sent = collect(icq, kConns);
  ASSERT_EQ(sent.size(), static_cast<std::size_t>(kConns)) << describe(sent);
  for (const auto& c : sent) EXPECT_FALSE(c.status) << describe(c);
  auto got = collect(tcq, kConns);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kConns)) << describe(got);
  for (const auto& c : got) {
    ASSERT_GE(c.cookie, 1000u);
    const int i = static_cast<int>(c.cookie - 1000);
    ASSERT_LT(i, kConns);
    EXPECT_FALSE(c.status) << describe(c);
    EXPECT_EQ(c.op, Opcode::recv_write_imm);
    EXPECT_EQ(c.endpoint_id, tep[i].id()) << "receive " << i << " completed on another endpoint";
    EXPECT_TRUE(c.has_imm);
    EXPECT_EQ(c.imm, 0xA000u + static_cast<std::uint32_t>(i)) << "the immediate of another connection";
    EXPECT_EQ(c.length, kChunk);
    // The data was placed before the note.
    for (std::size_t b = 0; b < kChunk; ++b)
      ASSERT_EQ(target_mem[i * kChunk + b], static_cast<std::uint8_t>(i + 1)) << "connection " << i;
  }
}

// Closing some connections of a queue (their completions still in it, or
// arriving while they go) leaves the others' completions to them.
TEST_F(SharedQueue, ClosingSomeConnectionsLeavesTheOthersServed) {
  connect_all();
  ASSERT_FALSE(HasFatalFailure());
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kConns; ++i) {
      if (!iep[i].valid()) continue;
      Segment s(lmr, i * kChunk, kChunk);
      ASSERT_OK(iep[i].write({&s, 1}, rr, i * kChunk, 100 * round + i));
      ASSERT_OK(iep[i].flush(rr, i * kChunk, kChunk, FlushType::visibility, 100 * round + 50 + i));
    }
    // Every fourth connection goes away on both sides with its operations
    // in flight: they fail (flushed, or refused by the closing target),
    // and nothing of theirs reaches another endpoint. The others' complete.
    std::vector<bool> closing(kConns, false);
    for (int i = round; i < kConns; i += 4) {
      closing[i] = true;
      tep[i].close();
      iep[i].close();
    }
    auto got = drain_for(icq, std::chrono::milliseconds(500));
    for (const auto& c : got) {
      const int i = static_cast<int>(c.cookie % 50);
      ASSERT_LT(i, kConns);
      if (!closing[i]) {
        EXPECT_FALSE(c.status) << describe(c);
        EXPECT_EQ(c.endpoint_id, iep[i].id()) << describe(c);
      }
    }
  }
  // Those still open complete, each on its own endpoint.
  int open = 0;
  for (int i = 0; i < kConns; ++i) {
    if (!iep[i].valid()) continue;
    ++open;
    Segment s(lmr, i * kChunk, kChunk);
    ASSERT_OK(iep[i].read({&s, 1}, rr, i * kChunk, 9000 + i));
  }
  ASSERT_GT(open, 0);
  auto got = collect(icq, static_cast<std::size_t>(open));
  ASSERT_EQ(got.size(), static_cast<std::size_t>(open)) << describe(got);
  for (const auto& c : got) {
    EXPECT_FALSE(c.status) << describe(c);
    const int i = static_cast<int>(c.cookie - 9000);
    ASSERT_TRUE(i >= 0 && i < kConns);
    EXPECT_EQ(c.endpoint_id, iep[i].id());
  }
}

// A completion queue keeps the endpoints feeding it as their connections
// come and go (CqImpl::attach, detach), with the distinct shared transport
// queues they are on: a poll reads those and visits no idle endpoint.
TEST_F(SharedQueue, AQueueKnowsItsEndpointsAndTheirTransportQueues) {
  connect_all();
  ASSERT_FALSE(HasFatalFailure());
  auto sources = [](const CompletionQueue& cq) {
    auto& impl = *cq.impl();
    detail::MutexLock lock(impl.sources_mu);
    return std::make_tuple(impl.sources.size(), impl.shared_queues.size(), impl.own_queue.size());
  };
  for (const CompletionQueue* cq : {&tcq, &icq}) {
    const auto [eps, queues, own] = sources(*cq);
    EXPECT_EQ(eps, static_cast<std::size_t>(kConns));
    // 64 connections to a transport queue by default: kConns share one.
    EXPECT_GE(queues, 1u);
    EXPECT_LT(queues, static_cast<std::size_t>(kConns));
    EXPECT_EQ(own, 0u);
  }
  for (int i = 0; i < kConns; ++i) {
    tep[i].close();
    iep[i].close();
  }
  for (const CompletionQueue* cq : {&tcq, &icq}) {
    const auto [eps, queues, own] = sources(*cq);
    EXPECT_EQ(eps, 0u);
    EXPECT_EQ(queues, 0u);
    EXPECT_EQ(own, 0u);
  }
}

// Idle connections on a shared transport queue cost nothing per connection:
// neither the agent's periodic sweeps (about every 100 ms when it is idle)
// nor a user's polls of their completion queue progress them. (Before, every
// sweep progressed every endpoint nobody else drove, and asked the transport
// of each whether it could sleep.)
TEST_F(SharedQueue, IdleConnectionsAreNotProgressed) {
  connect_all();
  ASSERT_FALSE(HasFatalFailure());
  // Some traffic on every connection first, then quiet.
  for (int i = 0; i < kConns; ++i) {
    Segment s(lmr, i * kChunk, kChunk);
    ASSERT_OK(iep[i].write({&s, 1}, rr, i * kChunk, 2 * i));
    ASSERT_OK(iep[i].flush(rr, i * kChunk, kChunk, FlushType::visibility, 2 * i + 1));
  }
  auto got = collect(icq, 2 * kConns);
  ASSERT_EQ(got.size(), 2u * kConns) << describe(got);
  for (const auto& c : got) EXPECT_FALSE(c.status) << describe(c);
  // Let the acknowledgements and the agents' last turns pass.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto calls = [&] {
    std::vector<std::uint64_t> v;
    for (int i = 0; i < kConns; ++i) {
      v.push_back(tep[i].impl()->progress_calls.load());
      v.push_back(iep[i].impl()->progress_calls.load());
    }
    return v;
  };
  const auto before = calls();
  // Several sweeps of both zones' agents, then many empty polls.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  Completion c[4];
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(tcq.poll(c), 0u);
    EXPECT_EQ(icq.poll(c), 0u);
  }
  const auto after = calls();
  for (std::size_t i = 0; i < before.size(); ++i)
    EXPECT_LE(after[i] - before[i], 2u) << (i % 2 ? "initiator" : "target") << " endpoint " << i / 2
                                        << " was progressed while idle";
}

// The same connections between zones whose agents spin (FabricOptions::
// busy_poll), over the transport queues only.
class SharedQueueBusyAgents : public SharedQueue {
 public:
  static void SetUpTestSuite() { busy_agents = true; }
  static void TearDownTestSuite() { busy_agents = false; }
};

// A queue whose endpoints a user drives, all of them, is the user's: once
// a sweep of the agent found so, the agent no longer reads it. It used to
// go on reading a queue it had started reading before the user came, for as
// long as it kept polling (a busy agent always does; a sleeping one while
// traffic kept the queue's try-wait failing), and so contended with the
// user for the queue and the endpoints on every completion: a busy-polling
// 8-byte write + flush took twice the CPU and 4 ms at p99.9.
TEST_F(SharedQueueBusyAgents, AQueueItsUserDrivesIsNotReadByTheAgent) {
  connect_all();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(iep[0].impl()->shared_queue.load(), iep[kConns - 1].impl()->shared_queue.load());
  ASSERT_NE(iep[0].impl()->shared_queue.load(), nullptr);
  auto& agent = *iz.impl()->agent;
  constexpr int kDepth = 16;
  std::uint64_t posted = 0, done = 0;
  auto post = [&] {
    const int i = static_cast<int>(posted % kConns);
    Segment s(lmr, i * kChunk, kChunk);
    ASSERT_OK(iep[i].read({&s, 1}, rr, i * kChunk, posted));
    ++posted;
  };
  // Reads in flight while nobody polls: the agent reads the queue.
  const std::uint64_t reads_before = agent.queue_reads();
  for (int k = 0; k < kDepth; ++k) post();
  const auto until = std::chrono::steady_clock::now() + kWait;
  while (agent.queue_reads() == reads_before) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the agent never read the queue";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Now the user drives the queue, keeping kDepth reads in flight, while
  // `stop` is false; `gap` is the longest time between two of its polls.
  std::chrono::nanoseconds gap{0};
  auto last = std::chrono::steady_clock::now();
  auto drive = [&](auto stop) {
    Completion c[kDepth];
    do {
      const auto now = std::chrono::steady_clock::now();
      ASSERT_LT(now, until) << "no progress: " << done << " reads done";
      gap = std::max<std::chrono::nanoseconds>(gap, now - last);
      last = now;
      const std::size_t n = icq.poll(c);
      for (std::size_t k = 0; k < n; ++k) {
        ASSERT_FALSE(c[k].status) << describe(c[k]);
        ++done;
        post();
        if (::testing::Test::HasFatalFailure()) return;
      }
    } while (!stop());
    // The last poll's own time counts too: descheduled in it, the thread
    // left the queue to the agent, which read it until the window's count.
    gap = std::max<std::chrono::nanoseconds>(gap, std::chrono::steady_clock::now() - last);
  };
  // A poll claims the queue's endpoints for 1 ms: a user thread descheduled
  // for longer (a loaded machine) rightly gives the queue back to the agent
  // until the next sweep. So the agent's reads are counted over windows of
  // 30 ms in which the user never paused for 0.4 ms since a poll before a
  // whole sweep (a sweep is counted when it starts: the first one counted
  // after the poll has ended when the second is). The agent that read the
  // queue on every turn did so hundreds of times in every window; now a
  // window with at most a few reads must come (on a quiet machine the first
  // one has none; under TSan's load a clean window once had 4).
  constexpr std::uint64_t kFewReads = 16;
  int clean = 0, unread = 0;
  std::uint64_t fewest = ~std::uint64_t{0};
  for (int attempt = 0; attempt < 40 && unread == 0; ++attempt) {
    gap = {};
    last = std::chrono::steady_clock::now();
    drive([] { return true; });  // one poll
    const std::uint64_t swept = agent.sweeps();
    drive([&] { return agent.sweeps() >= swept + 2; });
    ASSERT_FALSE(HasFatalFailure());
    const std::uint64_t reads = agent.queue_reads();
    const std::uint64_t done_before = done;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    drive([&] { return std::chrono::steady_clock::now() >= end; });
    ASSERT_FALSE(HasFatalFailure());
    if (gap >= std::chrono::microseconds(400)) continue;
    ++clean;
    EXPECT_GT(done - done_before, 0u);
    const std::uint64_t n = agent.queue_reads() - reads;
    fewest = std::min(fewest, n);
    if (n <= kFewReads) ++unread;
  }
  // The last reads, collected before the connections go.
  auto rest = collect(icq, posted - done);
  EXPECT_EQ(rest.size(), posted - done);
  if (clean == 0) GTEST_SKIP() << "the machine was too busy: the test thread paused for 0.4 ms in every window";
  EXPECT_GT(unread, 0) << "the agent read a queue its user drove in each of " << clean
                       << " windows of steady polling, at least " << fewest << " times (at most " << kFewReads
                       << " expected in one)";
}

}  // namespace

namespace {

// The note of a write with immediate data carries the write's length, so a
// write of 16 MiB or more (beyond the length field of the immediate data)
// reports its own length at the target, as on verbs.
TEST(SharedQueueNote, AWriteOfMoreThan16MiBReportsItsLength) {
  constexpr std::size_t kBig = (std::size_t{16} << 20) + 4096;
  PairOptions o;
  o.target_size = kBig;
  o.local_size = kBig;
  Pair p(o);
  std::memset(p.local_mem.data(), 0x5A, kBig);
  Segment r(p.tmr, 0, 0);
  ASSERT_OK(p.tep.recv({&r, 1}, 1));
  Segment s(p.lmr, 0, kBig);
  ASSERT_OK(p.iep.write_imm({&s, 1}, p.rr, 0, 0x1234, 2));
  auto sent = collect(p.icq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_FALSE(sent[0].status) << describe(sent[0]);
  auto got = collect(p.tcq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].status) << describe(got[0]);
  EXPECT_EQ(got[0].op, Opcode::recv_write_imm);
  EXPECT_EQ(got[0].imm, 0x1234u);
  EXPECT_EQ(got[0].length, kBig);
  EXPECT_EQ(p.target_mem[kBig - 1], 0x5A);
}

}  // namespace
