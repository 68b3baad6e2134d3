// compat/rpma/src/base.cpp - errors, logging, device lookup, configuration
// objects, peers and memory regions of the librpma API.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>

#include "internal.hpp"

using remora::Access;
using remora::Errc;

namespace rpma_compat {

// ---- the one error conversion ----------------------------------------------

int rpma_error(std::error_code ec) noexcept {
  if (!ec) return 0;
  if (ec.category() != remora::remora_category()) {
    if (ec == std::errc::not_enough_memory) return RPMA_E_NOMEM;
    return RPMA_E_PROVIDER;
  }
  switch (static_cast<Errc>(ec.value())) {
    case Errc::invalid_handle:
    case Errc::invalid_argument: return RPMA_E_INVAL;
    case Errc::not_supported:
    case Errc::malformed:  // bytes that are not a valid descriptor
      return RPMA_E_NOSUPP;
    case Errc::no_memory: return RPMA_E_NOMEM;
    case Errc::timeout:  // a wait that found nothing
      return RPMA_E_NO_EVENT;
    case Errc::length_error:
    case Errc::zone_mismatch:
    case Errc::privileges:
    case Errc::invalid_state:
    case Errc::queue_full:
    case Errc::remote_access:
    case Errc::flushed:
    case Errc::connection_rejected:
    case Errc::unreachable:
    case Errc::not_connected:
    case Errc::address_in_use:
    case Errc::provider_error:
    case Errc::io_error: return RPMA_E_PROVIDER;
  }
  return RPMA_E_UNKNOWN;
}

// ---- descriptors -------------------------------------------------------------

int make_watch_fd(std::initializer_list<int> fds) noexcept {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return -1;
  for (int fd : fds) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(ep);
      return -1;
    }
  }
  return ep;
}

bool is_nonblocking(int fd) noexcept {
  int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK) != 0;
}

void wait_readable(int fd, int slice_ms) noexcept {
  pollfd p{fd, POLLIN, 0};
  (void)::poll(&p, 1, slice_ms);
}

Access remote_access_for(int usage) noexcept {
  Access a = Access::none;
  if (usage & (RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT))
    a = a | Access::remote_read;
  if (usage & RPMA_MR_USAGE_WRITE_DST) a = a | Access::remote_write;
  return a;
}

// ---- logging -------------------------------------------------------------------

namespace {
std::atomic<int> g_threshold[RPMA_LOG_THRESHOLD_MAX] = {RPMA_LOG_LEVEL_WARNING, RPMA_LOG_DISABLED};
std::atomic<rpma_log_function*> g_log_function{nullptr};

const char* level_name(rpma_log_level l) {
  switch (l) {
    case RPMA_LOG_LEVEL_FATAL: return "*FATAL*";
    case RPMA_LOG_LEVEL_ERROR: return "*ERROR*";
    case RPMA_LOG_LEVEL_WARNING: return "*WARNING*";
    case RPMA_LOG_LEVEL_NOTICE: return "*NOTICE*";
    case RPMA_LOG_LEVEL_INFO: return "*INFO*";
    case RPMA_LOG_LEVEL_DEBUG: return "*DEBUG*";
    default: return "";
  }
}

int syslog_priority(rpma_log_level l) {
  switch (l) {
    case RPMA_LOG_LEVEL_FATAL: return LOG_CRIT;
    case RPMA_LOG_LEVEL_ERROR: return LOG_ERR;
    case RPMA_LOG_LEVEL_WARNING: return LOG_WARNING;
    case RPMA_LOG_LEVEL_NOTICE: return LOG_NOTICE;
    case RPMA_LOG_LEVEL_INFO: return LOG_INFO;
    default: return LOG_DEBUG;
  }
}
}  // namespace

void log_message(rpma_log_level level, const char* file, int line, const char* func, const char* fmt, ...) {
  if (level == RPMA_LOG_DISABLED || level > g_threshold[RPMA_LOG_THRESHOLD].load()) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (auto* fn = g_log_function.load()) {
    fn(level, file, line, func, "%s", msg);
    return;
  }
  // The built-in function: syslog first, stderr up to the auxiliary threshold.
  const char* base = file ? std::strrchr(file, '/') : nullptr;
  base = base ? base + 1 : (file ? file : "");
  syslog(syslog_priority(level), "%s %s:%d %s: %s", level_name(level), base, line, func ? func : "", msg);
  if (level <= g_threshold[RPMA_LOG_THRESHOLD_AUX].load())
    std::fprintf(stderr, "%s %s:%d %s: %s\n", level_name(level), base, line, func ? func : "", msg);
}

