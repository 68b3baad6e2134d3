// The same-host direct path: the owner's region table and the initiator's
// checked cross-memory transfers (docs/design.md, "Same-host direct path").
#include "core/direct/direct.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <thread>

#include "core/direct/copier.hpp"
#include "core/direct/fault_guard.hpp"
#include "core/direct/huge_pages.hpp"

namespace remora::detail::direct {
namespace {

std::uint64_t mix(std::uint64_t k) noexcept {
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ull;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebull;
  k ^= k >> 31;
  return k;
}

constexpr std::size_t kMask = kCapacity - 1;
static_assert((kCapacity & kMask) == 0, "capacity must be a power of two");

/// [addr, addr+len) lies inside the region of `f` (without overflow).
bool inside(const Found& f, std::uint64_t addr, std::uint64_t len) noexcept {
  return addr >= f.addr && len <= f.len && addr - f.addr <= f.len - len;
}

}  // namespace

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

int sealed_memfd(const char* name, std::uint64_t bytes, std::string& why) {
  const int fd = static_cast<int>(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) {
    why = errno_text("memfd_create");
    return -1;
  }
  const char* step = nullptr;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    step = "ftruncate";
  else if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    step = "fcntl F_ADD_SEALS";
  if (step == nullptr) return fd;
  why = errno_text(step);
  ::close(fd);
  return -1;
}

bool size_sealed(int fd) noexcept {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
}

bool switch_from_environment(const char* name, const char* what, std::atomic<bool>& said, bool unset) noexcept {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  for (const char* off : {"0", "off", "no", "false"})
    if (std::strcmp(v, off) == 0) return false;
  for (const char* on : {"1", "on", "yes", "true"})
    if (std::strcmp(v, on) == 0) return true;
  if (!said.exchange(true))
    std::fprintf(stderr, "remora: %s=\"%s\" is neither 0/off/no/false nor 1/on/yes/true; ignored (%s)\n", name, v,
                 what);
  return unset;
}

bool allowed_by_environment() noexcept {
  static std::atomic<bool> said{false};
  return switch_from_environment("REMORA_SAMEHOST",
                                 "the same-host direct path stays on unless the program turned it off", said);
}

const Identity& identity() noexcept {
  static const Identity id = [] {
    Identity out;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string boot;
    if (f && std::getline(f, boot) && !boot.empty()) {
      std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
      for (unsigned char c : boot) {
        h ^= c;
        h *= 0x100000001b3ull;
      }
      out.boot_hash = h;
    }
    struct stat st {};
    if (::stat("/proc/self/ns/pid", &st) == 0) out.pidns = static_cast<std::uint64_t>(st.st_ino);
    return out;
  }();
  return id;
}

// ---- owner side ----

std::unique_ptr<Table> Table::create(std::string& why) {
  std::unique_ptr<Table> t(new Table());
  t->fd_ = sealed_memfd("remora-regions", kTableBytes, why);
  if (t->fd_ < 0) return nullptr;
  void* m = ::mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd_, 0);
  if (m == MAP_FAILED) {
    why = errno_text("mmap");
    return nullptr;
  }
  t->map_ = m;
  // The file starts zeroed: every entry empty.
  t->header()->capacity.store(kCapacity, std::memory_order_relaxed);
  t->header()->omitted.store(0, std::memory_order_relaxed);
  std::random_device rd;
  std::uint64_t nonce = 0;
  while (nonce == 0) nonce = (std::uint64_t{rd()} << 32) | rd();
  t->header()->nonce.store(nonce, std::memory_order_relaxed);
  t->header()->magic.store(kMagic, std::memory_order_release);
  return t;
}

void Table::set_doorbell(int fd) noexcept {
  if (fd < 0) return;
  header()->doorbell.store(kDoorbell | static_cast<std::uint32_t>(fd), std::memory_order_release);
}

Table::~Table() {
  if (map_ != nullptr) ::munmap(map_, kTableBytes);
  if (fd_ >= 0) ::close(fd_);
}

