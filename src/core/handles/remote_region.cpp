// RemoteRegion serialization: a fixed 40-byte little-endian record.
//   0  u32 magic "RRG1"   4 u8 version(1)  5 u8 flags  6 u16 reserved(0)
//   8  u64 address       16 u64 length     24 u64 key   32 u64 reserved(0)
#include <cstring>

#include "remora/remote_region.hpp"

namespace remora {
namespace {
constexpr std::uint32_t kMagic = 0x31475252;  // "RRG1"
constexpr std::uint8_t kVersion = 1;
constexpr std::uint8_t kFlagRead = 1, kFlagWrite = 2, kFlagPersistent = 4;

template <class T>
void put(std::uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
T get(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace

std::vector<std::uint8_t> RemoteRegion::serialize() const {
  std::vector<std::uint8_t> out(kSerializedSize, 0);
  std::uint8_t flags = 0;
  if (has(access_, Access::remote_read)) flags |= kFlagRead;
  if (has(access_, Access::remote_write)) flags |= kFlagWrite;
  if (persistent_) flags |= kFlagPersistent;
  put(out.data(), kMagic);
  out[4] = kVersion;
  out[5] = flags;
  put(out.data() + 8, address_);
  put(out.data() + 16, length_);
  put(out.data() + 24, key_);
  return out;
}

Result<RemoteRegion> RemoteRegion::parse(std::span<const std::uint8_t> b) {
  if (b.size() != kSerializedSize) return Errc::malformed;
  if (get<std::uint32_t>(b.data()) != kMagic || b[4] != kVersion) return Errc::malformed;
  std::uint8_t flags = b[5];
  if (flags & ~(kFlagRead | kFlagWrite | kFlagPersistent)) return Errc::malformed;
  if (get<std::uint16_t>(b.data() + 6) != 0 || get<std::uint64_t>(b.data() + 32) != 0) return Errc::malformed;
  auto addr = get<std::uint64_t>(b.data() + 8);
  auto len = get<std::uint64_t>(b.data() + 16);
  if (addr + len < addr) return Errc::malformed;
  Access a = Access::none;
  if (flags & kFlagRead) a = a | Access::remote_read;
  if (flags & kFlagWrite) a = a | Access::remote_write;
  return RemoteRegion(addr, len, get<std::uint64_t>(b.data() + 24), a, (flags & kFlagPersistent) != 0);
}

}  // namespace remora