// ---- the registry of device contexts ------------------------------------------

namespace {
struct Device {
  std::unique_ptr<ibv_context> ctx;
  remora::Fabric fabric;
};
std::mutex g_dev_mu;
std::map<std::string, Device>* g_devices = new std::map<std::string, Device>;  // never freed: contexts live forever

// Resolve `addr` to a numeric address of the local interface that serves it.
int local_address_for(const char* addr, rpma_util_ibv_context_type type, std::string& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr, nullptr, &hints, &res) != 0 || res == nullptr) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "cannot resolve address '%s'", addr);
    return RPMA_E_PROVIDER;
  }
  sockaddr_storage ss{};
  socklen_t sl = static_cast<socklen_t>(res->ai_addrlen);
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  int family = res->ai_family;
  freeaddrinfo(res);
  int s = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return RPMA_E_PROVIDER;
  int rc;
  if (type == RPMA_UTIL_IBV_CONTEXT_LOCAL) {
    rc = bind(s, reinterpret_cast<sockaddr*>(&ss), sl);  // fails unless the address is ours
  } else {
    // The route to a peer: a connected datagram socket picks the source address.
    if (family == AF_INET)
      reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(9);
    else
      reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(9);
    rc = connect(s, reinterpret_cast<sockaddr*>(&ss), sl);
    if (rc == 0) {
      sl = sizeof ss;
      rc = getsockname(s, reinterpret_cast<sockaddr*>(&ss), &sl);
    }
  }
  ::close(s);
  if (rc != 0) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "no local interface for address '%s': %s", addr, std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr)
                                    : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr);
  if (!inet_ntop(family, a, buf, sizeof buf)) return RPMA_E_PROVIDER;
  out = buf;
  return 0;
}
}  // namespace

remora::Fabric* fabric_of(ibv_context* ctx) noexcept {
  std::lock_guard<std::mutex> lock(g_dev_mu);
  for (auto& [k, d] : *g_devices)
    if (d.ctx.get() == ctx) return &d.fabric;
  return nullptr;
}

}  // namespace rpma_compat

using namespace rpma_compat;

