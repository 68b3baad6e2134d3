// Cross-memory transfers split over two threads (copier.hpp).
#include "core/direct/copier.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <thread>
#include <utility>

#include "core/direct/direct.hpp"
#include "core/direct/fault_guard.hpp"

namespace remora::detail::direct {
namespace {

std::atomic<std::uint64_t> helped{0};
std::atomic<std::uint64_t> taken_back{0};
std::atomic<std::uint64_t> moved_by_peer{0};
std::atomic<std::uint64_t> tails_by_peer{0};

static_assert(kMaxRangeSegments == kMaxRanges * kMaxLocal);

/// The copy of copy_here, run under copy_guarded.
struct HereCopy {
  bool write = false;
  const iovec* local = nullptr;
  std::size_t n = 0;
  const iovec* remote = nullptr;
  std::size_t nr = 0;
  // The bytes of the pieces copied whole so far: read after a fault, so
  // stored after each piece.
  volatile std::size_t done = 0;

  void run() noexcept;
};

/// What process_vm_writev (`write`) or process_vm_readv does, between two
/// lists of this process's memory (kThisProcess): the local bytes in order
/// into (or from) the remote ranges in order, by memcpy. The bytes copied;
/// as process_vm_writev for a range it cannot reach, fewer with EFAULT, or
/// -1 with EFAULT when none were, should a page of a mapped file be gone
/// (the file was cut short under the mapping: fault_guard.hpp).
ssize_t copy_here(bool write, const iovec* local, std::size_t n, const iovec* remote, std::size_t nr) noexcept {
  HereCopy c;
  c.write = write;
  c.local = local;
  c.n = n;
  c.remote = remote;
  c.nr = nr;
  if (copy_guarded([](void* p) { static_cast<HereCopy*>(p)->run(); }, &c)) return static_cast<ssize_t>(c.done);
  errno = EFAULT;
  return c.done > 0 ? static_cast<ssize_t>(c.done) : -1;
}

void HereCopy::run() noexcept {
  std::size_t i = 0, at_local = 0, r = 0, at_remote = 0;
  while (i < n && r < nr) {
    const std::size_t c = std::min(local[i].iov_len - at_local, remote[r].iov_len - at_remote);
    char* l = static_cast<char*>(local[i].iov_base) + at_local;
    char* there = static_cast<char*>(remote[r].iov_base) + at_remote;
    if (c != 0) {
      if (write)
        std::memcpy(there, l, c);
      else
        std::memcpy(l, there, c);
    }
    done = done + c;
    at_local += c;
    at_remote += c;
    if (at_local == local[i].iov_len) {
      ++i;
      at_local = 0;
    }
    if (at_remote == remote[r].iov_len) {
      ++r;
      at_remote = 0;
    }
  }
}

ssize_t one_call(pid_t pid, bool write, const iovec* local, std::size_t n, const iovec* remote,
                 std::size_t nr) noexcept {
  if (pid == kThisProcess) return copy_here(write, local, n, remote, nr);
  return write ? ::process_vm_writev(pid, local, n, remote, nr, 0) : ::process_vm_readv(pid, local, n, remote, nr, 0);
}
ssize_t one_call(pid_t pid, bool write, const iovec* local, std::size_t n, iovec remote) noexcept {
  return one_call(pid, write, local, n, &remote, 1);
}

/// The second part of one split transfer (or list of writes). Written by
/// the caller before it posts the job, read by the helper after it claims
/// it; the result the other way round (the state's release and acquire
/// order both).
struct Job {
  pid_t pid = 0;
  bool write = false;
  std::size_t n = 0;
  std::size_t nr = 0;
  ssize_t moved = 0;
  int err = 0;
  // Only the first n and nr entries are ever read: left unset, so that a
  // job (some 2.6 KB) is not zeroed for each transfer.
  iovec local[kListSegments];  // a cut segment adds one
  iovec remote[kMaxRanges];