int Table::add(std::uint64_t key, std::uint64_t addr, std::uint64_t len, Access access, int share_fd,
               std::uint64_t share_offset, bool persistent, bool ring_ok, bool huge_moves, bool stores) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t start = mix(key) & kMask;
  for (std::size_t i = 0; i < kCapacity; ++i) {
    const std::size_t at = (start + i) & kMask;
    Entry& e = entries()[at];
    const std::uint64_t st = e.state.load(std::memory_order_relaxed);
    if (st != EntryState::empty && st != EntryState::tombstone) continue;
    const std::uint64_t s = e.seq.load(std::memory_order_relaxed);
    e.seq.store(s + 1, std::memory_order_seq_cst);  // odd: changing
    e.key.store(key, std::memory_order_relaxed);
    e.addr.store(addr, std::memory_order_relaxed);
    e.len.store(len, std::memory_order_relaxed);
    e.access.store((has(access, Access::remote_read) ? kRead : 0) | (has(access, Access::remote_write) ? kWrite : 0) |
                       (persistent ? kPersistent : 0) | (ring_ok ? kRingOk : 0) | (huge_moves ? kHugeMoves : 0) |
                       (stores ? kStores : 0),
                   std::memory_order_relaxed);
    e.share.store(encode_share(share_fd, share_offset), std::memory_order_relaxed);
    e.state.store(EntryState::live, std::memory_order_release);
    e.seq.store(s + 2, std::memory_order_release);
    return static_cast<int>(at);
  }
  header()->omitted.fetch_add(1, std::memory_order_seq_cst);
  return -1;
}

bool Table::remove(int index) {
  if (index < 0 || static_cast<std::size_t>(index) >= kCapacity) return true;
  Entry& e = entries()[index];
  std::uint64_t s = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = e.seq.load(std::memory_order_relaxed);
    // Odd from here on: an initiator that has not yet announced itself
    // (inflight) sees the change after announcing and backs off; one that
    // announced before is seen below and waited for. Both sides use
    // sequentially consistent operations, so one of the two always sees the
    // other.
    e.seq.store(s + 1, std::memory_order_seq_cst);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  bool timed_out = false;
  for (int spins = 0; e.inflight.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (timed_out) {
    // A peer died inside a transfer (it never decrements): a dead process
    // writes nothing more. The entry is never reused, its counter being
    // wrong for good.
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr,
                   "remora: a same-host peer did not leave a transfer to a region being deregistered within 1 s "
                   "(it probably died); deregistering anyway\n");
  }
  std::lock_guard<std::mutex> lock(mu_);
  e.key.store(0, std::memory_order_relaxed);
  e.addr.store(0, std::memory_order_relaxed);
  e.len.store(0, std::memory_order_relaxed);
  e.access.store(0, std::memory_order_relaxed);
  e.share.store(0, std::memory_order_relaxed);
  e.state.store(timed_out ? EntryState::dead : EntryState::tombstone, std::memory_order_release);
  e.seq.store(s + 2, std::memory_order_release);
  return !timed_out;
}

bool Table::place(std::uint64_t key, std::uint64_t addr, std::span<const std::uint8_t> bytes,
                  std::uint64_t need) noexcept {
  for (int attempt = 0; attempt < 16; ++attempt) {
    const Found f = find_entry(entries(), key);
    if (f.torn) continue;
    const std::uint64_t len = bytes.size();
    if (f.entry == nullptr || (f.access & kWrite) == 0 || (f.access & need) == 0 || !inside(f, addr, len)) return false;
    if (!enter(f)) continue;
    std::memcpy(reinterpret_cast<void*>(addr), bytes.data(), len);
    leave(f);
    return true;
  }
  return false;
}

// ---- initiator side ----

namespace {
// Every Peer open in this process, so that the connections towards one
// table share one mapping of it, one pidfd and one cache of region mappings.
std::mutex peers_mu;
// Never destroyed: connections closed by static destructors at exit may
// still look in it.
std::vector<std::weak_ptr<Peer>>& peers() {
  static auto* all = new std::vector<std::weak_ptr<Peer>>();
  return *all;
}
}  // namespace

std::shared_ptr<Peer> Peer::get(std::uint64_t pid, std::uint64_t fd, std::uint64_t nonce, std::uint64_t boot_hash,
                                std::uint64_t pidns, std::string& why) {
  std::lock_guard<std::mutex> lock(peers_mu);
  auto& all = peers();
  std::erase_if(all, [](const std::weak_ptr<Peer>& w) { return w.expired(); });
  for (const auto& w : all) {
    auto p = w.lock();
    // The nonce is secret to the table's owner (and those who can read it):
    // a matching offer names the same table, as opening it would show.
    if (!p || nonce == 0 || p->nonce_ != nonce || p->fd_ != fd || static_cast<std::uint64_t>(p->pid_) != pid) continue;
    pollfd pf{p->pidfd_, POLLIN, 0};
    if (::poll(&pf, 1, 0) != 0) continue;  // that process exited
    return p;
  }
  auto p = open(pid, fd, nonce, boot_hash, pidns, why);
  if (p) all.push_back(p);
  return p;
}