namespace {
// Little-endian fields of the descriptors, whatever the host's byte order.
void put_le(std::uint8_t* p, std::uint64_t v, int bytes) noexcept {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint64_t get_le(const std::uint8_t* p, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}
}  // namespace

extern "C" {

// ---- errors and events as text ---------------------------------------------------

const char* rpma_err_2str(int ret) {
  switch (ret) {
    case 0: return "Success";
    case RPMA_E_UNKNOWN: return "Unknown error";
    case RPMA_E_NOSUPP: return "Not supported";
    case RPMA_E_PROVIDER: return "Fabric provider error";
    case RPMA_E_NOMEM: return "Out of memory";
    case RPMA_E_INVAL: return "Invalid argument";
    case RPMA_E_NO_COMPLETION: return "No completion available";
    case RPMA_E_NO_EVENT: return "No event available";
    case RPMA_E_AGAIN: return "Temporary error, try again";
    case RPMA_E_SHARED_CHANNEL: return "Completion channel is shared";
    case RPMA_E_NOT_SHARED_CHNL: return "Completion channel is not shared";
    default: return "Unknown error code";
  }
}

const char* rpma_utils_conn_event_2str(enum rpma_conn_event conn_event) {
  switch (conn_event) {
    case RPMA_CONN_UNDEFINED: return "Undefined connection event";
    case RPMA_CONN_ESTABLISHED: return "Connection established";
    case RPMA_CONN_CLOSED: return "Connection closed";
    case RPMA_CONN_LOST: return "Connection lost";
    case RPMA_CONN_REJECTED: return "Connection rejected";
    case RPMA_CONN_UNREACHABLE: return "Connection unreachable";
  }
  return "Unknown connection event";
}

// ---- logging ---------------------------------------------------------------------

int rpma_log_set_threshold(enum rpma_log_threshold threshold, enum rpma_log_level level) {
  if (threshold != RPMA_LOG_THRESHOLD && threshold != RPMA_LOG_THRESHOLD_AUX) return RPMA_E_INVAL;
  if (level < RPMA_LOG_DISABLED || level > RPMA_LOG_LEVEL_DEBUG) return RPMA_E_INVAL;
  g_threshold[threshold].store(level);
  return 0;
}

int rpma_log_get_threshold(enum rpma_log_threshold threshold, enum rpma_log_level* level) {
  if (threshold != RPMA_LOG_THRESHOLD && threshold != RPMA_LOG_THRESHOLD_AUX) return RPMA_E_INVAL;
  if (level == nullptr) return RPMA_E_INVAL;
  *level = static_cast<rpma_log_level>(g_threshold[threshold].load());
  return 0;
}

int rpma_log_set_function(rpma_log_function* log_function) {
  g_log_function.store(log_function);
  return 0;
}

// ---- device lookup ---------------------------------------------------------------

int rpma_utils_get_ibv_context(const char* addr, enum rpma_util_ibv_context_type type,
                               struct ibv_context** ibv_ctx_ptr) {
  if (addr == nullptr || ibv_ctx_ptr == nullptr) return RPMA_E_INVAL;
  if (type != RPMA_UTIL_IBV_CONTEXT_LOCAL && type != RPMA_UTIL_IBV_CONTEXT_REMOTE) return RPMA_E_INVAL;
  std::string local;
  if (int rc = local_address_for(addr, type, local); rc != 0) return rc;
  std::lock_guard<std::mutex> lock(g_dev_mu);
  auto it = g_devices->find(local);
  if (it == g_devices->end()) {
    remora::FabricOptions fo;
    fo.address = local;
    fo.check = "coherent";  // remora-check: librpma has no sync call, so check 1 stays off
    if (const char* prov = std::getenv("REMORA_PROVIDER")) fo.provider = prov;
    auto fab = remora::Fabric::open(fo);
    if (!fab) {
      RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "opening a fabric on %s failed: %s", local.c_str(), fab.error().message().c_str());
      return rpma_error(fab.error()) == RPMA_E_NOMEM ? RPMA_E_NOMEM : RPMA_E_PROVIDER;
    }
    Device d;
    d.ctx.reset(new (std::nothrow) ibv_context{});
    if (!d.ctx) return RPMA_E_NOMEM;
    d.ctx->cmd_fd = -1;
    d.ctx->async_fd = -1;
    d.ctx->num_comp_vectors = 1;
    d.fabric = std::move(*fab);
    it = g_devices->emplace(local, std::move(d)).first;
  }
  *ibv_ctx_ptr = it->second.ctx.get();
  return 0;
}

int rpma_utils_ibv_context_is_odp_capable(struct ibv_context* ibv_ctx, int* is_odp_capable) {
  if (ibv_ctx == nullptr || is_odp_capable == nullptr) return RPMA_E_INVAL;
  remora::Fabric* f = fabric_of(ibv_ctx);
  if (f == nullptr) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "the device context was not obtained from rpma_utils_get_ibv_context()");
    return RPMA_E_PROVIDER;
  }
  *is_odp_capable = f->info().odp ? 1 : 0;
  return 0;
}

// ---- peer configuration ----------------------------------------------------------

int rpma_peer_cfg_new(struct rpma_peer_cfg** pcfg_ptr) {
  if (pcfg_ptr == nullptr) return RPMA_E_INVAL;
  auto* c = new (std::nothrow) rpma_peer_cfg;
  if (!c) return RPMA_E_NOMEM;
  *pcfg_ptr = c;
  return 0;
}

int rpma_peer_cfg_delete(struct rpma_peer_cfg** pcfg_ptr) {
  if (pcfg_ptr == nullptr) return RPMA_E_INVAL;
  delete *pcfg_ptr;
  *pcfg_ptr = nullptr;
  return 0;
}

int rpma_peer_cfg_set_direct_write_to_pmem(struct rpma_peer_cfg* pcfg, bool supported) {
  if (pcfg == nullptr) return RPMA_E_INVAL;
  pcfg->direct_write_to_pmem = supported;
  return 0;
}

int rpma_peer_cfg_get_direct_write_to_pmem(const struct rpma_peer_cfg* pcfg, bool* supported) {
  if (pcfg == nullptr || supported == nullptr) return RPMA_E_INVAL;
  *supported = pcfg->direct_write_to_pmem;
  return 0;
}

int rpma_peer_cfg_get_descriptor(const struct rpma_peer_cfg* pcfg, void* desc) {
  if (pcfg == nullptr || desc == nullptr) return RPMA_E_INVAL;
  *static_cast<std::uint8_t*>(desc) = pcfg->direct_write_to_pmem ? 1 : 0;
  return 0;
}

