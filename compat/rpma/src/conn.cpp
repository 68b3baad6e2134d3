// compat/rpma/src/conn.cpp - endpoints, connection requests, connections,
// completion queues, shared receive queues and the data path of librpma.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "internal.hpp"

using remora::Access;
using remora::Errc;
using remora::PostFlags;
using remora::Segment;
using namespace std::chrono_literals;
using namespace rpma_compat;

rpma_cq::~rpma_cq() {
  if (watch_fd >= 0) ::close(watch_fd);
}

int rpma_cq::watch() const noexcept {
  std::lock_guard<std::mutex> lock(watch_mu);
  if (watched) return 0;
  // From here on the queue's eventfd follows its completions (raised now
  // if some are waiting), and the agent drives its connections while the
  // program sleeps on the descriptor.
  const int fd = cq.fd();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (fd < 0 || epoll_ctl(watch_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return RPMA_E_PROVIDER;
  watched = true;
  return 0;
}

namespace {

constexpr auto kForever = std::chrono::milliseconds(-1);

int parse_port(const char* port, std::uint16_t& out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(port, &end, 10);
  if (errno != 0 || end == port || *end != '\0' || v < 0 || v > 65535) {
    // What rdma_getaddrinfo() would refuse.
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "invalid port '%s'", port);
    return RPMA_E_PROVIDER;
  }
  out = static_cast<std::uint16_t>(v);
  return 0;
}

int resolve_host(const char* addr, std::string& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr, nullptr, &hints, &res) != 0 || res == nullptr) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "cannot resolve address '%s'", addr);
    return RPMA_E_PROVIDER;
  }
  char buf[INET6_ADDRSTRLEN] = {};
  const void* a = res->ai_family == AF_INET
                      ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr)
                      : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr);
  const bool ok = inet_ntop(res->ai_family, a, buf, sizeof buf) != nullptr;
  freeaddrinfo(res);
  if (!ok) return RPMA_E_PROVIDER;
  out = buf;
  return 0;
}

// A completion queue, with the descriptor rpma_cq_get_fd() hands out (its
// queue's own joins it when the program first asks for it or waits).
rpma_cq* new_cq(rpma_peer* peer, std::uint32_t size, int& rc) {
  auto cq = peer->zone.create_cq(size == 0 ? 1 : size);
  if (!cq) {
    rc = rpma_error(cq.error()) == RPMA_E_NOMEM ? RPMA_E_NOMEM : RPMA_E_PROVIDER;
    return nullptr;
  }
  auto* c = new (std::nothrow) rpma_cq;
  if (!c) {
    rc = RPMA_E_NOMEM;
    return nullptr;
  }
  c->cq = std::move(*cq);
  c->watch_fd = make_watch_fd({});  // the queue's descriptor joins on first need (rpma_cq::watch)
  if (c->watch_fd < 0) {
    delete c;
    rc = RPMA_E_PROVIDER;
    return nullptr;
  }
  return c;
}

// Everything a connection (request) needs before it connects: queues and an
// unconnected endpoint, set up as `cfg` says.
int prepare(rpma_peer* peer, const rpma_conn_cfg* cfg_in, rpma_conn_req* req) {
  static const rpma_conn_cfg defaults;
  const rpma_conn_cfg& cfg = cfg_in ? *cfg_in : defaults;
  int rc = 0;
  req->cq = new_cq(peer, cfg.cq_size, rc);
  if (!req->cq) return rc;
  if (cfg.srq != nullptr && cfg.srq->rcq != nullptr) {
    req->rcq = cfg.srq->rcq;  // the shared queue's receive CQ
  } else if (cfg.rcq_size > 0) {
    req->rcq = new_cq(peer, cfg.rcq_size, rc);
    if (!req->rcq) return rc;
    req->owns_rcq = true;
  }
  req->shared = cfg.shared;
  req->cq->shared = cfg.shared;
  if (req->owns_rcq) req->rcq->shared = cfg.shared;
  remora::EndpointOptions eo;
  eo.send_cq = &req->cq->cq;
  eo.recv_cq = req->rcq ? &req->rcq->cq : &req->cq->cq;
  eo.max_outstanding = cfg.sq_size == 0 ? 1 : cfg.sq_size;
  eo.max_recv = cfg.rq_size == 0 ? 1 : cfg.rq_size;
  if (cfg.srq != nullptr) {
    eo.srq = &cfg.srq->srq;
    req->srq = cfg.srq;  // rpma_srq_delete refuses while this request or its connection exists
    ++cfg.srq->users;
  }
  auto ep = peer->zone.create_endpoint(eo);
  if (!ep) return rpma_error(ep.error()) == RPMA_E_NOMEM ? RPMA_E_NOMEM : RPMA_E_PROVIDER;
  req->ep = std::move(*ep);
  return 0;
}

