// src/fabric/backend.hpp - the narrow interface between the core and a
// transport. No libfabric type appears here; ofi_backend.cpp implements it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "remora/access.hpp"
#include "remora/fabric.hpp"
#include "remora/result.hpp"

namespace remora::backend {

struct Iov {
  void* addr;
  std::size_t len;
  void* desc;
};

/// Per-operation memory the transport hands back in completions. The core
/// embeds it at the start of its own operation contexts.
struct alignas(16) OpSlotHeader {
  void* transport[8];  // room for a fi_context2
  // The backend's own: the connection the operation was posted on, so that
  // a completion read from a queue shared by several connections goes back
  // to the right one (SharedQueue).
  void* conn = nullptr;
};

enum CqFlags : std::uint64_t {
  kCqSend = 1u << 0,
  kCqRecv = 1u << 1,
  kCqRead = 1u << 2,
  kCqWrite = 1u << 3,
  kCqRemoteWrite = 1u << 4,
  kCqRemoteData = 1u << 5,
};

struct CqEntry {
  void* context = nullptr;  // the OpSlotHeader*, or null for remote-data events
  std::uint64_t flags = 0;
  std::size_t len = 0;
  std::uint64_t data = 0;
  int err = 0;  // 0, or a positive errno-style code from the transport
};

class MemoryKey {
 public:
  virtual ~MemoryKey() = default;
  virtual void* desc() const noexcept = 0;
  virtual std::uint64_t key() const noexcept = 0;
};

/// A transport completion queue that several connections of one domain
/// share (the libfabric backend groups connections, see ofi_backend.cpp):
/// one queue, one wait fd and one set of transport buffers for the group
/// instead of one each. Reading it makes progress for every connection of
/// the group; each entry is kept for its own connection, whose poll()
/// returns it.
class SharedQueue {
 public:
  virtual ~SharedQueue() = default;
  /// Read what the transport has, keep every entry for its connection, and
  /// append to `ready` the owner (Connection::set_owner) of each connection
  /// of the group that has entries waiting (or owes the transport a call:
  /// its poll() must run). Returns the entries read, or a negative error
  /// code. Counts as this ProgressPass's read of the queue.
  virtual int pump(std::vector<void*>& ready) = 0;
  /// The group's wait fd (-1 for a queue created without one).
  virtual int wait_fd() const noexcept = 0;
  /// True when it is safe to sleep on wait_fd() (nothing pending in the
  /// transport or kept for any connection of the group).
  virtual bool try_wait() noexcept = 0;
};

namespace pass_detail {
inline thread_local std::uint64_t current = 0;
inline std::atomic<std::uint64_t> next{1};
}  // namespace pass_detail

/// A pass of progress over many connections on the calling thread (the
/// agent's turn, a completion queue's drive). While one is open, a
/// connection's poll() reads its SharedQueue only if no poll of this pass
/// has read it yet: the first read keeps every connection's entries, so a
/// pass over the N connections of a queue reads it once, not N times.
/// Entries that arrive during the pass wait for the next one.
class ProgressPass {
 public:
  ProgressPass() : prev_(pass_detail::current) { pass_detail::current = pass_detail::next.fetch_add(1); }
  ~ProgressPass() { pass_detail::current = prev_; }
  ProgressPass(const ProgressPass&) = delete;
  ProgressPass& operator=(const ProgressPass&) = delete;
  /// The open pass's number on this thread, 0 outside any.
  static std::uint64_t current() noexcept { return pass_detail::current; }

 private:
  std::uint64_t prev_;
};

/// One reliable connection, with its own completion queue or a share of a
/// SharedQueue.
class Connection {
 public:
  virtual ~Connection() = default;
  /// The queue this connection shares with others, or null when it has
  /// its own. When shared, wait_fd() is the queue's fd (the same for every
  /// connection of the group).
  virtual SharedQueue* shared_queue() noexcept { return nullptr; }
  /// The core's identity for this connection, reported by
  /// SharedQueue::pump and Domain's ready callback. Set before any post.
  virtual void set_owner(void* owner) noexcept { (void)owner; }
  virtual Result<void> connect(const std::string& host, std::uint16_t port, std::span<const std::uint8_t> pdata) = 0;
  virtual Result<void> accept(std::span<const std::uint8_t> pdata) = 0;
  virtual void shutdown() noexcept = 0;