int rpma_peer_cfg_get_descriptor_size(const struct rpma_peer_cfg* pcfg, size_t* desc_size) {
  if (pcfg == nullptr || desc_size == nullptr) return RPMA_E_INVAL;
  *desc_size = 1;
  return 0;
}

// As librpma: at least one byte (more are ignored); any non-zero first byte
// means direct write to PMem is supported.
int rpma_peer_cfg_from_descriptor(const void* desc, size_t desc_size, struct rpma_peer_cfg** pcfg_ptr) {
  if (desc == nullptr || pcfg_ptr == nullptr || desc_size < 1) return RPMA_E_INVAL;
  std::uint8_t b = *static_cast<const std::uint8_t*>(desc);
  auto* c = new (std::nothrow) rpma_peer_cfg;
  if (!c) return RPMA_E_NOMEM;
  c->direct_write_to_pmem = b != 0;
  *pcfg_ptr = c;
  return 0;
}

// ---- connection configuration -----------------------------------------------------

int rpma_conn_cfg_new(struct rpma_conn_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  auto* c = new (std::nothrow) rpma_conn_cfg;
  if (!c) return RPMA_E_NOMEM;
  *cfg_ptr = c;
  return 0;
}

int rpma_conn_cfg_delete(struct rpma_conn_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  delete *cfg_ptr;
  *cfg_ptr = nullptr;
  return 0;
}

int rpma_conn_cfg_set_timeout(struct rpma_conn_cfg* cfg, int timeout_ms) {
  if (cfg == nullptr || timeout_ms < 0) return RPMA_E_INVAL;
  cfg->timeout_ms = timeout_ms;
  return 0;
}

int rpma_conn_cfg_get_timeout(const struct rpma_conn_cfg* cfg, int* timeout_ms) {
  if (cfg == nullptr || timeout_ms == nullptr) return RPMA_E_INVAL;
  *timeout_ms = cfg->timeout_ms;
  return 0;
}

#define RPMA_CFG_U32(name, field)                                              \
  int rpma_conn_cfg_set_##name(struct rpma_conn_cfg* cfg, uint32_t v) {        \
    if (cfg == nullptr) return RPMA_E_INVAL;                                   \
    cfg->field = v;                                                            \
    return 0;                                                                  \
  }                                                                            \
  int rpma_conn_cfg_get_##name(const struct rpma_conn_cfg* cfg, uint32_t* v) { \
    if (cfg == nullptr || v == nullptr) return RPMA_E_INVAL;                   \
    *v = cfg->field;                                                           \
    return 0;                                                                  \
  }
RPMA_CFG_U32(cq_size, cq_size)
RPMA_CFG_U32(rcq_size, rcq_size)
RPMA_CFG_U32(sq_size, sq_size)
RPMA_CFG_U32(rq_size, rq_size)
#undef RPMA_CFG_U32

int rpma_conn_cfg_set_compl_channel(struct rpma_conn_cfg* cfg, bool shared) {
  if (cfg == nullptr) return RPMA_E_INVAL;
  cfg->shared = shared;
  return 0;
}

int rpma_conn_cfg_get_compl_channel(const struct rpma_conn_cfg* cfg, bool* shared) {
  if (cfg == nullptr || shared == nullptr) return RPMA_E_INVAL;
  *shared = cfg->shared;
  return 0;
}

int rpma_conn_cfg_set_srq(struct rpma_conn_cfg* cfg, struct rpma_srq* srq) {
  if (cfg == nullptr) return RPMA_E_INVAL;
  cfg->srq = srq;
  return 0;
}

int rpma_conn_cfg_get_srq(const struct rpma_conn_cfg* cfg, struct rpma_srq** srq_ptr) {
  if (cfg == nullptr || srq_ptr == nullptr) return RPMA_E_INVAL;
  *srq_ptr = cfg->srq;
  return 0;
}

// ---- shared receive queue configuration --------------------------------------------

int rpma_srq_cfg_new(struct rpma_srq_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  auto* c = new (std::nothrow) rpma_srq_cfg;
  if (!c) return RPMA_E_NOMEM;
  *cfg_ptr = c;
  return 0;
}

int rpma_srq_cfg_delete(struct rpma_srq_cfg** cfg_ptr) {
  if (cfg_ptr == nullptr) return RPMA_E_INVAL;
  delete *cfg_ptr;
  *cfg_ptr = nullptr;
  return 0;
}

