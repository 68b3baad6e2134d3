// Connection management between two processes: private data both ways,
// accept and reject, and the events established / rejected / unreachable /
// disconnected / lost.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "harness.hpp"

using namespace remora;
using namespace remora_it;

namespace {

/// A loopback port nothing listens on (bound, read back and closed).
std::uint16_t unused_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sin;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&sin), &len) != 0) {
    if (s >= 0) ::close(s);
    return 0;
  }
  ::close(s);
  return ntohs(sin.sin_port);
}

void expect_clean_exit(Peer& peer) {
  auto st = peer.quit();
  ASSERT_TRUE(st.has_value()) << "peer did not exit";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "status " << *st << "\n" << peer.proc().transcript();
}

TEST(Connections, PrivateDataOfAtLeast200BytesBothWays) {
  auto peer = Peer::start({});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  int conn = 0;
  for (std::size_t n : {200u, 231u, static_cast<unsigned>(kMaxPrivateData)}) {
    SCOPED_TRACE(n);
    ++conn;
    auto pdata = make_pdata(n, static_cast<std::uint8_t>(n));
    Endpoint ep;
    std::vector<std::uint8_t> reply;
    ASSERT_TRUE(client.connect(ep, peer->port(), pdata, &reply));
    // The server's accept data: the peer derives it from what it received,
    // so equality proves both directions.
    EXPECT_EQ(reply.size(), n);
    EXPECT_EQ(reply, accept_reply(pdata));
    auto line = peer->proc().wait_line("ACCEPTED conn=" + std::to_string(conn) + " ", 5s);
    ASSERT_TRUE(line) << peer->proc().transcript();
    EXPECT_EQ(field(*line, "pdata"), to_hex(pdata));
    EXPECT_TRUE(peer->wait_event(conn, "established"));
    ep.close();
  }
  {
    // connect() + next_event(): the `established` event carries the reply.
    ++conn;
    auto pdata = make_pdata(222, 9);
    auto ep = client.endpoint();
    ASSERT_TRUE(ep.ok());
    ASSERT_TRUE(ep->connect("127.0.0.1", peer->port(), pdata).ok());
    // The agent may already have handled the transport's event (loopback
    // handshakes are fast): either state is right here.
    const auto st = ep->state();
    EXPECT_TRUE(st == EndpointState::connect_pending || st == EndpointState::connected) << to_string(st);
    ConnectionEvent ev;
    ASSERT_TRUE(expect_event(*ep, ConnectionEventType::established, 10s, &ev));
    EXPECT_EQ(ev.private_data, accept_reply(pdata));
    EXPECT_EQ(ep->state(), EndpointState::connected);
    EXPECT_TRUE(peer->wait_event(conn, "established"));
  }
  // One byte more than the limit is refused locally.
  auto ep = client.endpoint();
  ASSERT_TRUE(ep.ok());
  auto big = make_pdata(kMaxPrivateData + 1);
  EXPECT_EQ(ep->connect("127.0.0.1", peer->port(), big).error(), Errc::invalid_argument);
  expect_clean_exit(*peer);
}

