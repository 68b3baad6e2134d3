// The wire protocol: the connection Hello and the control messages, built
// and parsed here only (layouts in core/impl.hpp, namespace wire).
#include <cstring>

#include "core/protocol/wire.hpp"
#include "remora/endpoint.hpp"

namespace remora::detail::wire {

std::vector<std::uint8_t> make_hello(std::uint32_t max_message, std::span<const std::uint8_t> user) {
  const Hello h{kHelloMagic, kVersion, sizeof(Hello), max_message, 0};
  std::vector<std::uint8_t> out(sizeof h + user.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!user.empty()) std::memcpy(out.data() + sizeof h, user.data(), user.size());
  return out;
}

std::optional<ParsedHello> parse_hello(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < sizeof(Hello)) return std::nullopt;
  ParsedHello p;
  std::memcpy(&p.hello, bytes.data(), sizeof(Hello));
  if (p.hello.magic != kHelloMagic || p.hello.header_len < sizeof(Hello) || p.hello.header_len > bytes.size())
    return std::nullopt;
  p.user = bytes.subspan(p.hello.header_len);
  return p;
}

CtlCheck parse_ctl(std::span<const std::uint8_t> bytes, Ctl& out) {
  if (bytes.size() != sizeof(Ctl)) return CtlCheck::malformed;
  std::memcpy(&out, bytes.data(), sizeof(Ctl));
  if (out.magic != kCtlMagic) return CtlCheck::malformed;
  switch (out.op) {
    case op_atomic_write:
    case op_bye:
    case op_direct_offer:
    case op_direct_revoke:
    case op_ring_offer: return CtlCheck::ok;
    case op_flush:
      return out.flush_type <= static_cast<std::uint8_t>(FlushType::persistent) ? CtlCheck::ok
                                                                                : CtlCheck::unknown_flush;
    default: return CtlCheck::unknown_op;
  }
}

Ctl make_ctl(CtlOp op, std::uint64_t key, std::uint64_t addr, std::uint64_t len) {
  Ctl c{};
  c.magic = kCtlMagic;
  c.op = op;
  c.key = key;
  c.addr = addr;
  c.len = len;
  return c;
}

}  // namespace remora::detail::wire
