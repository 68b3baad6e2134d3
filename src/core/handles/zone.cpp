// ProtectionZone: registration, queues, endpoints and listeners of a zone.
#include <fcntl.h>
#include <libpmem2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "core/handles/maps.hpp"
#include "core/impl.hpp"

namespace remora {
namespace detail {

ZoneImpl::~ZoneImpl() {
  if (agent) agent->stop();
}

void ZoneImpl::release_shared_file(int fd) noexcept {
  std::lock_guard<std::mutex> lock(shared_files_mu);
  for (auto it = shared_files.begin(); it != shared_files.end(); ++it) {
    if (it->second.fd != fd) continue;
    if (--it->second.regions == 0) {
      ::close(fd);
      shared_files.erase(it);
    }
    return;
  }
}

void ZoneImpl::revoke_at_peers() noexcept {
  std::vector<std::pair<std::shared_ptr<EndpointImpl>, std::uint64_t>> asked;
  std::vector<std::shared_ptr<direct::Peer>> bells;  // one per peer zone (Peers are shared per table)
  for (auto& ep : agent->live_endpoints()) {
    std::shared_ptr<direct::Peer> bell;
    if (const std::uint64_t serial = ep->ask_revoke(wire::kRevokeRegions, bell); serial != 0)
      asked.emplace_back(std::move(ep), serial);
    if (bell && std::find(bells.begin(), bells.end(), bell) == bells.end()) bells.push_back(std::move(bell));
  }
  // Once every request is sent: each peer zone's agent then reads them all
  // in one sweep.
  for (auto& b : bells) b->ring();
  if (asked.empty() || !agent->serves_others()) return;
  agent->wake();
  wait_revoked(asked);
}

namespace {
// Same bound as Table::remove's wait: a peer that is stopped, or whose zone
// makes no progress, is not waited for longer. It still drops the mappings
// at its next miss or when the connection ends. Between looks the waiting
// thread progresses the endpoints it waits on (`drive`) itself: the answer
// is taken as soon as it arrives, also when this zone's users drive those
// connections (the agent then leaves them to the users until their claims
// expire).
template <typename Done, typename Drive>
void wait_bounded(Done done, Drive drive) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (int spins = 0; !done() && std::chrono::steady_clock::now() < deadline; ++spins) {
    drive();
    if (done()) break;
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}
}  // namespace

void wait_revoked(std::vector<std::pair<std::shared_ptr<EndpointImpl>, std::uint64_t>>& asked) noexcept {
  wait_bounded(
      [&] {
        std::erase_if(asked, [](const auto& a) { return a.first->revoke_answered(a.second); });
        return asked.empty();
      },
      [&] {
        backend::ProgressPass look;  // each shared transport queue is read once per look
        for (auto& a : asked) (void)a.first->progress();
      });
}

void wait_revoked(EndpointImpl& ep, std::uint64_t serial) noexcept {
  wait_bounded([&] { return ep.revoke_answered(serial); }, [&] { (void)ep.progress(); });
}

std::uint64_t ZoneImpl::random_key() {
  MutexLock lock(rng_mu);
  std::uint64_t k = 0;
  while (k == 0) k = rng() & key_mask;
  return k;
}

namespace {

/// True when every page of [addr, addr+len) is mapped in this process (the
/// range must not wrap). msync validates the range without touching it:
/// ENOMEM when a page of it is not mapped; MS_ASYNC schedules nothing.
bool range_mapped(const void* addr, std::size_t len) noexcept {
  static const std::uintptr_t page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t start = a & ~(page - 1);
  if (a + len < a || a + len > UINTPTR_MAX - page) return false;
  const std::uintptr_t end = (a + len + page - 1) & ~(page - 1);
  return msync(reinterpret_cast<void*>(start), end - start, MS_ASYNC) == 0;
}

/// A registered range that is a shared mapping of a regular file: the file,
/// opened again (or the zone's descriptor of it), and the file offset of the
/// range's start.
struct SharedFile {
  int fd = -1;
  std::uint64_t offset = 0;
};

/// For the same-host direct path (docs/design.md, "Shared-mapped regions"):
/// when [addr, addr+len) starts on a page and lies in one shared mapping of a
/// regular file this process can open by its name (as a librpma server's
/// pmem2 mapping of its file is), that file opened again (read-write when
/// `write`, and then only if the mapping is writable) and the offset. The
/// file opened must be the mapped one (device and inode as `maps` says).
/// fd -1 otherwise: the region is reached by cross-memory attach.
SharedFile find_shared_file(ZoneImpl& zone, Maps& maps, const void* addr, std::size_t len, bool write) {
  static const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if ((a & (page - 1)) != 0) return {};
  Mapping m;
  if (!maps.at_or_after(a, m, true) || m.start > a) return {};
  // The one mapping holding the start: all of the range in it, shared,
  // readable (and writable when remote write is granted), a named file.
  const char* path = m.path;
  const std::size_t plen = std::strlen(path);
  constexpr const char kDeleted[] = " (deleted)";
  if (len > m.end - a || !m.read || (write && !m.write) || !m.shared || m.inode == 0 || path[0] != '/' ||
      (plen >= sizeof kDeleted - 1 && std::strcmp(path + plen - (sizeof kDeleted - 1), kDeleted) == 0))
    return {};
  SharedFile out;
  // One descriptor per file and mode in the zone: a file already open for
  // another region is not opened again (its device and inode were checked
  // then).
  const auto id = std::make_tuple(std::uint64_t{::makedev(m.major, m.minor)}, m.inode, write);
  std::lock_guard<std::mutex> lock(zone.shared_files_mu);
  if (auto it = zone.shared_files.find(id); it != zone.shared_files.end()) {
    ++it->second.regions;
    out.fd = it->second.fd;
    out.offset = m.offset + (a - m.start);
    return out;
  }
  const int fd = ::open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return {};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != m.inode || ::major(st.st_dev) != m.major ||
      ::minor(st.st_dev) != m.minor) {
    ::close(fd);
    return {};
  }
  zone.shared_files[id] = ZoneImpl::SharedFile{fd, 1};
  out.fd = fd;
  out.offset = m.offset + (a - m.start);
  return out;
}

/// `share_fd`: the memory is a shared mapping of that descriptor from file
/// offset `share_offset` (map_file, allocate, a file mapping the program
/// made), which lives as long as the region: same-host peers may map it
/// themselves. -1 otherwise.
Result<std::shared_ptr<RegionImpl>> register_region(const std::shared_ptr<ZoneImpl>& zone, void* addr, std::size_t len,
                                                    Access access, int share_fd = -1, std::uint64_t share_offset = 0,
                                                    bool persistent = false) {
  auto r = std::make_shared<RegionImpl>();
  r->zone = zone;
  r->base = addr;
  r->length = len;
  r->access = access;
  // Random keys, never sequential; retry on the (unlikely) collision.
  for (int attempt = 0; attempt < 8; ++attempt) {
    auto mk = zone->domain->register_memory(addr, len, access, zone->random_key());
    if (mk) {
      r->mkey = std::move(*mk);
      break;
    }
    if (mk.error() != Errc::address_in_use) return mk.error();
  }
  if (!r->mkey) return Errc::no_memory;
  r->key = r->mkey->key();
  if (has(access, Access::remote_read) || has(access, Access::remote_write)) {
    std::unique_lock<std::shared_mutex> lock(zone->regions_mu);
    zone->regions[r->key] = r.get();
    r->registered = true;
  }
  // Same-host peers check their direct transfers against this table
  // (docs/design.md, "Same-host direct path"); a full table leaves the
  // region to the transport.
  if (r->registered && zone->direct) {
    // Ordinary memory with a whole, aligned huge page in it: register_memory
    // starts moving those into huge pages (HugePageJob), and peers split
    // transfers into them over their own threads (kHugeMoves).
    const auto a = reinterpret_cast<std::uint64_t>(addr);
    const bool huge_moves = zone->direct_huge && share_fd < 0 && !direct::whole_huge_pages(a, len).empty();
    // Ordinary memory registered with remote write: the owner may store into
    // it (kStores), and take ring writes into it when its zone does (kRingOk).
    const bool stores = share_fd < 0 && has(access, Access::remote_write);
    r->direct_slot = zone->direct->add(r->key, a, len, access, share_fd, share_offset, persistent,
                                       zone->ring_writes && stores, huge_moves, stores);
  }
  return r;
}

}  // namespace
}  // namespace detail

