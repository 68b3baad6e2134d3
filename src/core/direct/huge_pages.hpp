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
// registration pins every page; a huge page none of whose pages were
// touched yet is left to the kernel (it refuses it). The program's own
// choices hold: MADV_NOHUGEPAGE, PR_SET_THP_DISABLE and "never" in sysfs
// make the kernel refuse. Deregistration stops the job: no huge page of the
// region is asked for after close() returned.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace remora::detail::direct {

/// False when REMORA_HUGEPAGES turns the moves off ("0", "off", "no",
/// "false"); true when it is unset or turns them on. Any other value is
/// reported on stderr once and ignored.
bool huge_pages_allowed_by_environment() noexcept;

/// The kernel's transparent huge page size (hpage_pmd_size; 2 MiB on
/// x86-64), 0 when it has none.
std::size_t huge_page_size() noexcept;

class HugePager;

/// One region's move into huge pages, made by the process's huge-page thread.
class HugePageJob {
 public:
  /// A job for the whole, aligned huge pages inside [addr, addr + len),
  /// queued; null when there are none (or the kernel has no huge pages, or
  /// no thread could be started).
  static std::shared_ptr<HugePageJob> start(void* addr, std::size_t len) noexcept;

  /// No huge page of the range is asked for after this returns. Does not
  /// wait for one the thread is making now: a move keeps the contents, so
  /// it cannot be told from no move by the program.
  void cancel() noexcept { cancelled_.store(true, std::memory_order_release); }

  /// Waits until the job ended (every huge page asked for, the kernel
  /// refused, or cancelled), at most `limit`: true when it ended (tests).
  bool wait(std::chrono::milliseconds limit) const noexcept;

  bool ended() const noexcept { return ended_.load(std::memory_order_acquire); }
  /// Bytes of the range in whole, aligned huge pages.
  std::size_t covered() const noexcept { return end_ - start_; }
  /// Bytes the kernel moved into huge pages (or found there) so far.
  std::size_t moved() const noexcept { return moved_.load(std::memory_order_acquire); }
  /// errno of the kernel's first refusal of one of its huge pages (ENOMEM
  /// ends the job; any other leaves that one as it is); 0 when none.
  int error() const noexcept { return error_.load(std::memory_order_acquire); }

  HugePageJob(std::uintptr_t start, std::uintptr_t end) noexcept : start_(start), next_(start), end_(end) {}

 private:
  friend class HugePager;
  /// The next huge page of the job (the huge-page thread only): false when
  /// the job ended.
  bool step(std::size_t huge) noexcept;

  const std::uintptr_t start_;
  std::uintptr_t next_;  // the huge-page thread's only
  const std::uintptr_t end_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> ended_{false};
  std::atomic<std::size_t> moved_{0};
  std::atomic<int> error_{0};
};

}  // namespace remora::detail::direct
