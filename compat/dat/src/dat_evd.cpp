// compat/dat/src/dat_evd.cpp - EVD and CNO: where DTO completions, connection
// events, connection requests and software events meet.
//
// An EVD belongs to the IA; a Remora completion queue belongs to one zone. So
// an EVD keeps one Remora queue per protection zone it serves, plus a software
// queue. Events are moved from their sources into the software queue lazily,
// on dequeue/wait, never from a background thread.
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "dat_internal.hpp"

namespace remora_dat {

using namespace std::chrono_literals;

/// How long dat_evd_wait polls before it sleeps.
constexpr std::chrono::microseconds kSpin{50};

void push_event(Evd& e, const DAT_EVENT& ev, bool notify) {
  e.queue.push_back({ev, notify});
  wake(e);
}

DAT_EP_STATE ep_state(const Ep& ep) {
  if (!ep.pz || !ep.rep.valid())
    return ep.tentative  ? DAT_EP_STATE_UNCONFIGURED_TENTATIVE
           : ep.reserved ? DAT_EP_STATE_UNCONFIGURED_RESERVED
                         : DAT_EP_STATE_UNCONFIGURED_UNCONNECTED;
  switch (ep.rep.state()) {
    case remora::EndpointState::unconnected:
      return ep.tentative ? DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING
                          : ep.reserved ? DAT_EP_STATE_RESERVED : DAT_EP_STATE_UNCONNECTED;
    case remora::EndpointState::connect_pending:
      return ep.role == Role::active ? DAT_EP_STATE_ACTIVE_CONNECTION_PENDING
                                     : DAT_EP_STATE_PASSIVE_CONNECTION_PENDING;
    case remora::EndpointState::connected: return DAT_EP_STATE_CONNECTED;
    default: return DAT_EP_STATE_DISCONNECTED;
  }
}

namespace {

/// A core completion becomes a DTO event. Events of an EP's request queue
/// (and of its receive queue) are reported in posting order, as DAT
/// requires, even when the transport finishes them in another order (an RDMA
/// read can finish before an earlier write).
void convert_completion(Evd& e, const remora::Completion& c) {
  auto ep = ep_by_rid(c.endpoint_id);
  if (!ep) return;  // its EP was freed
  SlotTable* table = (c.cookie & kTokenSrq) ? (ep->srq ? &ep->srq->slots : nullptr)
                     : (c.cookie & kTokenRecv) ? &ep->rcv
                                               : &ep->req;
  Slot* s = table ? table->find(c.cookie) : nullptr;
  if (!s) return;
  const DAT_DTO_COMPLETION_STATUS st = dto_status(c.status);
  s->ev = DAT_EVENT{};
  s->ev.event_number = DAT_DTO_COMPLETION_EVENT;
  s->ev.evd_handle = &e;
  auto& d = s->ev.event_data.dto_completion_event_data;
  d.ep_handle = ep.get();
  d.user_cookie = s->cookie;
  d.status = st;
  d.transfered_length = st == DAT_DTO_SUCCESS ? c.length : 0;
  s->emit = !(st == DAT_DTO_SUCCESS && (s->flags & DAT_COMPLETION_SUPPRESS_FLAG));
  s->notify = st != DAT_DTO_SUCCESS || !(s->flags & DAT_COMPLETION_UNSIGNALLED_FLAG);
  if (c.cookie & kTokenSrq) {
    // An SRQ serves several EPs; its receives are reported as they complete.
    Slot out;
    if (table->release(c.cookie, &out) && out.emit) e.queue.push_back({out.ev, out.notify});
    return;
  }
  s->done = true;
  table->drain([&](const Slot& done) { e.queue.push_back({done.ev, done.notify}); });
}

void conn_event(Evd& e, Ep& ep, DAT_EVENT_NUMBER n, std::vector<std::uint8_t> pdata = {}) {
  DAT_EVENT ev{};
  ev.event_number = n;
  ev.evd_handle = &e;
  auto& d = ev.event_data.connect_event_data;
  d.ep_handle = &ep;
  ep.pdata.push_back(std::move(pdata));
  while (ep.pdata.size() > 16) ep.pdata.pop_front();
  d.private_data_size = static_cast<DAT_COUNT>(ep.pdata.back().size());
  d.private_data = ep.pdata.back().empty() ? nullptr : ep.pdata.back().data();
  e.queue.push_back({ev, true});
}

void pull_connection_events(Evd& e, Ep& ep) {
  if (!ep.rep.valid()) return;
  if (ep.has_deadline && ep.rep.state() == remora::EndpointState::connect_pending &&
      std::chrono::steady_clock::now() >= ep.deadline) {
    ep.has_deadline = false;
    (void)ep.rep.disconnect();
    while (ep.rep.next_event(0ms)) {
    }
    conn_event(e, ep, DAT_CONNECTION_EVENT_TIMED_OUT);
    return;
  }
  for (;;) {
    auto r = ep.rep.next_event(0ms);
    if (!r) break;
    using T = remora::ConnectionEventType;
    switch (r->type) {
      case T::established:
        ep.has_deadline = false;
        conn_event(e, ep, DAT_CONNECTION_EVENT_ESTABLISHED, std::move(r->private_data));
        break;
      case T::rejected:
        ep.has_deadline = false;
        conn_event(e, ep, DAT_CONNECTION_EVENT_PEER_REJECTED, std::move(r->private_data));
        break;
      case T::unreachable:
        ep.has_deadline = false;
        conn_event(e, ep, DAT_CONNECTION_EVENT_UNREACHABLE);
        break;
      case T::disconnected: conn_event(e, ep, DAT_CONNECTION_EVENT_DISCONNECTED); break;
      case T::lost: conn_event(e, ep, DAT_CONNECTION_EVENT_BROKEN); break;
    }
  }
}

void pull_requests(Evd& e, const std::shared_ptr<Sp>& sp) {
  while (sp->listener.valid()) {
    auto r = sp->listener.next_request(0ms);
    if (!r) break;
    if (sp->kind == Kind::rsp && sp->used) {
      (void)r->reject();
      continue;
    }
    auto cr = std::make_shared<Cr>();
    cr->ia = sp->ia;
    cr->sp = sp;
    cr->pdata = r->private_data();
    cr->remote.sin_family = AF_INET;
    if (auto host = r->peer_host(); !host.empty()) inet_pton(AF_INET, host.c_str(), &cr->remote.sin_addr);
    cr->remote.sin_port = htons(r->peer_port());
    cr->req = std::move(*r);
    if (sp->kind == Kind::psp && sp->flags == DAT_PSP_PROVIDER_FLAG) cr->provider_ep = make_provider_ep(sp->ia);
    add_handle(cr);
    if (sp->kind == Kind::rsp) {
      sp->used = true;
      if (sp->ep) sp->ep->tentative = true;
    }
    DAT_EVENT ev{};
    ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
    ev.evd_handle = &e;
    auto& d = ev.event_data.cr_arrival_event_data;
    d.local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&sp->ia->addr);
    d.conn_qual = sp->conn_qual;
    if (sp->kind == Kind::rsp)
      d.sp_handle.rsp_handle = sp.get();
    else
      d.sp_handle.psp_handle = sp.get();
    d.cr_handle = cr.get();
    e.queue.push_back({ev, true});
  }
}

}  // namespace