std::size_t Peer::open_count() {
  std::lock_guard<std::mutex> lock(peers_mu);
  std::size_t n = 0;
  for (const auto& w : peers()) n += w.expired() ? 0 : 1;
  return n;
}

std::size_t Peer::mappings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return maps_.size();
}

const void* Peer::newest_mapping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return maps_.empty() ? nullptr : maps_.back()->base;
}

std::shared_ptr<Peer> Peer::open(std::uint64_t pid, std::uint64_t fd, std::uint64_t nonce, std::uint64_t boot_hash,
                                 std::uint64_t pidns, std::string& why) {
  const Identity& me = identity();
  if (me.boot_hash == 0 || boot_hash != me.boot_hash) {
    why = "the peer runs on another host (boot id)";
    return nullptr;
  }
  if (me.pidns == 0 || pidns != me.pidns) {
    why = "the peer is in another pid namespace";
    return nullptr;
  }
  if (pid == 0 || pid > 0x7fffffff || fd > 0x7fffffff) {
    why = "malformed offer";
    return nullptr;
  }
  std::shared_ptr<Peer> p(new Peer());
  p->pid_ = static_cast<pid_t>(pid);
  p->fd_ = fd;
  p->nonce_ = nonce;
  p->pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, p->pid_, 0));
  if (p->pidfd_ < 0) {
    why = errno_text("pidfd_open");
    return nullptr;
  }
  const int tfd = static_cast<int>(::syscall(SYS_pidfd_getfd, p->pidfd_, static_cast<int>(fd), 0));
  if (tfd < 0) {
    why = errno_text("pidfd_getfd");  // EPERM: no ptrace rights over the peer
    return nullptr;
  }
  struct stat st {};
  if (::fstat(tfd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < kTableBytes) {
    ::close(tfd);
    why = "the offered descriptor is not a region table";
    return nullptr;
  }
  // Only a table whose size is sealed (Table::create): one the peer could
  // cut short would raise SIGBUS here at every lookup past its end.
  if (!size_sealed(tfd)) {
    ::close(tfd);
    why = "the offered region table's size is not sealed (F_SEAL_SHRINK): the peer could cut it short";
    return nullptr;
  }
  void* m = ::mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_SHARED, tfd, 0);
  ::close(tfd);
  if (m == MAP_FAILED) {
    why = errno_text("mmap");
    return nullptr;
  }
  p->map_ = m;
  if (p->header()->magic.load(std::memory_order_acquire) != kMagic ||
      p->header()->capacity.load(std::memory_order_relaxed) != kCapacity) {
    why = "the offered table has another layout";
    return nullptr;
  }
  if (nonce == 0 || p->header()->nonce.load(std::memory_order_relaxed) != nonce) {
    why = "the offered descriptor is not the peer's region table (nonce)";
    return nullptr;
  }
  // The peer agent's doorbell, if its table names one (the table is the
  // peer's own, as the nonce showed, so the number is the peer's word).
  // Without it the connection works the same, and the peer answers
  // revocations at its own pace.
  if (const std::uint64_t bell = p->header()->doorbell.load(std::memory_order_acquire); (bell & kDoorbell) != 0) {
    const int bfd = p->open_doorbell(static_cast<int>(bell & 0x7fffffffu));
    if (bfd >= 0) {
      p->doorbell_ = static_cast<int>(bell & 0x7fffffffu);
      ::close(bfd);
    }
  }
  return p;
}

int Peer::take_fd(int number) const noexcept { return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd_, number, 0)); }

int Peer::open_doorbell(int number) const noexcept {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd_, number, 0));
  if (fd < 0) return -1;
  char link[64] = {};
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(self.c_str(), link, sizeof link - 1);
  if (n > 0 && std::strcmp(link, "anon_inode:[eventfd]") == 0) return fd;
  ::close(fd);
  return -1;
}

