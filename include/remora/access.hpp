// remora/access.hpp - privileges of a memory region.
#pragma once

#include <cstdint>

namespace remora {

/// Privileges a region is registered with. A region gets exactly what is
/// asked for: a gather source needs local_read, a scatter destination
/// local_write, a write target remote_write, a read source remote_read.
enum class Access : std::uint32_t {
  none = 0,
  local_read = 1u << 0,
  local_write = 1u << 1,
  remote_read = 1u << 2,
  remote_write = 1u << 3,
  all = 0xf,
};

constexpr Access operator|(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr Access operator&(Access a, Access b) noexcept {
  return static_cast<Access>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
/// True when every bit of `wanted` is in `have`.
constexpr bool has(Access have, Access wanted) noexcept { return (have & wanted) == wanted; }

}  // namespace remora