  /// RMA; `raddr` is the target's virtual address. Ordering between
  /// operations (fences) is the core's business.
  virtual int write(std::span<const Iov> iov, std::uint64_t raddr, std::uint64_t key, bool with_data,
                    std::uint64_t data, OpSlotHeader* ctx) = 0;
  virtual int read(std::span<const Iov> iov, std::uint64_t raddr, std::uint64_t key, OpSlotHeader* ctx) = 0;
  virtual int send(std::span<const Iov> iov, std::uint64_t data, OpSlotHeader* ctx) = 0;
  /// Small message without a completion; the buffer is reusable at return.
  virtual int inject(const void* buf, std::size_t len, std::uint64_t data) = 0;
  virtual int recv(void* buf, std::size_t len, void* desc, OpSlotHeader* ctx) = 0;

  /// Read up to out.size() completions; returns the count (0: none) or a
  /// negative error code.
  virtual int poll(std::span<CqEntry> out) = 0;
  /// File descriptor that becomes readable when poll() may return entries;
  /// -1 for a connection created without one.
  virtual int wait_fd() const noexcept = 0;
  /// True when it is safe to sleep on wait_fd() (nothing pending).
  virtual bool try_wait() noexcept = 0;
  /// For a connection on a shared queue: try_wait() but for the queue's own
  /// SharedQueue::try_wait() (nothing is kept for this connection and it
  /// owes the transport no call). A caller with many connections on one
  /// queue asks each this and the queue once. Without a shared queue, the
  /// same as try_wait().
  virtual bool quiet() noexcept { return try_wait(); }
  /// poll() must read the transport again before the caller's next sleep,
  /// even when the last read returned fewer entries than asked for: every
  /// receive buffer the transport held has completed and some are posted
  /// again, and the transport may keep a message it read while it had none
  /// where its wait fd does not show it (libfabric 1.17's tcp provider parks
  /// such a message until its next progress call; one without payload, an
  /// acknowledgement, leaves nothing in the socket to wake a sleeper).
  virtual bool needs_poll() const noexcept { return false; }
  /// Identity used by connection-management events. A later connection may
  /// get the same identity once this one is destroyed; destroying it
  /// discards its events still queued in the domain (as fi_close does), so
  /// an event read after that is never this connection's.
  virtual const void* cm_id() const noexcept = 0;
};

struct CmEvent {
  enum Kind { conn_request, connected, shutdown, error } kind = error;
  const void* cm_id = nullptr;  // connection or listener identity
  std::vector<std::uint8_t> data;
  int err = 0;
  std::shared_ptr<void> request;  // opaque request info (conn_request)
  std::string peer_host;          // conn_request: the peer's address, when known
  std::uint16_t peer_port = 0;
};

class PassiveEndpoint {
 public:
  virtual ~PassiveEndpoint() = default;
  virtual std::uint16_t port() const noexcept = 0;
  virtual Result<void> reject(const std::shared_ptr<void>& request, std::span<const std::uint8_t> pdata) = 0;
  virtual const void* cm_id() const noexcept = 0;
};

/// A protection domain with one connection-management event queue.
class Domain {
 public:
  virtual ~Domain() = default;
  virtual Result<std::unique_ptr<MemoryKey>> register_memory(void* addr, std::size_t len, Access access,
                                                             std::uint64_t requested_key) = 0;
  /// `waitable`: the connection's queue gets a wait fd (else wait_fd() is -1).
  virtual Result<std::unique_ptr<Connection>> create_connection(const std::shared_ptr<void>& request,
                                                                std::size_t cq_size, bool waitable) = 0;
  virtual Result<std::unique_ptr<PassiveEndpoint>> listen(const std::string& address, std::uint16_t port) = 0;
  /// Read one event; false when none is queued.
  virtual bool next_cm_event(CmEvent& ev) = 0;
  virtual int cm_wait_fd() const noexcept = 0;
  virtual bool cm_try_wait() noexcept = 0;
  /// Called, with no lock of the backend held, when a connection's poll()
  /// read a shared queue and kept entries for *other* connections of the
  /// group (their owners): someone must progress them. The core sets it
  /// once, before creating connections.
  virtual void set_ready_callback(std::function<void(void* owner)> fn) { (void)fn; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  static Result<std::shared_ptr<Transport>> open(const FabricOptions& options);
  static Result<std::vector<FabricInfo>> list(const std::string& provider_filter);
  virtual const FabricInfo& info() const noexcept = 0;
  virtual Result<std::unique_ptr<Domain>> open_domain() = 0;
};

}  // namespace remora::backend