void Peer::ring() noexcept {
  if (doorbell_ < 0) return;
  // Opened for each ring, not kept: a Peer (one per peer zone, so one per
  // client process at a server) then costs one descriptor, its pidfd. The
  // number is checked to be an eventfd each time: were the peer's zone gone
  // and the number reused for another file, nothing is written to it.
  const int fd = open_doorbell(doorbell_);
  if (fd < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);  // nonblocking (the owner made it so)
  ::close(fd);
}

Peer::~Peer() {
  maps_.clear();  // each unmapped as its last holder lets go
  if (map_ != nullptr) ::munmap(map_, kTableBytes);
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool enter(const Found& f) noexcept {
  // Announce the transfer, then make sure the entry was not revoked
  // meanwhile (Table::remove: revoke, then wait for inflight == 0). Both
  // sequentially consistent, so either this side sees the revocation or the
  // owner sees the announcement.
  f.entry->inflight.fetch_add(1, std::memory_order_seq_cst);
  if (f.entry->seq.load(std::memory_order_seq_cst) == f.seq) return true;
  f.entry->inflight.fetch_sub(1, std::memory_order_seq_cst);
  return false;
}

void leave(const Found& f) noexcept { f.entry->inflight.fetch_sub(1, std::memory_order_seq_cst); }

bool Peer::peer_alive() noexcept {
  // The pid names the peer only while it lives (a pid is reused once its
  // process is reaped): its pidfd turns readable when it exits. Looked at
  // once per tick of the coarse clock (a few ms; reading it is no system
  // call), not per transfer, where the poll cost as much as the copy's own
  // system call overhead. For a pid to name another process within that
  // time, the kernel would have to hand out every other pid of pid_max
  // (4,194,304 here by default) in a few milliseconds.
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const std::int64_t tick = static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
  if (alive_at_.load(std::memory_order_relaxed) == tick) return true;
  pollfd pf{pidfd_, POLLIN, 0};
  if (::poll(&pf, 1, 0) != 0) return false;
  alive_at_.store(tick, std::memory_order_relaxed);
  return true;
}

Peer::Mapping::~Mapping() {
  if (map != nullptr) ::munmap(map, span);
}

Found Peer::lookup(std::uint64_t key) const noexcept { return find_entry(entries(), key); }

bool Peer::in_huge_pages(const Found& f, std::uint64_t raddr, std::uint64_t len) noexcept {
  if ((f.access & kHugeMoves) == 0) return false;
  const HugeSpan span = whole_huge_pages(f.addr, f.len);
  return raddr >= span.start && raddr < span.end && len <= span.end - raddr;
}

bool Peer::ring_writable(std::uint64_t key, std::uint64_t raddr, std::uint64_t len) const noexcept {
  for (int attempt = 0; attempt < 16; ++attempt) {
    const Found f = lookup(key);
    if (f.torn) continue;
    return !refusal(f, raddr, len, kWrite) && f.share == 0 && (f.access & kRingOk) != 0;
  }
  return false;
}

Found find_entry(Entry* entries, std::uint64_t key) noexcept {
  Found f;
  const std::size_t start = mix(key) & kMask;
  for (std::size_t i = 0; i < kCapacity; ++i) {
    const std::size_t at = (start + i) & kMask;
    Entry& e = entries[at];
    const std::uint64_t s1 = e.seq.load(std::memory_order_acquire);
    const std::uint64_t st = e.state.load(std::memory_order_relaxed);
    if (st == EntryState::empty && (s1 & 1) == 0) break;  // end of the probe chain
    if (e.key.load(std::memory_order_relaxed) != key) continue;
    if (s1 & 1) continue;  // being revoked (or entered): not a usable region
    // Acquire loads: the second read of `seq` below cannot move above them
    // (a fence would do the same, but TSan does not support fences).
    f.addr = e.addr.load(std::memory_order_acquire);
    f.len = e.len.load(std::memory_order_acquire);
    f.access = e.access.load(std::memory_order_acquire);
    f.share = e.share.load(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) != s1) {
      f.torn = true;  // changed under us: look again
      return f;
    }
    if (st != EntryState::live) continue;
    f.entry = &e;
    f.index = at;
    f.seq = s1;
    return f;
  }
  return f;
}