void destroy_req(rpma_conn_req* req) {
  if (!req) return;
  req->ep.close();
  if (req->passive && req->request.valid()) (void)req->request.reject();
  delete req->cq;
  if (req->owns_rcq) delete req->rcq;
  if (req->srq) --req->srq->users;
  delete req;
}

PostFlags post_flags(int flags) {
  return (flags & RPMA_F_COMPLETION_ALWAYS) == RPMA_F_COMPLETION_ALWAYS ? PostFlags::none : PostFlags::unsignalled;
}

std::uint64_t cookie_of(const void* op_context) { return reinterpret_cast<std::uint64_t>(op_context); }

// A zero-length read or write names no region; Remora needs one to post an
// operation, so it borrows the last region this connection addressed (0
// bytes of it). Before any region was addressed there is none to borrow.
bool borrowed_region(rpma_conn* conn, remora::RemoteRegion& out) {
  std::lock_guard<std::mutex> lock(conn->last_mu);
  if (conn->last_remote.key() == 0) return false;
  out = conn->last_remote;
  return true;
}

bool in_range(std::size_t size, std::size_t offset, std::size_t len) { return offset <= size && len <= size - offset; }

// A post result, converted. Local checks Remora makes before posting that
// real hardware would only report in the completion are "ibv_post_send
// failed" here: RPMA_E_PROVIDER, except plain argument errors.
int post_result(const remora::Result<void>& r) {
  if (r) return 0;
  RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "posting failed: %s", r.error().message().c_str());
  return rpma_error(r.error());
}

}  // namespace

extern "C" {

// ---- listening endpoint ------------------------------------------------------------

int rpma_ep_listen(struct rpma_peer* peer, const char* addr, const char* port, struct rpma_ep** ep_ptr) {
  if (peer == nullptr || addr == nullptr || port == nullptr || ep_ptr == nullptr) return RPMA_E_INVAL;
  std::uint16_t p = 0;
  if (int rc = parse_port(port, p); rc) return rc;
  std::string host;
  if (int rc = resolve_host(addr, host); rc) return rc;
  auto* e = new (std::nothrow) rpma_ep;
  if (!e) return RPMA_E_NOMEM;
  auto l = peer->zone.listen(host, p);
  if (!l) {
    delete e;
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "listening on %s:%s failed: %s", addr, port, l.error().message().c_str());
    return rpma_error(l.error()) == RPMA_E_NOMEM ? RPMA_E_NOMEM : RPMA_E_PROVIDER;
  }
  e->listener = std::move(*l);
  e->peer = peer;
  e->watch_fd = make_watch_fd({e->listener.fd()});
  if (e->watch_fd < 0) {
    delete e;
    return RPMA_E_PROVIDER;
  }
  *ep_ptr = e;
  return 0;
}

int rpma_ep_shutdown(struct rpma_ep** ep_ptr) {
  if (ep_ptr == nullptr) return RPMA_E_INVAL;
  if (*ep_ptr == nullptr) return 0;
  (*ep_ptr)->listener.close();
  ::close((*ep_ptr)->watch_fd);
  delete *ep_ptr;
  *ep_ptr = nullptr;
  return 0;
}

int rpma_ep_get_fd(const struct rpma_ep* ep, int* fd) {
  if (ep == nullptr || fd == nullptr) return RPMA_E_INVAL;
  *fd = ep->watch_fd;
  return 0;
}