TEST(Connections, RejectDeliversPrivateDataAndListenerKeepsServing) {
  auto peer = Peer::start({});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());

  std::vector<std::uint8_t> pdata(kRejectPrefix.begin(), kRejectPrefix.end());
  auto tail = make_pdata(214, 3);
  pdata.insert(pdata.end(), tail.begin(), tail.end());  // 220 bytes
  {
    auto ep = client.endpoint();
    ASSERT_TRUE(ep.ok());
    ASSERT_TRUE(ep->connect("127.0.0.1", peer->port(), pdata).ok());
    ConnectionEvent ev;
    ASSERT_TRUE(expect_event(*ep, ConnectionEventType::rejected, 10s, &ev));
    EXPECT_EQ(ev.private_data, reject_reply(pdata));
    EXPECT_GE(ev.private_data.size(), 200u);
    EXPECT_NE(ep->state(), EndpointState::connected);
    auto line = peer->proc().wait_line("REJECTED conn=1 ", 5s);
    ASSERT_TRUE(line);
    EXPECT_EQ(field(*line, "rc"), "ok");
    EXPECT_EQ(field(*line, "pdata"), to_hex(pdata));
    // Posting on a rejected endpoint: completes at once as flushed, or is refused.
    Segment s = client.seg(0, 8);
    auto r = ep->write({&s, 1}, peer->region("rw"), 0, 0xAB);
    if (r.ok()) {
      Completion c;
      ASSERT_TRUE(client.wait_cookie(0xAB, &c, 2s));
      EXPECT_EQ(c.status, Errc::flushed);
    }
  }
  {
    // connect_and_wait reports the rejection as an error.
    auto ep = client.endpoint();
    ASSERT_TRUE(ep.ok());
    auto r = ep->connect_and_wait("127.0.0.1", peer->port(), pdata, 10s);
    EXPECT_EQ(r.error(), Errc::connection_rejected);
  }
  // The listener keeps accepting.
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(220)));
  Segment s = client.seg(0, 64);
  ASSERT_TRUE(ep.read({&s, 1}, peer->region("ro"), 0, 1).ok());
  Completion c;
  ASSERT_TRUE(client.wait_cookie(1, &c));
  EXPECT_FALSE(c.status);
  ep.close();
  expect_clean_exit(*peer);
}

TEST(Connections, UnreachableWhenNothingListens) {
  Client client;
  ASSERT_TRUE(client.init());
  const std::uint16_t port = unused_port();
  ASSERT_NE(port, 0);
  auto ep = client.endpoint();
  ASSERT_TRUE(ep.ok());
  auto r = ep->connect("127.0.0.1", port, make_pdata(200));
  if (r.ok()) {
    EXPECT_TRUE(expect_event(*ep, ConnectionEventType::unreachable, 10s));
  } else {
    EXPECT_EQ(r.error(), Errc::unreachable);
  }
  EXPECT_NE(ep->state(), EndpointState::connected);
  auto ep2 = client.endpoint();
  ASSERT_TRUE(ep2.ok());
  EXPECT_EQ(ep2->connect_and_wait("127.0.0.1", port, {}, 10s).error(), Errc::unreachable);
}

TEST(Connections, ClientDisconnectIsSeenAsDisconnected) {
  auto peer = Peer::start({"--recv", "2"});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(200)));
  ASSERT_TRUE(peer->wait_event(1, "established"));
  ASSERT_TRUE(ep.disconnect().ok());
  EXPECT_TRUE(expect_event(ep, ConnectionEventType::disconnected, 5s));
  EXPECT_EQ(ep.state(), EndpointState::disconnected);
  EXPECT_TRUE(peer->wait_event(1, "disconnected")) << peer->proc().transcript();
  // The peer's posted receives are flushed.
  auto line = peer->proc().wait_line("RECV conn=1 ", 5s);
  ASSERT_TRUE(line) << peer->proc().transcript();
  EXPECT_EQ(field(*line, "status"), std::to_string(static_cast<int>(Errc::flushed)));
  // Posts after the disconnect complete at once as flushed, cookie kept.
  Segment s = client.seg(0, 8);
  ASSERT_TRUE(ep.write({&s, 1}, peer->region("rw"), 0, 0x51).ok());
  Completion c;
  ASSERT_TRUE(client.wait_cookie(0x51, &c, 2s));
  EXPECT_EQ(c.status, Errc::flushed);
  EXPECT_EQ(c.op, Opcode::write);
  expect_clean_exit(*peer);
}

TEST(Connections, PeerDisconnectIsSeenAsDisconnected) {
  auto peer = Peer::start({});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(200)));
  ASSERT_TRUE(peer->wait_event(1, "established"));
  ASSERT_TRUE(peer->proc().send("disconnect 1"));
  auto line = peer->proc().wait_line("DISCONNECTED conn=1 ", 5s);
  ASSERT_TRUE(line);
  EXPECT_EQ(field(*line, "rc"), "ok");
  EXPECT_TRUE(expect_event(ep, ConnectionEventType::disconnected, 10s));
  EXPECT_EQ(ep.state(), EndpointState::disconnected);
  EXPECT_TRUE(peer->wait_event(1, "disconnected"));
  expect_clean_exit(*peer);
}

