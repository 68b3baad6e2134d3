// compat/dat/src/dat_evd.cpp - EVD and CNO: where DTO completions, connection
// events, connection requests and software events meet.
//
// An EVD belongs to the IA; a Remora completion queue belongs to one zone. So
// an EVD keeps one Remora queue per protection zone it serves, plus a software
// queue. Events are moved from their sources into the software queue lazily,
// on dequeue/wait, never from a background thread.
//
// CNO notification (as the DAT 1.2 reference, compat-dapl 1.2, does it): an
// event arrives on an EVD when it enters the EVD's queue. A notifying event
// (not an unsignalled completion) that arrives while the EVD is enabled, has
// a CNO and no thread is in dat_evd_wait on it triggers that CNO, whatever
// the EVD's waitability and whatever threshold a later wait uses. A CNO
// remembers only the first trigger since dat_cno_wait last returned; later
// arrivals are dropped, and events that were already queued never trigger
// again. dat_cno_wait returns the triggering EVD and untriggers the CNO.
#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "dat_internal.hpp"

namespace remora_dat {

using namespace std::chrono_literals;

/// How long dat_evd_wait polls before it sleeps.
constexpr std::chrono::microseconds kSpin{50};

namespace {

/// Proxy agent calls due in this thread; made when its outermost AgentScope
/// ends, after the DAT lock is released (an agent may call the API).
thread_local std::vector<std::pair<DAT_OS_WAIT_PROXY_AGENT, DAT_EVD_HANDLE>> t_agent_calls;
thread_local int t_agent_depth = 0;

/// Trigger `c` for `e` (null: every EVD left the CNO while a thread waits on
/// it). No effect on a CNO that is already triggered.
void trigger(Cno& c, Evd* e) {
  if (c.triggered) return;
  c.triggered = true;
  c.trigger_evd.reset();
  if (e) {
    c.trigger_evd = std::static_pointer_cast<Evd>(lookup(e, Kind::evd));
    wake(*e);  // a dat_cno_wait sleeping in another thread polls this fd
  }
  if (c.agent.proxy_agent_func) t_agent_calls.emplace_back(c.agent, e);
}

/// An event entered e's queue.
void arrived(Evd& e) {
  if (e.cno && e.enabled && !e.waiting) trigger(*e.cno, &e);
}

/// Queue an event; a notifying one may trigger the EVD's CNO.
void enqueue(Evd& e, const DAT_EVENT& ev, bool notify) {
  e.queue.push_back({ev, notify});
  if (notify) arrived(e);
}

/// e leaves its CNO. A CNO left without EVDs while a thread waits on it is
/// triggered with no EVD, which unblocks the waiter (DAT 1.2).
void detach_cno(Evd& e) {
  if (!e.cno) return;
  auto c = std::move(e.cno);
  e.cno.reset();
  if (--c->refs == 0 && c->waiting) trigger(*c, nullptr);
}

}  // namespace

AgentScope::AgentScope() { ++t_agent_depth; }

AgentScope::~AgentScope() {
  if (--t_agent_depth != 0) return;
  while (!t_agent_calls.empty()) {
    auto calls = std::move(t_agent_calls);
    t_agent_calls.clear();
    for (auto& [agent, evd] : calls) agent.proxy_agent_func(agent.instance_data, evd);
  }
}

void push_event(Evd& e, const DAT_EVENT& ev, bool notify) {
  enqueue(e, ev, notify);
  wake(e);
}

DAT_EP_STATE ep_state(const Ep& ep) {
  if (!ep.pz || !ep.rep.valid())
    return ep.tentative  ? DAT_EP_STATE_UNCONFIGURED_TENTATIVE
           : ep.reserved ? DAT_EP_STATE_UNCONFIGURED_RESERVED
                         : DAT_EP_STATE_UNCONFIGURED_UNCONNECTED;
  switch (ep.rep.state()) {
    case remora::EndpointState::unconnected:
      return ep.tentative  ? DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING
             : ep.reserved ? DAT_EP_STATE_RESERVED
                           : DAT_EP_STATE_UNCONNECTED;
    case remora::EndpointState::connect_pending:
      return ep.role == Role::active ? DAT_EP_STATE_ACTIVE_CONNECTION_PENDING : DAT_EP_STATE_PASSIVE_CONNECTION_PENDING;
    case remora::EndpointState::connected: return DAT_EP_STATE_CONNECTED;
    default: return DAT_EP_STATE_DISCONNECTED;
  }
}

namespace {

/// A core completion becomes a DTO event. Events of an EP's request queue
/// (and of its receive queue) are reported in posting order, as DAT
/// requires: the core already delivers each endpoint's completions in that
/// order (even when the transport finishes them in another), so each is
/// queued as it comes.
void convert_completion(Evd& e, const remora::Completion& c) {
  auto ep = ep_by_rid(c.endpoint_id);
  if (!ep) return;  // its EP was freed
  SlotTable* table = (c.cookie & kTokenSrq)    ? (ep->srq ? &ep->srq->slots : nullptr)
                     : (c.cookie & kTokenRecv) ? &ep->rcv
                                               : &ep->req;
  // (An SRQ serves several EPs; its receives are reported as they complete.)
  Slot s;
  if (table == nullptr || !table->release(c.cookie, &s)) return;  // stale or foreign token
  const DAT_DTO_COMPLETION_STATUS st = dto_status(c.status);
  if (st == DAT_DTO_SUCCESS && (s.flags & DAT_COMPLETION_SUPPRESS_FLAG)) return;
  DAT_EVENT ev{};
  ev.event_number = DAT_DTO_COMPLETION_EVENT;
  ev.evd_handle = &e;
  auto& d = ev.event_data.dto_completion_event_data;
  d.ep_handle = ep.get();
  d.user_cookie = s.cookie;
  d.status = st;
  d.transfered_length = st == DAT_DTO_SUCCESS ? c.length : 0;
  enqueue(e, ev, st != DAT_DTO_SUCCESS || !(s.flags & DAT_COMPLETION_UNSIGNALLED_FLAG));
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
  enqueue(e, ev, true);
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
    enqueue(e, ev, true);
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
      const std::size_t room =
          e.queue.size() < static_cast<std::size_t>(e.qlen) ? static_cast<std::size_t>(e.qlen) - e.queue.size() : 0;
      if (room == 0) break;
      // wait(0) rather than poll(): it takes what is there and drives the
      // endpoints once without claiming them from the zone's agent, which
      // keeps making progress while this thread sleeps on the queue's fd.
      auto n =
          cq->wait(std::span<remora::Completion>(c, std::min<std::size_t>(16, room)), std::chrono::milliseconds(0));
      if (!n || *n == 0) break;
      for (std::size_t i = 0; i < *n; ++i) convert_completion(e, c[i]);
    }
  }
}