  /// Take `from`'s transfer: its used entries only. The whole struct is
  /// some 40 cache lines, each of which the helper thread would then read
  /// from this thread's cache; the entries of a batch of 16 writes through
  /// mappings fill 8.
  void take(const Job& from) noexcept {
    pid = from.pid;
    write = from.write;
    n = from.n;
    nr = from.nr;
    std::copy_n(from.local, from.n, local);
    std::copy_n(from.remote, from.nr, remote);
  }
};

/// The process's helper thread and its one job slot. Made on first use and
/// never freed: the thread is detached and may still be looking at its
/// state while the process exits.
class Helper {
 public:
  /// The helper, its thread started on the first call; null when no thread
  /// could be started. A child process after fork(2) gets a new one (the
  /// parent's thread is not in it).
  static Helper* get() noexcept;

  /// The job slot for one transfer at a time: false when another caller
  /// holds it (that caller moves its transfer alone).
  bool claim() noexcept { return !busy_.exchange(true, std::memory_order_acquire); }
  void release() noexcept { busy_.store(false, std::memory_order_release); }
  Job& job() noexcept { return job_; }

  /// Hand the job (filled in) to the helper.
  void post() noexcept {
    state_.store(kPosted, std::memory_order_seq_cst);
    // The helper sleeps on this count, not on state_: a caller that takes
    // its job back before the woken helper looks sets state_ back to what
    // the helper went to sleep on, and the wait (which re-checks the value
    // after each wake) would go on sleeping; posts that each ended so
    // could starve the helper for good (a loaded machine under ASan: 10 s
    // of transfers without one part moved by it). The count only grows.
    posts_.fetch_add(1, std::memory_order_seq_cst);
    // All sequentially consistent with the helper's side (sleeping_, then
    // posts_, then state_): either the helper sees the job before it
    // sleeps, or this sees it asleep and wakes it.
    if (sleeping_.load(std::memory_order_seq_cst)) posts_.notify_one();
  }
  /// The helper's share of the next split, in 64ths (FarHand::share's
  /// sense): moved towards the two parts ending together by note_end.
  unsigned share() const noexcept { return share_.load(std::memory_order_relaxed); }
  /// Called by the caller once its own part is done, before it takes the
  /// job back or waits: the helper done already gets a larger share next
  /// time, one the caller waits for a smaller one. (The hand-over and the
  /// word that says a part is done each cross between the two cores: the
  /// helper starts its part later than the caller, and halves left the
  /// caller waiting for it in most splits.)
  void note_end() noexcept {
    const unsigned s = share();
    if (state_.load(std::memory_order_acquire) == kDone) {
      if (s < kMaxShare) share_.store(s + 1, std::memory_order_relaxed);
    } else if (s > kMinShare) {
      share_.store(s - 1, std::memory_order_relaxed);
    }
  }
  /// Take the job back if the helper has not started it: true when it is
  /// the caller's to move.
  bool take_back() noexcept {
    int expected = kPosted;
    return state_.compare_exchange_strong(expected, kIdle, std::memory_order_acq_rel);
  }
  /// Wait until the helper is done with the job it started (it is copying:
  /// bounded by the copy).
  void wait_done() noexcept {
    for (unsigned spins = 0; state_.load(std::memory_order_acquire) != kDone; ++spins) {
      relax();
      if (spins % 1024 == 1023) std::this_thread::yield();  // the helper was descheduled
    }
    state_.store(kIdle, std::memory_order_relaxed);
  }

 private:
  enum : int { kIdle = 0, kPosted = 1, kRunning = 2, kDone = 3 };
  static constexpr unsigned kMinShare = 16, kMaxShare = 48;
  /// After a job the helper looks for the next one this long before it
  /// sleeps: a stream of large transfers finds it awake.
  static constexpr std::chrono::microseconds kSpin{200};

