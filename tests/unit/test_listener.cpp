// Listener and ConnectionRequest: private data, accept, reject, errors.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "unit_support.hpp"

namespace {

using namespace unit;

class ListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fabric = MUST(Fabric::open({}));
    sz = MUST(fabric.create_zone());
    cz = MUST(fabric.create_zone());
    scq = MUST(sz.create_cq());
    ccq = MUST(cz.create_cq());
    lis = MUST(sz.listen("127.0.0.1", 0));
  }
  Endpoint server_ep() {
    EndpointOptions o;
    o.send_cq = &scq;
    return MUST(sz.create_endpoint(o));
  }
  Endpoint client_ep() {
    EndpointOptions o;
    o.send_cq = &ccq;
    return MUST(cz.create_endpoint(o));
  }

  Fabric fabric;
  ProtectionZone sz, cz;
  CompletionQueue scq, ccq;
  Listener lis;
};

TEST_F(ListenerTest, ListenerBasics) {
  {  // PortZeroBindsARealPort
    EXPECT_TRUE(lis.valid());
    EXPECT_NE(lis.port(), 0);
    auto other = MUST(sz.listen("127.0.0.1", 0));
    EXPECT_NE(other.port(), 0);
    EXPECT_NE(other.port(), lis.port());
    EXPECT_GE(lis.fd(), 0);
  }
  {  // SamePortTwiceIsAddressInUse
    EXPECT_ERR(cz.listen("127.0.0.1", lis.port()), Errc::address_in_use);
  }
  {  // NextRequestTimesOut
    EXPECT_ERR(lis.next_request(30ms), Errc::timeout);
    EXPECT_FALSE(readable(lis.fd(), 0));
  }
  {  // NextEventTimesOut
    auto ce = client_ep();
    EXPECT_ERR(ce.next_event(20ms), Errc::timeout);
    EXPECT_FALSE(readable(ce.event_fd(), 0));
  }
  {  // DefaultRequestIsInvalidHandle
    ConnectionRequest req;
    EXPECT_FALSE(req.valid());
    EXPECT_TRUE(req.private_data().empty());
    auto se = server_ep();
    EXPECT_ERR(req.accept(se), Errc::invalid_handle);
    EXPECT_ERR(req.reject(), Errc::invalid_handle);
  }
  {  // InvalidAndClosedListener
    Listener none;
    EXPECT_FALSE(none.valid());
    EXPECT_EQ(none.port(), 0);
    EXPECT_EQ(none.fd(), -1);
    EXPECT_ERR(none.next_request(1ms), Errc::invalid_handle);
    Listener moved = std::move(lis);
    EXPECT_ERR(lis.next_request(1ms), Errc::invalid_handle);  // NOLINT(bugprone-use-after-move)
    moved.close();
    EXPECT_FALSE(moved.valid());
    EXPECT_ERR(moved.next_request(1ms), Errc::invalid_handle);
    moved.close();
  }
}

TEST_F(ListenerTest, PrivateDataOfMaximumSizeBothWays) {
  auto ce = client_ep();
  auto se = server_ep();
  const auto hello = pattern(kMaxPrivateData, 0x10);
  const auto answer = pattern(kMaxPrivateData, 0x90);
  ASSERT_OK(ce.connect("127.0.0.1", lis.port(), hello));
  EXPECT_EQ(ce.state(), EndpointState::connect_pending);
  ASSERT_TRUE(readable(lis.fd(), static_cast<int>(kWait.count())));
  auto req = MUST(lis.next_request(kWait));
  EXPECT_FALSE(readable(lis.fd(), 0));
  EXPECT_TRUE(req.valid());
  EXPECT_EQ(req.private_data(), hello);
  ASSERT_OK(req.accept(se, answer));
  ASSERT_TRUE(readable(ce.event_fd(), static_cast<int>(kWait.count())));
  auto ev = MUST(ce.next_event(kWait));
  EXPECT_FALSE(readable(ce.event_fd(), 0));
  EXPECT_EQ(ev.type, ConnectionEventType::established);
  EXPECT_EQ(ev.private_data, answer);
  auto sev = MUST(se.next_event(kWait));
  EXPECT_EQ(sev.type, ConnectionEventType::established);
  EXPECT_EQ(ce.state(), EndpointState::connected);
  EXPECT_EQ(se.state(), EndpointState::connected);
}

TEST_F(ListenerTest, ConnectAndWaitReturnsServerData) {
  auto ce = client_ep();
  auto se = server_ep();
  const auto hello = pattern(17, 1);
  const auto answer = pattern(kMaxPrivateData, 2);
  std::thread server([&] {
    auto req = lis.next_request(kWait);
    if (!req) return;
    EXPECT_EQ(req->private_data(), hello);
    EXPECT_OK(req->accept(se, answer));
  });
  auto got = ce.connect_and_wait("127.0.0.1", lis.port(), hello, kWait);
  server.join();
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(*got, answer);
  EXPECT_EQ(ce.state(), EndpointState::connected);
}