void Peer::drop_revoked_locked() {
  std::erase_if(maps_, [this](const std::shared_ptr<const Mapping>& m) {
    return entries()[m->index].seq.load(std::memory_order_acquire) != m->seq;
  });
}

void Peer::drop_revoked() {
  std::lock_guard<std::mutex> lock(mu_);
  drop_revoked_locked();
}

std::shared_ptr<const Peer::Mapping> Peer::mapping(const Found& f) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : maps_)
    if (m->index == f.index && m->seq == f.seq) return m;
  // A miss: drop every mapping whose entry changed since it was made (the
  // region was deregistered, or the entry reused), so a revoked region does
  // not stay mapped here longer than the next miss; then make room. A
  // transfer of another connection copying through a dropped mapping keeps
  // it until it is done.
  drop_revoked_locked();
  if (maps_.size() >= kMaxMappings) maps_.erase(maps_.begin());
  static const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t offset = share_offset(f.share);
  if (f.len == 0 || f.len > UINT64_MAX - page || offset % page != 0) return nullptr;
  const std::uint64_t span = (f.len + page - 1) / page * page;
  const int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd_, share_fd(f.share), 0));
  if (fd < 0) return nullptr;
  // Only a regular file (or memfd) long enough to hold the region: a
  // mapping past its end would fault on access instead of failing here.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
      static_cast<std::uint64_t>(st.st_size) < offset || static_cast<std::uint64_t>(st.st_size) - offset < f.len) {
    ::close(fd);
    return nullptr;
  }
  // What the region's access allows, and no more: without remote_write the
  // MMU refuses a store (the privilege is checked before every copy too).
  const int prot = PROT_READ | ((f.access & kWrite) != 0 ? PROT_WRITE : 0);
  // A file on a DAX file system (persistent memory) is mapped as its owner
  // maps it for pmem2: with MAP_SYNC, so that the file system's metadata for
  // a page is durable once it is written here, and the owner's cache flush
  // (a PERSISTENT flush) is the whole durability step. Elsewhere (page cache,
  // memfd) MAP_SYNC is refused and the mapping is an ordinary shared one.
  void* m = MAP_FAILED;
  if ((prot & PROT_WRITE) != 0)
    m = ::mmap(nullptr, span, prot, MAP_SHARED_VALIDATE | MAP_SYNC, fd, static_cast<off_t>(offset));
  if (m == MAP_FAILED) m = ::mmap(nullptr, span, prot, MAP_SHARED, fd, static_cast<off_t>(offset));
  ::close(fd);
  if (m == MAP_FAILED) return nullptr;
  auto made = std::make_shared<Mapping>();
  made->index = f.index;
  made->seq = f.seq;
  made->base = static_cast<char*>(m);
  made->map = m;
  made->span = span;
  // The descriptor number names the region's file only while the entry is
  // unchanged (the owner closes it after revoking the entry): if the entry
  // changed since it was read, what was mapped may be another file.
  if (f.entry->seq.load(std::memory_order_seq_cst) != f.seq) return nullptr;
  maps_.push_back(made);
  return made;
}

std::optional<Peer::Outcome> Peer::refusal(const Found& f, std::uint64_t raddr, std::uint64_t len,
                                           std::uint64_t need) const noexcept {
  if (f.entry == nullptr)
    // Not a region of the peer's zone, unless the table left some out.
    return header()->omitted.load(std::memory_order_seq_cst) == 0 ? Outcome::refused : Outcome::tcp;
  // The checks the target would make: the range inside the region, the
  // privilege in the region's access.
  if (!inside(f, raddr, len) || (f.access & need) == 0) return Outcome::refused;
  return std::nullopt;
}

