// Same-host message rings (ring.hpp; docs/design.md, "Same-host message
// rings").
#include "core/direct/ring.hpp"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <random>

#include "core/direct/direct.hpp"

#if defined(__SANITIZE_THREAD__)
#define REMORA_RING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define REMORA_RING_TSAN 1
#endif
#endif
#ifdef REMORA_RING_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace remora::detail::direct {
namespace {

// ThreadSanitizer orders accesses by address, and the two ends of a ring in
// one process (the two zones of a test) map it at two addresses: the
// handled count one end stores and the other loads are two variables to it,
// so it saw the target's copy of a ring write into registered memory race
// with the initiator's reading of that memory after the write completed.
// Both ends know the ring by its nonce: a release and an acquire on a byte
// the nonce picks give ThreadSanitizer the ordering the shared count gives.
// Nothing in other builds.
#ifdef REMORA_RING_TSAN
char g_tsan_sync[256];
void sync_release(std::uint64_t nonce) noexcept { __tsan_release(&g_tsan_sync[nonce % sizeof g_tsan_sync]); }
void sync_acquire(std::uint64_t nonce) noexcept { __tsan_acquire(&g_tsan_sync[nonce % sizeof g_tsan_sync]); }
#else
void sync_release(std::uint64_t) noexcept {}
void sync_acquire(std::uint64_t) noexcept {}
#endif

std::size_t stride_of(std::size_t slot_size) noexcept { return (sizeof(RingSlot) + slot_size + 63) & ~std::size_t{63}; }

std::atomic<std::size_t> g_ring_fds{0};

// Count `n` more descriptors for rings; false (nothing counted) when that
// would pass ring_fd_cap().
bool charge_fds(std::size_t n, std::string& why) noexcept {
  const std::size_t cap = ring_fd_cap();
  std::size_t held = g_ring_fds.load(std::memory_order_relaxed);
  do {
    if (held + n > cap) {
      why = "the rings of this process hold " + std::to_string(held) + " descriptors, their share (a quarter) of " +
            "the open-file limit (ulimit -n); this connection's messages go over the transport";
      return false;
    }
  } while (!g_ring_fds.compare_exchange_weak(held, held + n, std::memory_order_relaxed));
  return true;
}

void release_fds(std::size_t& charged, std::size_t n) noexcept {
  n = std::min(n, charged);
  charged -= n;
  g_ring_fds.fetch_sub(n, std::memory_order_relaxed);
}

}  // namespace

std::size_t ring_fds_held() noexcept { return g_ring_fds.load(std::memory_order_relaxed); }

std::size_t ring_fd_cap() noexcept {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return SIZE_MAX / 4;
  return static_cast<std::size_t>(rl.rlim_cur / 4);
}

bool RingGeometry::make(std::size_t slots, std::size_t slot_size, RingGeometry& out) noexcept {
  if (slots == 0 || !std::has_single_bit(slots) || slot_size == 0 || slot_size > kRingMaxSlot) return false;
  const std::size_t stride = stride_of(slot_size);
  if (slots > kRingBytes / stride) return false;
  out = RingGeometry{slots, slot_size, stride, sizeof(RingHeader) + slots * stride};
  return true;
}

RingSlot* RingGeometry::slot(void* map, std::uint64_t seq) const noexcept {
  return reinterpret_cast<RingSlot*>(static_cast<char*>(map) + sizeof(RingHeader) + (seq & (slots - 1)) * stride);
}

bool ring_writes_allowed_by_environment() noexcept {
  static std::atomic<bool> said{false};
  return switch_from_environment("REMORA_RING_WRITES",
                                 "writes of 16 KiB or more stay on cross-memory attach unless it is 1", said, false);
}

std::size_t ring_slots(std::size_t max_recv, std::size_t slot_size) noexcept {
  if (slot_size == 0 || slot_size > kRingMaxSlot || max_recv == 0) return 0;
  std::size_t n = std::min(max_recv, kRingBytes / stride_of(slot_size));
  if (n == 0) return 0;
  return std::bit_floor(n);
}

// ---- owner ----