int rpma_ep_next_conn_req(struct rpma_ep* ep, const struct rpma_conn_cfg* cfg, struct rpma_conn_req** req_ptr) {
  if (ep == nullptr || req_ptr == nullptr) return RPMA_E_INVAL;
  auto r = ep->listener.next_request(is_nonblocking(ep->watch_fd) ? 0ms : kForever);
  if (!r) {
    if (r.error() == Errc::timeout) return RPMA_E_NO_EVENT;
    return RPMA_E_PROVIDER;
  }
  auto* req = new (std::nothrow) rpma_conn_req;
  if (!req) return RPMA_E_NOMEM;  // the request is rejected as it goes
  req->passive = true;
  req->private_data = r->private_data();
  req->request = std::move(*r);
  if (int rc = prepare(ep->peer, cfg, req); rc) {
    destroy_req(req);
    return rc;
  }
  *req_ptr = req;
  return 0;
}

// ---- connection requests -------------------------------------------------------------

int rpma_conn_req_new(struct rpma_peer* peer, const char* addr, const char* port, const struct rpma_conn_cfg* cfg,
                      struct rpma_conn_req** req_ptr) {
  if (peer == nullptr || addr == nullptr || port == nullptr || req_ptr == nullptr) return RPMA_E_INVAL;
  std::uint16_t p = 0;
  if (int rc = parse_port(port, p); rc) return rc;
  std::string host;
  if (int rc = resolve_host(addr, host); rc) return rc;
  auto* req = new (std::nothrow) rpma_conn_req;
  if (!req) return RPMA_E_NOMEM;
  req->host = host;
  req->port = p;
  if (int rc = prepare(peer, cfg, req); rc) {
    destroy_req(req);
    return rc;
  }
  *req_ptr = req;
  return 0;
}

int rpma_conn_req_delete(struct rpma_conn_req** req_ptr) {
  if (req_ptr == nullptr) return RPMA_E_INVAL;
  if (*req_ptr == nullptr) return 0;
  destroy_req(*req_ptr);
  *req_ptr = nullptr;
  return 0;
}

int rpma_conn_req_get_private_data(const struct rpma_conn_req* req, struct rpma_conn_private_data* pdata) {
  if (req == nullptr || pdata == nullptr) return RPMA_E_INVAL;
  pdata->ptr = req->private_data.empty() ? nullptr : const_cast<std::uint8_t*>(req->private_data.data());
  pdata->len = static_cast<std::uint8_t>(req->private_data.size());
  return 0;
}

int rpma_conn_req_recv(struct rpma_conn_req* req, struct rpma_mr_local* dst, size_t offset, size_t len,
                       const void* op_context) {
  if (req == nullptr || dst == nullptr) return RPMA_E_INVAL;
  if (!in_range(dst->mr.length(), offset, len)) return RPMA_E_INVAL;
  Segment s(dst->mr, offset, len);
  return post_result(req->ep.recv({&s, 1}, cookie_of(op_context)));
}

int rpma_conn_req_connect(struct rpma_conn_req** req_ptr, const struct rpma_conn_private_data* pdata,
                          struct rpma_conn** conn_ptr) {
  if (req_ptr == nullptr || *req_ptr == nullptr) return RPMA_E_INVAL;
  rpma_conn_req* req = *req_ptr;
  // From here on the request is consumed, whatever the outcome.
  *req_ptr = nullptr;
  if (conn_ptr == nullptr || (pdata != nullptr && (pdata->ptr == nullptr || pdata->len == 0))) {
    destroy_req(req);
    return RPMA_E_INVAL;
  }
  std::span<const std::uint8_t> pd;
  if (pdata) pd = {static_cast<const std::uint8_t*>(pdata->ptr), pdata->len};
  auto* conn = new (std::nothrow) rpma_conn;
  if (!conn) {
    destroy_req(req);
    return RPMA_E_NOMEM;
  }
  conn->event_watch_fd = make_watch_fd({req->ep.event_fd()});
  if (req->shared) {
    if (req->rcq)
      conn->compl_fd = make_watch_fd({req->cq->cq.fd(), req->rcq->cq.fd()});
    else
      conn->compl_fd = make_watch_fd({req->cq->cq.fd()});
  }
  if (conn->event_watch_fd < 0 || (req->shared && conn->compl_fd < 0)) {
    if (conn->event_watch_fd >= 0) ::close(conn->event_watch_fd);
    if (conn->compl_fd >= 0) ::close(conn->compl_fd);
    delete conn;
    destroy_req(req);
    return RPMA_E_PROVIDER;
  }
  remora::Result<void> r = req->passive ? req->request.accept(req->ep, pd) : req->ep.connect(req->host, req->port, pd);
  if (!r) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "%s failed: %s", req->passive ? "accepting" : "connecting",
             r.error().message().c_str());
    ::close(conn->event_watch_fd);
    if (conn->compl_fd >= 0) ::close(conn->compl_fd);
    delete conn;
    destroy_req(req);
    return rpma_error(r.error()) == RPMA_E_NOMEM ? RPMA_E_NOMEM : RPMA_E_PROVIDER;
  }
  conn->ep = std::move(req->ep);
  conn->cq = req->cq;
  conn->rcq = req->rcq;
  conn->owns_rcq = req->owns_rcq;
  conn->srq = std::exchange(req->srq, nullptr);
  conn->shared = req->shared;
  conn->private_data = std::move(req->private_data);
  conn->qp_num = static_cast<std::uint32_t>(conn->ep.id());
  req->cq = nullptr;
  req->rcq = nullptr;
  req->owns_rcq = false;
  destroy_req(req);
  *conn_ptr = conn;
  return 0;
}