ProtectionZone::~ProtectionZone() = default;

std::uint64_t ProtectionZone::id() const noexcept { return impl_ ? impl_->id : 0; }

Result<MemoryRegion> ProtectionZone::register_memory(void* addr, std::size_t len, Access access, bool persistent) {
  if (!impl_) return Errc::invalid_handle;
  if (addr == nullptr || len == 0 || access == Access::none ||
      (static_cast<std::uint32_t>(access) & ~static_cast<std::uint32_t>(Access::all)) != 0)
    return Errc::invalid_argument;
  // As a verbs provider would refuse it: a range that wraps around the
  // address space or has a page not mapped in this process.
  if (!detail::range_mapped(addr, len)) return Errc::invalid_argument;
  // Nor write access to memory this process may not write (a read-only
  // mapping), which a verbs provider refuses where it pins the pages for
  // writing: the transport's receive path, and the target's copy of a
  // same-host ring write, would store into it and fault. (A process without
  // /proc, which cannot tell, registers as before the check.)
  // And memory the program mapped from a file (a librpma server's pmem2
  // mapping, say): same-host peers may map the file themselves. The
  // descriptor stays open, as `fd`, until the region is closed. Both ask the
  // process's mappings (maps.hpp), through one open of /proc/self/maps.
  const bool check_write = has(access, Access::local_write) || has(access, Access::remote_write);
  const bool look_for_file = impl_->direct && (has(access, Access::remote_read) || has(access, Access::remote_write));
  detail::SharedFile shared;
  if (check_write || look_for_file) {
    detail::Maps maps;
    if (check_write && maps.ok() && !maps.writable(reinterpret_cast<std::uintptr_t>(addr), len))
      return Errc::invalid_argument;
    if (look_for_file) shared = detail::find_shared_file(*impl_, maps, addr, len, has(access, Access::remote_write));
  }
  auto r = detail::register_region(impl_, addr, len, access, shared.fd, shared.offset, persistent);
  if (!r) {
    if (shared.fd >= 0) impl_->release_shared_file(shared.fd);
    return r.error();
  }
  (*r)->fd = shared.fd;
  (*r)->fd_shared = shared.fd >= 0;
  (*r)->persistent = persistent;
  // Ordinary memory that same-host peers reach by cross-memory attach: its
  // pages moved into huge pages by the process's huge-page thread, once, so
  // that every later transfer pins one page per 2 MiB instead of one per
  // 4 KiB (src/core/direct/huge_pages.hpp).
  if ((*r)->direct_slot >= 0 && impl_->direct_huge && shared.fd < 0)
    (*r)->huge = detail::direct::HugePageJob::start(addr, len);
  if (impl_->check) impl_->check->on_register(**r);  // remora-check (docs/check.md)
  return MemoryRegion(std::move(*r));
}

