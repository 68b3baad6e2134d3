// Thin RAII helpers over libfabric shared by the raw client and server.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace rbench {

// Any failure of the benchmark: main prints it and exits 1.
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws BenchError("<what>: <fi_strerror(-rc)> (rc)") when rc < 0.
void check(long rc, const char* what);

template <class T>
struct FidDeleter {
  void operator()(T* p) const noexcept { fi_close(&p->fid); }
};
template <class T>
using Fid = std::unique_ptr<T, FidDeleter<T>>;

struct InfoDeleter {
  void operator()(fi_info* p) const noexcept { fi_freeinfo(p); }
};
using Info = std::unique_ptr<fi_info, InfoDeleter>;

// Page-aligned, zero-filled memory.
struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte, FreeDeleter>;
Buffer allocate_buffer(std::size_t size);

// fi_getinfo for a connection-oriented endpoint (FI_EP_MSG) with FI_MSG and
// FI_RMA (and FI_RMA_PMEM where the provider has it). `source` = node/service
// name a local address to listen on.
Info get_info(const std::string& provider, const std::string& node, const std::string& service, bool source);

// The CM private data: the client's request and the server's answer.
inline constexpr std::uint32_t kMagic = 0x52424e43;  // "RBNC"
inline constexpr std::uint16_t kVersion = 1;

struct ConnectRequest {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t want_recvs = 0;  // 1: the client will send; post receives
  std::uint32_t qd = 0;          // client's queue depth (receives to post)
  std::uint32_t reserved = 0;
  std::uint64_t max_size = 0;  // largest size the client will use
};

inline constexpr std::uint16_t kServerBusyPoll = 1;  // AcceptReply::reserved: the server busy-polls

struct AcceptReply {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t reserved = 0;  // kServerBusyPoll or 0
  std::uint64_t addr = 0;      // remote address of the target buffer
  std::uint64_t key = 0;       // its key
  std::uint64_t len = 0;       // its length
};

// A connection-manager event with its private data.
struct CmEvent {
  std::uint32_t event = 0;
  fi_info* info = nullptr;  // FI_CONNREQ only; the caller frees it
  std::vector<std::byte> data;
};

// Waits up to `timeout` for one event on `eq`; an error entry throws with
// the provider's message, a timeout throws "<what>: timed out ...".
CmEvent wait_cm_event(fid_eq* eq, std::chrono::milliseconds timeout, const char* what);

// Non-blocking: true when an FI_SHUTDOWN (or an error) is waiting on `eq`.
bool shutdown_seen(fid_eq* eq);

// A CQ error entry, as text.
std::string cq_error_text(fid_cq* cq, fi_cq_err_entry* err_out = nullptr);

// Registers [buf, buf+len) in `domain` with `access` and an application key
// (ignored where the provider chooses keys).
Fid<fid_mr> register_memory(fid_domain* domain, void* buf, std::size_t len, std::uint64_t access, std::uint64_t key);

// A CQ of context entries; FI_WAIT_FD when `waitable` (for fi_cq_sread).
Fid<fid_cq> open_cq(fid_domain* domain, std::size_t size, bool waitable);

Fid<fid_eq> open_eq(fid_fabric* fabric);

}  // namespace rbench