TEST_F(ListenerTest, EmptyPrivateDataAndConnectTwice) {
  {  // EmptyPrivateData
    auto ce = client_ep();
    auto se = server_ep();
    ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
    auto req = MUST(lis.next_request(kWait));
    EXPECT_TRUE(req.private_data().empty());
    ASSERT_OK(req.accept(se));
    auto ev = MUST(ce.next_event(kWait));
    EXPECT_EQ(ev.type, ConnectionEventType::established);
    EXPECT_TRUE(ev.private_data.empty());
  }
  {  // ConnectTwiceIsInvalidState
    auto ce = client_ep();
    auto se = server_ep();
    ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
    EXPECT_ERR(ce.connect("127.0.0.1", lis.port()), Errc::invalid_state);
    auto req = MUST(lis.next_request(kWait));
    ASSERT_OK(req.accept(se));
    EXPECT_EQ(MUST(ce.next_event(kWait)).type, ConnectionEventType::established);
    EXPECT_ERR(ce.connect("127.0.0.1", lis.port()), Errc::invalid_state);
    EXPECT_ERR(lis.next_request(100ms), Errc::timeout);
  }
}

TEST_F(ListenerTest, TooMuchPrivateDataIsInvalidArgument) {
  auto ce = client_ep();
  auto se = server_ep();
  const std::vector<std::uint8_t> too_long(kMaxPrivateData + 1, 0xAB);
  EXPECT_ERR(ce.connect("127.0.0.1", lis.port(), too_long), Errc::invalid_argument);
  EXPECT_ERR(ce.connect_and_wait("127.0.0.1", lis.port(), too_long, 100ms), Errc::invalid_argument);
  EXPECT_EQ(ce.state(), EndpointState::unconnected);
  EXPECT_ERR(lis.next_request(100ms), Errc::timeout) << "a refused connect reached the listener";

  ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
  auto req = MUST(lis.next_request(kWait));
  EXPECT_ERR(req.accept(se, too_long), Errc::invalid_argument);
  EXPECT_ERR(req.reject(too_long), Errc::invalid_argument);
  EXPECT_EQ(se.state(), EndpointState::unconnected);
  // The request is still usable.
  ASSERT_OK(req.accept(se));
  EXPECT_EQ(MUST(ce.next_event(kWait)).type, ConnectionEventType::established);
}

TEST_F(ListenerTest, RejectWithPrivateDataReachesConnectAndWait) {
  auto ce = client_ep();
  const auto why = pattern(kMaxPrivateData, 0x33);
  std::thread server([&] {
    auto req = lis.next_request(kWait);
    if (!req) return;
    EXPECT_OK(req->reject(why));
  });
  auto got = ce.connect_and_wait("127.0.0.1", lis.port(), {}, kWait);
  server.join();
  EXPECT_ERR(got, Errc::connection_rejected);
  EXPECT_NE(ce.state(), EndpointState::connected);
}

TEST_F(ListenerTest, RejectedEventCarriesPrivateData) {
  auto ce = client_ep();
  const auto why = pattern(kMaxPrivateData, 0x44);
  ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
  auto req = MUST(lis.next_request(kWait));
  ASSERT_OK(req.reject(why));
  EXPECT_ERR(req.reject(), Errc::invalid_handle) << "reject twice";
  auto se = server_ep();
  EXPECT_ERR(req.accept(se), Errc::invalid_handle) << "accept after reject";
  auto ev = MUST(ce.next_event(kWait));
  EXPECT_EQ(ev.type, ConnectionEventType::rejected) << to_string(ev.type);
  EXPECT_EQ(ev.private_data, why);
  EXPECT_NE(ce.state(), EndpointState::connected);
  // Posting on it now completes as flushed (it is no longer pending).
  std::vector<std::uint8_t> mem(64);
  auto mr = MUST(cz.register_memory(mem.data(), mem.size(), kLocal));
  Segment s(mr, 0, 8);
  ASSERT_OK(ce.send({&s, 1}, 5));
  auto c = collect(ccq, 1, 1000ms);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, make_error_code(Errc::flushed));
}

TEST_F(ListenerTest, DroppedRequestIsRejected) {
  auto ce = client_ep();
  ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
  { auto req = MUST(lis.next_request(kWait)); }
  auto ev = MUST(ce.next_event(kWait));
  EXPECT_EQ(ev.type, ConnectionEventType::rejected) << to_string(ev.type);
}