Result<MemoryRegion> ProtectionZone::map_file(const std::string& path, std::size_t len, Access access) {
  if (!impl_) return Errc::invalid_handle;
  if (path.empty() || len == 0 || access == Access::none) return Errc::invalid_argument;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return std::error_code(errno, std::generic_category());
  // libpmem2 maps whole pages: a shorter length is mapped (and the file
  // grown) to the next page boundary; the region is still `len` bytes.
  static const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (len > SIZE_MAX - page) {
    ::close(fd);
    return Errc::invalid_argument;
  }
  const std::size_t map_len = (len + page - 1) / page * page;
  struct stat st {};
  if (fstat(fd, &st) != 0 ||
      (static_cast<std::size_t>(st.st_size) < map_len && ftruncate(fd, static_cast<off_t>(map_len)) != 0)) {
    std::error_code ec(errno, std::generic_category());
    ::close(fd);
    return ec;
  }
  pmem2_config* cfg = nullptr;
  pmem2_source* src = nullptr;
  pmem2_map* map = nullptr;
  int rc = pmem2_config_new(&cfg);
  if (rc == 0) rc = pmem2_config_set_required_store_granularity(cfg, PMEM2_GRANULARITY_PAGE);
  if (rc == 0) rc = pmem2_config_set_length(cfg, map_len);
  if (rc == 0) rc = pmem2_source_from_fd(&src, fd);
  if (rc == 0) rc = pmem2_map_new(&map, cfg, src);
  if (src) pmem2_source_delete(&src);
  if (cfg) pmem2_config_delete(&cfg);
  if (rc != 0) {
    ::close(fd);
    return Errc::io_error;
  }
  auto r = detail::register_region(impl_, pmem2_map_get_address(map), len, access, fd, 0, true);
  if (!r) {
    pmem2_map_delete(&map);
    ::close(fd);
    return r.error();
  }
  (*r)->persistent = true;
  (*r)->map = map;
  // On DAX the persist function flushes CPU caches and cannot fail; on a
  // page-granular mapping it would msync and drop the error, so such a
  // mapping is written back by RegionImpl::persist's own checked msync.
  if (pmem2_map_get_store_granularity(map) != PMEM2_GRANULARITY_PAGE) (*r)->persist_fn = pmem2_get_persist_fn(map);
  (*r)->fd = fd;
  if (impl_->check) impl_->check->on_register(**r);
  return MemoryRegion(std::move(*r));
}