std::vector<pollfd> wait_fds(Evd& e) {
  std::vector<pollfd> fds;
  fds.push_back({e.efd, POLLIN, 0});
  for (auto& [zid, cq] : e.cqs) {
    // progress() re-arms the queue's descriptor for the sleep (it also
    // wakes for its connections' transport work); a completion it makes
    // leaves the descriptor readable, so the sleep returns at once.
    (void)cq->progress();
    fds.push_back({cq->fd(), POLLIN, 0});
  }
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
  AgentScope agents;
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
  AgentScope agents;
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  collect(*e);
  if (e->queue.empty()) {
    // As compat-dapl 1.2: an EVD that has a completion queue there (one
    // created with a flag beyond SOFTWARE, CONNECTION and CR, and not ASYNC)
    // reports the bare DAT_QUEUE_EMPTY of its CQ poll; the others the error
    // class form. Compare with DAT_GET_TYPE() to accept both.
    const DAT_UINT32 f = static_cast<DAT_UINT32>(e->flags);
    const DAT_UINT32 no_cq = DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CONNECTION_FLAG | DAT_EVD_CR_FLAG;
    if (!(f & DAT_EVD_ASYNC_FLAG) && (f & ~no_cq) != 0) return DAT_QUEUE_EMPTY;
    return err(DAT_QUEUE_EMPTY, 0);
  }
  *out = e->queue.front().ev;
  e->queue.pop_front();
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_wait(DAT_EVD_HANDLE h, DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* out, DAT_COUNT* nmore) {
  AgentScope agents;
  std::unique_lock<std::recursive_mutex> lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (!out || !nmore) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
  if (threshold <= 0 || threshold > e->qlen) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  if (!e->waitable) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
  if (e->waiting) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
  // What arrived before this call arrived on an EVD nobody waited on: it may
  // trigger the CNO. From here on the waiter preempts the CNO.
  collect(*e);
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
    {
      // This thread drives the queues when it wakes (collect): the zones'
      // agents leave their endpoints to it while it sleeps.
      std::vector<remora::CompletionQueue::Sleeper> asleep;
      for (auto& [zid, cq] : e->cqs) asleep.push_back(cq->sleeper());
      lock.unlock();
      sleep_on(fds, left);
    }
    lock.lock();
    drain_efd(*e);
  }
  e->waiting = false;
  return rc;
}