  void run() noexcept {
    for (;;) {
      auto until = std::chrono::steady_clock::now() + kSpin;
      for (unsigned spins = 0; state_.load(std::memory_order_acquire) != kPosted; ++spins) {
        relax();
        if (spins % 64 != 63 || std::chrono::steady_clock::now() < until) continue;
        sleeping_.store(true, std::memory_order_seq_cst);
        const std::uint32_t posts = posts_.load(std::memory_order_seq_cst);
        if (state_.load(std::memory_order_seq_cst) != kPosted) posts_.wait(posts, std::memory_order_seq_cst);
        sleeping_.store(false, std::memory_order_relaxed);
        until = std::chrono::steady_clock::now() + kSpin;
      }
      int expected = kPosted;
      if (!state_.compare_exchange_strong(expected, kRunning, std::memory_order_acq_rel)) continue;  // taken back
      errno = 0;
      job_.moved = one_call(job_.pid, job_.write, job_.local, job_.n, job_.remote, job_.nr);
      job_.err = errno;
      state_.store(kDone, std::memory_order_release);
    }
  }

  // On lines of their own: the job slot's claim (callers only) apart from
  // what the helper spins on, and both apart from the job.
  alignas(64) std::atomic<int> state_{kIdle};
  std::atomic<std::uint32_t> posts_{0};  // jobs posted (wraps): what a sleeping helper waits on
  std::atomic<bool> sleeping_{false};
  alignas(64) std::atomic<bool> busy_{false};
  std::atomic<unsigned> share_{FarHand::kHalfShare};  // the job slot's holder writes it
  alignas(64) Job job_;
};

std::atomic<Helper*> current{nullptr};
// A parent's helpers in a child after fork: kept reachable (they are not
// freed), but never used there.
std::atomic<Helper*> retired{nullptr};

Helper* Helper::get() noexcept {
  if (Helper* h = current.load(std::memory_order_acquire)) return h;
  static const bool at_fork = [] {
    ::pthread_atfork(nullptr, nullptr, [] { retired.store(current.exchange(nullptr)); });
    return true;
  }();
  (void)at_fork;
  auto* made = new (std::nothrow) Helper();
  if (made == nullptr) return nullptr;
  // Started before it is published: a caller never waits for a thread that
  // does not exist.
  made->busy_.store(true, std::memory_order_relaxed);
  Helper* expected = nullptr;
  if (!current.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    delete made;  // another caller's is in place
    return expected;
  }
  try {
    std::thread([made] { made->run(); }).detach();
  } catch (...) {
    return nullptr;  // stays claimed: every caller moves its transfers alone
  }
  made->release();
  return made;
}

// The local segments' bytes [from, to), as segments, into `out` (room for
// n + 1): the count.
std::size_t slice(const iovec* local, std::size_t n, std::size_t from, std::size_t to, iovec* out) noexcept {
  std::size_t count = 0, at = 0;
  for (std::size_t i = 0; i < n && at < to; at += local[i].iov_len, ++i) {
    const std::size_t end = at + local[i].iov_len;
    if (end <= from) continue;
    const std::size_t lo = std::max(at, from), hi = std::min(end, to);
    out[count++] = iovec{static_cast<char*>(local[i].iov_base) + (lo - at), hi - lo};
  }
  return count;
}

/// The second part of a split, once the caller's own part is done: moved
/// here when the helper has not started it (taken back), else waited for;
/// the job slot released either way. The bytes moved, or -1, with the
/// call's errno in `err`.
ssize_t second_part(Helper& h, int& err) noexcept {
  Job& job = h.job();
  ssize_t moved = 0;
  h.note_end();
  if (h.take_back()) {
    errno = 0;
    moved = one_call(job.pid, job.write, job.local, job.n, job.remote, job.nr);
    err = errno;
    taken_back.fetch_add(1, std::memory_order_relaxed);
  } else {
    h.wait_done();
    moved = job.moved;
    err = job.err;
    helped.fetch_add(1, std::memory_order_relaxed);
  }
  h.release();
  return moved;
}

/// The second part handed to the peer (FarHand), once the caller's own part
/// is done: what the peer moved when it moved all of it, else moved here.
ssize_t far_part(FarHand& far, const Job& job, int& err) noexcept {
  std::size_t want = 0;
  for (std::size_t k = 0; k < job.nr; ++k) want += job.remote[k].iov_len;
  if (far.finish() == static_cast<ssize_t>(want)) {
    moved_by_peer.fetch_add(1, std::memory_order_relaxed);
    err = 0;
    return static_cast<ssize_t>(want);
  }
  // Not taken, refused or short at the peer: every byte of the part moved
  // here (the peer's partial copy, if any, wrote the same bytes).
  taken_back.fetch_add(1, std::memory_order_relaxed);
  errno = 0;
  const ssize_t moved = one_call(job.pid, job.write, job.local, job.n, job.remote, job.nr);
  err = errno;
  return moved;
}

/// The second part `job` (filled in) to the peer when `far` takes it, else to
/// this process's helper: false when neither can (the caller makes one
/// call). `*helper` is the helper it went to, or null.
bool hand_over(const Job& job, const std::uint64_t* keys, FarHand* far, Helper** helper,
               const FarHand::Tails* tails = nullptr) noexcept {
  *helper = nullptr;
  if (far != nullptr && keys != nullptr && far->offer(job.write, keys, job.remote, job.nr, job.local, job.n, tails))
    return true;
  Helper* h = Helper::get();
  if (h == nullptr || !h->claim()) return false;
  h->job().take(job);
  h->post();
  *helper = h;
  return true;
}

/// The caller's share of a split, in 64ths: what the far hand leaves it,
/// else what this process's helper does.
std::size_t callers_share(const FarHand* far) noexcept {
  if (far != nullptr) return 64 - std::min(far->share(), 63u);
  const Helper* h = Helper::get();
  return 64 - (h != nullptr ? h->share() : FarHand::kHalfShare);
}

/// The errno of the first part that failed with EPERM or ESRCH (the peer
/// is out of reach, which outweighs a fault), else 0.
int out_of_reach(std::initializer_list<std::pair<ssize_t, int>> parts) noexcept {
  for (const auto& [moved, err] : parts)
    if (moved < 0 && (err == EPERM || err == ESRCH)) return err;
  return 0;
}

}  // namespace

ssize_t cross_memory(pid_t pid, bool write, const iovec* local, std::size_t n, iovec remote, bool split,
                     std::uint64_t key, FarHand* far) noexcept {
  const std::size_t len = remote.iov_len;
  if (!split || len < kSplitBytes || n > kMaxLocal) return one_call(pid, write, local, n, remote);
  std::size_t local_len = 0;
  for (std::size_t i = 0; i < n; ++i) local_len += local[i].iov_len;
  if (local_len != len) return one_call(pid, write, local, n, remote);

  // Three parts: [0, cut) by this thread and [cut, tail) by the helper at
  // once, then [tail, len) by this thread once both are done, so the last
  // bytes of the range are placed last, as one call (and the tcp provider,
  // and RDMA NICs in practice) place them: a program polling the last byte
  // of a write finds the rest there. The cut is the page boundary nearest
  // below the middle, so that no page is pinned by both calls.
  const auto base = reinterpret_cast<std::uintptr_t>(remote.iov_base);
  const std::size_t tail = len - kLastBytes;
  const std::size_t want = tail * callers_share(far) / 64;
  std::size_t cut = ((base + want) & ~std::uintptr_t{4095}) - base;
  if (cut == 0 || cut >= tail) cut = want;

  Job job;
  job.pid = pid;
  job.write = write;
  job.n = slice(local, n, cut, tail, job.local);
  job.remote[0] = iovec{reinterpret_cast<void*>(base + cut), tail - cut};
  job.nr = 1;
  Helper* h = nullptr;
  if (!hand_over(job, &key, far, &h)) return one_call(pid, write, local, n, remote);

  iovec mine[kMaxLocal + 1];
  errno = 0;
  const ssize_t moved1 = one_call(pid, write, mine, slice(local, n, 0, cut, mine), iovec{remote.iov_base, cut});
  const int err1 = errno;
  int err2 = 0;
  const ssize_t moved2 = h != nullptr ? second_part(*h, err2) : far_part(*far, job, err2);

  ssize_t moved3 = -1;
  int err3 = 0;
  if (moved1 == static_cast<ssize_t>(cut) && moved2 == static_cast<ssize_t>(tail - cut)) {
    errno = 0;
    moved3 = one_call(pid, write, mine, slice(local, n, tail, len, mine),
                      iovec{reinterpret_cast<void*>(base + tail), len - tail});
    err3 = errno;
    if (moved3 == static_cast<ssize_t>(len - tail)) return static_cast<ssize_t>(len);
  }
  // A failed part: the peer out of reach (EPERM, ESRCH) outweighs a fault.
  if (const int gone = out_of_reach({{moved1, err1}, {moved2, err2}, {moved3, err3}}); gone != 0) {
    errno = gone;
    return -1;
  }
  if (moved1 < 0) {
    errno = err1;
    return -1;
  }
  if (moved2 < 0) {
    errno = err2;
    return -1;
  }
  errno = EFAULT;
  return moved1 + moved2 + std::max<ssize_t>(moved3, 0);  // short: fewer bytes than asked
}

namespace {

/// One write of a batch, as write_ranges cuts it: its remote range
/// [at, at + len), its first byte's place in the batch's local bytes, and
/// where its last bytes start (`body`: at + len - min(len, kLastBytes)).
struct Cut {
  std::uintptr_t at = 0, body = 0, end = 0;
  std::size_t from = 0;  // in the local bytes
};

/// True when no write's last bytes fall in the body of a write posted after
/// it: the last bytes are placed after every body, so such a write would
/// leave its bytes on top of the later one's.
bool tails_stay_last(const Cut* w, std::size_t nr) noexcept {
  for (std::size_t k = 0; k < nr; ++k)
    for (std::size_t j = k + 1; j < nr; ++j)
      if (w[k].body < w[k].end && w[j].at < w[j].body && w[k].body < w[j].body && w[j].at < w[k].end) return false;
  return true;
}

/// The bytes of the writes' bodies below address `c`.
std::size_t below(const Cut* w, std::size_t nr, std::uintptr_t c) noexcept {
  std::size_t n = 0;
  for (std::size_t k = 0; k < nr; ++k)
    if (c > w[k].at) n += std::min(c, w[k].body) - w[k].at;
  return n;
}

/// How many writes, from the first, have their piece in a list (`lo` and
/// `hi` bound the list's addresses) wholly moved, when the call moved
/// `moved` bytes of those pieces in order (negative: none).
std::size_t whole(const Cut* w, std::size_t nr, std::uintptr_t lo, std::uintptr_t hi, ssize_t moved) noexcept {
  std::size_t left = moved < 0 ? 0 : static_cast<std::size_t>(moved);
  for (std::size_t k = 0; k < nr; ++k) {
    const std::uintptr_t a = std::max(w[k].at, lo), b = std::min(w[k].body, hi);
    const std::size_t piece = a < b ? b - a : 0;
    if (left < piece) return k;
    left -= piece;
  }
  return nr;
}

/// The address a batch is cut at: the lowest in [lo, hi] with `share` 64ths
/// of the `bytes` of the pieces (below() counts them) under it, then the
/// page boundary nearest to it, so that no page is pinned by both threads,
/// unless that leaves all on one side; 0 when every cut does.
std::uintptr_t cut_at(const Cut* w, std::size_t nr, std::uintptr_t lo, std::uintptr_t hi, std::size_t bytes,
                      std::size_t share) noexcept {
  std::uintptr_t a = lo, b = hi;
  while (a < b) {
    const std::uintptr_t mid = a + (b - a) / 2;
    if (64 * below(w, nr, mid) >= bytes * share)
      b = mid;
    else
      a = mid + 1;
  }
  std::uintptr_t cut = (a + 2048) & ~std::uintptr_t{4095};
  if (below(w, nr, cut) == 0 || below(w, nr, cut) == bytes) cut = a;
  if (below(w, nr, cut) == 0 || below(w, nr, cut) == bytes) return 0;
  return cut;
}

}  // namespace

ssize_t write_ranges(pid_t pid, const iovec* local, std::size_t nl, const iovec* remote, std::size_t nr, bool split,
                     const std::uint64_t* keys, FarHand* far) noexcept {
  std::size_t total = 0;
  for (std::size_t k = 0; k < nr; ++k) total += remote[k].iov_len;
  if (!split || nr < 2 || nr > kMaxRanges || nl > kMaxRangeSegments || total < kSplitBytes)
    return one_call(pid, true, local, nl, remote, nr);
  std::size_t local_len = 0;
  for (std::size_t i = 0; i < nl; ++i) local_len += local[i].iov_len;
  if (local_len != total) return one_call(pid, true, local, nl, remote, nr);

  Cut w[kMaxRanges];
  std::size_t bodies = 0;
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (std::size_t k = 0, from = 0; k < nr; from += remote[k++].iov_len) {
    const auto at = reinterpret_cast<std::uintptr_t>(remote[k].iov_base);
    const std::size_t len = remote[k].iov_len;
    w[k] = Cut{at, at + len - std::min(len, kLastBytes), at + len, from};
    bodies += w[k].body - at;
    if (w[k].body > at) {
      lo = std::min(lo, at);
      hi = std::max(hi, w[k].body);
    }
  }
  if (bodies == 0 || !tails_stay_last(w, nr)) return one_call(pid, true, local, nl, remote, nr);

  // The cut: half the bodies' bytes below it (with a far hand, the
  // caller's share of them).
  const std::uintptr_t cut = cut_at(w, nr, lo, hi, bodies, callers_share(far));
  if (cut == 0) return one_call(pid, true, local, nl, remote, nr);

  // Every write's body cut at `cut`: the part below for this thread, the
  // part above for the helper, each list in posting order (so every byte is
  // moved by one thread only, the writes to it in posting order); then the
  // last bytes of every write, in posting order.
  Job job;
  job.pid = pid;
  job.write = true;
  job.n = 0;
  job.nr = 0;
  std::uint64_t job_keys[kMaxRanges] = {};
  iovec first_local[kListSegments], first_remote[kMaxRanges];
  std::size_t fn = 0, fr = 0, first = 0, second = 0;
  for (std::size_t k = 0; k < nr; ++k) {
    const Cut& c = w[k];
    if (const std::uintptr_t e = std::min(c.body, cut); c.at < e) {
      fn += slice(local, nl, c.from, c.from + (e - c.at), first_local + fn);
      first_remote[fr++] = iovec{reinterpret_cast<void*>(c.at), e - c.at};
      first += e - c.at;
    }
    if (const std::uintptr_t s0 = std::max(c.at, cut); s0 < c.body) {
      job.n += slice(local, nl, c.from + (s0 - c.at), c.from + (c.body - c.at), job.local + job.n);
      if (keys != nullptr) job_keys[job.nr] = keys[k];
      job.remote[job.nr++] = iovec{reinterpret_cast<void*>(s0), c.body - s0};
      second += c.body - s0;
    }
  }
  // The last bytes of every write, in posting order (`tail_n[k]`,
  // `tail_r[k]`, `tail_bytes[k]`: the local segments, the ranges and the
  // bytes of the writes before write k): offered to the peer with its part,
  // which places them once both parts are done (FarHand::tails_go), else
  // moved here below.
  iovec tails_local[kListSegments], tails_remote[kMaxRanges];
  std::uint64_t tail_keys[kMaxRanges] = {};
  std::size_t tail_n[kMaxRanges + 1] = {}, tail_r[kMaxRanges + 1] = {}, tail_bytes[kMaxRanges + 1] = {};
  for (std::size_t k = 0; k < nr; ++k) {
    const Cut& c = w[k];
    tail_n[k + 1] = tail_n[k];
    tail_r[k + 1] = tail_r[k];
    tail_bytes[k + 1] = tail_bytes[k];
    if (c.body == c.end) continue;
    tail_n[k + 1] += slice(local, nl, c.from + (c.body - c.at), c.from + (c.end - c.at), tails_local + tail_n[k]);
    if (keys != nullptr) tail_keys[tail_r[k]] = keys[k];
    tails_remote[tail_r[k + 1]++] = iovec{reinterpret_cast<void*>(c.body), c.end - c.body};
    tail_bytes[k + 1] += c.end - c.body;
  }
  const FarHand::Tails offered_tails{tail_keys, tails_remote, tail_r[nr], tails_local, tail_n[nr]};
  Helper* h = nullptr;
  if (!hand_over(job, keys != nullptr ? job_keys : nullptr, far, &h, tail_r[nr] > 0 ? &offered_tails : nullptr))
    return one_call(pid, true, local, nl, remote, nr);

  errno = 0;
  const ssize_t moved1 = one_call(pid, true, first_local, fn, first_remote, fr);
  const int err1 = errno;
  const bool peer_tails = h == nullptr && far->tails_go(moved1 == static_cast<ssize_t>(first));
  int err2 = 0;
  const ssize_t moved2 = h != nullptr ? second_part(*h, err2) : far_part(*far, job, err2);
  const bool both = moved1 == static_cast<ssize_t>(first) && moved2 == static_cast<ssize_t>(second);
  if (both && peer_tails && far->tails_placed()) {
    tails_by_peer.fetch_add(1, std::memory_order_relaxed);
    return static_cast<ssize_t>(total);
  }

  // The writes whose bodies are whole (all of them, unless a list came up
  // short): their last bytes, in posting order.
  const std::size_t bodies_whole =
      both ? nr : std::min(whole(w, nr, 0, cut, moved1), whole(w, nr, cut, UINTPTR_MAX, moved2));
  ssize_t moved3 = 0;
  int err3 = 0;
  std::size_t placed = 0, done = 0;
  if (bodies_whole > 0) {
    const std::size_t last = tail_bytes[bodies_whole];
    errno = 0;
    moved3 = one_call(pid, true, tails_local, tail_n[bodies_whole], tails_remote, tail_r[bodies_whole]);
    err3 = errno;
    if (moved3 == static_cast<ssize_t>(last) && bodies_whole == nr) return static_cast<ssize_t>(total);
    // The writes whose last bytes all landed are placed in full.
    std::size_t left = moved3 < 0 ? 0 : static_cast<std::size_t>(moved3);
    for (; done < bodies_whole && left >= w[done].end - w[done].body; ++done) {
      left -= w[done].end - w[done].body;
      placed += w[done].end - w[done].at;
    }
  }
  if (const int gone = out_of_reach({{moved1, err1}, {moved2, err2}, {moved3, err3}}); gone != 0) {
    errno = gone;
    return -1;
  }
  errno = EFAULT;
  return static_cast<ssize_t>(placed);
}

ssize_t read_ranges(pid_t pid, const iovec* local, std::size_t nl, const iovec* remote, std::size_t nr, bool split,
                    const std::uint64_t* keys, FarHand* far) noexcept {
  std::size_t total = 0;
  for (std::size_t k = 0; k < nr; ++k) total += remote[k].iov_len;
  if (!split || nr < 2 || nr > kMaxRanges || nl != nr || total < kSplitBytes)
    return one_call(pid, false, local, nl, remote, nr);
  // One destination segment per read, as long as its range: each read's
  // bytes are cut by where they land here.
  Cut w[kMaxRanges];
  std::uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (std::size_t k = 0; k < nr; ++k) {
    if (local[k].iov_len != remote[k].iov_len) return one_call(pid, false, local, nl, remote, nr);
    const auto at = reinterpret_cast<std::uintptr_t>(local[k].iov_base);
    w[k] = Cut{at, at + local[k].iov_len, at + local[k].iov_len, 0};
    if (local[k].iov_len != 0) {
      lo = std::min(lo, at);
      hi = std::max(hi, w[k].body);
    }
  }
  // The cut: half the bytes landing below it (with a far hand, the
  // caller's share of them).
  const std::uintptr_t cut = cut_at(w, nr, lo, hi, total, callers_share(far));
  if (cut == 0) return one_call(pid, false, local, nl, remote, nr);

  // Every read cut at `cut` where it lands: the part below for this thread,
  // the part above for the helper, each list in posting order, so every
  // byte here is written by one thread, the reads into it in posting order
  // (overlapping destinations end as one call leaves them).
  Job job;
  job.pid = pid;
  job.write = false;
  job.n = 0;
  job.nr = 0;
  std::uint64_t job_keys[kMaxRanges] = {};
  iovec first_local[kMaxRanges], first_remote[kMaxRanges];
  std::size_t fn = 0, first = 0, second = 0;
  for (std::size_t k = 0; k < nr; ++k) {
    const Cut& c = w[k];
    char* from = static_cast<char*>(remote[k].iov_base);
    if (const std::uintptr_t e = std::min(c.body, cut); c.at < e) {
      first_local[fn] = iovec{reinterpret_cast<void*>(c.at), e - c.at};
      first_remote[fn++] = iovec{from, e - c.at};
      first += e - c.at;
    }
    if (const std::uintptr_t s0 = std::max(c.at, cut); s0 < c.body) {
      job.local[job.n++] = iovec{reinterpret_cast<void*>(s0), c.body - s0};
      if (keys != nullptr) job_keys[job.nr] = keys[k];
      job.remote[job.nr++] = iovec{from + (s0 - c.at), c.body - s0};
      second += c.body - s0;
    }
  }
  Helper* h = nullptr;
  if (!hand_over(job, keys != nullptr ? job_keys : nullptr, far, &h))
    return one_call(pid, false, local, nl, remote, nr);
  errno = 0;
  const ssize_t moved1 = one_call(pid, false, first_local, fn, first_remote, fn);
  const int err1 = errno;
  int err2 = 0;
  const ssize_t moved2 = h != nullptr ? second_part(*h, err2) : far_part(*far, job, err2);
  if (moved1 == static_cast<ssize_t>(first) && moved2 == static_cast<ssize_t>(second))
    return static_cast<ssize_t>(total);
  if (const int gone = out_of_reach({{moved1, err1}, {moved2, err2}}); gone != 0) {
    errno = gone;
    return -1;
  }
  // The reads, from the first, whose pieces in both lists were moved whole.
  const std::size_t reads_whole = std::min(whole(w, nr, 0, cut, moved1), whole(w, nr, cut, UINTPTR_MAX, moved2));
  std::size_t placed = 0;
  for (std::size_t k = 0; k < reads_whole; ++k) placed += remote[k].iov_len;
  errno = EFAULT;
  return static_cast<ssize_t>(placed);
}

std::uint64_t copies_helped() noexcept { return helped.load(std::memory_order_relaxed); }
std::uint64_t copies_taken_back() noexcept { return taken_back.load(std::memory_order_relaxed); }
std::uint64_t copies_moved_by_peer() noexcept { return moved_by_peer.load(std::memory_order_relaxed); }
std::uint64_t copies_tails_by_peer() noexcept { return tails_by_peer.load(std::memory_order_relaxed); }

bool copy_helper_allowed_by_environment() noexcept {
  static std::atomic<bool> said{false};
  return switch_from_environment("REMORA_COPY_HELPER", "large same-host transfers stay split over two threads", said);
}

bool peer_helper_allowed_by_environment() noexcept {
  static std::atomic<bool> said{false};
  return switch_from_environment("REMORA_PEER_HELPER",
                                 "the same-host peer stays offered the second part of large transfers", said);
}

bool gather_allowed_by_environment() noexcept {
  static std::atomic<bool> said{false};
  return switch_from_environment("REMORA_GATHER_WRITES",
                                 "writes and reads posted back to back stay gathered into one cross-memory call", said);
}

}  // namespace remora::detail::direct
