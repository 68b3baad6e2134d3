// src/core/direct/direct.hpp - the same-host direct path (docs/design.md,
// "Same-host direct path"): when both ends of a connection are processes of
// one host, the initiator places RMA writes and reads itself with
// cross-memory attach (process_vm_writev/readv), after checking key, bounds
// and privilege against the target zone's region table, which the target
// keeps in a memfd-backed shared mapping and the initiator maps.
//
// On unless FabricOptions::same_host is false or REMORA_SAMEHOST=0 (read
// when a zone is created).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fabric/backend.hpp"
#include "remora/access.hpp"
#include "remora/memory_region.hpp"

namespace remora::detail::direct {

class FarHand;

/// One region of the table. 64 bytes, every field a lock-free atomic, so the
/// layout is the same in both processes and no access tears. `seq` is a
/// seqlock: odd while the owner changes the entry (or revokes it); a reader
/// that sees it even and unchanged around its reads saw a whole entry.
struct Entry {
  std::atomic<std::uint64_t> seq;
  std::atomic<std::uint64_t> state;  // EntryState
  std::atomic<std::uint64_t> key;
  std::atomic<std::uint64_t> addr;
  std::atomic<std::uint64_t> len;
  std::atomic<std::uint64_t> access;  // kRead | kWrite | kPersistent
  // Initiators inside a transfer to this entry's memory: incremented before
  // process_vm_*, decremented after. Deregistration waits for 0.
  std::atomic<std::uint64_t> inflight;
  // The region's memory as a shared file mapping the initiator may map
  // itself (ProtectionZone::map_file, ProtectionZone::allocate): 0 when it
  // is not; else kShareable | the file offset of the region's start in 4 KiB
  // units << 32 | the descriptor's number in the owner's process
  // (encode_share, share_fd, share_offset). Was `reserved` (always 0) in
  // layout 1, so the layout number did not change: a table of an older
  // version reads as "nothing shareable".
  std::atomic<std::uint64_t> share;
};
static_assert(sizeof(Entry) == 64);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

enum EntryState : std::uint64_t {
  empty = 0,      // never used: a lookup stops here
  live = 1,       // a registered region
  tombstone = 2,  // was a region; reusable
  dead = 3,       // a revocation timed out (a peer died inside a transfer): never reused
};
constexpr std::uint64_t kRead = 1, kWrite = 2;
// The owner declared the region persistent (PERSISTENT flushes are carried
// out). A bit older tables never set: their regions' flushes go to the owner.
constexpr std::uint64_t kPersistent = 4;
// The owner takes writes into the region over its message rings (a region
// of ordinary memory registered with remote write, which registration found
// writable: Table::place copies into it with a store). Older tables never
// set it.
constexpr std::uint64_t kRingOk = 8;
// The owner moves the region's whole, aligned huge pages into huge pages
// (HugePageJob): a transfer inside them pins one page per huge page, and is
// split over the initiator's own threads rather than offered to the owner
// (docs/design.md, "The peer moves half"). Older tables never set it.
constexpr std::uint64_t kHugeMoves = 16;
// The owner copies the last bytes of a peer's split batch into the region
// with a store (wire::PullTails; a region of ordinary memory registered with
// remote write, which registration found writable where it could tell, as
// for kRingOk). Read by the owner only.
constexpr std::uint64_t kStores = 32;

constexpr std::uint64_t kShareable = 1ull << 63;
/// Entry::share for a region at file offset `offset` (a multiple of 4 KiB
/// below 2^43) of descriptor `fd`; 0 (not shareable) when either is out of
/// range.
constexpr std::uint64_t encode_share(int fd, std::uint64_t offset) noexcept {
  if (fd < 0 || (offset & 4095) != 0 || (offset >> 12) >= (1ull << 31)) return 0;
  return kShareable | ((offset >> 12) << 32) | static_cast<std::uint32_t>(fd);
}
constexpr int share_fd(std::uint64_t share) noexcept { return static_cast<int>(share & 0x7fffffffull); }
constexpr std::uint64_t share_offset(std::uint64_t share) noexcept { return ((share >> 32) & 0x7fffffffull) << 12; }

struct Header {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint64_t> capacity;
  // Regions left out of the table because it was full: while 0, a key the
  // table does not have is not a region of the zone at all.
  std::atomic<std::uint64_t> omitted;
  // A random number chosen when the table is made and sent in the offer:
  // only a process that can read the table (its owner, or one with ptrace
  // rights over the owner) knows it. The initiator refuses a table whose
  // nonce is not the offered one, so an offer naming a third process's pid
  // and table cannot turn the initiator's writes towards that process.
  std::atomic<std::uint64_t> nonce;
  // The owner zone's doorbell: kDoorbell | the number, in the owner's
  // process, of an eventfd its agent sleeps on (Table::set_doorbell); 0 when
  // it has none (no progress thread, a busy-polling zone, or a table of an
  // older version, where this was reserved and 0). A peer that asks the
  // owner to answer something at once (an op_direct_revoke request) rings it
  // after sending: the owner's agent then reads every transport queue of
  // its zone, those its users drive too, and serves what it finds.
  std::atomic<std::uint64_t> doorbell;
  // Bumped by a peer each time it rings the bell of an inbox of this zone
  // (Outbox::ring, after the bell): the zone's agent and completion queues
  // look at every inbox only when it moved, and otherwise at those they
  // found busy and those whose sender does not bump it (an older version,
  // where this was reserved and stays 0): direct::RingWatch.
  std::atomic<std::uint64_t> rung;
  std::atomic<std::uint64_t> reserved[2];
};
static_assert(sizeof(Header) == 64);

constexpr std::uint64_t kDoorbell = 1ull << 63;
constexpr std::uint64_t kMagic = 0x524d445431000001ull;  // "RMDT1" + layout 1
constexpr std::size_t kCapacity = 4096;                  // a power of two
constexpr std::size_t kTableBytes = sizeof(Header) + kCapacity * sizeof(Entry);
constexpr std::size_t kMaxLocal = kMaxSegments;  // local segments of one operation

/// False when REMORA_SAMEHOST turns the path off ("0", "off", "no",
/// "false"); true when it is unset or turns it on ("1", "on", "yes",
/// "true"). Any other value is reported on stderr once and ignored.
bool allowed_by_environment() noexcept;
/// The switch `name` in the environment: false for "0", "off", "no",
/// "false"; true for "1", "on", "yes", "true"; `unset` when unset or empty.
/// Any other value is reported on stderr (once per `said`, with `what`
/// saying what happens) and counts as unset.
bool switch_from_environment(const char* name, const char* what, std::atomic<bool>& said, bool unset = true) noexcept;

/// "`what`: " and errno's text (the reasons the path is not taken).
std::string errno_text(const char* what);

/// A memory file named `name` of `bytes` bytes (close-on-exec), its size
/// sealed: peers map it through their own descriptors, and one that could
/// cut it short would raise SIGBUS in every process reading past the new
/// end. The descriptor, or -1 with `why` set (and nothing left open).
int sealed_memfd(const char* name, std::uint64_t bytes, std::string& why);

/// Whether the size of the memory file `fd` is sealed against shrinking,
/// as sealed_memfd seals it (what a peer's offered table or ring must be
/// before it is mapped here).
bool size_sealed(int fd) noexcept;

/// What this process tells a peer so that it can tell whether the two share
/// a host and a pid namespace: a hash of the boot id and the pid-namespace
/// inode. Computed once.
struct Identity {
  std::uint64_t boot_hash = 0;
  std::uint64_t pidns = 0;
};
const Identity& identity() noexcept;

/// One consistent read of a table's entry of a key (find_entry).
struct Found {
  Entry* entry = nullptr;
  std::size_t index = 0;
  std::uint64_t seq = 0, addr = 0, len = 0, access = 0, share = 0;
  bool torn = false;  // changed while read: look again
};
/// The live entry of `key` among the kCapacity entries at `entries`, read
/// once (torn when it changed meanwhile), or none.
Found find_entry(Entry* entries, std::uint64_t key) noexcept;
/// Announce a transfer to the entry of `f` (Table::remove waits for it to
/// leave); false, with nothing announced, when the entry changed since `f`
/// was read (look it up again).
bool enter(const Found& f) noexcept;
void leave(const Found& f) noexcept;

/// The owner's side: the zone's region table.
class Table {
 public:
  /// Null (and `why` set) when the memfd cannot be made or mapped.
  static std::unique_ptr<Table> create(std::string& why);
  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  int fd() const noexcept { return fd_; }
  std::uint64_t nonce() const noexcept { return header()->nonce.load(std::memory_order_relaxed); }
  /// Enter a region (the table full: counted as omitted, served over tcp).
  /// `share_fd`/`share_offset`: the region's memory is a shared mapping of
  /// that descriptor (which stays open until remove returns) from that file
  /// offset, so initiators may map it (-1: not shareable). `ring_ok`: the
  /// owner takes writes into it over its rings (kRingOk). `huge_moves`: the
  /// owner moves its whole huge pages into huge pages (kHugeMoves).
  /// `stores`: the owner may store a peer's last bytes into it (kStores).
  /// Returns the entry's index, or -1.
  int add(std::uint64_t key, std::uint64_t addr, std::uint64_t len, Access access, int share_fd = -1,
          std::uint64_t share_offset = 0, bool persistent = false, bool ring_ok = false, bool huge_moves = false,
          bool stores = false);
  /// Revoke entry `index` (from add): after this returns, no initiator that
  /// honours the protocol is inside a transfer to it, and none starts one
  /// (bounded wait: a peer killed inside a transfer never leaves it). False
  /// when the wait timed out: a transfer may still be inside the region.
  bool remove(int index);
  /// Copy `bytes` to `addr` in this process, a write a same-host peer sent
  /// over a message ring (EndpointImpl::take_ring), after the checks the
  /// peer made against this table: the entry of `key` live, the range
  /// inside it, remote write granted, kRingOk set. Entered as a peer's transfer is, so a
  /// deregistration waits for the copy. False, with nothing written, when a
  /// check fails (a peer that honours the protocol checked first: the region
  /// was deregistered since, or the peer broke the rules).
  /// `need`: the entry's bit that allows the store (kRingOk for a ring
  /// write, kStores for the last bytes of a split batch).
  bool place(std::uint64_t key, std::uint64_t addr, std::span<const std::uint8_t> bytes,
             std::uint64_t need = kRingOk) noexcept;
  /// Move the second part of a same-host peer's split transfer (FarHand,
  /// copier.hpp) for it: every range of this process checked against the
  /// table (the entry of its key live, the range inside it, remote write
  /// granted for a write, remote read for a read) and entered, as a peer's
  /// transfer is, then one process_vm_readv from process `pid` into the
  /// ranges (a write) or one process_vm_writev from them to it (a read),
  /// its segments `segs`. The bytes moved, or -1 with errno set: EACCES,
  /// nothing moved, when a check fails; EINVAL for more than kMaxRanges
  /// ranges or lengths that differ; else the call's.
  ssize_t move_for_peer(pid_t pid, bool write, const std::uint64_t* keys, const iovec* ranges, std::size_t nr,
                        const iovec* segs, std::size_t n) noexcept;
  /// Publish the zone agent's doorbell (an eventfd of this process, which
  /// stays open as long as the table) in the header.
  void set_doorbell(int fd) noexcept;
  /// The header's `rung` count, now.
  std::uint64_t rung() const noexcept { return header()->rung.load(std::memory_order_seq_cst); }