// ---- connections -----------------------------------------------------------------------

int rpma_conn_get_event_fd(const struct rpma_conn* conn, int* fd) {
  if (conn == nullptr || fd == nullptr) return RPMA_E_INVAL;
  *fd = conn->event_watch_fd;
  return 0;
}

int rpma_conn_next_event(struct rpma_conn* conn, enum rpma_conn_event* event) {
  if (conn == nullptr || event == nullptr) return RPMA_E_INVAL;
  auto ev = conn->ep.next_event(is_nonblocking(conn->event_watch_fd) ? 0ms : kForever);
  if (!ev) return ev.error() == Errc::timeout ? RPMA_E_NO_EVENT : RPMA_E_PROVIDER;
  switch (ev->type) {
    case remora::ConnectionEventType::established:
      if (!ev->private_data.empty()) conn->private_data = std::move(ev->private_data);
      *event = RPMA_CONN_ESTABLISHED;
      break;
    case remora::ConnectionEventType::disconnected: *event = RPMA_CONN_CLOSED; break;
    case remora::ConnectionEventType::lost: *event = RPMA_CONN_LOST; break;
    case remora::ConnectionEventType::rejected: *event = RPMA_CONN_REJECTED; break;
    case remora::ConnectionEventType::unreachable: *event = RPMA_CONN_UNREACHABLE; break;
    default: return RPMA_E_UNKNOWN;
  }
  return 0;
}

int rpma_conn_get_private_data(const struct rpma_conn* conn, struct rpma_conn_private_data* pdata) {
  if (conn == nullptr || pdata == nullptr) return RPMA_E_INVAL;
  pdata->ptr = conn->private_data.empty() ? nullptr : const_cast<std::uint8_t*>(conn->private_data.data());
  pdata->len = static_cast<std::uint8_t>(conn->private_data.size());
  return 0;
}

int rpma_conn_apply_remote_peer_cfg(struct rpma_conn* conn, const struct rpma_peer_cfg* pcfg) {
  if (conn == nullptr || pcfg == nullptr) return RPMA_E_INVAL;
  conn->direct_write_to_pmem = pcfg->direct_write_to_pmem;
  return 0;
}

int rpma_conn_get_qp_num(const struct rpma_conn* conn, uint32_t* qp_num) {
  if (conn == nullptr || qp_num == nullptr) return RPMA_E_INVAL;
  *qp_num = conn->qp_num;
  return 0;
}

int rpma_conn_get_cq(const struct rpma_conn* conn, struct rpma_cq** cq_ptr) {
  if (conn == nullptr || cq_ptr == nullptr) return RPMA_E_INVAL;
  *cq_ptr = conn->cq;
  return 0;
}

int rpma_conn_get_rcq(const struct rpma_conn* conn, struct rpma_cq** rcq_ptr) {
  if (conn == nullptr || rcq_ptr == nullptr) return RPMA_E_INVAL;
  *rcq_ptr = conn->rcq;
  return 0;
}

int rpma_conn_get_compl_fd(const struct rpma_conn* conn, int* fd) {
  if (conn == nullptr || fd == nullptr) return RPMA_E_INVAL;
  if (!conn->shared) return RPMA_E_NOT_SHARED_CHNL;
  *fd = conn->compl_fd;
  return 0;
}