void collect(Evd& e) {
  std::erase_if(e.conn_eps, [](auto& w) { return w.expired(); });
  std::erase_if(e.sps, [](auto& w) { return w.expired(); });
  auto eps = e.conn_eps;
  for (auto& w : eps)
    if (auto ep = w.lock()) pull_connection_events(e, *ep);
  auto sps = e.sps;
  for (auto& w : sps)
    if (auto sp = w.lock()) pull_requests(e, sp);
  for (auto& [zid, cq] : e.cqs) {
    remora::Completion c[16];
    for (;;) {
      const std::size_t room = e.queue.size() < static_cast<std::size_t>(e.qlen)
                                   ? static_cast<std::size_t>(e.qlen) - e.queue.size()
                                   : 0;
      if (room == 0) break;
      // wait(0) rather than poll(): it takes what is there and drives the
      // endpoints once without claiming them from the zone's agent, which
      // keeps making progress while this thread sleeps on the queue's fd.
      auto n = cq->wait(std::span<remora::Completion>(c, std::min<std::size_t>(16, room)),
                        std::chrono::milliseconds(0));
      if (!n || *n == 0) break;
      for (std::size_t i = 0; i < *n; ++i) convert_completion(e, c[i]);
    }
  }
}

std::vector<pollfd> wait_fds(Evd& e) {
  std::vector<pollfd> fds;
  fds.push_back({e.efd, POLLIN, 0});
  for (auto& [zid, cq] : e.cqs) fds.push_back({cq->fd(), POLLIN, 0});
  for (auto& w : e.conn_eps)
    if (auto ep = w.lock(); ep && ep->rep.valid()) fds.push_back({ep->rep.event_fd(), POLLIN, 0});
  for (auto& w : e.sps)
    if (auto sp = w.lock(); sp && sp->listener.valid()) fds.push_back({sp->listener.fd(), POLLIN, 0});
  return fds;
}

