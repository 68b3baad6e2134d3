// tests/integration/common.hpp - what the test peer and the tests agree on:
// the target's memory layout, its initial contents, private-data transforms
// and hex encoding. Header-only, no GoogleTest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace remora_it {

/// Guard bytes around every region the peer registers. They are never
/// registered, so no remote operation may ever change them.
inline constexpr std::size_t kGuard = 4096;
inline constexpr std::uint8_t kGuardByte = 0xA5;
inline constexpr std::size_t kDefaultRegionSize = 64 * 1024;

/// The peer's anonymous allocation: for each region in the order given on
/// its command line, [guard][region][guard].
inline std::size_t region_stride(std::size_t region_size) { return region_size + 2 * kGuard; }
inline std::size_t region_offset(std::size_t index, std::size_t region_size) {
  return index * region_stride(region_size) + kGuard;
}

/// Initial contents of byte `i` of region number `index` (never all-guard).
inline std::uint8_t initial_byte(std::size_t index, std::size_t i) {
  return static_cast<std::uint8_t>((i * 7u + index * 51u + 1u) ^ (i >> 8));
}

/// What the peer answers in accept private data for a client's private data.
inline std::vector<std::uint8_t> accept_reply(std::span<const std::uint8_t> in) {
  std::vector<std::uint8_t> out(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = static_cast<std::uint8_t>(in[i] ^ 0x5A);
  return out;
}
/// What the peer answers in reject private data.
inline std::vector<std::uint8_t> reject_reply(std::span<const std::uint8_t> in) {
  std::vector<std::uint8_t> out(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = static_cast<std::uint8_t>(~in[in.size() - 1 - i]);
  return out;
}
/// Client private data starting with this is rejected by the peer.
inline constexpr std::string_view kRejectPrefix = "REJECT";

inline std::string to_hex(std::span<const std::uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (auto c : b) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

inline std::optional<std::vector<std::uint8_t>> from_hex(std::string_view s) {
  if (s.size() % 2) return std::nullopt;
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::uint8_t> out(s.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = nib(s[2 * i]), lo = nib(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return out;
}

/// Value of `key=` in a space-separated line, or empty.
inline std::string field(std::string_view line, std::string_view key) {
  std::size_t pos = 0;
  while (pos < line.size()) {
    std::size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    std::string_view tok = line.substr(pos, end - pos);
    if (tok.size() > key.size() && tok.substr(0, key.size()) == key && tok[key.size()] == '=')
      return std::string(tok.substr(key.size() + 1));
    pos = end + 1;
  }
  return {};
}

}  // namespace remora_it