ssize_t Table::move_for_peer(pid_t pid, bool write, const std::uint64_t* keys, const iovec* ranges, std::size_t nr,
                             const iovec* segs, std::size_t n) noexcept {
  std::size_t total = 0, seg_total = 0;
  for (std::size_t k = 0; k < nr; ++k) total += ranges[k].iov_len;
  for (std::size_t i = 0; i < n; ++i) seg_total += segs[i].iov_len;
  if (nr == 0 || nr > kMaxRanges || n > kListSegments || total != seg_total) {
    errno = EINVAL;
    return -1;
  }
  const std::uint64_t need = write ? kWrite : kRead;
  Found entered[kMaxRanges];
  std::size_t in = 0;
  for (; in < nr; ++in) {
    const auto addr = reinterpret_cast<std::uint64_t>(ranges[in].iov_base);
    bool ok = false;
    for (int attempt = 0; attempt < 16 && !ok; ++attempt) {
      const Found f = find_entry(entries(), keys[in]);
      if (f.torn) continue;
      if (f.entry == nullptr || (f.access & need) == 0 || !inside(f, addr, ranges[in].iov_len)) break;
      if (enter(f)) {
        entered[in] = f;
        ok = true;
      }
    }
    if (!ok) break;
  }
  ssize_t moved = -1;
  int err = EACCES;
  if (in == nr) {
    errno = 0;
    moved = write ? ::process_vm_readv(pid, ranges, nr, segs, n, 0) : ::process_vm_writev(pid, ranges, nr, segs, n, 0);
    err = errno;
  }
  for (std::size_t k = 0; k < in; ++k) leave(entered[k]);
  errno = err;
  return moved;
}

Peer::Outcome Peer::transfer(bool write, std::span<const backend::Iov> local, std::uint64_t total, std::uint64_t raddr,
                             std::uint64_t key, bool split, bool* mapped, FarHand* far) {
  const std::uint64_t need = write ? kWrite : kRead;
  // At most kMaxLocal local segments in one call.
  iovec liov[kMaxLocal];
  std::size_t n = 0;
  for (const backend::Iov& v : local) {
    if (v.len == 0) continue;
    if (n == kMaxLocal) return Outcome::tcp;
    liov[n++] = iovec{v.addr, v.len};
  }
  for (int attempt = 0; attempt < 16; ++attempt) {
    const Found f = lookup(key);
    if (f.torn) continue;
    if (const auto no = refusal(f, raddr, total, need)) return *no;
    // A shareable region: copy through this process's own mapping of it. No
    // pidfd check: the mapping is of the region's file, not of a pid.
    const std::shared_ptr<const Mapping> m = f.share != 0 ? mapping(f) : nullptr;
    if (m == nullptr) {
      // Cross-memory attach, to the peer's pid while it lives.
      if (!peer_alive()) return Outcome::broken;
      iovec riov{reinterpret_cast<void*>(raddr), total};
      if (!enter(f)) continue;
      errno = 0;
      // Into the owner's huge pages this process's helper moves the second
      // part as fast, without the owner's work (docs/design.md, "The peer
      // moves half").
      FarHand* hand = in_huge_pages(f, raddr, total) ? nullptr : far;
      const ssize_t moved = cross_memory(pid_, write, liov, n, riov, split, key, hand);
      const int err = errno;
      leave(f);
      if (moved == static_cast<ssize_t>(total)) return Outcome::done;
      if (moved < 0 && (err == EPERM || err == ESRCH)) return Outcome::broken;
      return Outcome::tcp;  // short, EFAULT, ENOMEM: the transport decides
    }
    if (!enter(f)) continue;
    // A memcpy through the mapping; a large one on two threads (this one
    // and the helper), its last bytes stored last (copier.hpp). It fails
    // only when pages of the region's file are gone (the file was cut short
    // under the mapping, fault_guard.hpp): as a range the region does not
    // hold, refused.
    const ssize_t moved = cross_memory(kThisProcess, write, liov, n, iovec{m->base + (raddr - f.addr), total}, split);
    leave(f);
    if (moved != static_cast<ssize_t>(total)) return Outcome::refused;
    if (mapped != nullptr) *mapped = true;
    return Outcome::done;
  }
  return Outcome::tcp;  // the entry kept changing
}

static_assert(Peer::kMaxBatch == kMaxRanges && Peer::kMaxBatch * kMaxLocal == kMaxRangeSegments);