TEST_F(ListenerTest, NobodyListeningIsUnreachable) {
  // A port held by a socket that is bound but never listens: connections to
  // it are refused, and no test running in parallel can be given it for its
  // listener (a port freed by closing a listener could, and then this test
  // connected to that other test's listener).
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  const std::uint16_t port = ntohs(a.sin_port);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{holder};
  auto ce = client_ep();
  EXPECT_ERR(ce.connect_and_wait("127.0.0.1", port, {}, kWait), Errc::unreachable);
  EXPECT_NE(ce.state(), EndpointState::connected);

  // The same through connect + next_event (either step may report it).
  auto ce2 = client_ep();
  auto r = ce2.connect("127.0.0.1", port);
  if (r.ok()) {
    auto ev = MUST(ce2.next_event(kWait));
    EXPECT_EQ(ev.type, ConnectionEventType::unreachable) << to_string(ev.type);
  } else {
    EXPECT_EQ(r.error(), make_error_code(Errc::unreachable)) << r.error().message();
  }
}

TEST_F(ListenerTest, AcceptTwiceOrIntoInvalidEndpointIsInvalidHandle) {
  {  // AcceptTwiceIsInvalidHandle
    auto ce = client_ep();
    auto se = server_ep();
    auto se2 = server_ep();
    ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
    auto req = MUST(lis.next_request(kWait));
    ASSERT_OK(req.accept(se));
    EXPECT_ERR(req.accept(se2), Errc::invalid_handle);
    EXPECT_ERR(req.reject(), Errc::invalid_handle);
    EXPECT_EQ(se2.state(), EndpointState::unconnected);
    EXPECT_EQ(MUST(ce.next_event(kWait)).type, ConnectionEventType::established);
  }
  {  // AcceptIntoInvalidEndpoint
    auto ce = client_ep();
    ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
    auto req = MUST(lis.next_request(kWait));
    Endpoint none;
    EXPECT_ERR(req.accept(none), Errc::invalid_handle);
    auto closed = server_ep();
    closed.close();
    EXPECT_ERR(req.accept(closed), Errc::invalid_handle);
    auto se = server_ep();
    ASSERT_OK(req.accept(se));
  }
}

TEST_F(ListenerTest, AcceptIntoEndpointOfAnotherZone) {
  auto ce = client_ep();
  auto wrong = client_ep();  // client zone, not the listener's
  ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
  auto req = MUST(lis.next_request(kWait));
  EXPECT_ERR(req.accept(wrong), Errc::zone_mismatch);
  EXPECT_EQ(wrong.state(), EndpointState::unconnected);
  auto se = server_ep();
  ASSERT_OK(req.accept(se));
  EXPECT_EQ(MUST(ce.next_event(kWait)).type, ConnectionEventType::established);
}

TEST_F(ListenerTest, AcceptIntoConnectedEndpointIsInvalidState) {
  auto c1 = client_ep();
  auto c2 = client_ep();
  auto se = server_ep();
  ASSERT_OK(c1.connect("127.0.0.1", lis.port()));
  auto r1 = MUST(lis.next_request(kWait));
  ASSERT_OK(r1.accept(se));
  ASSERT_EQ(MUST(se.next_event(kWait)).type, ConnectionEventType::established);
  ASSERT_EQ(se.state(), EndpointState::connected);

  ASSERT_OK(c2.connect("127.0.0.1", lis.port()));
  auto r2 = MUST(lis.next_request(kWait));
  EXPECT_ERR(r2.accept(se), Errc::invalid_state);
  EXPECT_EQ(se.state(), EndpointState::connected);
  // A server-zone endpoint that is itself still connecting is refused too.
  auto pending = server_ep();
  ASSERT_OK(pending.connect("127.0.0.1", lis.port()));
  EXPECT_ERR(r2.accept(pending), Errc::invalid_state);
  // Answer the request `pending` made (see RequestsLeftInAClosedListenerAreRejected).
  EXPECT_OK(MUST(lis.next_request(kWait)).reject());
  // The request survives the refusal.
  auto se2 = server_ep();
  ASSERT_OK(r2.accept(se2));
  EXPECT_EQ(MUST(c2.next_event(kWait)).type, ConnectionEventType::established);
}

TEST_F(ListenerTest, RequestsLeftInAClosedListenerAreRejected) {
  // listener.hpp: "a request dropped without either is rejected". A request
  // still queued when the listener closes is dropped too.
  auto ce = client_ep();
  ASSERT_OK(ce.connect("127.0.0.1", lis.port()));
  ASSERT_TRUE(readable(lis.fd(), static_cast<int>(kWait.count()))) << "request never arrived";
  lis.close();
  auto ev = ce.next_event(1000ms);
  if (!ev && ev.error() == Errc::timeout)
    FAIL() << "the client of a request left queued in a closed Listener never gets an answer "
              "(still "
           << to_string(ce.state()) << " after 1 s)";
  ASSERT_TRUE(ev.ok()) << ev.error().message();
  EXPECT_TRUE(ev->type == ConnectionEventType::rejected || ev->type == ConnectionEventType::unreachable)
      << to_string(ev->type);
}

}  // namespace
