// remora/memory_region.hpp - locally registered memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "remora/access.hpp"
#include "remora/remote_region.hpp"
#include "remora/result.hpp"

namespace remora {

namespace detail {
struct RegionImpl;
}

/// Memory registered in a ProtectionZone with a set of privileges. Move-only;
/// keeps its zone alive. The memory itself is the caller's (or, for
/// ProtectionZone::map_file regions, Remora's mapping of the file; for
/// ProtectionZone::allocate regions, Remora's memory, unmapped by close())
/// and must stay mapped until the region is closed. close() is safe to call
/// twice.
class MemoryRegion {
 public:
  MemoryRegion() = default;
  explicit MemoryRegion(std::shared_ptr<detail::RegionImpl> impl) : impl_(std::move(impl)) {}
  MemoryRegion(MemoryRegion&&) noexcept = default;
  MemoryRegion& operator=(MemoryRegion&&) noexcept = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;
  ~MemoryRegion() = default;

  bool valid() const noexcept;
  void* address() const noexcept;       ///< registered start address
  std::size_t length() const noexcept;  ///< registered length in bytes
  Access access() const noexcept;
  bool persistent() const noexcept;
  /// The remote key; 0 when the region grants no remote privilege.
  std::uint64_t key() const noexcept;
  /// Descriptor for a peer. Errors: Errc::privileges when the region was
  /// registered without remote_read or remote_write; Errc::invalid_handle.
  Result<RemoteRegion> remote() const;
  /// Make [offset, offset+len) durable (pmem2 persist or msync).
  /// Errors: invalid_argument (range), not_supported (region not persistent), io_error.
  Result<void> persist(std::size_t offset, std::size_t len) const;
  /// Non-coherent memory (FabricInfo::requires_sync), as
  /// dat_lmr_sync_rdma_write: make what RDMA writes (incoming) and RDMA reads
  /// (outgoing) placed in [offset, offset+len) visible to this CPU. Call it
  /// after such an operation completed and before reading the range. On
  /// coherent memory it does nothing; under remora-check's non-coherent
  /// emulation (docs/check.md) the range shows poison until it is called.
  /// Errors: invalid_argument (range), invalid_handle.
  Result<void> sync_rdma_write(std::size_t offset, std::size_t len);
  /// Non-coherent memory, as dat_lmr_sync_rdma_read: make this CPU's writes
  /// to [offset, offset+len) visible to RDMA (an outgoing write or send from
  /// it, a peer's RDMA read of it). Call it after writing the range and
  /// before posting. Errors: invalid_argument (range), invalid_handle.
  Result<void> sync_rdma_read(std::size_t offset, std::size_t len);
  /// Deregister. Operations still using the region must have completed.
  void close() noexcept;

  const std::shared_ptr<detail::RegionImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::RegionImpl> impl_;
};

/// The most segments one operation's gather or scatter list may have (fewer
/// when the provider allows fewer: Endpoint::max_segments).
inline constexpr std::size_t kMaxSegments = 8;

/// One entry of a gather or scatter list: `length` bytes at `address`, which
/// must lie inside `region`.
struct Segment {
  const MemoryRegion* region = nullptr;
  const void* address = nullptr;
  std::size_t length = 0;

  Segment() = default;
  Segment(const MemoryRegion& r, std::size_t offset, std::size_t len)
      : region(&r), address(static_cast<const char*>(r.address()) + offset), length(len) {}
  /// A segment given by absolute address rather than offset.
  static Segment at(const MemoryRegion& r, const void* addr, std::size_t len) {
    Segment s;
    s.region = &r;
    s.address = addr;
    s.length = len;
    return s;
  }
};

}  // namespace remora
