// src/core/direct/ring.hpp - same-host message rings (docs/design.md,
// "Same-host message rings"): when both ends of a connection took each
// other's direct offer, each side also offers an inbox, a ring of message
// slots in a memfd of its own with an eventfd (the bell) that its agent and
// completion queues watch. The peer maps it (pidfd_getfd) as its outbox and
// places its sends there, copying once, instead of sending them over the
// transport; the owner takes them in its progress, in order, and publishes
// how many receive-consuming messages it has handled (the acknowledgement
// that completes a send), then rings the sender's bell.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "fabric/backend.hpp"

namespace remora::detail::direct {

class Peer;

/// The ring's first 256 bytes. Each field one side writes sits on its own
/// cache line. Every field a lock-free atomic, the same in both processes.
struct RingHeader {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint64_t> nonce;
  std::atomic<std::uint64_t> slots;      // a power of two
  std::atomic<std::uint64_t> slot_size;  // payload bytes per slot
  // kSenderCounts, stored by the sender when it maps the ring (before its
  // first message): it bumps the owner zone's table `rung` count whenever
  // it rings the bell. 0 from a sender of an older version (then reserved).
  std::atomic<std::uint64_t> sender;
  std::atomic<std::uint64_t> pad0[3];
  // Written by the sender: messages published (monotonic).
  alignas(64) std::atomic<std::uint64_t> tail;
  // Set to 1 by whoever wrote to the owner's bell, after the write; the
  // owner swaps it to 0 and then empties the eventfd.
  std::atomic<std::uint64_t> bell;
  std::atomic<std::uint64_t> pad1[6];
  // Written by the owner: messages taken out of the ring (their slots are
  // free again) and receive-consuming messages of the connection handled
  // (over the ring and the transport), the count a send completes on.
  alignas(64) std::atomic<std::uint64_t> head;
  std::atomic<std::uint64_t> handled;
  std::atomic<std::uint64_t> pad2[6];
  std::atomic<std::uint64_t> pad3[8];
};
static_assert(sizeof(RingHeader) == 256);

/// A slot: the message's length and 64-bit data (its kind and immediate
/// data, as over the transport), then the payload.
struct RingSlot {
  std::atomic<std::uint64_t> len;
  std::atomic<std::uint64_t> data;
};
static_assert(sizeof(RingSlot) == 16);

constexpr std::uint64_t kRingMagic = 0x524d524e31000001ull;     // "RMRN1" + layout 1
constexpr std::uint64_t kSenderCounts = 0x524d524e43000001ull;  // RingHeader::sender
/// Rings are offered for messages of at most this many bytes, and at most
/// kRingBytes of slots per connection (fewer slots for larger messages).
constexpr std::size_t kRingMaxSlot = 1u << 20;
constexpr std::size_t kRingBytes = 4u << 20;

/// True when REMORA_RING_WRITES turns writes over the rings on ("1", "on",
/// "yes", "true"); false when it is unset or turns them off. Any other value
/// is reported on stderr once and ignored.
bool ring_writes_allowed_by_environment() noexcept;

/// The slots and slot size a ring gets for `max_recv` receives of
/// `slot_size` bytes: 0 slots when no ring is made for such messages.
std::size_t ring_slots(std::size_t max_recv, std::size_t slot_size) noexcept;

/// A ring's shape, the same at both ends: `slots` slots (a power of two) of
/// `slot_size` payload bytes, each `stride` bytes apart after the header,
/// `bytes` in all.
struct RingGeometry {
  std::size_t slots = 0, slot_size = 0, stride = 0, bytes = 0;
  /// The geometry of `slots` slots of `slot_size` bytes; false (and `out`
  /// untouched) when that is no ring: a count that is not a power of two,
  /// a slot size out of (0, kRingMaxSlot], or more than kRingBytes of
  /// slots (checked without overflow: the values may come from a peer).
  static bool make(std::size_t slots, std::size_t slot_size, RingGeometry& out) noexcept;
  /// Slot number `seq` (modulo the count) of the ring mapped at `map`.
  RingSlot* slot(void* map, std::uint64_t seq) const noexcept;
};

/// Descriptors held by the rings of this process (each inbox its eventfd,
/// and its memfd until the peer answered the offer; each outbox the peer's
/// eventfd): rings are made only while this stays within a quarter of the
/// soft RLIMIT_NOFILE, so that connections beyond it still get their
/// sockets (their messages then go over the transport).
std::size_t ring_fds_held() noexcept;
/// That quarter of the soft limit, now.
std::size_t ring_fd_cap() noexcept;

/// The owner's side: messages from the peer.
class Inbox {
 public:
  /// Null (and `why` set) when the memfd, its mapping or the eventfd cannot
  /// be made, or the rings hold their share of descriptors already.
  static std::unique_ptr<Inbox> create(std::size_t slots, std::size_t slot_size, std::string& why);
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  int fd() const noexcept { return fd_; }
  /// The peer answered the offer (it mapped the ring or will not): the
  /// descriptor is not needed any more (the mapping stays).
  void close_fd() noexcept;
  int bell_fd() const noexcept { return bell_; }
  std::uint64_t nonce() const noexcept { return nonce_; }
  std::size_t slots() const noexcept { return geo_.slots; }
  std::size_t slot_size() const noexcept { return geo_.slot_size; }