std::size_t Peer::move_many(bool write, std::span<Item> batch, bool split, FarHand* far) {
  const std::uint64_t need = write ? kWrite : kRead;
  std::size_t placed = 0;
  while (placed < batch.size()) {
    // A run of transfers with memory not shareable here, from `placed` on:
    // each checked and its entry entered, then one call for all of them.
    Found entered[kMaxBatch];
    iovec liov[kMaxBatch * kMaxLocal];
    iovec riov[kMaxBatch];
    std::uint64_t keys[kMaxBatch];
    std::size_t run = 0, nl = 0;
    bool huge = false;  // a range of the run lies in the owner's huge pages
    bool stop = false;  // batch[placed + run] is decided (not placed): end after the run
    for (std::size_t i = placed; i < batch.size() && run < kMaxBatch; ++i) {
      Item& w = batch[i];
      Found f;
      bool in = false, checked = false;
      for (int attempt = 0; attempt < 16 && !in; ++attempt) {
        f = lookup(w.key);
        if (f.torn) continue;
        if (const auto no = refusal(f, w.raddr, w.total, need)) {
          w.outcome = *no;
          break;
        }
        checked = true;
        if (f.share != 0) break;  // transfer() places it (through the mapping if it can)
        in = enter(f);
      }
      if (!in) {
        // Refused, not the table's to decide, shareable, or the entry kept
        // changing: the run ends before this one.
        if (checked && f.share != 0) break;
        if (checked) w.outcome = Outcome::tcp;
        stop = true;
        break;
      }
      std::size_t segs = 0;
      for (const backend::Iov& v : w.local)
        if (v.len != 0) ++segs;
      if (segs > kMaxLocal) {
        leave(f);
        w.outcome = Outcome::tcp;
        stop = true;
        break;
      }
      for (const backend::Iov& v : w.local)
        if (v.len != 0) liov[nl++] = iovec{v.addr, v.len};
      riov[run] = iovec{reinterpret_cast<void*>(w.raddr), w.total};
      keys[run] = w.key;
      huge = huge || in_huge_pages(f, w.raddr, w.total);
      entered[run++] = f;
    }
    if (run > 0) {
      ssize_t moved = -1;
      int err = ESRCH;
      if (peer_alive()) {
        errno = 0;
        // One call, where the kernel copies the ranges one after the other,
        // so the writes (or reads) are placed in posting order, as on one
        // connection; or, when `split` and they are large, two threads at
        // once, each for the bytes on its side of one address, with each
        // write's last bytes placed in order after them (copier.hpp,
        // write_ranges, read_ranges).
        FarHand* const hand = huge ? nullptr : far;
        moved = write ? write_ranges(pid_, liov, nl, riov, run, split, keys, hand)
                      : read_ranges(pid_, liov, nl, riov, run, split, keys, hand);
        err = errno;
      }
      for (std::size_t k = 0; k < run; ++k) leave(entered[k]);
      std::uint64_t left = moved < 0 ? 0 : static_cast<std::uint64_t>(moved);
      for (std::size_t k = 0; k < run; ++k) {
        Item& w = batch[placed];
        if (left < w.total) {
          // Short (a fault) or refused by the kernel: this one and the rest
          // are the transport's (EPERM, ESRCH: the path is gone).
          w.outcome = moved < 0 && (err == EPERM || err == ESRCH) ? Outcome::broken : Outcome::tcp;
          return placed;
        }
        left -= w.total;
        w.outcome = Outcome::done;
        ++placed;
      }
      continue;
    }
    if (stop || placed == batch.size()) break;
    // The next one is with a shareable region: it and those after it that
    // are too, copied through the mappings as one list; one that cannot be
    // (not mappable, a failed check) is transfer()'s to decide.
    if (const std::size_t copied = move_mapped(write, batch.subspan(placed), split); copied > 0) {
      placed += copied;
      continue;
    }
    Item& w = batch[placed];
    w.outcome = transfer(write, w.local, w.total, w.raddr, w.key, false, &w.mapped);
    if (w.outcome != Outcome::done) break;
    ++placed;
  }
  return placed;
}