std::unique_ptr<Inbox> Inbox::create(std::size_t slots, std::size_t slot_size, std::string& why) {
  std::unique_ptr<Inbox> b(new Inbox());
  if (!RingGeometry::make(slots, slot_size, b->geo_)) {
    why = "no ring for messages of this size";
    return nullptr;
  }
  if (!charge_fds(2, why)) return nullptr;  // the memfd and the bell
  b->charged_ = 2;
  // Sealed at its size: the peer holds the descriptor too, and a ring it
  // shrank would fault here.
  b->fd_ = sealed_memfd("remora-ring", b->geo_.bytes, why);
  if (b->fd_ < 0) return nullptr;
  void* m = ::mmap(nullptr, b->geo_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd_, 0);
  if (m == MAP_FAILED) {
    why = errno_text("mmap");
    return nullptr;
  }
  b->map_ = m;
  // A child the program forks does not share the ring (it has no part in
  // the connection).
  (void)::madvise(m, b->geo_.bytes, MADV_DONTFORK);
  b->bell_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (b->bell_ < 0) {
    why = errno_text("eventfd");
    return nullptr;
  }
  std::random_device rd;
  std::uint64_t nonce = 0;
  while (nonce == 0) nonce = (std::uint64_t{rd()} << 32) | rd();
  RingHeader* h = b->header();  // the file starts zeroed
  h->nonce.store(nonce, std::memory_order_relaxed);
  b->nonce_ = nonce;
  h->slots.store(slots, std::memory_order_relaxed);
  h->slot_size.store(slot_size, std::memory_order_relaxed);
  h->magic.store(kRingMagic, std::memory_order_release);
  return b;
}

Inbox::~Inbox() {
  if (map_ != nullptr) ::munmap(map_, geo_.bytes);
  if (fd_ >= 0) ::close(fd_);
  if (bell_ >= 0) ::close(bell_);
  release_fds(charged_, charged_);
}

Inbox::Next Inbox::next(std::span<const std::uint8_t>& bytes, std::uint64_t& data) noexcept {
  // Sequentially consistent with the sender's publish-then-look (Outbox::
  // put): either the sender sees this side's last head and rings the bell,
  // or this load sees its message.
  const std::uint64_t tail = header()->tail.load(std::memory_order_seq_cst);
  if (tail == head_) return Next::none;
  sync_acquire(nonce_);
  if (tail - head_ > geo_.slots) return Next::broken;  // more than the ring holds: not a Remora sender
  RingSlot* slot = geo_.slot(map_, head_);
  const std::uint64_t len = slot->len.load(std::memory_order_relaxed);
  if (len > geo_.slot_size) return Next::broken;
  data = slot->data.load(std::memory_order_relaxed);
  bytes = {reinterpret_cast<const std::uint8_t*>(slot + 1), static_cast<std::size_t>(len)};
  return Next::message;
}

void Inbox::pop() noexcept {
  ++head_;
  header()->head.store(head_, std::memory_order_seq_cst);
}

void Inbox::publish_handled(std::uint64_t n) noexcept {
  if (n == published_) return;  // nothing new: no store to the shared line
  published_ = n;
  sync_release(nonce_);
  header()->handled.store(n, std::memory_order_release);
}

void Inbox::release_to_sender() const noexcept { sync_release(nonce_); }

void Inbox::quiet_bell() noexcept {
  if (header()->bell.load(std::memory_order_relaxed) == 0) return;
  if (header()->bell.exchange(0, std::memory_order_acq_rel) == 0) return;
  std::uint64_t v = 0;
  [[maybe_unused]] auto n = ::read(bell_, &v, sizeof v);  // nonblocking: EAGAIN when already empty
}

bool Inbox::idle() const noexcept {
  const RingHeader* h = header();
  return h->tail.load(std::memory_order_seq_cst) == h->head.load(std::memory_order_seq_cst) &&
         h->bell.load(std::memory_order_acquire) == 0;
}

bool Inbox::sender_counts() const noexcept { return header()->sender.load(std::memory_order_seq_cst) == kSenderCounts; }

void Inbox::close_fd() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  release_fds(charged_, 1);
}

// ---- sender ----

