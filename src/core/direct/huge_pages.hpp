// src/core/direct/huge_pages.hpp - registered regions that same-host peers
// reach by cross-memory attach, moved into huge pages in the background
// (docs/design.md, "Huge pages for regions reached by cross-memory attach").
//
// process_vm_writev/readv pin the peer's pages one by one: a walk of the page
// table and its lock for every 4 KiB page, and a copy per page. Into a range
// backed by a 2 MiB huge page the same call pins one page per 2 MiB and runs
// about twice as fast (bench/README.md). Where transparent huge pages are
// "madvise" (Debian, Ubuntu), ordinary heap memory stays in 4 KiB pages; a
// registration asks the kernel to move the whole, aligned huge pages of the
// region into huge pages (madvise MADV_COLLAPSE, Linux 6.1). That copies
// every page once, about 1-4 ms per 2 MiB here, so it is done by one thread of
// the process after the registration returned, one huge page at a time,
// never in the caller's time.
//
// A move keeps the contents and touches no memory outside the region. It
// fills the huge page's untouched 4 KiB pages, as a verbs provider's
// registration pins every page. A huge page none of whose pages were touched
// yet (memory fresh from malloc or mmap, registered before it is written, as
// fio's librpma server does) has nothing to move: it is looked at again
// later, with the rest of the region's, and moved once a page of it was
// touched (by the program or a peer's write), until deregistration. The
// looks back off from 10 ms to 1 s (longer for regions past 64 GiB), each
// one mincore(2) call per 64 MiB. The program's own choices hold:
// MADV_NOHUGEPAGE, PR_SET_THP_DISABLE and "never" in sysfs make the kernel
// refuse. Deregistration stops the job: no huge page of the region is asked
// for after close() returned.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace remora::detail::direct {

/// False when REMORA_HUGEPAGES turns the moves off ("0", "off", "no",
/// "false"); true when it is unset or turns them on. Any other value is
/// reported on stderr once and ignored.
bool huge_pages_allowed_by_environment() noexcept;

/// The kernel's transparent huge page size (hpage_pmd_size; 2 MiB on
/// x86-64), 0 when it has none.
std::size_t huge_page_size() noexcept;

/// The whole, aligned huge pages inside [addr, addr + len): [start, end),
/// empty when there are none (or the kernel has no huge pages, or the range
/// wraps around).
struct HugeSpan {
  std::uint64_t start = 0, end = 0;
  bool empty() const noexcept { return start >= end; }
};
HugeSpan whole_huge_pages(std::uint64_t addr, std::uint64_t len) noexcept;

class HugePager;

/// One region's move into huge pages, made by the process's huge-page thread.
class HugePageJob {
 public:
  /// A job for the whole, aligned huge pages inside [addr, addr + len),
  /// queued; null when there are none (or the kernel has no huge pages, or
  /// no thread could be started, or no memory).
  static std::shared_ptr<HugePageJob> start(void* addr, std::size_t len) noexcept;

  /// No huge page of the range is asked for after this returns. Does not
  /// wait for one the thread is making now: a move keeps the contents, so
  /// it cannot be told from no move by the program. A job waiting for its
  /// next look ends at once.
  void cancel() noexcept;

  /// Waits until the job ended (every huge page moved or refused by the
  /// kernel, ENOMEM, or cancelled), at most `limit`: true when it ended
  /// (tests).
  bool wait(std::chrono::milliseconds limit) const noexcept;
  /// Waits until the thread went over the range `n` times (or the job
  /// ended), at most `limit` (tests).
  bool wait_passes(unsigned n, std::chrono::milliseconds limit) const noexcept;

  bool ended() const noexcept { return ended_.load(std::memory_order_acquire); }
  /// Bytes of the range in whole, aligned huge pages.
  std::size_t covered() const noexcept { return end_ - start_; }
  /// Bytes the kernel moved into huge pages (or found there) so far.
  std::size_t moved() const noexcept { return moved_.load(std::memory_order_acquire); }
  /// Bytes of huge pages left for a later look after the last pass: none of
  /// their pages touched yet, or the kernel busy with one of them (EAGAIN).
  std::size_t waiting() const noexcept { return waiting_.load(std::memory_order_acquire); }
  /// Passes over the range made so far.
  unsigned passes() const noexcept { return passes_.load(std::memory_order_acquire); }
  /// errno of the kernel's first refusal of one of its huge pages (ENOMEM
  /// ends the job; any other leaves that one as it is for good); 0 when
  /// none. An untouched huge page is not a refusal: it waits.
  int error() const noexcept { return error_.load(std::memory_order_acquire); }

  /// `huge_pages` is (end - start) / the huge page size.
  HugePageJob(std::uintptr_t start, std::uintptr_t end, std::size_t huge_pages);

 private:
  friend class HugePager;
  enum class Next { again, later, ended };
  /// The next piece of work (the huge-page thread only): one huge page
  /// moved or refused, or one stretch of the range found untouched (looked
  /// up by mincore into `resident`, `entries` bytes long), or the end of a
  /// pass. `later`: the next pass is due at `due_`.
  Next step(std::size_t huge, unsigned char* resident, std::size_t entries) noexcept;
  /// Asks the kernel for the huge page at `at` (index `i`).
  Next collapse(std::uintptr_t at, std::size_t i, std::size_t huge) noexcept;
  /// Keeps `e` as error() unless one was kept before.
  void note_error(int e) noexcept;
  Next end_with(int e) noexcept;

  const std::uintptr_t start_;
  const std::uintptr_t end_;
  // The huge-page thread's only:
  std::uintptr_t next_;
  std::vector<bool> done_;  // per huge page: moved, or refused for good
  std::size_t left_;        // huge pages not done
  bool progress_ = false;   // one moved in this pass
  std::chrono::milliseconds interval_{0};
  std::chrono::steady_clock::time_point due_{};
  // The pager it was queued on, woken by cancel().
  HugePager* pager_ = nullptr;

  std::atomic<bool> cancelled_{false};
  std::atomic<bool> ended_{false};
  std::atomic<std::size_t> moved_{0};
  std::atomic<std::size_t> waiting_{0};
  std::atomic<unsigned> passes_{0};
  std::atomic<int> error_{0};
};

}  // namespace remora::detail::direct