  /// The oldest message published and not yet taken: `message` with its
  /// bytes (valid until pop()) and data; `none`; or `broken` when the
  /// sender broke the ring's rules (a count or length out of range).
  enum class Next { none, message, broken };
  Next next(std::span<const std::uint8_t>& bytes, std::uint64_t& data) noexcept;
  /// Free the slot of the message next() returned. A caller that takes
  /// until next() says `none` has looked at `tail` after its last `head`
  /// (the other half of the sender's publish-then-look, Outbox::put).
  void pop() noexcept;
  /// Publish `n` as the count of receive-consuming messages handled.
  void publish_handled(std::uint64_t n) noexcept;
  /// What this side wrote before its next store to the ring is ordered
  /// before what the sender does after it sees that store
  /// (Outbox::acquire_from_owner): stores through the two mappings of the
  /// ring are told apart by ThreadSanitizer, which this tells. Nothing in
  /// other builds.
  void release_to_sender() const noexcept;
  /// Empty the bell if a peer rang it since the last look (a system call
  /// only then).
  void quiet_bell() noexcept;
  /// Nothing published and not taken, the bell not rung (since the last
  /// quiet_bell). Safe from any thread while the Inbox lives: a completion
  /// queue's drive asks it without the endpoint's lock. The peer rings the
  /// bell after each new handled count it publishes for this side's sends,
  /// so this also says no acknowledgement is waiting.
  bool idle() const noexcept;
  /// The sender bumps the zone's `rung` count when it rings the bell
  /// (RingHeader::sender): a consumer that saw this inbox idle need not look
  /// at it again until that count moves.
  bool sender_counts() const noexcept;

