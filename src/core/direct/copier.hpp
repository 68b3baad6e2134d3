// src/core/direct/copier.hpp - cross-memory transfers of the same-host
// direct path (and copies through this process's mapping of a peer's
// region: kThisProcess), split over two threads when they are large
// (docs/design.md, "Same-host direct path", "Large transfers on two
// threads").
//
// One process_vm_writev/readv call copies with one CPU, and most of its time
// for a large range is the kernel pinning the peer's pages and copying them
// (a profile of 64 KiB writes: over 90% of the initiator's time in the
// kernel). A transfer of at least kSplitBytes is cut in two at a page
// boundary of the remote range: the calling thread moves the first part, a
// helper thread of this process the second, at the same time, and then the
// caller moves the last kLastBytes, so that the end of the range is placed
// last, as with one call. The caller takes the second part back and moves it
// itself when the helper has not started it by the time the first is done,
// so a helper that is asleep, descheduled or busy with another caller's
// transfer costs a look, never a wait. With a FarHand (below) the second
// part is offered to the peer process first ("The peer moves half").
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace remora::detail::direct {

/// Transfers of at least this many bytes are split (below it the second
/// call's own overhead outweighs what the second CPU saves; measured in
/// bench/README.md).
constexpr std::size_t kSplitBytes = 256 * 1024;
/// The last bytes of a split transfer, moved after the rest.
constexpr std::size_t kLastBytes = 64;
/// At most this many ranges in one write_ranges call (Peer::kMaxBatch).
constexpr std::size_t kMaxRanges = 16;
/// At most this many local segments in one write_ranges call.
constexpr std::size_t kMaxRangeSegments = kMaxRanges * 8;
/// At most this many local segments in one part of a split: each write's
/// piece takes the local segments its bytes lie in, and a segment that
/// straddles two pieces is counted in both.
constexpr std::size_t kListSegments = kMaxRangeSegments + kMaxRanges;

/// The peer process as the second hand of a split transfer (docs/design.md,
/// "The peer moves half"): the second part offered to it, which it moves by
/// the opposite call towards this process (for a write, process_vm_readv
/// from this process into its own memory). Two processes pin pages under two
/// page tables' locks, where two threads of one process contend for the
/// peer's. Implemented by the endpoint over the connection's message ring.
class FarHand {
 public:
  virtual ~FarHand() = default;
  /// The last bytes of a batch's writes (write_ranges), offered with its
  /// part: the peer's ranges (`nr`, each at most kLastBytes, in the region
  /// of its key) and this process's segments holding their bytes (`n`), in
  /// posting order.
  struct Tails {
    const std::uint64_t* keys = nullptr;
    const iovec* remote = nullptr;
    std::size_t nr = 0;
    const iovec* local = nullptr;
    std::size_t n = 0;
  };
  /// Offer the part: the peer's ranges (each in the region of its key,
  /// which the peer checks again) and this process's segments, as the call
  /// of this process would move them. False when it cannot be offered now
  /// (this process's helper thread takes it instead). `tails` (or null):
  /// the batch's last bytes, which the peer may place after its part once
  /// this thread's part is done too (tails_go); taken with the part when
  /// they fit.
  virtual bool offer(bool write, const std::uint64_t* keys, const iovec* remote, std::size_t nr, const iovec* local,
                     std::size_t n, const Tails* tails) noexcept = 0;
  /// Called once this thread's part is done, before finish(), when the
  /// offer was taken: `whole`, this thread's part moved in full. True when
  /// the peer may place the last bytes offered with the part (it then does
  /// so after its own part, or says it did not: tails_placed); false when
  /// they are this thread's to place (none offered, `whole` false, or the
  /// peer stopped waiting for this thread).
  virtual bool tails_go(bool whole) noexcept {
    (void)whole;
    return false;
  }
  /// After finish() returned the whole part: the peer placed every last
  /// byte offered with it, in posting order, after every byte of the batch.
  virtual bool tails_placed() const noexcept { return false; }
  /// Called once this thread's part is done: takes the part back when the
  /// peer has not started it, else waits until the peer is done. The bytes
  /// the peer moved, or -1 when the part is the caller's to move (taken
  /// back, refused, failed, or the peer is gone).
  virtual ssize_t finish() noexcept = 0;
  /// The peer's share of a split, in 64ths (32: half), asked before the
  /// transfer is cut: a peer that finishes its part later than this thread
  /// finishes its own gets less.
  virtual unsigned share() const noexcept { return kHalfShare; }
  static constexpr unsigned kHalfShare = 32;
};

/// A spinning thread's pause between looks at memory another thread or
/// process writes.
inline void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// False when REMORA_COPY_HELPER turns the helper off ("0", "off", "no",
/// "false"); true when it is unset or turns it on. Any other value is
/// reported on stderr once and ignored.
bool copy_helper_allowed_by_environment() noexcept;
/// The same for REMORA_PEER_HELPER: the same-host peer is offered the second
/// part of a split transfer (FarHand) and moves its peers' parts.
bool peer_helper_allowed_by_environment() noexcept;
/// The same for REMORA_GATHER_WRITES: writes posted back to back while a
/// user polls are placed by one call (EndpointImpl::gatherable).
bool gather_allowed_by_environment() noexcept;

/// The pid that names this process's own memory in cross_memory: the
/// remote range is its mapping of a peer's region (docs/design.md,
/// "Shared-mapped regions"), and the bytes are copied with memcpy, in the
/// same parts and order as the system calls would move them (split over
/// this thread and the helper when large, the last bytes stored last). Such
/// a copy cannot fail; it copies the bytes both sides hold.
constexpr pid_t kThisProcess = 0;

/// process_vm_writev (`write`) or process_vm_readv between `local` (`n`
/// segments) and the one range `remote` of process `pid`, with the system
/// call's result: the bytes moved, or -1 with errno set. When `split` is
/// true and the range is at least kSplitBytes, the two halves are moved at
/// once by this thread and the helper; the result is then the whole length
/// when both halves were moved, -1 with the first failed half's errno when
/// a half failed (EPERM or ESRCH first, as they mean the peer is out of
/// reach), else fewer bytes than asked (a short half).
/// With `far` (and `key`, the region of `remote`): the second part is offered
/// to the peer first, and moved here whenever the peer does not move all of
/// it.
ssize_t cross_memory(pid_t pid, bool write, const iovec* local, std::size_t n, iovec remote, bool split,
                     std::uint64_t key = 0, FarHand* far = nullptr) noexcept;

/// process_vm_writev from `local` (`nl` segments) into the ranges `remote`
/// (`nr`, at most kMaxRanges), which take the local bytes in order: the
/// writes of a batch, placed in posting order. When `split` is true and the
/// ranges are two or more holding at least kSplitBytes together, each
/// write's body (all but its last kLastBytes) is cut at one address, the
/// page boundary nearest the point that halves the bodies' bytes: this thread moves
/// the parts below it, the helper those above, at once, each list in
/// posting order, so every byte is moved by one thread, the writes to it in
/// posting order; once both are done, this thread moves the last bytes of
/// every write, in posting order. (With `far`: the last bytes go with the
/// peer's part, and the peer copies them into its own memory once its part
/// is done and this thread said its own is (FarHand::tails_go), without a
/// system call; whatever it does not place is moved here as before.) So the
/// last bytes of each write land
/// after every byte of the writes before it and of itself, as with one
/// call; and the bytes left are those one call leaves, unless a write's
/// last bytes lie in the body of a later write: such a batch is one call.
/// The result: the whole length when all was moved; -1 with errno EPERM or
/// ESRCH (the peer is out of reach) when a call failed so; else a length
/// that covers only writes placed in full (every range wholly inside the
/// first that many bytes is: the writes before the first one a list came up
/// short in, whose last bytes all landed), with errno EFAULT.
/// `keys` (one per range) and `far`: as for cross_memory.
ssize_t write_ranges(pid_t pid, const iovec* local, std::size_t nl, const iovec* remote, std::size_t nr, bool split,
                     const std::uint64_t* keys = nullptr, FarHand* far = nullptr) noexcept;

/// process_vm_readv of the ranges `remote` (`nr`, at most kMaxRanges) of
/// process `pid` into `local` (`nl` segments), which take the ranges' bytes
/// in order: the reads of a batch. When `split` is true, the reads are two
/// or more holding at least kSplitBytes together and each lands in one
/// segment as long as its range (`nl` == `nr`), the segments are cut at one
/// address of this process, the page boundary nearest the point that halves
/// their bytes: this thread moves the parts below it, the helper those
/// above, at once, each list in posting order, so every byte here is
/// written by one thread, the reads into it in posting order, and
/// overlapping destinations end as one call leaves them. The result: the
/// whole length when all was moved; -1 with errno EPERM or ESRCH (the peer
/// is out of reach) when a call failed so; else a length that covers only
/// reads moved in full (those before the first one a list came up short
/// in), with errno EFAULT. `keys` (one per range) and `far`: as for
/// cross_memory (the peer moves its part by process_vm_writev into this
/// process).
ssize_t read_ranges(pid_t pid, const iovec* local, std::size_t nl, const iovec* remote, std::size_t nr, bool split,
                    const std::uint64_t* keys = nullptr, FarHand* far = nullptr) noexcept;

/// Transfers whose second part the helper moved, in this process (tests,
/// remora-info).
std::uint64_t copies_helped() noexcept;
/// Split transfers whose second part the caller took back (tests): from
/// the helper, or from the peer (FarHand) when it did not move all of it.
std::uint64_t copies_taken_back() noexcept;
/// Split transfers whose second part the peer process moved (tests).
std::uint64_t copies_moved_by_peer() noexcept;
/// Split batches whose last bytes the peer process placed (tests).
std::uint64_t copies_tails_by_peer() noexcept;

}  // namespace remora::detail::direct