TEST(Connections, PeerKilledIsSeenAsLost) {
  auto peer = Peer::start({});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(200)));
  ASSERT_TRUE(peer->wait_event(1, "established"));
  peer->proc().kill_now();
  EXPECT_TRUE(expect_event(ep, ConnectionEventType::lost, 10s));
  EXPECT_EQ(ep.state(), EndpointState::error);
  Segment s = client.seg(0, 8);
  ASSERT_TRUE(ep.read({&s, 1}, peer->region("rw"), 0, 0x61).ok());
  Completion c;
  ASSERT_TRUE(client.wait_cookie(0x61, &c, 2s));
  EXPECT_EQ(c.status, Errc::flushed);
}

TEST(Connections, ManyConcurrentConnectionsToOneTarget) {
  auto peer = Peer::start({});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  constexpr int kConns = 6;
  Endpoint eps[kConns];
  for (int i = 0; i < kConns; ++i) ASSERT_TRUE(client.connect(eps[i], peer->port(), make_pdata(200, i)));
  const RemoteRegion& rw = peer->region("rw");
  const std::size_t chunk = 8192;
  for (int i = 0; i < kConns; ++i) {
    fill(client.buf() + i * chunk, chunk, static_cast<std::uint8_t>(i + 1));
    Segment s = client.seg(i * chunk, chunk);
    ASSERT_TRUE(eps[i].write({&s, 1}, rw, i * chunk, 10 + i).ok());
    ASSERT_TRUE(eps[i].flush(rw, i * chunk, chunk, FlushType::visibility, 20 + i).ok());
  }
  auto got = client.collect(2 * kConns);
  ASSERT_EQ(got.size(), 2u * kConns);
  for (const auto& c : got) {
    EXPECT_FALSE(c.status) << c.status.message();
    const int i = static_cast<int>(c.cookie % 10);
    EXPECT_EQ(c.endpoint_id, eps[i].id()) << "cookie " << c.cookie;
  }
  std::string g;
  auto d = peer->dump(&g);
  ASSERT_TRUE(d);
  EXPECT_EQ(g, "ok");
  EXPECT_TRUE(region_equals(*d, 0, peer->region_size(), 0,
                            std::vector<std::uint8_t>(client.buf(), client.buf() + kConns * chunk)));
  for (auto& e : eps) e.close();
  expect_clean_exit(*peer);
}

// The oracle itself: a damaged guard byte is reported by the dump check, by
// the peer's own check and by its exit status.
TEST(Harness, GuardDamageIsDetected) {
  auto peer = Peer::start({});
  ASSERT_TRUE(peer);
  std::string guards;
  auto d = peer->dump(&guards);
  ASSERT_TRUE(d);
  EXPECT_EQ(guards, "ok");
  EXPECT_TRUE(guards_intact(*d, 3, peer->region_size()));
  for (std::size_t r = 0; r < 3; ++r) EXPECT_TRUE(region_pristine(*d, r, peer->region_size()));
  ASSERT_TRUE(peer->proc().send("poke-guard"));
  ASSERT_TRUE(peer->proc().wait_line("POKED", 5s));
  d = peer->dump(&guards);
  ASSERT_TRUE(d);
  EXPECT_NE(guards, "ok");
  EXPECT_FALSE(guards_intact(*d, 3, peer->region_size()));
  auto st = peer->quit();
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 3) << "status " << *st;
}