 private:
  Inbox() = default;
  int fd_ = -1;
  int bell_ = -1;
  std::size_t charged_ = 0;  // descriptors counted in ring_fds_held()
  void* map_ = nullptr;
  RingGeometry geo_;
  std::uint64_t head_ = 0;       // the owner's copy of header()->head
  std::uint64_t published_ = 0;  // the last count publish_handled stored
  std::uint64_t nonce_ = 0;      // this ring's, as in its header
  RingHeader* header() const noexcept { return static_cast<RingHeader*>(map_); }
};

/// The sender's side: the peer's inbox, mapped.
class Outbox {
 public:
  /// The inbox the peer offered (its descriptor and bell numbers in the
  /// peer's process, taken through `peer`'s pidfd), checked against the
  /// offered nonce and geometry. Null, with `why` set, when it cannot be
  /// (also when the rings hold their share of descriptors already).
  /// The Outbox keeps `peer` (the owner zone's table, whose `rung` count
  /// ring() bumps).
  static std::unique_ptr<Outbox> open(const std::shared_ptr<const Peer>& peer, int fd, int bell, std::uint64_t nonce,
                                      std::size_t slots, std::size_t slot_size, std::string& why);
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  std::size_t slot_size() const noexcept { return geo_.slot_size; }
  /// Place one message (the gather list, `total` bytes, at most
  /// slot_size()) and publish it; rings the owner's bell when the ring was
  /// empty (the owner may be asleep). Null when every slot is taken, else
  /// the message's first byte in the ring (the slot stays the message's
  /// until the owner has taken it).
  std::uint8_t* put(std::span<const backend::Iov> iov, std::size_t total, std::uint64_t data) noexcept;
  /// Every slot is taken (put would return false).
  bool full() const noexcept;
  /// Slots not taken now (at least this many puts would succeed).
  std::size_t free_slots() const noexcept;
  std::size_t slots() const noexcept { return geo_.slots; }
  /// The owner's count of receive-consuming messages handled.
  std::uint64_t handled() const noexcept;
  /// The other half of Inbox::release_to_sender, after a load that saw the
  /// owner's store.
  void acquire_from_owner() const noexcept;
  /// Wake the owner (its bell), and bump its zone's `rung` count.
  void ring() noexcept;

 private:
  Outbox() = default;
  std::shared_ptr<const Peer> peer_;
  int bell_ = -1;            // the owner's eventfd, taken into this process
  std::size_t charged_ = 0;  // descriptors counted in ring_fds_held()
  void* map_ = nullptr;
  RingGeometry geo_;
  std::uint64_t tail_ = 0;   // this side's copy of header()->tail
  std::uint64_t nonce_ = 0;  // the ring's, as offered
  RingHeader* header() const noexcept { return static_cast<RingHeader*>(map_); }
};

/// The inboxes of one zone that one consumer (the zone's agent, a
/// completion queue of the zone) watches, and which of them it looks at.
/// A look at an inbox reads a page of its own, so looking at every one on
/// each turn or poll cost thousands of page reads with thousands of
/// connections. A sender that counts (Inbox::sender_counts) bumps the
/// zone's `rung` count after it rings a bell, and it rings whenever it
/// publishes into an inbox whose owner had taken everything: so an inbox
/// seen idle stays idle until the count moves. look() therefore looks at
/// every inbox only when the count moved since its last look (or when
/// asked to), and otherwise only at those it found busy last time and
/// those whose sender does not count. Not thread-safe: its owner's lock
/// guards it.
class RingWatch {
 public:
  /// Watch `box` under `key` (the endpoint): looked at on the next look.
  void add(const void* key, std::shared_ptr<const Inbox> box);
  void remove(const void* key);
  bool empty() const noexcept { return rings_.empty(); }
  std::size_t size() const noexcept { return rings_.size(); }
  /// Append to `busy` the key of each inbox looked at and found not idle.
  /// `rung`: the zone's count, read before this call. `all`: look at every
  /// inbox whatever the count (the agent's sweeps).
  void look(std::uint64_t rung, bool all, std::vector<const void*>& busy);
  /// Inboxes the last look left to look at again (busy, or a sender that
  /// does not count), for tests.
  std::size_t looks() const noexcept { return looks_.size(); }

 private:
  struct Ring {
    std::shared_ptr<const Inbox> box;
    bool counted = false;  // its sender counts: seen so, sticky
  };
  void look_at(const void* key, Ring& r, std::vector<const void*>& busy);
  std::unordered_map<const void*, Ring> rings_;
  std::vector<const void*> looks_, next_;
  std::uint64_t seen_ = 0;  // the count at the last look at every inbox
};

}  // namespace remora::detail::direct