int rpma_srq_cfg_set_rq_size(struct rpma_srq_cfg* cfg, uint32_t rq_size) {
  if (cfg == nullptr) return RPMA_E_INVAL;
  cfg->rq_size = rq_size;
  return 0;
}

int rpma_srq_cfg_get_rq_size(const struct rpma_srq_cfg* cfg, uint32_t* rq_size) {
  if (cfg == nullptr || rq_size == nullptr) return RPMA_E_INVAL;
  *rq_size = cfg->rq_size;
  return 0;
}

int rpma_srq_cfg_set_rcq_size(struct rpma_srq_cfg* cfg, uint32_t rcq_size) {
  if (cfg == nullptr) return RPMA_E_INVAL;
  cfg->rcq_size = rcq_size;
  return 0;
}

int rpma_srq_cfg_get_rcq_size(const struct rpma_srq_cfg* cfg, uint32_t* rcq_size) {
  if (cfg == nullptr || rcq_size == nullptr) return RPMA_E_INVAL;
  *rcq_size = cfg->rcq_size;
  return 0;
}

// ---- peer ----------------------------------------------------------------------------

int rpma_peer_new(struct ibv_context* ibv_ctx, struct rpma_peer** peer_ptr) {
  if (ibv_ctx == nullptr || peer_ptr == nullptr) return RPMA_E_INVAL;
  remora::Fabric* f = fabric_of(ibv_ctx);
  if (f == nullptr) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "unknown device context");
    return RPMA_E_PROVIDER;
  }
  // 32-bit keys: the region descriptor carries the key in 32 bits, as verbs' rkey.
  auto zone = f->create_zone({.key_bits = 32});
  if (!zone) return rpma_error(zone.error());
  auto* p = new (std::nothrow) rpma_peer;
  if (!p) return RPMA_E_NOMEM;
  p->zone = std::move(*zone);
  p->ctx = ibv_ctx;
  *peer_ptr = p;
  return 0;
}

int rpma_peer_delete(struct rpma_peer** peer_ptr) {
  if (peer_ptr == nullptr) return RPMA_E_INVAL;
  if (*peer_ptr == nullptr) return 0;
  (*peer_ptr)->zone.close();
  delete *peer_ptr;
  *peer_ptr = nullptr;
  return 0;
}

// ---- memory regions -------------------------------------------------------------------

int rpma_mr_reg(struct rpma_peer* peer, void* ptr, size_t size, int usage, struct rpma_mr_local** mr_ptr) {
  if (peer == nullptr || ptr == nullptr || size == 0 || mr_ptr == nullptr) return RPMA_E_INVAL;
  if (usage == 0 || (usage & ~0xff) != 0) return RPMA_E_INVAL;
  // Exactly the privileges the usages need.
  Access a = remote_access_for(usage);
  if (usage & (RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_RECV)) a = a | Access::local_write;
  if (usage & (RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_SEND)) a = a | Access::local_read;
  if (a == Access::none) return RPMA_E_INVAL;
  const bool persistent = (usage & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) != 0;
  auto* m = new (std::nothrow) rpma_mr_local;
  if (!m) return RPMA_E_NOMEM;
  auto mr = peer->zone.register_memory(ptr, size, a, persistent);
  if (!mr) {
    delete m;
    // The arguments were checked above: what remains is the registration
    // itself failing (a range that wraps or is not mapped), as ibv_reg_mr
    // failing in librpma.
    if (mr.error() == Errc::no_memory) return RPMA_E_NOMEM;
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "registering [%p, +%zu) failed: %s", ptr, size, mr.error().message().c_str());
    return RPMA_E_PROVIDER;
  }
  m->mr = std::move(*mr);
  m->usage = usage;
  *mr_ptr = m;
  return 0;
}

int rpma_mr_dereg(struct rpma_mr_local** mr_ptr) {
  if (mr_ptr == nullptr) return RPMA_E_INVAL;
  if (*mr_ptr == nullptr) return 0;
  (*mr_ptr)->mr.close();
  delete *mr_ptr;
  *mr_ptr = nullptr;
  return 0;
}

int rpma_mr_get_descriptor_size(const struct rpma_mr_local* mr, size_t* desc_size) {
  if (mr == nullptr || desc_size == nullptr) return RPMA_E_INVAL;
  *desc_size = kMrDescriptorSize;
  return 0;
}

