// MemoryRegion and persistence of registered ranges.
#include <libpmem2.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/impl.hpp"

namespace remora {
namespace detail {

RegionImpl::~RegionImpl() { close(); }

void RegionImpl::close() noexcept {
  if (closed.exchange(true)) return;
  if (check) zone->check->on_close(*this);  // remora-check: lost writes, crash image
  if (registered) {
    std::unique_lock<std::shared_mutex> lock(zone->regions_mu);
    zone->regions.erase(key);
  }
  // Same-host peers: revoked in the table, and every direct transfer to the
  // region already under way waited for (bounded: docs/design.md,
  // "Same-host direct path").
  const bool no_peer_inside = direct_slot < 0 || zone->direct->remove(direct_slot);
  if (huge) huge->cancel();  // no huge page of it asked for after this returns
  // A shareable region may be mapped by peers: they drop the mapping before
  // this returns (bounded: ZoneImpl::revoke_at_peers).
  if (direct_slot >= 0 && fd >= 0) zone->revoke_at_peers();
  direct_slot = -1;
  // A peer's write-back already running finishes first; any later one sees
  // `closed` and touches nothing.
  { std::lock_guard<std::mutex> wait(persist_mu); }
  mkey.reset();
  // Wait out any thread inside the transport's progress right now: it may be
  // sending this memory as the answer to a read (ibv_dereg_mr's guarantee:
  // once deregistration returns, the memory is not touched).
  { std::unique_lock<std::shared_mutex> quiesce(zone->transport_mu); }
  if (map != nullptr) pmem2_map_delete(&map);
  // Memory of ProtectionZone::allocate: same-host peers may have mapped its
  // file (docs/design.md, "Same-host direct path"). Emptying the file frees
  // the pages now and takes them from every such mapping too, so nothing of
  // the region stays reachable at a peer once this returns (a peer touching
  // its old mapping faults). Peers that honour the table stopped already;
  // not when one may still be inside a copy (the bounded wait above timed
  // out: a stopped or dead peer), which must not fault when it resumes.
  if (owned_map != nullptr && fd >= 0 && no_peer_inside) (void)::ftruncate(fd, 0);
  if (owned_map != nullptr) ::munmap(owned_map, owned_len);
  owned_map = nullptr;
  if (fd >= 0 && fd_shared)
    zone->release_shared_file(fd);
  else if (fd >= 0)
    ::close(fd);
  fd = -1;
}

Result<void> RegionImpl::persist(std::uint64_t addr, std::uint64_t len) const {
  if (!persistent) return Errc::not_supported;
  if (len == 0) return {};
  if (persist_fn != nullptr) {  // DAX: cache flushes, nothing to fail
    persist_fn(reinterpret_cast<const void*>(addr), len);
    if (check) zone->check->on_persist(*this, addr, len);
    return {};
  }
  // A shared file mapping the owner made: write back the covering pages.
  static const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::uint64_t start = addr & ~(page - 1);
  std::uint64_t end = addr + len;
  // Anonymous or private memory has nothing to write back and msync
  // succeeds on it; any failure (EIO from the device, ENOMEM for a range no
  // longer mapped) means the data may not be durable.
  if (msync(reinterpret_cast<void*>(start), end - start, MS_SYNC) != 0) return Errc::io_error;
  if (check) zone->check->on_persist(*this, addr, len);  // remora-check: now durable
  return {};
}

Result<void> RegionImpl::persist_for_peer(std::uint64_t addr, std::uint64_t len) {
  std::lock_guard<std::mutex> lock(persist_mu);
  if (closed) return Errc::remote_access;
  return persist(addr, len);
}

}  // namespace detail

bool MemoryRegion::valid() const noexcept { return impl_ && !impl_->closed; }
void* MemoryRegion::address() const noexcept { return impl_ ? impl_->base : nullptr; }
std::size_t MemoryRegion::length() const noexcept { return impl_ ? impl_->length : 0; }
Access MemoryRegion::access() const noexcept { return impl_ ? impl_->access : Access::none; }
bool MemoryRegion::persistent() const noexcept { return impl_ && impl_->persistent; }

std::uint64_t MemoryRegion::key() const noexcept { return impl_ && impl_->registered ? impl_->key : 0; }

Result<RemoteRegion> MemoryRegion::remote() const {
  if (!valid()) return Errc::invalid_handle;
  if (!impl_->registered) return Errc::privileges;
  return RemoteRegion(reinterpret_cast<std::uint64_t>(impl_->base), impl_->length, impl_->key,
                      impl_->access & (Access::remote_read | Access::remote_write), impl_->persistent);
}

Result<void> MemoryRegion::persist(std::size_t offset, std::size_t len) const {
  if (!valid()) return Errc::invalid_handle;
  if (offset > impl_->length || len > impl_->length - offset) return Errc::invalid_argument;
  return impl_->persist(reinterpret_cast<std::uint64_t>(impl_->base) + offset, len);
}

Result<void> MemoryRegion::sync_rdma_write(std::size_t offset, std::size_t len) {
  if (!valid()) return Errc::invalid_handle;
  if (offset > impl_->length || len > impl_->length - offset) return Errc::invalid_argument;
  if (impl_->check) impl_->zone->check->on_sync(*impl_, offset, len, true);
  return {};
}

Result<void> MemoryRegion::sync_rdma_read(std::size_t offset, std::size_t len) {
  if (!valid()) return Errc::invalid_handle;
  if (offset > impl_->length || len > impl_->length - offset) return Errc::invalid_argument;
  if (impl_->check) impl_->zone->check->on_sync(*impl_, offset, len, false);
  return {};
}

void MemoryRegion::close() noexcept {
  if (impl_) impl_->close();
  impl_.reset();
}

}  // namespace remora