int rpma_conn_wait(struct rpma_conn* conn, int flags, struct rpma_cq** cq, bool* is_rcq) {
  (void)flags;  // completions are always waited for
  if (conn == nullptr || cq == nullptr) return RPMA_E_INVAL;
  if (!conn->shared) return RPMA_E_NOT_SHARED_CHNL;
  const bool nonblocking = is_nonblocking(conn->compl_fd);
  // Woken, this thread drives the queues (progress()): the zone's agent
  // leaves their endpoints to it while it waits.
  const auto asleep = conn->cq->cq.sleeper();
  const auto asleep_rcq = conn->rcq ? conn->rcq->cq.sleeper() : remora::CompletionQueue::Sleeper();
  for (;;) {
    if (conn->cq->cq.progress() > 0) {
      *cq = conn->cq;
      if (is_rcq) *is_rcq = false;
      return 0;
    }
    if (conn->rcq && conn->rcq->cq.progress() > 0) {
      // The drive that made the receive's completion may have made a send
      // completion too: the peer's acknowledgement of a send came with its
      // next message (the engine completes the send first, as hardware
      // does, where the send's completion event comes before the
      // message's). The main queue is named first then, as it would have
      // been had the two come in two drives.
      const bool send_first = conn->cq->cq.size() > 0;
      *cq = send_first ? conn->cq : conn->rcq;
      if (is_rcq) *is_rcq = !send_first;
      return 0;
    }
    if (nonblocking) return RPMA_E_NO_COMPLETION;
    // Nothing posted that could complete: the wait would never end. The
    // descriptor also turns readable for a connection's other traffic (its
    // set-up, the library's own messages), so a program that waits each
    // time it is readable, before it has posted anything (librpma's
    // 06scch example waits before the connection's ESTABLISHED event has
    // been handled), is told there is no completion instead.
    if (!conn->cq->cq.expecting() && !(conn->rcq && conn->rcq->cq.expecting())) return RPMA_E_NO_COMPLETION;
    wait_readable(conn->compl_fd, 50);
  }
}

int rpma_conn_disconnect(struct rpma_conn* conn) {
  if (conn == nullptr) return RPMA_E_INVAL;
  auto r = conn->ep.disconnect();
  if (!r) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "disconnect failed: %s", r.error().message().c_str());
    return RPMA_E_PROVIDER;
  }
  return 0;
}

int rpma_conn_delete(struct rpma_conn** conn_ptr) {
  if (conn_ptr == nullptr) return RPMA_E_INVAL;
  rpma_conn* conn = *conn_ptr;
  if (conn == nullptr) return 0;
  conn->ep.close();
  delete conn->cq;
  if (conn->owns_rcq) delete conn->rcq;
  if (conn->srq) --conn->srq->users;
  if (conn->event_watch_fd >= 0) ::close(conn->event_watch_fd);
  if (conn->compl_fd >= 0) ::close(conn->compl_fd);
  delete conn;
  *conn_ptr = nullptr;
  return 0;
}

// ---- shared receive queue ------------------------------------------------------------------

int rpma_srq_new(struct rpma_peer* peer, struct rpma_srq_cfg* cfg, struct rpma_srq** srq_ptr) {
  if (peer == nullptr || srq_ptr == nullptr) return RPMA_E_INVAL;
  static const rpma_srq_cfg defaults;
  const rpma_srq_cfg& c = cfg ? *cfg : defaults;
  auto* s = new (std::nothrow) rpma_srq;
  if (!s) return RPMA_E_NOMEM;
  auto q = peer->zone.create_srq(c.rq_size == 0 ? 1 : c.rq_size);
  if (!q) {
    delete s;
    return rpma_error(q.error()) == RPMA_E_NOMEM ? RPMA_E_NOMEM : RPMA_E_PROVIDER;
  }
  s->srq = std::move(*q);
  if (c.rcq_size > 0) {
    int rc = 0;
    s->rcq = new_cq(peer, c.rcq_size, rc);
    if (!s->rcq) {
      delete s;
      return rc;
    }
  }
  *srq_ptr = s;
  return 0;
}