std::size_t Peer::move_mapped(bool write, std::span<Item> batch, bool split) {
  const std::uint64_t need = write ? kWrite : kRead;
  Found entered[kMaxBatch];
  std::shared_ptr<const Mapping> maps[kMaxBatch];  // held until the copies are done
  iovec liov[kMaxBatch * kMaxLocal];
  iovec riov[kMaxBatch];
  std::size_t run = 0, nl = 0;
  for (Item& w : batch) {
    if (run == kMaxBatch) break;
    std::size_t segs = 0;
    for (const backend::Iov& v : w.local)
      if (v.len != 0) ++segs;
    if (segs > kMaxLocal) break;
    Found f;
    std::shared_ptr<const Mapping> m;
    bool in = false;
    for (int attempt = 0; attempt < 16 && !in; ++attempt) {
      f = lookup(w.key);
      if (f.torn) continue;
      if (refusal(f, w.raddr, w.total, need) || f.share == 0) break;
      // Writes into one region, as a batch mostly is: the mapping found for
      // the one before (mapping() takes the peer's lock).
      if (run > 0 && entered[run - 1].index == f.index && entered[run - 1].seq == f.seq)
        m = maps[run - 1];
      else
        m = mapping(f);
      if (m == nullptr) break;
      in = enter(f);
    }
    if (!in) break;  // the list ends before it
    for (const backend::Iov& v : w.local)
      if (v.len != 0) liov[nl++] = iovec{v.addr, v.len};
    riov[run] = iovec{m->base + (w.raddr - f.addr), w.total};
    maps[run] = std::move(m);
    entered[run++] = f;
  }
  if (run == 0) return 0;
  // Copies between this process's own memory fail only when pages of a
  // region's file are gone (cut short under the mapping, fault_guard.hpp):
  // the writes (or reads) before the one that faulted are placed, and that
  // one is transfer()'s to decide (which refuses it).
  const ssize_t moved = write ? write_ranges(kThisProcess, liov, nl, riov, run, split)
                              : read_ranges(kThisProcess, liov, nl, riov, run, split);
  for (std::size_t k = 0; k < run; ++k) leave(entered[k]);
  std::uint64_t left = moved < 0 ? 0 : static_cast<std::uint64_t>(moved);
  std::size_t placed = 0;
  for (; placed < run && left >= batch[placed].total; ++placed) {
    left -= batch[placed].total;
    batch[placed].outcome = Outcome::done;
    batch[placed].mapped = true;
  }
  return placed;
}

Peer::Outcome Peer::atomic_write(std::uint64_t key, std::uint64_t raddr, std::uint64_t value) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    const Found f = lookup(key);
    if (f.torn) continue;
    // The checks of handle_request; any failure is the target's to answer.
    if (f.entry == nullptr || f.share == 0 || (f.access & kWrite) == 0 || raddr % 8 != 0 || f.addr % 8 != 0 ||
        !inside(f, raddr, 8))
      return Outcome::tcp;
    const std::shared_ptr<const Mapping> m = mapping(f);
    if (m == nullptr) return Outcome::tcp;
    if (!enter(f)) continue;
    // The mapping starts at the region's start, both 8-aligned, so an
    // 8-aligned remote address is 8-aligned here too: a real atomic store
    // to the same physical memory the owner's agent would store to.
    struct Store {
      std::uint64_t* at;
      std::uint64_t value;
    } store{reinterpret_cast<std::uint64_t*>(m->base + (raddr - f.addr)), value};
    // Guarded as every copy through a mapping (fault_guard.hpp): a page of
    // a file cut short under the mapping refuses the store.
    const bool stored = copy_guarded(
        [](void* p) {
          const auto& s = *static_cast<const Store*>(p);
          __atomic_store_n(s.at, s.value, __ATOMIC_SEQ_CST);
        },
        &store);
    leave(f);
    return stored ? Outcome::done : Outcome::refused;
  }
  return Outcome::tcp;
}

Peer::Outcome Peer::flush(std::uint64_t key, std::uint64_t raddr, std::uint64_t len, bool persistent) {
  if (len == 0) return Outcome::tcp;  // nothing to check or write back: the owner's rules apply
  for (int attempt = 0; attempt < 16; ++attempt) {
    const Found f = lookup(key);
    if (f.torn) continue;
    // handle_request's checks for a flush: some remote access granted.
    if (const auto no = refusal(f, raddr, len, kRead | kWrite)) return *no;
    if (!persistent) return Outcome::done;
    if ((f.access & kPersistent) == 0 || f.share == 0) return Outcome::tcp;
    const std::shared_ptr<const Mapping> m = mapping(f);
    if (m == nullptr) return Outcome::tcp;
    if (!enter(f)) continue;
    // RegionImpl::persist's step for a file mapping, on the same pages
    // through this process's mapping (page-aligned at the region's start).
    static const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    const std::uint64_t from = (raddr - f.addr) & ~(page - 1);
    const std::uint64_t to = raddr - f.addr + len;
    const int rc = ::msync(m->base + from, to - from, MS_SYNC);
    leave(f);
    return rc == 0 ? Outcome::done : Outcome::tcp;
  }
  return Outcome::tcp;
}

}  // namespace remora::detail::direct