// A graceful disconnect while operations are outstanding (the target is
// stopped, so none can finish): each completes exactly once as flushed.
TEST(Connections, DisconnectFlushesOutstandingOperations) {
  auto peer = Peer::start({});
  ASSERT_TRUE(peer);
  Client client;
  // On the transport: a stopped target completes nothing there. The
  // same-host direct path, like an RDMA NIC, places writes in a stopped
  // process's memory.
  client.same_host = false;
  ASSERT_TRUE(client.init());
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(200)));
  ASSERT_TRUE(peer->wait_event(1, "established"));
  ASSERT_TRUE(peer->proc().stop()) << "the peer did not stop";
  const RemoteRegion& rw = peer->region("rw");
  std::set<std::uint64_t> posted;
  for (std::uint64_t i = 0; i < 40; ++i) {
    Segment s = client.seg((i % 8) * 8192, 8192);
    Result<void> r;
    switch (i % 4) {
      case 0: r = ep.write({&s, 1}, rw, 0, 500 + i); break;
      case 1: r = ep.read({&s, 1}, rw, 0, 500 + i); break;
      case 2: r = ep.flush(rw, 0, 8192, FlushType::visibility, 500 + i); break;
      case 3: r = ep.atomic_write(rw, 0, i, 500 + i, PostFlags::fence); break;
    }
    ASSERT_TRUE(r.ok()) << r.error().message();
    posted.insert(500 + i);
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ep.disconnect().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "disconnect blocked on the stopped peer";
  auto got = client.collect(posted.size(), 10s);
  EXPECT_EQ(got.size(), posted.size());
  std::set<std::uint64_t> seen;
  std::string not_flushed;
  for (const auto& c : got) {
    EXPECT_TRUE(seen.insert(c.cookie).second) << "cookie " << c.cookie << " twice";
    EXPECT_TRUE(posted.count(c.cookie)) << "unknown cookie " << c.cookie;
    EXPECT_TRUE(c.status) << "cookie " << c.cookie << " succeeded on a stopped target";
    if (c.status != Errc::flushed) {
      // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict
      // for the chain of operator+ (GCC bug 105329).
      not_flushed.append(" ").append(std::to_string(c.cookie)).append("(").append(to_string(c.op));
      not_flushed.append("):").append(std::to_string(c.status.value()));
    }
  }
  EXPECT_TRUE(client.expect_no_completion(200ms));
  EXPECT_EQ(ep.state(), EndpointState::disconnected);
  std::string events;
  for (;;) {
    auto ev = ep.next_event(300ms);
    if (!ev) break;
    events += std::string(events.empty() ? "" : ",") + to_string(ev->type);
  }
  // The target, resumed, sees the connection end and still checks out.
  peer->proc().signal(SIGCONT);
  EXPECT_TRUE(peer->proc().wait_line("EVENT conn=1 type=disconnected", 10s) ||
              peer->proc().wait_line("EVENT conn=1 type=lost", 1s))
      << peer->proc().transcript();
  expect_clean_exit(*peer);

  // Endpoint::disconnect documents: "Outstanding operations complete as
  // flushed" and one `disconnected` event.
  if (!not_flushed.empty() || events != "disconnected") {
    FAIL() << "Endpoint::disconnect() with operations outstanding reports events [" << events
           << "] (want [disconnected]) and completions not flushed:" << not_flushed
           << ". src/core/handles/endpoint.cpp Endpoint::disconnect() drains the CQ after "
              "conn->shutdown() while the state is still `connected`, so EndpointImpl::handle() "
              "(src/core/engine/engine.cpp, EndpointImpl::handle) takes the provider's cancellation entries "
              "(ECANCELED) as remote failures: remote_access status + fail(lost). Fix: set the state "
              "to disconnected before the drain (or skip the drain and let flush_all() complete "
              "every slot as flushed).";
  }
}

// SIGTERM: the peer checks its guards and exits 0.
TEST(Connections, PeerStopsOnSigtermAfterServing) {
  auto peer = Peer::start({"--regions", "rw,wo"});
  ASSERT_TRUE(peer);
  Client client;
  ASSERT_TRUE(client.init());
  Endpoint ep;
  ASSERT_TRUE(client.connect(ep, peer->port(), make_pdata(200)));
  fill(client.buf(), 4096, 3);
  Segment s = client.seg(0, 4096);
  ASSERT_TRUE(ep.write({&s, 1}, peer->region("wo"), peer->region_size() - 4096, 1).ok());
  Completion c;
  ASSERT_TRUE(client.wait_cookie(1, &c));
  EXPECT_FALSE(c.status);
  peer->proc().signal(SIGTERM);
  auto bye = peer->proc().wait_line("BYE ", 10s);
  ASSERT_TRUE(bye) << peer->proc().transcript();
  EXPECT_EQ(field(*bye, "guards"), "ok");
  auto st = peer->proc().wait_exit(10s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "status " << *st;
  EXPECT_TRUE(expect_event(ep, ConnectionEventType::disconnected, 10s));
}

}  // namespace