int rpma_srq_delete(struct rpma_srq** srq_ptr) {
  if (srq_ptr == nullptr) return RPMA_E_INVAL;
  if (*srq_ptr == nullptr) return 0;
  // A connection (request) made with it still receives through it and
  // reports into its receive CQ: as ibv_destroy_srq fails with EBUSY while
  // queue pairs use the SRQ, nothing is freed and the caller may delete the
  // connections first and try again.
  if ((*srq_ptr)->users > 0) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR,
             "the shared receive queue is still used by %d connection(s) or request(s): delete them first",
             (*srq_ptr)->users.load());
    return RPMA_E_PROVIDER;
  }
  delete (*srq_ptr)->rcq;
  delete *srq_ptr;
  *srq_ptr = nullptr;
  return 0;
}

int rpma_srq_get_rcq(const struct rpma_srq* srq, struct rpma_cq** rcq_ptr) {
  if (srq == nullptr || rcq_ptr == nullptr) return RPMA_E_INVAL;
  *rcq_ptr = srq->rcq;
  return 0;
}

int rpma_srq_recv(struct rpma_srq* srq, struct rpma_mr_local* dst, size_t offset, size_t len, const void* op_context) {
  if (srq == nullptr) return RPMA_E_INVAL;
  if (dst == nullptr && (offset != 0 || len != 0)) return RPMA_E_INVAL;
  if (dst == nullptr) return post_result(srq->srq.recv({}, cookie_of(op_context)));
  if (!in_range(dst->mr.length(), offset, len)) return RPMA_E_INVAL;
  Segment s(dst->mr, offset, len);
  return post_result(srq->srq.recv({&s, 1}, cookie_of(op_context)));
}

// ---- data path ------------------------------------------------------------------------------

int rpma_read(struct rpma_conn* conn, struct rpma_mr_local* dst, size_t dst_offset, const struct rpma_mr_remote* src,
              size_t src_offset, size_t len, int flags, const void* op_context) {
  if (conn == nullptr || flags == 0) return RPMA_E_INVAL;
  if (dst == nullptr && (src != nullptr || src_offset != 0 || dst_offset != 0 || len != 0)) return RPMA_E_INVAL;
  if (src == nullptr && (dst != nullptr || src_offset != 0 || dst_offset != 0 || len != 0)) return RPMA_E_INVAL;
  if (dst == nullptr) {
    remora::RemoteRegion rr;
    if (!borrowed_region(conn, rr)) return RPMA_E_NOSUPP;
    return post_result(conn->ep.read({}, rr, 0, cookie_of(op_context), post_flags(flags)));
  }
  if (!in_range(dst->mr.length(), dst_offset, len)) return RPMA_E_INVAL;
  Segment s(dst->mr, dst_offset, len);
  conn->remember(src->rr);
  return post_result(conn->ep.read({&s, 1}, src->rr, src_offset, cookie_of(op_context), post_flags(flags)));
}

static int do_write(rpma_conn* conn, rpma_mr_remote* dst, size_t dst_offset, const rpma_mr_local* src,
                    size_t src_offset, size_t len, int flags, bool with_imm, uint32_t imm, const void* op_context) {
  if (conn == nullptr || flags == 0) return RPMA_E_INVAL;
  if (dst == nullptr && (src != nullptr || src_offset != 0 || dst_offset != 0 || len != 0)) return RPMA_E_INVAL;
  if (src == nullptr && (dst != nullptr || src_offset != 0 || dst_offset != 0 || len != 0)) return RPMA_E_INVAL;
  std::span<const Segment> segs;
  Segment s;
  remora::RemoteRegion borrowed;
  const remora::RemoteRegion* rr = &borrowed;
  if (src != nullptr) {
    if (!in_range(src->mr.length(), src_offset, len)) return RPMA_E_INVAL;
    s = Segment(src->mr, src_offset, len);
    segs = {&s, 1};
    rr = &dst->rr;
    conn->remember(dst->rr);
  } else {
    if (!borrowed_region(conn, borrowed)) return RPMA_E_NOSUPP;
  }
  const auto cookie = cookie_of(op_context);
  return post_result(with_imm ? conn->ep.write_imm(segs, *rr, dst_offset, imm, cookie, post_flags(flags))
                              : conn->ep.write(segs, *rr, dst_offset, cookie, post_flags(flags)));
}

int rpma_write(struct rpma_conn* conn, struct rpma_mr_remote* dst, size_t dst_offset, const struct rpma_mr_local* src,
               size_t src_offset, size_t len, int flags, const void* op_context) {
  return do_write(conn, dst, dst_offset, src, src_offset, len, flags, false, 0, op_context);
}

