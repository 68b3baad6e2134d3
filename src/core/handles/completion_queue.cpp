// CompletionQueue: a software queue fed by the endpoints that use it.
#include <algorithm>

#include "core/impl.hpp"

namespace remora {
namespace detail {

// How long after a user's poll the agent leaves the queue's endpoints to
// that user instead of competing with it for them.
constexpr std::chrono::microseconds kUserDriveWindow{1000};

void CqImpl::push(Completion c) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (queue.empty() && fd_in_use) signal.raise();
    queue.push_back(std::move(c));
  }
  cv.notify_all();
}

std::size_t CqImpl::take(std::span<Completion> out) {
  std::lock_guard<std::mutex> lock(mu);
  std::size_t n = std::min(out.size(), queue.size());
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = std::move(queue.front());
    queue.pop_front();
  }
  if (n > 0 && queue.empty() && fd_in_use) signal.clear();
  return n;
}

void CqImpl::claim() {
  if (fd_in_use.load(std::memory_order_relaxed)) return;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  user_until.store((now + std::chrono::nanoseconds(kUserDriveWindow)).count(), std::memory_order_relaxed);
}

void CqImpl::drive() {
  // Called on every empty poll of a spinning user: reuse the thread's list
  // instead of allocating one each time, and empty it before returning so
  // it keeps no endpoint alive.
  thread_local std::vector<std::shared_ptr<EndpointImpl>> eps;
  eps.clear();
  {
    std::lock_guard<std::mutex> lock(sources_mu);
    std::erase_if(sources, [](const auto& w) { return w.expired(); });
    for (auto& w : sources)
      if (auto p = w.lock()) eps.push_back(std::move(p));
  }
  for (auto& ep : eps) ep->progress();
  eps.clear();
}

}  // namespace detail

std::size_t CompletionQueue::poll(std::span<Completion> out) {
  if (!impl_ || out.empty()) return 0;
  impl_->claim();
  std::size_t n = impl_->take(out);
  if (n > 0) return n;
  impl_->drive();
  return impl_->take(out);
}

Result<std::size_t> CompletionQueue::wait(std::span<Completion> out, std::chrono::milliseconds timeout) {
  if (!impl_) return Errc::invalid_handle;
  if (out.empty()) return Errc::invalid_argument;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    // A sleeping waiter leaves progress to the agent; a busy one drives it.
    if (impl_->zone->busy_poll) impl_->claim();
    if (std::size_t n = impl_->take(out); n > 0) return n;
    impl_->drive();
    if (std::size_t n = impl_->take(out); n > 0) return n;
    auto now = std::chrono::steady_clock::now();
    if (timeout.count() >= 0 && now >= deadline) return Errc::timeout;
    if (impl_->zone->busy_poll) continue;
    // The agent makes progress meanwhile and notifies; the slice bounds the
    // time a missed notification could cost.
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto until = std::min(deadline, now + std::chrono::milliseconds(20));
    if (timeout.count() < 0) until = now + std::chrono::milliseconds(20);
    impl_->cv.wait_until(lock, until, [&] { return !impl_->queue.empty(); });
  }
}

int CompletionQueue::fd() const noexcept {
  if (!impl_) return -1;
  // The eventfd is kept in step with the queue only once someone asked for
  // it: a queue that is only polled costs no system call per completion.
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->fd_in_use) {
    impl_->fd_in_use = true;
    if (!impl_->queue.empty()) impl_->signal.raise();
  }
  return impl_->signal.fd();
}

std::size_t CompletionQueue::size() const noexcept {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->queue.size();
}

}  // namespace remora
