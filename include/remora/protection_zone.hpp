// remora/protection_zone.hpp - a protection domain and its target agent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "remora/access.hpp"
#include "remora/completion_queue.hpp"
#include "remora/endpoint.hpp"
#include "remora/listener.hpp"
#include "remora/memory_region.hpp"
#include "remora/result.hpp"
#include "remora/shared_receive_queue.hpp"

namespace remora {

namespace detail {
struct ZoneImpl;
}

/// A protection zone: regions, queues and endpoints of one zone work only
/// with each other. Each zone runs a target agent (a progress thread) so a
/// target that makes no calls still serves writes, reads, atomic writes and
/// flushes. Move-only; children keep it alive.
class ProtectionZone {
 public:
  ProtectionZone() = default;
  explicit ProtectionZone(std::shared_ptr<detail::ZoneImpl> impl) : impl_(std::move(impl)) {}
  ProtectionZone(ProtectionZone&&) noexcept = default;
  ProtectionZone& operator=(ProtectionZone&&) noexcept = default;
  ProtectionZone(const ProtectionZone&) = delete;
  ProtectionZone& operator=(const ProtectionZone&) = delete;
  ~ProtectionZone();

  bool valid() const noexcept { return impl_ != nullptr; }
  std::uint64_t id() const noexcept;

  /// Register [addr, addr+len) with `access`. `persistent` declares that the
  /// memory is a shared file mapping the caller made: PERSISTENT flushes of it
  /// msync the covered pages. Errors: invalid_argument (null/zero length,
  /// access none, a range that wraps around the address space or holds a page
  /// not mapped in this process, local_write or remote_write on a page this
  /// process may not write; nothing is registered), no_memory,
  /// invalid_handle.
  Result<MemoryRegion> register_memory(void* addr, std::size_t len, Access access, bool persistent = false);
  /// Create (or open) `path`, grow it to at least `len` bytes rounded up to
  /// whole pages, map it with libpmem2 and register `len` bytes of the
  /// mapping as a persistent region (cache flush on DAX, a checked msync
  /// otherwise). The mapping lives as long as the region.
  Result<MemoryRegion> map_file(const std::string& path, std::size_t len, Access access);
  /// `len` bytes of zero-filled, page-aligned memory the library allocates
  /// (an anonymous memory file, `memfd_create`, grown to `len` rounded up to
  /// whole pages and mapped shared, read-write), registered with `access`.
  /// The memory is `MemoryRegion::address()`; it lives as long as the region
  /// and is unmapped when the region is closed or destroyed; the region
  /// holds one file descriptor (close-on-exec) until then. Not persistent.
  /// On the same-host direct path (on by default: FabricOptions::same_host),
  /// a peer of this host maps such a region itself and copies into and out
  /// of it; closing the region frees its pages there too (docs/design.md,
  /// "Same-host direct path"). Errors: invalid_argument
  /// (`len` 0 or too large for the address space, access none or unknown
  /// bits), no_memory (the memory file or its mapping could not be made, or
  /// the transport refused the registration), invalid_handle.
  Result<MemoryRegion> allocate(std::size_t len, Access access);
  /// A completion queue of this zone. It is unbounded: it never drops or
  /// refuses a completion (the endpoints' max_outstanding and max_recv bound
  /// what can be pending); `capacity_hint` is accepted and not used.
  /// Errors: invalid_handle.
  Result<CompletionQueue> create_cq(std::size_t capacity_hint = 256);
  /// Errors: invalid_argument (capacity 0 or above 65536), invalid_handle.
  Result<SharedReceiveQueue> create_srq(std::uint32_t capacity = 256);
  Result<Endpoint> create_endpoint(const EndpointOptions& options);
  /// Listen on address:port (port 0: any free port). Errors: address_in_use,
  /// invalid_argument, provider_error.
  Result<Listener> listen(const std::string& address, std::uint16_t port);

  /// One pass of the target agent's work on the calling thread: every queued
  /// connection-management event, then every endpoint of the zone. Returns
  /// how many events and completions it handled, parts of a same-host
  /// peer's transfers included (0: nothing was pending).
  /// Needed only for zones created with progress_thread = false; harmless
  /// otherwise. Errors: invalid_handle.
  Result<std::size_t> progress();

  void close() noexcept;
  const std::shared_ptr<detail::ZoneImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::ZoneImpl> impl_;
};

}  // namespace remora