int rpma_write_with_imm(struct rpma_conn* conn, struct rpma_mr_remote* dst, size_t dst_offset,
                        const struct rpma_mr_local* src, size_t src_offset, size_t len, int flags, uint32_t imm,
                        const void* op_context) {
  return do_write(conn, dst, dst_offset, src, src_offset, len, flags, true, imm, op_context);
}

int rpma_atomic_write(struct rpma_conn* conn, struct rpma_mr_remote* dst, size_t dst_offset, const char src[8],
                      int flags, const void* op_context) {
  if (conn == nullptr || dst == nullptr || src == nullptr || flags == 0) return RPMA_E_INVAL;
  if (dst_offset % RPMA_ATOMIC_WRITE_ALIGNMENT != 0) return RPMA_E_INVAL;
  std::uint64_t v;
  std::memcpy(&v, src, sizeof v);
  conn->remember(dst->rr);
  return post_result(conn->ep.atomic_write(dst->rr, dst_offset, v, cookie_of(op_context), post_flags(flags)));
}

int rpma_flush(struct rpma_conn* conn, struct rpma_mr_remote* dst, size_t dst_offset, size_t len,
               enum rpma_flush_type type, int flags, const void* op_context) {
  if (conn == nullptr || dst == nullptr || flags == 0) return RPMA_E_INVAL;
  if (type != RPMA_FLUSH_TYPE_PERSISTENT && type != RPMA_FLUSH_TYPE_VISIBILITY) return RPMA_E_INVAL;
  if (type == RPMA_FLUSH_TYPE_PERSISTENT &&
      (!conn->direct_write_to_pmem || (dst->usage & RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) == 0)) {
    RPMA_LOG(RPMA_LOG_LEVEL_ERROR, "persistent flush needs direct write to pmem and a persistent remote region");
    return RPMA_E_NOSUPP;
  }
  conn->remember(dst->rr);
  const auto ft = type == RPMA_FLUSH_TYPE_PERSISTENT ? remora::FlushType::persistent : remora::FlushType::visibility;
  return post_result(conn->ep.flush(dst->rr, dst_offset, len, ft, cookie_of(op_context), post_flags(flags)));
}

static int do_send(rpma_conn* conn, const rpma_mr_local* src, size_t offset, size_t len, int flags, bool with_imm,
                   uint32_t imm, const void* op_context) {
  if (conn == nullptr || flags == 0) return RPMA_E_INVAL;
  if (src == nullptr && (offset != 0 || len != 0)) return RPMA_E_INVAL;
  std::span<const Segment> segs;
  Segment s;
  if (src != nullptr) {
    if (!in_range(src->mr.length(), offset, len)) return RPMA_E_INVAL;
    s = Segment(src->mr, offset, len);
    segs = {&s, 1};
  }
  const auto cookie = cookie_of(op_context);
  return post_result(with_imm ? conn->ep.send_imm(segs, imm, cookie, post_flags(flags))
                              : conn->ep.send(segs, cookie, post_flags(flags)));
}

int rpma_send(struct rpma_conn* conn, const struct rpma_mr_local* src, size_t offset, size_t len, int flags,
              const void* op_context) {
  return do_send(conn, src, offset, len, flags, false, 0, op_context);
}

int rpma_send_with_imm(struct rpma_conn* conn, const struct rpma_mr_local* src, size_t offset, size_t len, int flags,
                       uint32_t imm, const void* op_context) {
  return do_send(conn, src, offset, len, flags, true, imm, op_context);
}

int rpma_recv(struct rpma_conn* conn, struct rpma_mr_local* dst, size_t offset, size_t len, const void* op_context) {
  if (conn == nullptr) return RPMA_E_INVAL;
  if (dst == nullptr && (offset != 0 || len != 0)) return RPMA_E_INVAL;
  if (dst == nullptr) return post_result(conn->ep.recv({}, cookie_of(op_context)));
  if (!in_range(dst->mr.length(), offset, len)) return RPMA_E_INVAL;
  Segment s(dst->mr, offset, len);
  return post_result(conn->ep.recv({&s, 1}, cookie_of(op_context)));
}

// ---- completion queues ------------------------------------------------------------------------

