// The connection Hello (src/core/protocol/wire.cpp): what parse_hello accepts, and
// that a listener refuses a Remora peer of another protocol version.
#include <thread>

#include "core/impl.hpp"
#include "fabric/backend.hpp"
#include "unit_support.hpp"

namespace {

using namespace unit;
namespace wire = remora::detail::wire;

std::vector<std::uint8_t> raw_hello(std::uint32_t magic, std::uint16_t version, std::uint16_t header_len,
                                    std::size_t user_bytes) {
  wire::Hello h{magic, version, header_len, 4096, 0};
  std::vector<std::uint8_t> b(sizeof h + user_bytes, 0xAB);
  std::memcpy(b.data(), &h, sizeof h);
  return b;
}

TEST(Wire, MakeAndParseHello) {
  const std::uint8_t user[5] = {1, 2, 3, 4, 5};
  auto bytes = wire::make_hello(777, user);
  ASSERT_EQ(bytes.size(), sizeof(wire::Hello) + 5);
  auto p = wire::parse_hello(bytes);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->hello.version, wire::kVersion);
  EXPECT_EQ(p->hello.max_message, 777u);
  ASSERT_EQ(p->user.size(), 5u);
  EXPECT_EQ(0, std::memcmp(p->user.data(), user, 5));
  auto empty = wire::parse_hello(wire::make_hello(1, {}));
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->user.empty());
}

TEST(Wire, ParseRejectsWhatIsNotAHello) {
  EXPECT_FALSE(wire::parse_hello({}).has_value());
  auto good = raw_hello(wire::kHelloMagic, wire::kVersion, sizeof(wire::Hello), 8);
  EXPECT_FALSE(wire::parse_hello(std::span(good).first(sizeof(wire::Hello) - 1)).has_value());       // short
  EXPECT_FALSE(wire::parse_hello(raw_hello(0x12345678, wire::kVersion, 16, 8)).has_value());         // magic
  EXPECT_FALSE(wire::parse_hello(raw_hello(wire::kHelloMagic, wire::kVersion, 15, 8)).has_value());  // header < 16
  // A header length past the bytes received (would read beyond them).
  EXPECT_FALSE(wire::parse_hello(raw_hello(wire::kHelloMagic, wire::kVersion, 25, 8)).has_value());
  EXPECT_FALSE(wire::parse_hello(raw_hello(wire::kHelloMagic, wire::kVersion, 0xFFFF, 8)).has_value());
  // A longer header (a later minor extension) is skipped, within bounds.
  auto longer = wire::parse_hello(raw_hello(wire::kHelloMagic, wire::kVersion, 20, 8));
  ASSERT_TRUE(longer.has_value());
  EXPECT_EQ(longer->user.size(), 4u);
  // The version is reported, not judged: callers refuse other versions.
  auto other = wire::parse_hello(raw_hello(wire::kHelloMagic, wire::kVersion + 1, 16, 0));
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->hello.version, wire::kVersion + 1);
}

// A peer announcing another protocol version is refused by the listener's
// agent (it never becomes a ConnectionRequest); the same peer with our
// version gets through. The peer is driven through the transport directly.
TEST(Wire, ListenerRefusesAnotherProtocolVersion) {
  auto fabric = MUST(Fabric::open({}));
  auto zone = MUST(fabric.create_zone());
  auto lis = MUST(zone.listen("127.0.0.1", 0));
  auto transport = MUST(remora::backend::Transport::open({}));
  auto domain = MUST(transport->open_domain());

  auto attempt = [&](std::uint16_t version) -> remora::backend::CmEvent::Kind {
    auto conn = MUST(domain->create_connection(nullptr, 16, true));
    auto pdata = raw_hello(wire::kHelloMagic, version, sizeof(wire::Hello), 3);
    MUST(conn->connect("127.0.0.1", lis.port(), pdata));
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    remora::backend::CmEvent ev;
    while (std::chrono::steady_clock::now() < deadline) {
      if (domain->next_cm_event(ev) && ev.cm_id == conn->cm_id()) {
        if (ev.kind == remora::backend::CmEvent::error) {
          // Refused with our Hello: the peer can tell it was a Remora listener.
          auto h = wire::parse_hello(ev.data);
          EXPECT_TRUE(h.has_value());
          if (h) {
            EXPECT_EQ(h->hello.version, wire::kVersion);
          }
        }
        return ev.kind;
      }
      // Our version reaches the listener as a request, to be accepted.
      if (auto req = lis.next_request(std::chrono::milliseconds(1))) {
        auto ep = MUST(zone.create_cq());
        auto tep = MUST(zone.create_endpoint({.send_cq = &ep}));
        MUST(req->accept(tep));
        while (std::chrono::steady_clock::now() < deadline)
          if (domain->next_cm_event(ev) && ev.cm_id == conn->cm_id()) return ev.kind;
        break;
      }
    }
    ADD_FAILURE() << "no outcome for version " << version;
    return remora::backend::CmEvent::shutdown;
  };
  EXPECT_EQ(attempt(wire::kVersion + 1), remora::backend::CmEvent::error);
  EXPECT_EQ(attempt(1), remora::backend::CmEvent::error);
  EXPECT_EQ(attempt(wire::kVersion), remora::backend::CmEvent::connected);
}

}  // namespace