DAT_RETURN dat_evd_enable(DAT_EVD_HANDLE h) {
  AgentScope agents;
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  // Events that arrived while disabled do not trigger the CNO afterwards.
  if (!e->enabled) collect(*e);
  e->enabled = true;
  wake(*e);
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_disable(DAT_EVD_HANDLE h) {
  AgentScope agents;
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  // Events that arrived while enabled still trigger the CNO.
  if (e->enabled) collect(*e);
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
  AgentScope agents;
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  std::shared_ptr<Cno> cno;
  if (cnoh) {
    cno = std::static_pointer_cast<Cno>(lookup(cnoh, Kind::cno));
    if (!cno || cno->ia != e->ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  }
  // Events that arrived before notify the old CNO; the new one hears only
  // of later arrivals.
  collect(*e);
  if (cno) cno->refs++;
  detach_cno(*e);
  e->cno = cno;
  return DAT_SUCCESS;
}

DAT_RETURN dat_evd_free(DAT_EVD_HANDLE h) {
  AgentScope agents;
  Lock lock(g_mu);
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e) return err(DAT_INVALID_HANDLE, 0);
  if (e->refs > 0 || e->waiting) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
  detach_cno(*e);
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
  AgentScope agents;
  std::unique_lock<std::recursive_mutex> lock(g_mu);
  auto c = std::static_pointer_cast<Cno>(lookup(h, Kind::cno));
  if (!c) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  if (c->waiting) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
  c->waiting = true;
  const auto start = std::chrono::steady_clock::now();
  const bool forever = timeout == DAT_TIMEOUT_INFINITE;
  const auto deadline = start + std::chrono::microseconds(timeout);
  // The EVDs whose events can trigger the CNO: attached, enabled, and not
  // waited on by dat_evd_wait (a waiter preempts the CNO); oldest first.
  auto feeding = [&] {
    std::vector<std::shared_ptr<Evd>> evds;
    for (auto& o : children_of(c->ia.get()))
      if (o->kind == Kind::evd) {
        auto e = std::static_pointer_cast<Evd>(o);
        if (e->cno == c && e->enabled && !e->waiting) evds.push_back(e);
      }
    std::sort(evds.begin(), evds.end(), [](auto& a, auto& b) { return a->seq < b->seq; });
    return evds;
  };
  DAT_RETURN rc;
  for (;;) {
    if (!lookup(h, Kind::cno)) {  // its IA was closed: unblocked with no EVD
      *out = DAT_HANDLE_NULL;
      rc = DAT_SUCCESS;
      break;
    }
    auto evds = c->triggered ? std::vector<std::shared_ptr<Evd>>{} : feeding();
    // Bring in what arrived, EVD by EVD, until one triggers the CNO. The
    // events of the EVDs after it stay at their sources: they arrive at a
    // later look, after this wait has returned and untriggered the CNO (as
    // in the reference, where each arrival is seen as it happens and the
    // waiter untriggers the CNO at once), so they are not lost.
    for (auto& e : evds) {
      collect(*e);
      if (c->triggered) break;
    }
    if (c->triggered) {
      auto e = c->trigger_evd.lock();
      *out = e && lookup(e.get(), Kind::evd) ? static_cast<DAT_EVD_HANDLE>(e.get()) : DAT_HANDLE_NULL;
      c->triggered = false;
      c->trigger_evd.reset();
      rc = DAT_SUCCESS;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!forever && now >= deadline) {
      // The DAT 1.2 code for "timed out without a notification", bare as
      // compat-dapl returns it.
      *out = DAT_HANDLE_NULL;
      rc = DAT_QUEUE_EMPTY;
      break;
    }
    if (now - start < kSpin) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    std::vector<pollfd> fds;
    for (auto& e : evds) {
      if (e->queue.size() >= static_cast<std::size_t>(e->qlen)) {
        fds.push_back({e->efd, POLLIN, 0});  // full: nothing more can arrive
        continue;
      }
      auto f = wait_fds(*e);
      fds.insert(fds.end(), f.begin(), f.end());
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