void drain_efd(Evd& e) {
  std::uint64_t v;
  while (::read(e.efd, &v, sizeof v) > 0) {
  }
}

/// Sleep on fds, at most `max` (the slice also bounds the cost of a source
/// added while sleeping). Called without the global lock.
void sleep_on(std::vector<pollfd>& fds, std::chrono::microseconds max) {
  int ms = static_cast<int>(std::min<long long>(std::max<long long>((max.count() + 999) / 1000, 0), 50));
  (void)::poll(fds.data(), fds.size(), ms);
}

}  // namespace remora_dat

using namespace remora_dat;

extern "C" {

DAT_RETURN dat_evd_create(DAT_IA_HANDLE iah, DAT_COUNT qlen, DAT_CNO_HANDLE cnoh, DAT_EVD_FLAGS flags,
                          DAT_EVD_HANDLE* out) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(iah, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  if (qlen <= 0 || qlen > 65536) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if ((static_cast<DAT_UINT32>(flags) & ~0x1F1u) != 0) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
  std::shared_ptr<Cno> cno;
  if (cnoh) {
    cno = std::static_pointer_cast<Cno>(lookup(cnoh, Kind::cno));
    if (!cno || cno->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  }
  auto e = make_evd(ia, qlen, flags);
  if (cno) {
    e->cno = cno;
    cno->refs++;
  }
  *out = e.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_query(DAT_EVD_HANDLE h, DAT_EVD_PARAM_MASK, DAT_EVD_PARAM* p) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = e->ia.get();
  p->evd_qlen = e->qlen;
  // One bit of each group: enabled/disabled | waitable/unwaitable.
  p->evd_state = static_cast<DAT_EVD_STATE>((e->enabled ? DAT_EVD_STATE_ENABLED : DAT_EVD_STATE_DISABLED) |
                                            (e->waitable ? DAT_EVD_STATE_WAITABLE : DAT_EVD_STATE_UNWAITABLE));
  p->cno_handle = e->cno.get();
  p->evd_flags = e->flags;
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_resize(DAT_EVD_HANDLE h, DAT_COUNT qlen) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (qlen <= 0 || qlen > 65536) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (static_cast<std::size_t>(qlen) < e->queue.size()) return err(DAT_INVALID_STATE, 0);
  e->qlen = qlen;
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_post_se(DAT_EVD_HANDLE h, const DAT_EVENT* ev) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (!ev || ev->event_number != DAT_SOFTWARE_EVENT || !(e->flags & DAT_EVD_SOFTWARE_FLAG))
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (e->queue.size() >= static_cast<std::size_t>(e->qlen)) return err(DAT_QUEUE_FULL, 0);
  DAT_EVENT copy = *ev;
  copy.evd_handle = e.get();
  push_event(*e, copy, true);
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT* out) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  collect(*e);
  if (e->queue.empty()) return err(DAT_QUEUE_EMPTY, 0);
  *out = e->queue.front().ev;
  e->queue.pop_front();
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_wait(DAT_EVD_HANDLE h, DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* out,
                        DAT_COUNT* nmore) {
  std::unique_lock<std::recursive_mutex> lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (!out || !nmore) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
  if (threshold <= 0 || threshold > e->qlen) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  if (!e->waitable) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
  if (e->waiting) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
  e->waiting = true;
  const auto start = std::chrono::steady_clock::now();
  const bool forever = timeout == DAT_TIMEOUT_INFINITE;
  const auto deadline = start + std::chrono::microseconds(timeout);
  DAT_RETURN rc;
  for (;;) {
    if (!lookup(h, Kind::evd)) {
      rc = err(DAT_INVALID_HANDLE, 0);
      break;
    }
    collect(*e);
    if (!e->waitable) {
      rc = err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
      *nmore = static_cast<DAT_COUNT>(e->queue.size());
      break;
    }
    if (!e->queue.empty() && e->notify_count() >= static_cast<std::size_t>(threshold)) {
      *out = e->queue.front().ev;
      e->queue.pop_front();
      *nmore = static_cast<DAT_COUNT>(e->queue.size());
      rc = DAT_SUCCESS;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!forever && now >= deadline) {
      *nmore = static_cast<DAT_COUNT>(e->queue.size());
      rc = err(DAT_TIMEOUT_EXPIRED, 0);
      break;
    }
    // A short spin first: completions on a live connection usually follow
    // within microseconds, and a sleep/wake round costs far more.
    if (now - start < kSpin) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    auto fds = wait_fds(*e);
    auto left = forever ? std::chrono::microseconds(50000)
                        : std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    lock.unlock();
    sleep_on(fds, left);
    lock.lock();
    drain_efd(*e);
  }
  e->waiting = false;
  return rc;
}

DAT_RETURN dat_evd_enable(DAT_EVD_HANDLE h) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  e->enabled = true;
  wake(*e);
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_disable(DAT_EVD_HANDLE h) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  e->enabled = false;
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_set_unwaitable(DAT_EVD_HANDLE h) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  e->waitable = false;
  wake(*e);
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_clear_unwaitable(DAT_EVD_HANDLE h) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  e->waitable = true;
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_modify_cno(DAT_EVD_HANDLE h, DAT_CNO_HANDLE cnoh) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  std::shared_ptr<Cno> cno;
  if (cnoh) {
    cno = std::static_pointer_cast<Cno>(lookup(cnoh, Kind::cno));
    if (!cno || cno->ia != e->ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  }
  if (e->cno) e->cno->refs--;
  e->cno = cno;
  if (cno) cno->refs++;
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_free(DAT_EVD_HANDLE h) {
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (e->refs > 0 || e->waiting) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
  destroy(e);
  return DAT_SUCCESS;
}

// ---------------------------------------------------------------- CNO

DAT_RETURN dat_cno_create(DAT_IA_HANDLE iah, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE* out) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(iah, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  auto c = std::make_shared<Cno>();
  c->ia = ia;
  c->agent = agent;
  add_handle(c);
  *out = c.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_cno_modify_agent(DAT_CNO_HANDLE h, DAT_OS_WAIT_PROXY_AGENT agent) {
  Lock lock(g_mu);
  auto c = std::static_pointer_cast<Cno>(lookup(h, Kind::cno));
  if (!c) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  c->agent = agent;
  return DAT_SUCCESS;
}

DAT_RETURN dat_cno_query(DAT_CNO_HANDLE h, DAT_CNO_PARAM_MASK, DAT_CNO_PARAM* p) {
  Lock lock(g_mu);
  auto c = std::static_pointer_cast<Cno>(lookup(h, Kind::cno));
  if (!c) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = c->ia.get();
  p->agent = c->agent;
  return DAT_SUCCESS;
}

DAT_RETURN dat_cno_free(DAT_CNO_HANDLE h) {
  Lock lock(g_mu);
  auto c = std::static_pointer_cast<Cno>(lookup(h, Kind::cno));
  if (!c) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  if (c->refs > 0 || c->waiting) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
  destroy(c);
  return DAT_SUCCESS;
}

DAT_RETURN dat_cno_wait(DAT_CNO_HANDLE h, DAT_TIMEOUT timeout, DAT_EVD_HANDLE* out) {
  std::unique_lock<std::recursive_mutex> lock(g_mu);
  auto c = std::static_pointer_cast<Cno>(lookup(h, Kind::cno));
  if (!c) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  if (c->waiting) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
  c->waiting = true;
  const bool forever = timeout == DAT_TIMEOUT_INFINITE;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout);
  DAT_RETURN rc;
  for (;;) {
    std::vector<std::shared_ptr<Evd>> evds;
    for (auto& o : children_of(c->ia.get()))
      if (o->kind == Kind::evd) {
        auto e = std::static_pointer_cast<Evd>(o);
        if (e->cno == c && e->enabled) evds.push_back(e);
      }
    std::shared_ptr<Evd> hit;
    std::vector<pollfd> fds;
    for (auto& e : evds) {
      collect(*e);
      if (!hit && e->notify_count() > 0) hit = e;
      auto f = wait_fds(*e);
      fds.insert(fds.end(), f.begin(), f.end());
    }
    if (hit) {
      *out = hit.get();
      DAT_OS_WAIT_PROXY_AGENT a = c->agent;
      rc = DAT_SUCCESS;
      if (a.proxy_agent_func) {
        lock.unlock();
        a.proxy_agent_func(a.instance_data, hit.get());
        lock.lock();
      }
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!forever && now >= deadline) {
      *out = DAT_HANDLE_NULL;
      rc = err(DAT_TIMEOUT_EXPIRED, 0);
      break;
    }
    auto left = forever ? std::chrono::microseconds(50000)
                        : std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
    lock.unlock();
    sleep_on(fds, left);
    lock.lock();
    for (auto& e : evds) drain_efd(*e);
  }
  c->waiting = false;
  return rc;
}

}  // extern "C"
