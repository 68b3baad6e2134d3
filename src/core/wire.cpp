// The connection Hello: built and parsed here only.
#include <cstring>

#include "core/impl.hpp"

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

}  // namespace remora::detail::wire
