// Registered regions moved into huge pages in the background (huge_pages.hpp).
#include "core/direct/huge_pages.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <new>
#include <thread>

#include "core/direct/direct.hpp"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; an older kernel refuses it (EINVAL)
#endif

namespace remora::detail::direct {

namespace {

/// The stretch of a range one mincore(2) call looks at (a multiple of the
/// huge page size, at least one huge page).
std::size_t scan_bytes(std::size_t huge) noexcept {
  constexpr std::size_t k = std::size_t{64} << 20;
  return k > huge ? k - k % huge : huge;
}

std::size_t base_page() noexcept {
  static const std::size_t page = [] {
    const long v = ::sysconf(_SC_PAGESIZE);
    return v > 0 ? static_cast<std::size_t>(v) : std::size_t{4096};
  }();
  return page;
}

// The first look again after a pass that left huge pages untouched, and the
// longest wait between looks for a range of up to kSlowAfter still waiting
// (a longer one waits proportionally longer: each look is one mincore(2)
// call per 64 MiB).
constexpr std::chrono::milliseconds kFirstLookAgain{10};
constexpr std::chrono::milliseconds kLongestWait{1000};
constexpr std::size_t kSlowAfter = std::size_t{64} << 30;

}  // namespace

/// The process's huge-page thread and its queue of jobs, taken one piece of
/// work at a time in turn; jobs waiting for their next pass sleep aside.
/// Made on first use and never freed: the thread is detached and may still
/// be looking at it while the process exits.
class HugePager {
 public:
  /// The pager, its thread started; null when no thread could be started.
  /// A child process after fork(2) gets a new one (the parent's thread is
  /// not in it, and its lock may have been held at the fork).
  static HugePager* get() noexcept;
  /// The pager of this process, if one was made (never the parent's in a
  /// child).
  static HugePager* existing() noexcept;

  void add(std::shared_ptr<HugePageJob> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

  /// A job was cancelled: a sleeping one is ended now.
  void wake() noexcept {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_one();
  }

 private:
  explicit HugePager(std::size_t entries) : entries_(entries), resident_(new unsigned char[entries]) {}

  void run() noexcept {
    const std::size_t huge = huge_page_size();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      // Sleepers due, or cancelled, join the queue.
      const auto now = std::chrono::steady_clock::now();
      auto wake_at = std::chrono::steady_clock::time_point::max();
      for (std::size_t i = 0; i < sleepers_.size();) {
        const HugePageJob& j = *sleepers_[i];
        if (j.due_ > now && !j.cancelled_.load(std::memory_order_acquire)) {
          wake_at = std::min(wake_at, j.due_);
          ++i;
          continue;
        }
        std::shared_ptr<HugePageJob> due = std::move(sleepers_[i]);
        if (i + 1 != sleepers_.size()) sleepers_[i] = std::move(sleepers_.back());
        sleepers_.pop_back();
        (void)keep(jobs_, std::move(due));
      }
      if (jobs_.empty()) {
        if (wake_at == std::chrono::steady_clock::time_point::max())
          cv_.wait(lock);
        else
          cv_.wait_until(lock, wake_at);
        continue;
      }
      std::shared_ptr<HugePageJob> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      const HugePageJob::Next next = job->step(huge, resident_.get(), entries_);
      lock.lock();
      if (next == HugePageJob::Next::again)
        (void)keep(jobs_, std::move(job));
      else if (next == HugePageJob::Next::later)
        (void)keep(sleepers_, std::move(job));
    }
  }