 private:
  Table() = default;
  int fd_ = -1;
  void* map_ = nullptr;
  std::mutex mu_;  // writers (add/remove); a leaf
  Header* header() const noexcept { return static_cast<Header*>(map_); }
  Entry* entries() const noexcept { return reinterpret_cast<Entry*>(static_cast<char*>(map_) + sizeof(Header)); }
};

/// The initiator's side: a peer's table, mapped, and how to reach its memory.
class Peer {
 public:
  /// The table the peer offered (its pid, the table's fd number in its
  /// process and the table's nonce), mapped. One Peer per table in this
  /// process, shared by every connection towards it: a second offer of the
  /// same table gets the first one's while any connection still holds it.
  /// Null, with `why` set, when that is not possible here or the table found
  /// is not the one offered.
  static std::shared_ptr<Peer> get(std::uint64_t pid, std::uint64_t fd, std::uint64_t nonce, std::uint64_t boot_hash,
                                   std::uint64_t pidns, std::string& why);
  ~Peer();
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  enum class Outcome {
    done,     // placed; the operation completed
    refused,  // the table says no (key, bounds, privilege), or pages of a mapped region's file are gone: remote_access
    tcp,      // not decided here (unknown key in a table that omitted some, short transfer, EFAULT): use tcp
    broken,   // the peer cannot be reached this way any more (EPERM, ESRCH): use tcp from now on
  };
  /// Check [raddr, raddr+total) against the entry of `key` (privilege: write
  /// or read) and transfer between `local` and it: a memcpy through this
  /// process's own mapping of the region when the entry is shareable (and
  /// `*mapped` set), else process_vm_writev/readv (a large one split over
  /// two threads when `split`, or with the peer process moving the second
  /// part when `far` takes it: copier.hpp).
  Outcome transfer(bool write, std::span<const backend::Iov> local, std::uint64_t total, std::uint64_t raddr,
                   std::uint64_t key, bool split, bool* mapped = nullptr, FarHand* far = nullptr);
  /// One write or read of a batch (write_many, read_many): what to move,
  /// and its outcome.
  struct Item {
    std::span<const backend::Iov> local;
    std::uint64_t total = 0, raddr = 0, key = 0;
    Outcome outcome = Outcome::tcp;
    bool mapped = false;  // placed through this process's mapping
  };
  /// The region of `key` is in the table and shareable (a write to it is a
  /// memcpy through a mapping: nothing to gain from a batch).
  bool shareable(std::uint64_t key) const noexcept {
    const Found f = lookup(key);
    return f.entry != nullptr && f.share != 0;
  }
  /// At most this many writes in one batch.
  static constexpr std::size_t kMaxBatch = 16;
  /// Writes posted back to back (at most kMaxBatch), placed in posting
  /// order, each checked as transfer() checks it: consecutive ones into
  /// memory that is not mapped here go in one process_vm_writev call (its
  /// remote side a list of ranges); consecutive ones into regions mapped
  /// here are copied as one list through the mappings (write_ranges with
  /// kThisProcess); any other one is placed as transfer() places it.
  /// Stops at the first write not placed, whose outcome says why (the
  /// writes after it are left to the caller). Returns how many were placed.
  /// When `split`, a call's or list's writes may be placed by two threads
  /// at once (write_ranges): the last bytes of each still land after every
  /// byte of the writes before it.
  std::size_t write_many(std::span<Item> batch, bool split, FarHand* far = nullptr) {
    return move_many(true, batch, split, far);
  }
  /// Reads posted back to back (at most kMaxBatch), as write_many places
  /// writes: checked as transfer() checks them (remote read), consecutive
  /// ones from memory not mapped here in one process_vm_readv call (split
  /// over two threads when `split` and large: read_ranges, where every byte
  /// of this process is written by one thread, the reads into it in posting
  /// order), each other one by transfer(). Stops at the first read not
  /// moved; returns how many were.
  std::size_t read_many(std::span<Item> batch, bool split, FarHand* far = nullptr) {
    return move_many(false, batch, split, far);
  }
  /// The 8-byte atomic write as an atomic store through the mapping of a
  /// shareable entry, after the target's checks. `done`; `refused` when the
  /// page is gone (the region's file was cut short under the mapping:
  /// fault_guard.hpp); or `tcp` for anything else (not shareable, not
  /// mappable, a failed check: the target's agent decides and answers).
  Outcome atomic_write(std::uint64_t key, std::uint64_t raddr, std::uint64_t value);