std::unique_ptr<Outbox> Outbox::open(const std::shared_ptr<const Peer>& peer_ptr, int fd, int bell, std::uint64_t nonce,
                                     std::size_t slots, std::size_t slot_size, std::string& why) {
  const Peer& peer = *peer_ptr;
  std::unique_ptr<Outbox> o(new Outbox());
  if (nonce == 0 || !RingGeometry::make(slots, slot_size, o->geo_)) {
    why = "malformed ring offer";
    return nullptr;
  }
  if (!charge_fds(2, why)) return nullptr;  // the ring's memfd (until mapped) and the bell
  o->charged_ = 2;
  const int rfd = peer.take_fd(fd);
  if (rfd < 0) {
    why = errno_text("pidfd_getfd (ring)");
    return nullptr;
  }
  struct stat st {};
  if (::fstat(rfd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != o->geo_.bytes) {
    ::close(rfd);
    why = "the offered descriptor is not a ring of the offered size";
    return nullptr;
  }
  // Only a ring whose size is sealed (Inbox::create): one the peer could
  // cut short would raise SIGBUS here at the next message past its end.
  if (!size_sealed(rfd)) {
    ::close(rfd);
    why = "the offered ring's size is not sealed (F_SEAL_SHRINK): the peer could cut it short";
    return nullptr;
  }
  void* m = ::mmap(nullptr, o->geo_.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
  ::close(rfd);
  release_fds(o->charged_, 1);
  if (m == MAP_FAILED) {
    why = errno_text("mmap (ring)");
    return nullptr;
  }
  o->map_ = m;
  (void)::madvise(m, o->geo_.bytes, MADV_DONTFORK);  // as the owner's (Inbox::create)
  const RingHeader* h = o->header();
  if (h->magic.load(std::memory_order_acquire) != kRingMagic || h->nonce.load(std::memory_order_relaxed) != nonce ||
      h->slots.load(std::memory_order_relaxed) != slots || h->slot_size.load(std::memory_order_relaxed) != slot_size) {
    why = "the offered descriptor is not the peer's ring (magic, nonce or geometry)";
    return nullptr;
  }
  o->tail_ = h->tail.load(std::memory_order_relaxed);
  o->nonce_ = nonce;
  o->bell_ = peer.take_eventfd(bell);
  if (o->bell_ < 0) {
    why = "the offered bell is not an eventfd of the peer";
    return nullptr;
  }
  o->peer_ = peer_ptr;
  // Before the first message: the owner may then skip looking at this ring
  // until the zone's count moves (RingWatch).
  o->header()->sender.store(kSenderCounts, std::memory_order_seq_cst);
  return o;
}

Outbox::~Outbox() {
  if (map_ != nullptr) ::munmap(map_, geo_.bytes);
  if (bell_ >= 0) ::close(bell_);
  release_fds(charged_, charged_);
}

std::uint8_t* Outbox::put(std::span<const backend::Iov> iov, std::size_t total, std::uint64_t data) noexcept {
  RingHeader* h = header();
  if (total > geo_.slot_size || tail_ - h->head.load(std::memory_order_acquire) >= geo_.slots) return nullptr;
  RingSlot* slot = geo_.slot(map_, tail_);
  auto* out = reinterpret_cast<std::uint8_t*>(slot + 1);
  std::size_t at = 0;
  for (const auto& v : iov) {
    const std::size_t n = std::min(v.len, total - at);
    std::memcpy(out + at, v.addr, n);
    at += n;
    if (at == total) break;
  }
  slot->len.store(total, std::memory_order_relaxed);
  slot->data.store(data, std::memory_order_relaxed);
  // What this thread did before the message is ordered before what the
  // owner does once it took it (the tail's store and load, for
  // ThreadSanitizer).
  sync_release(nonce_);
  const std::uint64_t was = tail_++;
  h->tail.store(tail_, std::memory_order_seq_cst);
  // The owner took everything before this message: it may be asleep.
  if (h->head.load(std::memory_order_seq_cst) == was) ring();
  return out;
}

bool Outbox::full() const noexcept { return tail_ - header()->head.load(std::memory_order_acquire) >= geo_.slots; }

std::size_t Outbox::free_slots() const noexcept {
  return geo_.slots - static_cast<std::size_t>(tail_ - header()->head.load(std::memory_order_acquire));
}

std::uint64_t Outbox::handled() const noexcept {
  const std::uint64_t n = header()->handled.load(std::memory_order_acquire);
  sync_acquire(nonce_);
  return n;
}

void Outbox::acquire_from_owner() const noexcept { sync_acquire(nonce_); }

void Outbox::ring() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(bell_, &one, sizeof one);
  // After the write: the owner empties the bell only once it sees this.
  header()->bell.store(1, std::memory_order_release);
  // After the bell: a consumer that sees the count move looks at every
  // ring of the zone and finds this one rung.
  peer_->rung_count().fetch_add(1, std::memory_order_seq_cst);
}

// ---- consumers ----

void RingWatch::add(const void* key, std::shared_ptr<const Inbox> box) {
  remove(key);
  rings_[key] = Ring{std::move(box), false};
  looks_.push_back(key);
}

void RingWatch::remove(const void* key) {
  if (rings_.erase(key) != 0) std::erase(looks_, key);
}

void RingWatch::look_at(const void* key, Ring& r, std::vector<const void*>& busy) {
  // Whether the sender counts first: it says so before its first message,
  // so an inbox seen idle after that is one whose next message moves the
  // count (or that its owner's drive, taking until the ring is empty, finds
  // anyway: Inbox::next).
  if (!r.counted) r.counted = r.box->sender_counts();
  const bool idle = r.box->idle();
  if (!idle) busy.push_back(key);
  if (!idle || !r.counted) next_.push_back(key);
}

void RingWatch::look(std::uint64_t rung, bool all, std::vector<const void*>& busy) {
  next_.clear();
  if (all || rung != seen_) {
    seen_ = rung;
    for (auto& [key, r] : rings_) look_at(key, r, busy);
  } else {
    for (const void* key : looks_)
      if (auto it = rings_.find(key); it != rings_.end()) look_at(key, it->second, busy);
  }
  looks_.swap(next_);
}

}  // namespace remora::detail::direct