  /// Into the queue or among the sleepers (the lock held): false, the job
  /// ended, when there is no memory for it.
  template <typename Jobs>
  static bool keep(Jobs& into, std::shared_ptr<HugePageJob> job) noexcept {
    try {
      into.push_back(job);
      return true;
    } catch (...) {
      job->ended_.store(true, std::memory_order_release);  // the rest stays as it is
      return false;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<HugePageJob>> jobs_;
  std::vector<std::shared_ptr<HugePageJob>> sleepers_;
  // mincore(2)'s answer for one stretch (the thread's only).
  const std::size_t entries_;
  const std::unique_ptr<unsigned char[]> resident_;
  // False when its thread could not be started: no later job is queued (one
  // queued by another caller in the moment before stays there, unmade).
  std::atomic<bool> alive_{true};
};

namespace {

std::atomic<HugePager*> current{nullptr};

}  // namespace

HugePager* HugePager::existing() noexcept { return current.load(std::memory_order_acquire); }

HugePager* HugePager::get() noexcept {
  if (HugePager* p = current.load(std::memory_order_acquire)) return p->alive_ ? p : nullptr;
  static const bool at_fork = [] {
    // The parent's pager is left behind in a child, never used there (its
    // jobs are the parent's regions, its lock may have been held).
    ::pthread_atfork(nullptr, nullptr, [] { current.store(nullptr, std::memory_order_relaxed); });
    return true;
  }();
  (void)at_fork;
  const std::size_t huge = huge_page_size();
  if (huge == 0) return nullptr;
  HugePager* made = nullptr;
  try {
    made = new HugePager(scan_bytes(huge) / base_page());
  } catch (...) {
    return nullptr;
  }
  HugePager* expected = nullptr;
  if (!current.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    delete made;  // another caller's is in place
    return expected->alive_ ? expected : nullptr;
  }
  try {
    std::thread([made] { made->run(); }).detach();
  } catch (...) {
    made->alive_ = false;  // stays in place: no job is ever queued
    return nullptr;
  }
  return made;
}

bool huge_pages_allowed_by_environment() noexcept {
  static std::atomic<bool> said{false};
  return switch_from_environment("REMORA_HUGEPAGES",
                                 "regions reached by cross-memory attach are still moved into huge pages", said);
}

std::size_t huge_page_size() noexcept {
  static const std::size_t size = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    unsigned long long v = 0;
    if (!(f >> v) || v < 4096 || (v & (v - 1)) != 0) return std::size_t{0};
    return static_cast<std::size_t>(v);
  }();
  return size;
}

HugeSpan whole_huge_pages(std::uint64_t addr, std::uint64_t len) noexcept {
  const std::uint64_t huge = huge_page_size();
  if (huge == 0 || len > UINT64_MAX - addr || addr > UINT64_MAX - (huge - 1)) return {};
  return HugeSpan{(addr + huge - 1) & ~(huge - 1), (addr + len) & ~(huge - 1)};
}

std::shared_ptr<HugePageJob> HugePageJob::start(void* addr, std::size_t len) noexcept {
  const std::size_t huge = huge_page_size();
  const HugeSpan span = whole_huge_pages(reinterpret_cast<std::uintptr_t>(addr), len);
  if (span.empty()) return nullptr;
  const auto start = static_cast<std::uintptr_t>(span.start), end = static_cast<std::uintptr_t>(span.end);
  HugePager* pager = HugePager::get();
  if (pager == nullptr) return nullptr;
  try {
    auto job = std::make_shared<HugePageJob>(start, end, (end - start) / huge);
    job->pager_ = pager;
    pager->add(job);
    return job;
  } catch (...) {
    return nullptr;  // no memory: the region works as it is
  }
}

HugePageJob::HugePageJob(std::uintptr_t start, std::uintptr_t end, std::size_t huge_pages)
    : start_(start), end_(end), next_(start), done_(huge_pages, false), left_(huge_pages) {}

void HugePageJob::cancel() noexcept {
  cancelled_.store(true, std::memory_order_release);
  // Only this process's own pager: in a child after fork(2) the job is the
  // parent's, queued on a pager with no thread here.
  if (pager_ != nullptr && pager_ == HugePager::existing()) pager_->wake();
}

void HugePageJob::note_error(int e) noexcept {
  int none = 0;
  error_.compare_exchange_strong(none, e, std::memory_order_acq_rel);
}

HugePageJob::Next HugePageJob::end_with(int e) noexcept {
  if (e != 0) note_error(e);
  waiting_.store(0, std::memory_order_release);
  ended_.store(true, std::memory_order_release);
  return Next::ended;
}

HugePageJob::Next HugePageJob::step(std::size_t huge, unsigned char* resident, std::size_t entries) noexcept {
  if (cancelled_.load(std::memory_order_acquire)) return end_with(0);
  if (next_ >= end_) {
    // The end of a pass. Huge pages left untouched (or busy) are looked at
    // again later: soon after a pass that moved one (a peer is writing its
    // way through the region), then less and less often.
    passes_.fetch_add(1, std::memory_order_acq_rel);
    if (left_ == 0) return end_with(0);
    waiting_.store(left_ * huge, std::memory_order_release);
    const std::size_t slow = 1 + left_ * huge / kSlowAfter;
    const auto longest = kLongestWait * static_cast<long>(slow);
    interval_ = progress_ || interval_.count() == 0 ? kFirstLookAgain : std::min(interval_ * 2, longest);
    progress_ = false;
    next_ = start_;
    due_ = std::chrono::steady_clock::now() + interval_;
    return Next::later;
  }
  // Which 4 KiB pages of the next stretch are in memory: a huge page none of
  // whose pages is has nothing to move (the kernel would refuse it) and waits.
  const std::size_t page = base_page();
  const std::size_t len = std::min<std::size_t>(end_ - next_, entries * page);
  if (::mincore(reinterpret_cast<void*>(next_), len, resident) != 0) {
    // ENOMEM: part of the range is no longer mapped. The rest is left.
    return end_with(errno);
  }
  const std::size_t per = huge / page;
  for (std::uintptr_t at = next_; at < next_ + len; at += huge) {
    const std::size_t i = (at - start_) / huge;
    if (done_[i]) continue;
    const unsigned char* r = resident + (at - next_) / page;
    bool touched = false;
    for (std::size_t k = 0; k < per && !touched; ++k) touched = (r[k] & 1) != 0;
    if (!touched) continue;
    next_ = at + huge;
    return collapse(at, i, huge);
  }
  next_ += len;
  return Next::again;
}

HugePageJob::Next HugePageJob::collapse(std::uintptr_t at, std::size_t i, std::size_t huge) noexcept {
  if (::madvise(reinterpret_cast<void*>(at), huge, MADV_COLLAPSE) == 0) {
    done_[i] = true;
    --left_;
    progress_ = true;
    moved_.fetch_add(huge, std::memory_order_release);
    return Next::again;
  }
  const int e = errno;
  // EAGAIN: a page locked for a moment: the next pass tries again. ENOMEM:
  // no huge page to be had, or the range no longer mapped: the rest would
  // fare the same, after the kernel tried hard. EINVAL and the rest: not
  // this one, for good (the program's MADV_NOHUGEPAGE, "never", an older
  // kernel), but maybe the next.
  if (e == EAGAIN) return Next::again;
  if (e == ENOMEM) return end_with(e);
  note_error(e);
  done_[i] = true;
  --left_;
  return Next::again;
}

bool HugePageJob::wait(std::chrono::milliseconds limit) const noexcept {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!ended()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool HugePageJob::wait_passes(unsigned n, std::chrono::milliseconds limit) const noexcept {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!ended() && passes() < n) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace remora::detail::direct