  /// A write of `len` bytes at `raddr` into the region of `key` passes the
  /// target's checks and the region is not shareable: what a write sent
  /// over a message ring must be (the target copies it into its memory).
  bool ring_writable(std::uint64_t key, std::uint64_t raddr, std::uint64_t len) const noexcept;

  /// At most this many regions of the peer are mapped at a time (the oldest
  /// mapping is dropped for a new one).
  static constexpr std::size_t kMaxMappings = 64;
  /// A flush of [raddr, raddr+len) of the region of `key`, after the checks
  /// the owner's agent makes (key, range, some remote access). VISIBILITY:
  /// `done` once checked (the caller has nothing in flight, so every
  /// earlier write is placed). PERSISTENT: the owner's write-back step
  /// (msync of the covering pages, MS_SYNC) run on this process's mapping of
  /// a shareable, persistent region: the same pages of the same file. `tcp`
  /// whenever the owner must decide or report (not persistent, not
  /// shareable, the write-back failed: the owner runs its own and reports
  /// its error), `refused` when a check fails.
  Outcome flush(std::uint64_t key, std::uint64_t raddr, std::uint64_t len, bool persistent);

  /// The peer's pid (its process is the one the table came from while
  /// alive() says so).
  pid_t pid() const noexcept { return pid_; }
  /// The peer process has not exited (a look at its pidfd at most once per
  /// tick of the coarse clock).
  bool alive() noexcept { return peer_alive(); }

