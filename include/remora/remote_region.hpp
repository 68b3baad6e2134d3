// remora/remote_region.hpp - a peer's registered memory, as a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "remora/access.hpp"
#include "remora/result.hpp"

namespace remora {

/// What an initiator needs to address a peer's region: its virtual address,
/// length, remote key, remote privileges and whether the owner declared it
/// persistent. A copyable value; serialize() gives a fixed-size, versioned
/// byte string for any out-of-band channel and parse() rejects anything else.
class RemoteRegion {
 public:
  static constexpr std::size_t kSerializedSize = 40;

  RemoteRegion() = default;
  RemoteRegion(std::uint64_t address, std::uint64_t length, std::uint64_t key, Access remote_access,
               bool persistent) noexcept
      : address_(address), length_(length), key_(key), access_(remote_access), persistent_(persistent) {}

  std::uint64_t address() const noexcept { return address_; }
  std::uint64_t length() const noexcept { return length_; }
  std::uint64_t key() const noexcept { return key_; }
  /// Only the remote bits (remote_read, remote_write) are meaningful.
  Access access() const noexcept { return access_; }
  /// The owner registered the region as persistent: PERSISTENT flushes are allowed.
  bool persistent() const noexcept { return persistent_; }

  std::vector<std::uint8_t> serialize() const;
  /// Errors: Errc::malformed for a wrong size, magic, version, unknown flag
  /// bits or an address range that wraps around.
  static Result<RemoteRegion> parse(std::span<const std::uint8_t> bytes);

  friend bool operator==(const RemoteRegion&, const RemoteRegion&) = default;

 private:
  std::uint64_t address_ = 0;
  std::uint64_t length_ = 0;
  std::uint64_t key_ = 0;
  Access access_ = Access::none;
  bool persistent_ = false;
};

}  // namespace remora
