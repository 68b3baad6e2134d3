// compat/rpma/src/internal.hpp - the C handles of librpma and what they wrap.
//
// Every librpma handle is a struct that owns Remora C++ objects. The C
// functions validate their arguments first, allocate second, and convert
// Remora errors in exactly one place: rpma_error().
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <remora/remora.hpp>

#include "librpma.h"

namespace rpma_compat {

/// The one conversion from a Remora error to an RPMA_E_* code.
int rpma_error(std::error_code ec) noexcept;

/// Log through the current log function (see log.cpp).
void log_message(rpma_log_level level, const char* file, int line, const char* func, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/// Map an ibv_context the library handed out back to its Remora fabric.
remora::Fabric* fabric_of(ibv_context* ctx) noexcept;

/// An epoll descriptor that is readable while any of `fds` is readable. It
/// is a descriptor of its own, so a caller may set O_NONBLOCK on it (the
/// librpma way of choosing non-blocking calls) without touching Remora's.
int make_watch_fd(std::initializer_list<int> fds) noexcept;
/// True when the caller made `fd` non-blocking.
bool is_nonblocking(int fd) noexcept;
/// Block until `fd` is readable or `slice_ms` passed.
void wait_readable(int fd, int slice_ms) noexcept;

/// Descriptor of a local region, librpma's encoding (21 bytes): the region's
/// address (u64), length (u64) and remote key (u32), little-endian, then one
/// byte of RPMA_MR_USAGE_* flags. Everything else a RemoteRegion holds follows
/// from these: remote privileges and persistence from the usage flags (a
/// region is registered with exactly the privileges its usage needs), and the
/// key fits 32 bits because this face opens its zones with key_bits = 32.
inline constexpr std::size_t kMrDescriptorSize = 21;
/// The remote privileges a usage set grants (what the descriptor must carry).
remora::Access remote_access_for(int usage) noexcept;

}  // namespace rpma_compat

struct rpma_peer {
  remora::ProtectionZone zone;
  ibv_context* ctx = nullptr;
};

struct rpma_peer_cfg {
  bool direct_write_to_pmem = false;
};

struct rpma_conn_cfg {
  int timeout_ms = RPMA_DEFAULT_TIMEOUT_MS;
  std::uint32_t cq_size = 10;
  std::uint32_t rcq_size = 0;
  std::uint32_t sq_size = 10;
  std::uint32_t rq_size = 10;
  bool shared = false;
  rpma_srq* srq = nullptr;
};

struct rpma_srq_cfg {
  std::uint32_t rq_size = 100;
  std::uint32_t rcq_size = 100;
};

struct rpma_cq {
  remora::CompletionQueue cq;
  int watch_fd = -1;    // what rpma_cq_get_fd() hands out
  bool shared = false;  // part of a connection's shared completion channel
  // The queue's own descriptor joins watch_fd on first need (watch()), not
  // when the queue is made: a queue whose descriptor was taken is left to
  // the agent between polls and signals each completion on an eventfd, so a
  // program that only polls (rpma_cq_get_wc) would pay for a descriptor it
  // never uses, and its writes would not be gathered on the same-host path.
  mutable std::mutex watch_mu;
  mutable bool watched = false;
  /// watch_fd with the queue's descriptor in it: 0, or RPMA_E_PROVIDER.
  int watch() const noexcept;
  ~rpma_cq();
};

struct rpma_srq {
  remora::SharedReceiveQueue srq;
  rpma_cq* rcq = nullptr;     // owned; NULL when rcq_size was 0
  std::atomic<int> users{0};  // connection requests and connections made with it
};

struct rpma_mr_local {
  remora::MemoryRegion mr;
  int usage = 0;
};

struct rpma_mr_remote {
  remora::RemoteRegion rr;
  int usage = 0;
};

struct rpma_ep {
  remora::Listener listener;
  rpma_peer* peer = nullptr;
  int watch_fd = -1;
};

struct rpma_conn_req {
  bool passive = false;
  remora::ConnectionRequest request;  // passive side
  std::string host;                   // active side
  std::uint16_t port = 0;
  remora::Endpoint ep;
  rpma_cq* cq = nullptr;
  rpma_cq* rcq = nullptr;
  bool owns_rcq = false;
  rpma_srq* srq = nullptr;  // counted in srq->users
  bool shared = false;
  std::vector<std::uint8_t> private_data;  // the client's, on the passive side
};

struct rpma_conn {
  remora::Endpoint ep;
  rpma_cq* cq = nullptr;
  rpma_cq* rcq = nullptr;
  bool owns_rcq = false;
  rpma_srq* srq = nullptr;  // counted in srq->users
  bool shared = false;
  int event_watch_fd = -1;
  int compl_fd = -1;
  std::vector<std::uint8_t> private_data;
  bool direct_write_to_pmem = false;
  std::uint32_t qp_num = 0;
  // The last region addressed, for zero-length operations naming none.
  std::mutex last_mu;
  remora::RemoteRegion last_remote;
  void remember(const remora::RemoteRegion& r) {
    std::lock_guard<std::mutex> lock(last_mu);
    last_remote = r;
  }
};

#define RPMA_LOG(level, ...) ::rpma_compat::log_message(level, __FILE__, __LINE__, __func__, __VA_ARGS__)
