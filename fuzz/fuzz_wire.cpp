// fuzz/fuzz_wire.cpp - the connection protocol's parsers (src/core/protocol/wire.cpp):
// the Hello at the start of connection private data, the 48-byte control
// messages, and the decoding of the 64-bit immediate data of messages,
// writes with immediate and receive acknowledgements.
//
// Each input goes through all of them: whole to parse_hello and parse_ctl,
// and, when it has 8 bytes, its first 8 as immediate data.
#include <span>

#include "core/impl.hpp"
#include "fuzz_common.hpp"

namespace wire = remora::detail::wire;
using namespace remora_fuzz;

namespace {

Bytes ctl_bytes(const wire::Ctl& c) {
  Bytes b;
  append(b, c);
  return b;
}

void check_hello(std::span<const std::uint8_t> in) {
  auto h = wire::parse_hello(in);
  if (!h) {
    // Only what the rules reject: too short, another magic, a header length
    // outside [sizeof(Hello), size].
    if (in.size() >= sizeof(wire::Hello)) {
      wire::Hello raw;
      std::memcpy(&raw, in.data(), sizeof raw);
      FUZZ_CHECK(raw.magic != wire::kHelloMagic || raw.header_len < sizeof(wire::Hello) || raw.header_len > in.size());
    }
    return;
  }
  FUZZ_CHECK(h->hello.magic == wire::kHelloMagic);
  FUZZ_CHECK(h->hello.header_len >= sizeof(wire::Hello) && h->hello.header_len <= in.size());
  FUZZ_CHECK(h->user.data() == in.data() + h->hello.header_len);
  FUZZ_CHECK(h->user.size() == in.size() - h->hello.header_len);
  FUZZ_CHECK(std::memcmp(&h->hello, in.data(), sizeof(wire::Hello)) == 0);
  // A Hello of ours with the same message size and private data parses
  // back to the same values (whatever the peer put in its header).
  auto ours = wire::make_hello(h->hello.max_message, h->user);
  auto back = wire::parse_hello(ours);
  FUZZ_CHECK(back && back->hello.version == wire::kVersion && back->hello.max_message == h->hello.max_message);
  FUZZ_CHECK(back->user.size() == h->user.size() &&
             (h->user.empty() || std::memcmp(back->user.data(), h->user.data(), h->user.size()) == 0));
}

void check_ctl(std::span<const std::uint8_t> in) {
  wire::Ctl c{};
  const auto res = wire::parse_ctl(in, c);
  if (in.size() != sizeof(wire::Ctl)) {
    FUZZ_CHECK(res == wire::CtlCheck::malformed);
    return;
  }
  if (res == wire::CtlCheck::malformed) {
    std::uint32_t magic;
    std::memcpy(&magic, in.data(), sizeof magic);
    FUZZ_CHECK(magic != wire::kCtlMagic);
    return;
  }
  // Well framed: `c` holds the bytes as they came, for an answer.
  FUZZ_CHECK(std::memcmp(&c, in.data(), sizeof c) == 0);
  const bool known_op = c.op == wire::op_atomic_write || c.op == wire::op_flush || c.op == wire::op_bye ||
                        c.op == wire::op_direct_offer || c.op == wire::op_direct_revoke || c.op == wire::op_ring_offer;
  const bool known_flush = c.flush_type <= static_cast<std::uint8_t>(remora::FlushType::persistent);
  switch (res) {
    case wire::CtlCheck::ok: FUZZ_CHECK(known_op && (c.op != wire::op_flush || known_flush)); break;
    case wire::CtlCheck::unknown_op: FUZZ_CHECK(!known_op); break;
    case wire::CtlCheck::unknown_flush: FUZZ_CHECK(c.op == wire::op_flush && !known_flush); break;
    default: FUZZ_CHECK(false);
  }
  if (res == wire::CtlCheck::ok) {
    // What make_ctl builds from the fields parses the same way.
    auto mine = wire::make_ctl(static_cast<wire::CtlOp>(c.op), c.key, c.addr, c.len);
    mine.flush_type = c.flush_type;
    wire::Ctl again{};
    FUZZ_CHECK(wire::parse_ctl(ctl_bytes(mine), again) == wire::CtlCheck::ok);
    FUZZ_CHECK(again.op == c.op && again.key == c.key && again.addr == c.addr && again.len == c.len);
  }
}

void check_immediate(std::uint64_t d) {
  const auto kind = wire::kind_of(d);
  FUZZ_CHECK(static_cast<std::uint64_t>(kind) == d >> 56);
  const std::uint64_t len = wire::write_imm_length(d);
  FUZZ_CHECK(len <= wire::kLengthUnknown && len == ((d >> 32) & 0xffffff));
  const std::uint64_t count = wire::ack_count(d);
  FUZZ_CHECK(count <= wire::kAckCountMask && count == (d & wire::kAckCountMask));
  // The encoders give back what the decoders read.
  const auto imm = static_cast<std::uint32_t>(d);
  const std::uint64_t w = wire::write_imm_data(imm, len);
  FUZZ_CHECK(wire::kind_of(w) == wire::write_imm && wire::write_imm_length(w) == len &&
             static_cast<std::uint32_t>(w) == imm);
  // Any length, the whole 64 bits: 16 MiB or more reads as unknown.
  const std::uint64_t w2 = wire::write_imm_data(imm, d);
  FUZZ_CHECK(wire::write_imm_length(w2) == (d < wire::kLengthUnknown ? d : wire::kLengthUnknown));
  const std::uint64_t a = wire::ack_data(d);
  FUZZ_CHECK(wire::kind_of(a) == wire::msg_ack && wire::ack_count(a) == count);
  FUZZ_CHECK(wire::kind_of(wire::data(kind, imm)) == kind);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<Bytes> seeds;
  const std::uint8_t user[] = {'p', 'r', 'i', 'v', 0, 0xff};
  seeds.push_back(wire::make_hello(65536, {}));
  seeds.push_back(wire::make_hello(1u << 20, user));
  {
    Bytes longer_header = wire::make_hello(4096, user);  // header_len 20: 4 bytes the parser skips
    wire::Hello h;
    std::memcpy(&h, longer_header.data(), sizeof h);
    h.header_len = sizeof h + 4;
    std::memcpy(longer_header.data(), &h, sizeof h);
    seeds.push_back(longer_header);
    h.version = 1;
    h.header_len = 200;  // past the end
    std::memcpy(longer_header.data(), &h, sizeof h);
    seeds.push_back(longer_header);
  }
  seeds.push_back(Bytes(15, 0));
  auto atomic = wire::make_ctl(wire::op_atomic_write, 0x1234, 0x7f0000001000, 8);
  atomic.value = 0x0123456789abcdef;
  seeds.push_back(ctl_bytes(atomic));
  auto flush = wire::make_ctl(wire::op_flush, 0x1234, 0x7f0000001000, 4096);
  flush.flush_type = static_cast<std::uint8_t>(remora::FlushType::persistent);
  seeds.push_back(ctl_bytes(flush));
  flush.flush_type = 9;
  seeds.push_back(ctl_bytes(flush));
  auto bye = wire::make_ctl(wire::op_bye, 0, 0, 0);
  seeds.push_back(ctl_bytes(bye));
  auto reply = bye;
  reply.op = wire::op_flush;
  reply.status = static_cast<std::uint16_t>(remora::Errc::not_supported);
  reply.token = 42;
  seeds.push_back(ctl_bytes(reply));
  reply.op = 77;
  seeds.push_back(ctl_bytes(reply));
  Bytes imm;
  append(imm, wire::write_imm_data(0xdeadbeef, 4096));
  seeds.push_back(imm);
  imm.clear();
  append(imm, wire::ack_data(12345));
  seeds.push_back(imm);
  imm.clear();
  append(imm, wire::data(wire::user_msg_imm, 7));
  seeds.push_back(imm);
  write_seeds_if_asked(seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> in(data, size);
  check_hello(in);
  check_ctl(in);
  if (size >= sizeof(std::uint64_t)) {
    std::uint64_t d;
    std::memcpy(&d, data, sizeof d);
    check_immediate(d);
  }
  return 0;
}