Result<MemoryRegion> ProtectionZone::allocate(std::size_t len, Access access) {
  if (!impl_) return Errc::invalid_handle;
  if (len == 0 || access == Access::none ||
      (static_cast<std::uint32_t>(access) & ~static_cast<std::uint32_t>(Access::all)) != 0)
    return Errc::invalid_argument;
  static const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (len > SIZE_MAX - page || len > static_cast<std::size_t>(INT64_MAX) - page) return Errc::invalid_argument;
  const std::size_t span = (len + page - 1) / page * page;
  const int fd = static_cast<int>(::memfd_create("remora-region", MFD_CLOEXEC));
  if (fd < 0) return Errc::no_memory;  // EMFILE, ENFILE, ENOMEM
  if (::ftruncate(fd, static_cast<off_t>(span)) != 0) {
    ::close(fd);
    return Errc::no_memory;
  }
  void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    ::close(fd);
    return Errc::no_memory;
  }
  auto r = detail::register_region(impl_, m, len, access, fd);
  if (!r) {
    ::munmap(m, span);
    ::close(fd);
    return r.error();
  }
  (*r)->owned_map = m;
  (*r)->owned_len = span;
  (*r)->fd = fd;
  if (impl_->check) impl_->check->on_register(**r);
  return MemoryRegion(std::move(*r));
}

Result<CompletionQueue> ProtectionZone::create_cq(std::size_t /*capacity_hint*/) {
  if (!impl_) return Errc::invalid_handle;
  auto cq = std::make_shared<detail::CqImpl>();
  cq->zone = impl_;
  return CompletionQueue(std::move(cq));
}

Result<SharedReceiveQueue> ProtectionZone::create_srq(std::uint32_t capacity) {
  if (!impl_) return Errc::invalid_handle;
  if (capacity == 0 || capacity > 65536) return Errc::invalid_argument;
  auto srq = std::make_shared<detail::SrqImpl>();
  srq->zone = impl_;
  srq->capacity = capacity;
  return SharedReceiveQueue(std::move(srq));
}

Result<Endpoint> ProtectionZone::create_endpoint(const EndpointOptions& o) {
  if (!impl_) return Errc::invalid_handle;
  if (o.send_cq == nullptr || !o.send_cq->valid() || (o.recv_cq != nullptr && !o.recv_cq->valid()))
    return Errc::invalid_handle;
  if (o.max_outstanding == 0 || o.max_outstanding > 65536 || o.max_recv == 0 || o.max_recv > 65536 ||
      o.max_message < sizeof(detail::wire::Ctl) || o.max_message > (64u << 20))
    return Errc::invalid_argument;
  auto ep = std::make_shared<detail::EndpointImpl>();
  ep->zone = impl_;
  ep->id = detail::next_object_id();
  ep->options = o;
  ep->send_cq = o.send_cq->impl();
  ep->recv_cq = o.recv_cq ? o.recv_cq->impl() : ep->send_cq;
  if (o.srq != nullptr) {
    if (!o.srq->valid()) return Errc::invalid_handle;
    ep->srq = o.srq->impl();
    if (ep->srq->zone != impl_) return Errc::zone_mismatch;
  }
  if (ep->send_cq->zone != impl_ || ep->recv_cq->zone != impl_) return Errc::zone_mismatch;
  // The queues list the endpoint once its connection is set up
  // (EndpointImpl::watch_queues): until then it has nothing to progress.
  return Endpoint(std::move(ep));
}

Result<Listener> ProtectionZone::listen(const std::string& address, std::uint16_t port) {
  if (!impl_) return Errc::invalid_handle;
  auto l = std::make_shared<detail::ListenerImpl>();
  l->zone = impl_;
  auto pep = impl_->domain->listen(address, port);
  if (!pep) return pep.error();
  l->pep = std::move(*pep);
  {
    detail::MutexLock lock(impl_->cm_mu);
    impl_->cm_listeners[l->pep->cm_id()] = l;
  }
  impl_->agent->wake();
  return Listener(std::move(l));
}

Result<std::size_t> ProtectionZone::progress() {
  if (!impl_) return Errc::invalid_handle;
  return impl_->agent->run_once();
}

void ProtectionZone::close() noexcept { impl_.reset(); }

}  // namespace remora