  /// Drop every cached mapping whose entry changed since it was made (the
  /// peer deregistered the region): unmapped now unless a transfer is still
  /// copying through it (it goes when that one lets go).
  void drop_revoked();

  /// Wake the peer zone's agent (its doorbell, when its table has one and
  /// this process could open it): a request was just sent that the peer
  /// should answer even if its users drive the connection but are not
  /// polling now.
  void ring() noexcept;
  /// The peer's descriptor `number`, taken into this process (pidfd_getfd):
  /// the new descriptor, or -1 (errno set).
  int take_fd(int number) const noexcept;
  /// The same, but only if it is an eventfd (else -1, nothing kept).
  int take_eventfd(int number) const noexcept { return open_doorbell(number); }
  /// The `rung` count in the peer's table header (Outbox::ring bumps it);
  /// valid while this Peer lives.
  std::atomic<std::uint64_t>& rung_count() const noexcept { return header()->rung; }
  /// The peer's table names a doorbell this process can open (tests).
  bool has_doorbell() const noexcept { return doorbell_ >= 0; }

  /// Mappings held now, and the first byte of the newest (tests).
  std::size_t mappings() const;
  const void* newest_mapping() const;
  /// Peers open in this process now (tests).
  static std::size_t open_count();

 private:
  Peer() = default;
  /// write_many (`write`) or read_many.
  std::size_t move_many(bool write, std::span<Item> batch, bool split, FarHand* far);
  /// The transfers at the start of `batch` into (or from) regions mapped
  /// here, as many as pass their checks, copied as one list through the
  /// mappings (write_ranges or read_ranges with kThisProcess: on two threads
  /// when `split` and they hold kSplitBytes together). Each one moved is
  /// `done` and `mapped`; returns how many (0: the first is not such a
  /// transfer, or failed a check: transfer() decides it).
  std::size_t move_mapped(bool write, std::span<Item> batch, bool split);
  static std::shared_ptr<Peer> open(std::uint64_t pid, std::uint64_t fd, std::uint64_t nonce, std::uint64_t boot_hash,
                                    std::uint64_t pidns, std::string& why);
  /// A region of the peer mapped here: entry `index` as of `seq`. Unmapped
  /// when the last holder lets go (a transfer copying through it keeps it
  /// while another connection's miss drops it from the cache).
  struct Mapping {
    std::size_t index = 0;
    std::uint64_t seq = 0;
    char* base = nullptr;  // the region's first byte (entry addr) here
    void* map = nullptr;   // what mmap returned
    std::size_t span = 0;  // mapped length
    Mapping() = default;
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping();
  };
  Found lookup(std::uint64_t key) const noexcept;
  /// The target's checks on `f` (a lookup that was not torn) for
  /// [raddr, raddr+len) and one of the access bits `need`: nothing when they
  /// pass; else `refused`, or `tcp` for a key missing from a table that left
  /// some regions out (the owner decides).
  std::optional<Outcome> refusal(const Found& f, std::uint64_t raddr, std::uint64_t len,
                                 std::uint64_t need) const noexcept;
  /// [raddr, raddr+len) lies in the whole huge pages of `f`, which its owner
  /// moves into huge pages (kHugeMoves).
  static bool in_huge_pages(const Found& f, std::uint64_t raddr, std::uint64_t len) noexcept;
  /// The mapping of `f` (a shareable entry), made now if needed; null when
  /// it cannot be made (the caller uses cross-memory attach).
  std::shared_ptr<const Mapping> mapping(const Found& f);
  void drop_revoked_locked();  // with mu_ held
  /// The peer process has not exited (its pidfd, looked at once per coarse
  /// clock tick).
  bool peer_alive() noexcept;
  pid_t pid_ = 0;
  int pidfd_ = -1;
  int doorbell_ = -1;  // the number of the peer agent's doorbell in its process (an eventfd), or -1
  /// The peer's descriptor `number`, taken here (pidfd_getfd) if it is an
  /// eventfd; -1 otherwise.
  int open_doorbell(int number) const noexcept;
  std::atomic<std::int64_t> alive_at_{-1};  // the coarse clock's tick of the last look
  std::uint64_t fd_ = 0, nonce_ = 0;        // what the offer named (Peer::get)
  void* map_ = nullptr;
  mutable std::mutex mu_;                             // maps_; a leaf
  std::vector<std::shared_ptr<const Mapping>> maps_;  // oldest first, at most kMaxMappings
  Header* header() const noexcept { return static_cast<Header*>(map_); }
  Entry* entries() const noexcept { return reinterpret_cast<Entry*>(static_cast<char*>(map_) + sizeof(Header)); }
};

}  // namespace remora::detail::direct
