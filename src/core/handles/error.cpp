// Error category, enum names and small shared helpers.
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "core/impl.hpp"

namespace remora {
namespace {

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "remora"; }
  std::string message(int ev) const override {
    switch (static_cast<Errc>(ev)) {
      case Errc::invalid_handle: return "invalid handle: the object is closed, moved-from or of another kind";
      case Errc::invalid_argument: return "invalid argument: a value or a segment is outside what is allowed";
      case Errc::length_error: return "length error: the data does not fit the remote range or the peer's buffer";
      case Errc::zone_mismatch: return "protection zone mismatch: the region belongs to another zone";
      case Errc::privileges: return "privileges violation: the region lacks the access this operation needs";
      case Errc::invalid_state: return "invalid state: the endpoint is not connected";
      case Errc::not_supported: return "not supported by this region or provider";
      case Errc::queue_full: return "request queue full: wait for completions and retry";
      case Errc::timeout: return "timed out";
      case Errc::remote_access:
        return "remote access error: the target refused the operation (key, bounds or privilege) "
               "or the connection broke; the endpoint is now in error state";
      case Errc::flushed: return "flushed: the endpoint left the connected state before the operation ran";
      case Errc::connection_rejected: return "connection rejected by the peer";
      case Errc::unreachable: return "peer unreachable: nothing listens at that address and port";
      case Errc::not_connected: return "not connected";
      case Errc::address_in_use: return "address already in use";
      case Errc::provider_error: return "fabric provider error";
      case Errc::io_error: return "I/O error while persisting";
      case Errc::malformed: return "malformed input";
      case Errc::no_memory: return "out of memory or registration resources";
    }
    return "unknown remora error " + std::to_string(ev);
  }
};

}  // namespace

const std::error_category& remora_category() noexcept {
  static const Category category;
  return category;
}

const char* to_string(Opcode op) noexcept {
  switch (op) {
    case Opcode::write: return "write";
    case Opcode::read: return "read";
    case Opcode::send: return "send";
    case Opcode::recv: return "recv";
    case Opcode::recv_write_imm: return "recv_write_imm";
    case Opcode::atomic_write: return "atomic_write";
    case Opcode::flush: return "flush";
  }
  return "?";
}

const char* to_string(EndpointState s) noexcept {
  switch (s) {
    case EndpointState::unconnected: return "unconnected";
    case EndpointState::connect_pending: return "connect_pending";
    case EndpointState::connected: return "connected";
    case EndpointState::disconnected: return "disconnected";
    case EndpointState::error: return "error";
  }
  return "?";
}

const char* to_string(ConnectionEventType t) noexcept {
  switch (t) {
    case ConnectionEventType::established: return "established";
    case ConnectionEventType::rejected: return "rejected";
    case ConnectionEventType::unreachable: return "unreachable";
    case ConnectionEventType::disconnected: return "disconnected";
    case ConnectionEventType::lost: return "lost";
  }
  return "?";
}

namespace detail {

std::uint64_t next_object_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

Signal::~Signal() {
  if (fd_ >= 0) ::close(fd_);
}

void Signal::raise() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (raised_) return;  // readable already
  raised_ = true;
  if (fd_ < 0) return;
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_, &one, sizeof one);
}

void Signal::clear() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (!raised_) return;  // not readable: nothing to read
  raised_ = false;
  if (fd_ < 0) return;
  std::uint64_t v;
  [[maybe_unused]] auto n = ::read(fd_, &v, sizeof v);
}

void Signal::drain() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  raised_ = false;
  if (fd_ < 0) return;
  std::uint64_t v;
  [[maybe_unused]] auto n = ::read(fd_, &v, sizeof v);
}

int Signal::fd() const noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) fd_ = eventfd(raised_ ? 1 : 0, EFD_NONBLOCK | EFD_CLOEXEC);
  return fd_;
}

LazyBuffer::~LazyBuffer() {
  if (p_ != nullptr) ::munmap(p_, n_);
}

LazyBuffer& LazyBuffer::operator=(LazyBuffer&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) ::munmap(p_, n_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

bool LazyBuffer::reserve(std::size_t bytes) noexcept {
  *this = LazyBuffer();
  if (bytes == 0) return true;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  p_ = static_cast<std::uint8_t*>(p);
  n_ = bytes;
  return true;
}

}  // namespace detail
}  // namespace remora
