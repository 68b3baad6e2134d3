// remora/shared_receive_queue.hpp - receives shared by several endpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "remora/memory_region.hpp"
#include "remora/result.hpp"

namespace remora {

namespace detail {
struct SrqImpl;
}

/// A pool of posted receives that every endpoint created with it draws from,
/// in posting order. Each receive completes on the receive queue of the
/// endpoint whose message it took (Completion::endpoint_id tells which).
/// Messages that arrive while the pool is empty are held, never dropped.
/// Thread-safe. Move-only.
class SharedReceiveQueue {
 public:
  SharedReceiveQueue() = default;
  explicit SharedReceiveQueue(std::shared_ptr<detail::SrqImpl> impl) : impl_(std::move(impl)) {}
  SharedReceiveQueue(SharedReceiveQueue&&) noexcept = default;
  SharedReceiveQueue& operator=(SharedReceiveQueue&&) noexcept = default;
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

  bool valid() const noexcept { return impl_ != nullptr; }
  /// Post a receive. Errors: invalid_handle, invalid_argument (segment outside
  /// its region, too many segments), zone_mismatch, privileges (no local_write),
  /// queue_full (more than the queue's capacity posted).
  Result<void> recv(std::span<const Segment> dst, std::uint64_t cookie);
  /// Receives posted and not yet consumed.
  std::size_t posted() const noexcept;

  const std::shared_ptr<detail::SrqImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::SrqImpl> impl_;
};

}  // namespace remora
