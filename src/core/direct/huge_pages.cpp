// Registered regions moved into huge pages in the background (huge_pages.hpp).
#include "core/direct/huge_pages.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/direct/direct.hpp"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; an older kernel refuses it (EINVAL)
#endif

namespace remora::detail::direct {

/// The process's huge-page thread and its queue of jobs, taken one huge page
/// at a time in turn. Made on first use and never freed: the thread is
/// detached and may still be looking at it while the process exits.
class HugePager {
 public:
  /// The pager, its thread started; null when no thread could be started.
  /// A child process after fork(2) gets a new one (the parent's thread is
  /// not in it, and its lock may have been held at the fork).
  static HugePager* get() noexcept;

  void add(std::shared_ptr<HugePageJob> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void run() noexcept {
    const std::size_t huge = huge_page_size();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return !jobs_.empty(); });
      std::shared_ptr<HugePageJob> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      const bool more = job->step(huge);
      lock.lock();
      if (!more) continue;
      try {
        jobs_.push_back(std::move(job));
      } catch (...) {
        job->ended_.store(true, std::memory_order_release);  // no memory for the queue: the rest stays as it is
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<HugePageJob>> jobs_;
  // False when its thread could not be started: no later job is queued (one
  // queued by another caller in the moment before stays there, unmade).
  std::atomic<bool> alive_{true};
};

namespace {

std::atomic<HugePager*> current{nullptr};

}  // namespace

HugePager* HugePager::get() noexcept {
  if (HugePager* p = current.load(std::memory_order_acquire)) return p->alive_ ? p : nullptr;
  static const bool at_fork = [] {
    // The parent's pager is left behind in a child, never used there (its
    // jobs are the parent's regions, its lock may have been held).
    ::pthread_atfork(nullptr, nullptr, [] { current.store(nullptr, std::memory_order_relaxed); });
    return true;
  }();
  (void)at_fork;
  auto* made = new (std::nothrow) HugePager();
  if (made == nullptr) return nullptr;
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

std::shared_ptr<HugePageJob> HugePageJob::start(void* addr, std::size_t len) noexcept {
  const std::size_t huge = huge_page_size();
  if (huge == 0) return nullptr;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (len > UINTPTR_MAX - a || a > UINTPTR_MAX - (huge - 1)) return nullptr;
  const std::uintptr_t start = (a + huge - 1) & ~(std::uintptr_t{huge} - 1);
  const std::uintptr_t end = (a + len) & ~(std::uintptr_t{huge} - 1);
  if (start >= end) return nullptr;
  HugePager* pager = HugePager::get();
  if (pager == nullptr) return nullptr;
  try {
    auto job = std::make_shared<HugePageJob>(start, end);
    pager->add(job);
    return job;
  } catch (...) {
    return nullptr;  // no memory: the region works as it is
  }
}

bool HugePageJob::step(std::size_t huge) noexcept {
  if (cancelled_.load(std::memory_order_acquire) || next_ >= end_) {
    ended_.store(true, std::memory_order_release);
    return false;
  }
  if (::madvise(reinterpret_cast<void*>(next_), huge, MADV_COLLAPSE) == 0) {
    moved_.fetch_add(huge, std::memory_order_release);
  } else {
    // EINVAL: not this one (none of its pages touched yet, the program's
    // MADV_NOHUGEPAGE, "never", an older kernel), but maybe the next; each
    // refusal is a quick check. EAGAIN: a page locked for a moment; left as
    // it is. ENOMEM: no huge page to be had, or the range no longer mapped:
    // the rest would fare the same, after the kernel tried hard.
    const int e = errno;
    int none = 0;
    error_.compare_exchange_strong(none, e, std::memory_order_acq_rel);
    if (e == ENOMEM) {
      ended_.store(true, std::memory_order_release);
      return false;
    }
  }
  next_ += huge;
  if (next_ < end_) return true;
  ended_.store(true, std::memory_order_release);
  return false;
}

bool HugePageJob::wait(std::chrono::milliseconds limit) const noexcept {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!ended()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace remora::detail::direct