int rpma_mr_get_descriptor(const struct rpma_mr_local* mr, void* desc) {
  if (mr == nullptr || desc == nullptr) return RPMA_E_INVAL;
  const std::uint64_t key = mr->mr.key();
  if (key > UINT32_MAX) {  // only a provider choosing its own wide keys can do this
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "the region's remote key does not fit the 32-bit descriptor field");
    return RPMA_E_NOSUPP;
  }
  auto* out = static_cast<std::uint8_t*>(desc);
  put_le(out, reinterpret_cast<std::uint64_t>(mr->mr.address()), 8);
  put_le(out + 8, mr->mr.length(), 8);
  put_le(out + 16, key, 4);
  out[20] = static_cast<std::uint8_t>(mr->usage);
  return 0;
}

// Accepts what librpma accepts: at least 21 bytes (any more are ignored) and
// a non-zero usage byte; the rest is the target's to check when an operation
// arrives.
int rpma_mr_remote_from_descriptor(const void* desc, size_t desc_size, struct rpma_mr_remote** mr_ptr) {
  if (desc == nullptr || mr_ptr == nullptr) return RPMA_E_INVAL;
  if (desc_size < kMrDescriptorSize) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "descriptor of %zu bytes, a region's descriptor has %zu", desc_size,
             kMrDescriptorSize);
    return RPMA_E_INVAL;
  }
  const auto* b = static_cast<const std::uint8_t*>(desc);
  const int usage = b[20];
  if (usage == 0) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "the descriptor's usage is not set");
    return RPMA_E_INVAL;
  }
  auto* m = new (std::nothrow) rpma_mr_remote;
  if (!m) return RPMA_E_NOMEM;
  m->rr = remora::RemoteRegion(get_le(b, 8), get_le(b + 8, 8), get_le(b + 16, 4), remote_access_for(usage),
                               (usage & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) != 0);
  m->usage = usage;
  *mr_ptr = m;
  return 0;
}

int rpma_mr_get_ptr(const struct rpma_mr_local* mr, void** ptr) {
  if (mr == nullptr || ptr == nullptr) return RPMA_E_INVAL;
  *ptr = mr->mr.address();
  return 0;
}

int rpma_mr_get_size(const struct rpma_mr_local* mr, size_t* size) {
  if (mr == nullptr || size == nullptr) return RPMA_E_INVAL;
  *size = mr->mr.length();
  return 0;
}

int rpma_mr_remote_get_size(const struct rpma_mr_remote* mr, size_t* size) {
  if (mr == nullptr || size == nullptr) return RPMA_E_INVAL;
  *size = mr->rr.length();
  return 0;
}

int rpma_mr_remote_get_flush_type(const struct rpma_mr_remote* mr, int* flush_type) {
  if (mr == nullptr || flush_type == nullptr) return RPMA_E_INVAL;
  *flush_type = mr->usage & (RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT);
  return 0;
}

int rpma_mr_remote_delete(struct rpma_mr_remote** mr_ptr) {
  if (mr_ptr == nullptr) return RPMA_E_INVAL;
  delete *mr_ptr;
  *mr_ptr = nullptr;
  return 0;
}

int rpma_mr_advise(struct rpma_mr_local* mr, size_t offset, size_t len, int advice, uint32_t flags) {
  if (mr == nullptr) return RPMA_E_INVAL;
  const std::size_t size = mr->mr.length();
  if (offset > size || len > size - offset) return RPMA_E_INVAL;
  if ((flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) != 0) return RPMA_E_INVAL;
  int madv;
  switch (advice) {
    case IBV_ADVISE_MR_ADVICE_PREFETCH: madv = MADV_POPULATE_READ; break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE:
      // Prefetching for write needs a region that may be written.
      if (!remora::has(mr->mr.access(), Access::local_write) && !remora::has(mr->mr.access(), Access::remote_write))
        return RPMA_E_INVAL;
      madv = MADV_POPULATE_WRITE;
      break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: madv = MADV_WILLNEED; break;
    default: return RPMA_E_INVAL;
  }
  if (len == 0) return 0;
  static const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  auto start = reinterpret_cast<std::uintptr_t>(mr->mr.address()) + offset;
  auto end = start + len;
  std::uintptr_t a = start & ~(page - 1);
  if (madvise(reinterpret_cast<void*>(a), end - a, madv) != 0) {
    if (errno == EINVAL) return RPMA_E_NOSUPP;  // a kernel without MADV_POPULATE_*
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "madvise failed: %s", std::strerror(errno));
    return RPMA_E_PROVIDER;
  }
  return 0;
}

}  // extern "C"