int rpma_cq_get_fd(const struct rpma_cq* cq, int* fd) {
  if (cq == nullptr || fd == nullptr) return RPMA_E_INVAL;
  // The program will sleep on it: the queue's own descriptor joins now.
  if (const int rc = cq->watch(); rc != 0) return rc;
  *fd = cq->watch_fd;
  return 0;
}

int rpma_cq_wait(struct rpma_cq* cq) {
  if (cq == nullptr) return RPMA_E_INVAL;
  if (cq->shared) return RPMA_E_SHARED_CHANNEL;
  if (const int rc = cq->watch(); rc != 0) return rc;
  const bool nonblocking = is_nonblocking(cq->watch_fd);
  const auto asleep = nonblocking ? remora::CompletionQueue::Sleeper() : cq->cq.sleeper();
  for (;;) {
    // progress(): the descriptor also wakes when a connection's transport
    // has something; the completion it carries is made here, on this thread.
    if (cq->cq.progress() > 0) return 0;
    if (nonblocking) return RPMA_E_NO_COMPLETION;
    if (!cq->cq.expecting()) return RPMA_E_NO_COMPLETION;  // as rpma_conn_wait
    wait_readable(cq->watch_fd, 50);
  }
}

int rpma_cq_get_wc(struct rpma_cq* cq, int num_entries, struct ibv_wc* wc, int* num_entries_got) {
  if (cq == nullptr || wc == nullptr || num_entries < 1) return RPMA_E_INVAL;
  if (num_entries > 1 && num_entries_got == nullptr) return RPMA_E_INVAL;
  constexpr int kBatch = 64;
  remora::Completion c[kBatch];
  const int want = num_entries < kBatch ? num_entries : kBatch;
  const std::size_t n = cq->cq.poll({c, static_cast<std::size_t>(want)});
  if (n == 0) return RPMA_E_NO_COMPLETION;
  for (std::size_t i = 0; i < n; ++i) {
    ibv_wc& w = wc[i];
    std::memset(&w, 0, sizeof w);
    w.wr_id = c[i].cookie;
    w.qp_num = static_cast<std::uint32_t>(c[i].endpoint_id);
    switch (c[i].op) {
      case remora::Opcode::write: w.opcode = IBV_WC_RDMA_WRITE; break;
      case remora::Opcode::read: w.opcode = IBV_WC_RDMA_READ; break;
      case remora::Opcode::send: w.opcode = IBV_WC_SEND; break;
      case remora::Opcode::recv: w.opcode = IBV_WC_RECV; break;
      case remora::Opcode::recv_write_imm: w.opcode = IBV_WC_RECV_RDMA_WITH_IMM; break;
      // librpma 1.2 emulates these with an RDMA write and an RDMA read.
      case remora::Opcode::atomic_write: w.opcode = IBV_WC_RDMA_WRITE; break;
      case remora::Opcode::flush: w.opcode = IBV_WC_RDMA_READ; break;
    }
    if (!c[i].status) {
      w.status = IBV_WC_SUCCESS;
    } else {
      // vendor_err keeps the exact remora::Errc. The target's reasons for a
      // failed operation map to the responder errors of verbs: a refusal
      // (key, bounds, privilege) is a remote access error, a PERSISTENT flush
      // whose write-back failed there a remote operational error, and an
      // operation the target cannot carry out (a PERSISTENT flush to a
      // region it holds as not persistent) a remote invalid request.
      w.vendor_err = static_cast<std::uint32_t>(c[i].status.value());
      if (c[i].status == Errc::flushed)
        w.status = IBV_WC_WR_FLUSH_ERR;
      else if (c[i].status == Errc::remote_access)
        w.status = IBV_WC_REM_ACCESS_ERR;
      else if (c[i].status == Errc::length_error)
        w.status = IBV_WC_LOC_LEN_ERR;
      else if (c[i].status == Errc::io_error)
        w.status = IBV_WC_REM_OP_ERR;
      else if (c[i].status == Errc::not_supported)
        w.status = IBV_WC_REM_INV_REQ_ERR;
      else
        w.status = IBV_WC_GENERAL_ERR;
    }
    w.byte_len = static_cast<std::uint32_t>(c[i].length);
    if (c[i].has_imm) {
      w.imm_data = htonl(c[i].imm);
      w.wc_flags |= IBV_WC_WITH_IMM;
    }
  }
  if (num_entries_got) *num_entries_got = static_cast<int>(n);
  return 0;
}

}  // extern "C"
