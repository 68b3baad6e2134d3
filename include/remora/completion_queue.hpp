// remora/completion_queue.hpp - where finished operations are reported.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>

#include "remora/completion.hpp"
#include "remora/result.hpp"

namespace remora {

namespace detail {
struct CqImpl;
}

/// A queue of Completions, shared by any number of endpoints of one zone
/// (for sends, receives or both). Thread-safe. Move-only.
class CompletionQueue {
 public:
  CompletionQueue() = default;
  explicit CompletionQueue(std::shared_ptr<detail::CqImpl> impl) : impl_(std::move(impl)) {}
  CompletionQueue(CompletionQueue&&) noexcept = default;
  CompletionQueue& operator=(CompletionQueue&&) noexcept = default;
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  bool valid() const noexcept { return impl_ != nullptr; }
  /// Take up to out.size() completions without blocking (drives progress of
  /// the attached endpoints on the calling thread). Returns how many.
  std::size_t poll(std::span<Completion> out);
  /// Like poll() but waits up to `timeout` for at least one completion.
  /// Errors: Errc::timeout. A negative timeout waits forever.
  Result<std::size_t> wait(std::span<Completion> out, std::chrono::milliseconds timeout);
  /// A file descriptor for epoll/poll, owned by the queue: readable while
  /// completions are queued, and also when the transport of a connection
  /// feeding the queue has something for it, so that a thread sleeping on
  /// it wakes at once and makes the progress itself (poll(), progress()).
  /// A wake-up may therefore find nothing to take (poll() returns 0):
  /// sleep again. -1 if no descriptor could be made.
  int fd() const noexcept;
  /// Completions waiting to be taken.
  std::size_t size() const noexcept;
  /// Like size(), but when nothing is queued, first drives the progress of
  /// the attached endpoints on the calling thread (as poll() does) without
  /// taking anything, and when still nothing, prepares fd() for a sleep
  /// (the transports' wait descriptors are re-armed): what a thread woken
  /// by fd() calls before deciding to sleep again.
  std::size_t progress();
  /// Whether a completion can still come without anything more being
  /// posted: one is queued, or an endpoint whose connection feeds the queue
  /// has an operation in flight (this is its send queue) or a receive posted
  /// (this is its receive queue; its shared receive queue's count too).
  /// False means a wait for a completion would never end. A thread posting
  /// at the same time can make the answer stale at once. False for an
  /// invalid (default-constructed or moved-from) queue, which never
  /// completes anything.
  bool expecting() const;

  /// Held by a thread that sleeps on fd() (poll, epoll) and calls poll(),
  /// wait() or progress() each time it wakes. While one is held, the zone's
  /// agent leaves the progress of the queue's endpoints to that thread: a
  /// completion is then made by the thread waiting for it, with one wake-up
  /// instead of two (the agent's, then the waiter's). Work the transport's
  /// descriptors do not announce (a reply made on another thread, a message
  /// the transport could not take at once) is still done by the agent.
  /// When the last one is dropped the agent takes the endpoints back (within
  /// a few milliseconds). wait() holds one while it sleeps; so do
  /// rpma_cq_wait and dat_evd_wait. Move-only.
  class Sleeper {
   public:
    Sleeper() = default;
    explicit Sleeper(std::shared_ptr<detail::CqImpl> impl);
    Sleeper(Sleeper&& o) noexcept : impl_(std::move(o.impl_)) {}
    Sleeper& operator=(Sleeper&& o) noexcept;
    Sleeper(const Sleeper&) = delete;
    Sleeper& operator=(const Sleeper&) = delete;
    ~Sleeper();

   private:
    std::shared_ptr<detail::CqImpl> impl_;
  };
  /// A Sleeper for this queue (an empty one for an invalid queue, or a
  /// queue whose fd() cannot be made: its waiters depend on the agent).
  [[nodiscard]] Sleeper sleeper() const;

  const std::shared_ptr<detail::CqImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::CqImpl> impl_;
};

}  // namespace remora
