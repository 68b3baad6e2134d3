// remora/endpoint.hpp - a reliable connection and the operations posted on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "remora/completion_queue.hpp"
#include "remora/memory_region.hpp"
#include "remora/remote_region.hpp"
#include "remora/result.hpp"
#include "remora/shared_receive_queue.hpp"

namespace remora {

namespace detail {
struct EndpointImpl;
}

enum class EndpointState : std::uint8_t {
  unconnected,      ///< created, never connected
  connect_pending,  ///< connect() or accept() issued, not yet established
  connected,        ///< operations may be posted
  disconnected,     ///< closed by either side; posts complete at once as flushed
  error,            ///< an operation failed remotely or the connection was lost
};
const char* to_string(EndpointState s) noexcept;

/// Flags of a posted operation.
enum class PostFlags : std::uint32_t {
  none = 0,
  /// No completion on success (one is always reported on error).
  unsignalled = 1u << 0,
  /// Do not start until every earlier operation on the endpoint completed.
  fence = 1u << 1,
};
constexpr PostFlags operator|(PostFlags a, PostFlags b) noexcept {
  return static_cast<PostFlags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr bool has(PostFlags f, PostFlags bit) noexcept {
  return (static_cast<std::uint32_t>(f) & static_cast<std::uint32_t>(bit)) != 0;
}

enum class FlushType : std::uint8_t { visibility, persistent };

enum class ConnectionEventType : std::uint8_t {
  established,
  rejected,
  unreachable,
  disconnected,
  lost,
};
const char* to_string(ConnectionEventType t) noexcept;

struct ConnectionEvent {
  ConnectionEventType type = ConnectionEventType::established;
  std::vector<std::uint8_t> private_data;  ///< the peer's, on established and rejected
};

struct EndpointOptions {
  CompletionQueue* send_cq = nullptr;  ///< required: completions of posted operations
  CompletionQueue* recv_cq = nullptr;  ///< receives; defaults to send_cq
  std::uint32_t max_outstanding = 64;  ///< request queue depth (posts beyond: queue_full)
  std::uint32_t max_recv = 64;         ///< posted receives
  std::uint32_t max_message = 65536;   ///< largest send/recv message
  /// Take receives from this shared queue (same zone) instead of
  /// Endpoint::recv, which then fails with invalid_argument.
  SharedReceiveQueue* srq = nullptr;
};

/// Maximum private data carried by connect/accept/reject.
inline constexpr std::size_t kMaxPrivateData = 240;

/// A connection. All post operations are non-blocking and thread-safe; the
/// memory a segment names must stay untouched until its completion. Checks
/// run synchronously, before anything is sent: invalid_handle, invalid_argument
/// (segment outside its region, too many segments, misaligned atomic),
/// length_error (remote range, peer message size), zone_mismatch, privileges
/// (local and, from the descriptor, remote), invalid_state (not connected and
/// not yet disconnected), queue_full, not_supported (PERSISTENT flush to a
/// region not declared persistent). In the disconnected/error states a post
/// succeeds and its completion is reported at once with Errc::flushed.
class Endpoint {
 public:
  Endpoint() = default;
  explicit Endpoint(std::shared_ptr<detail::EndpointImpl> impl) : impl_(std::move(impl)) {}
  Endpoint(Endpoint&&) noexcept = default;
  /// Closes the endpoint this handle held, as the destructor does.
  Endpoint& operator=(Endpoint&& other) noexcept;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  ~Endpoint();

  bool valid() const noexcept { return impl_ != nullptr; }
  std::uint64_t id() const noexcept;
  EndpointState state() const noexcept;

  /// Start connecting; the outcome arrives as a ConnectionEvent.
  /// Errors: invalid_state, invalid_argument (private data too long), unreachable.
  Result<void> connect(const std::string& host, std::uint16_t port, std::span<const std::uint8_t> private_data = {});
  /// Wait for the next connection event. Errors: timeout.
  Result<ConnectionEvent> next_event(std::chrono::milliseconds timeout);
  /// connect() then wait for the outcome; returns the server's private data.
  /// Errors as connect() plus connection_rejected, unreachable, timeout.
  Result<std::vector<std::uint8_t>> connect_and_wait(const std::string& host, std::uint16_t port,
                                                     std::span<const std::uint8_t> private_data,
                                                     std::chrono::milliseconds timeout);
  /// A file descriptor readable while connection events are queued.
  int event_fd() const noexcept;
  /// Graceful disconnect: the peer sees `disconnected`. Outstanding operations
  /// complete as flushed. Safe in any state.
  Result<void> disconnect();

  Result<void> write(std::span<const Segment> src, const RemoteRegion& dst, std::uint64_t dst_offset,
                     std::uint64_t cookie, PostFlags flags = PostFlags::none);
  Result<void> write_imm(std::span<const Segment> src, const RemoteRegion& dst, std::uint64_t dst_offset,
                         std::uint32_t imm, std::uint64_t cookie, PostFlags flags = PostFlags::none);
  Result<void> read(std::span<const Segment> dst, const RemoteRegion& src, std::uint64_t src_offset,
                    std::uint64_t cookie, PostFlags flags = PostFlags::none);
  Result<void> send(std::span<const Segment> src, std::uint64_t cookie, PostFlags flags = PostFlags::none);
  Result<void> send_imm(std::span<const Segment> src, std::uint32_t imm, std::uint64_t cookie,
                        PostFlags flags = PostFlags::none);
  /// Post a receive; completions go to the receive queue. Messages that
  /// arrive before a receive is posted are held and matched in order. Unlike
  /// the other posts, a receive may be posted before the endpoint is
  /// connected (it is kept for the connection). A write with immediate data
  /// consumes one receive and reports the written length (for writes below
  /// 16 MiB; larger ones report what the provider gives, 0 on tcp).
  Result<void> recv(std::span<const Segment> dst, std::uint64_t cookie);
  /// Atomically store 8 bytes at dst+dst_offset (must be 8-byte aligned).
  Result<void> atomic_write(const RemoteRegion& dst, std::uint64_t dst_offset, std::uint64_t value,
                            std::uint64_t cookie, PostFlags flags = PostFlags::none);
  /// Make every write posted earlier on this endpoint to [offset, offset+len)
  /// visible (VISIBILITY) or durable (PERSISTENT) at the target. A PERSISTENT
  /// flush the target could not carry out (msync or the persist function
  /// failed) completes with Errc::io_error, and the endpoint goes to error as
  /// for any failed remote operation; nothing is reported durable that may
  /// not be.
  Result<void> flush(const RemoteRegion& dst, std::uint64_t dst_offset, std::uint64_t len, FlushType type,
                     std::uint64_t cookie, PostFlags flags = PostFlags::none);

  /// Largest number of segments one operation accepts.
  std::size_t max_segments() const noexcept;
  /// Largest message the peer accepts (after establishment).
  std::size_t peer_max_message() const noexcept;

  /// Return a disconnected (or errored) endpoint to `unconnected`, ready for
  /// another connect() or accept(). Errors: invalid_state in other states.
  Result<void> reset();

  void close() noexcept;
  const std::shared_ptr<detail::EndpointImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::EndpointImpl> impl_;
};

}  // namespace remora
