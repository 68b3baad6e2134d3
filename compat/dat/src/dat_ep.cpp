// compat/dat/src/dat_ep.cpp - EP (create, modify, connect, post, states),
// PSP/RSP/CR, SRQ, and the one function that releases any object.
#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dat_internal.hpp"
#include "face.hpp"

namespace remora_dat {
namespace {

constexpr auto kMaxIov = static_cast<DAT_COUNT>(remora::kMaxSegments);
constexpr DAT_UINT32 kFlagMask = 0x1F;

/// The TCP port of a connection qualifier. Qualifiers of 16 bits are the
/// port; wider ones are folded onto ports 33534..65534 the way compat-dapl's
/// rdma_cm provider folds them (qualifier mod 32001, plus 33534), so both
/// sides of a connection agree on the port.
std::uint16_t qual_port(DAT_CONN_QUAL q) {
  constexpr DAT_CONN_QUAL kMod = 32001, kBase = 65535 - kMod;
  return static_cast<std::uint16_t>(q > 0xffff ? q % kMod + kBase : q);
}

DAT_EP_ATTR default_attr() {
  DAT_EP_ATTR a{};
  a.service_type = DAT_SERVICE_TYPE_RC;
  a.max_message_size = 65536;
  a.max_rdma_size = 1u << 30;
  a.qos = DAT_QOS_BEST_EFFORT;
  a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
  a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
  a.max_recv_dtos = 16;
  a.max_request_dtos = 16;
  a.max_recv_iov = 4;
  a.max_request_iov = 4;
  a.max_rdma_read_in = 4;
  a.max_rdma_read_out = 4;
  a.max_rdma_read_iov = 4;
  a.max_rdma_write_iov = 4;
  return a;
}

DAT_RETURN check_attr(const DAT_EP_ATTR& a) {
  if (a.service_type != DAT_SERVICE_TYPE_RC) return err(DAT_MODEL_NOT_SUPPORTED, 0);
  if (a.max_message_size > (64u << 20) || a.max_recv_dtos < 0 || a.max_request_dtos < 0 || a.max_recv_dtos > 65536 ||
      a.max_request_dtos > 65536 || a.max_recv_iov < 0 || a.max_recv_iov > kMaxIov || a.max_request_iov < 0 ||
      a.max_request_iov > kMaxIov || a.max_rdma_read_iov > kMaxIov || a.max_rdma_write_iov > kMaxIov ||
      (static_cast<DAT_UINT32>(a.recv_completion_flags) & ~kFlagMask) ||
      (static_cast<DAT_UINT32>(a.request_completion_flags) & ~kFlagMask))
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
  return DAT_SUCCESS;
}

/// (Re)create the Remora endpoint from the EP's PZ, EVDs and attributes.
DAT_RETURN build(const std::shared_ptr<Ep>& ep) {
  if (ep->rid) unregister_ep_rid(ep->rid);
  ep->rep.close();
  ep->rid = 0;
  ep->private_cq.reset();
  if (!ep->pz) return DAT_SUCCESS;
  remora::CompletionQueue* scq = ep->request_evd ? ep->request_evd->cq_for(*ep->pz) : nullptr;
  remora::CompletionQueue* rcq = ep->recv_evd ? ep->recv_evd->cq_for(*ep->pz) : nullptr;
  if (!scq || !rcq) {
    auto cq = ep->pz->zone.create_cq();
    if (!cq) return from_errc(cq.error());
    ep->private_cq = std::make_unique<remora::CompletionQueue>(std::move(*cq));
    if (!scq) scq = ep->private_cq.get();
    if (!rcq) rcq = ep->private_cq.get();
  }
  remora::EndpointOptions o;
  o.send_cq = scq;
  o.recv_cq = rcq;
  o.max_outstanding = static_cast<std::uint32_t>(std::max<DAT_COUNT>(1, ep->attr.max_request_dtos));
  o.max_recv = static_cast<std::uint32_t>(std::max<DAT_COUNT>(1, ep->attr.max_recv_dtos));
  o.max_message =
      static_cast<std::uint32_t>(std::max<DAT_VLEN>(64, ep->attr.max_message_size ? ep->attr.max_message_size : 65536));
  if (ep->srq) o.srq = &ep->srq->q;
  auto r = ep->pz->zone.create_endpoint(o);
  if (!r) return from_errc(r.error());
  ep->rep = std::move(*r);
  ep->rid = ep->rep.id();
  register_ep_rid(ep);
  const auto nreq = static_cast<std::size_t>(ep->attr.max_request_dtos);
  const auto nrcv = static_cast<std::size_t>(ep->attr.max_recv_dtos);
  ep->req.init(nreq, nreq);
  ep->rcv.init(nrcv, nrcv);
  return DAT_SUCCESS;
}

void attach(const std::shared_ptr<Ep>& ep) {
  if (ep->pz) ep->pz->refs++;
  if (ep->recv_evd) ep->recv_evd->refs++;
  if (ep->request_evd) ep->request_evd->refs++;
  if (ep->connect_evd) {
    ep->connect_evd->refs++;
    ep->connect_evd->conn_eps.push_back(ep);
  }
  if (ep->srq) ep->srq->refs++;
}

void detach(const std::shared_ptr<Ep>& ep) {
  if (ep->pz) ep->pz->refs--;
  if (ep->recv_evd) ep->recv_evd->refs--;
  if (ep->request_evd) ep->request_evd->refs--;
  if (ep->connect_evd) {
    ep->connect_evd->refs--;
    std::erase_if(ep->connect_evd->conn_eps, [&](auto& w) {
      auto p = w.lock();
      return !p || p == ep;
    });
  }
  if (ep->srq) ep->srq->refs--;
}

DAT_RETURN get_evd(DAT_EVD_HANDLE h, const std::shared_ptr<Ia>& ia, DAT_EVD_FLAGS need, DAT_UINT32 sub,
                   std::shared_ptr<Evd>* out) {
  out->reset();
  if (h == DAT_HANDLE_NULL) return DAT_SUCCESS;
  auto e = std::static_pointer_cast<Evd>(lookup(h, Kind::evd));
  if (!e || (ia && e->ia != ia) || !(e->flags & need)) return err(DAT_INVALID_HANDLE, sub);
  *out = e;
  return DAT_SUCCESS;
}

DAT_RETURN create_ep(DAT_IA_HANDLE iah, DAT_PZ_HANDLE pzh, DAT_EVD_HANDLE recv, DAT_EVD_HANDLE req, DAT_EVD_HANDLE conn,
                     DAT_SRQ_HANDLE srqh, bool with_srq, const DAT_EP_ATTR* attr, DAT_EP_HANDLE* out) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(iah, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  auto ep = std::make_shared<Ep>();
  ep->ia = ia;
  if (pzh) {
    ep->pz = std::static_pointer_cast<Pz>(lookup(pzh, Kind::pz));
    if (!ep->pz || ep->pz->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
  }
  if (auto rc = get_evd(recv, ia, DAT_EVD_DTO_FLAG, DAT_INVALID_HANDLE_EVD_RECV, &ep->recv_evd); rc) return rc;
  if (auto rc = get_evd(req, ia, DAT_EVD_DTO_FLAG, DAT_INVALID_HANDLE_EVD_REQUEST, &ep->request_evd); rc) return rc;
  // A connection EVD may belong to another IA of this process (compat-dapl
  // accepts that, and dapltest's limit test does it): connection events are
  // taken from the EP by this layer, whatever IA the EVD has.
  if (auto rc = get_evd(conn, nullptr, DAT_EVD_CONNECTION_FLAG, DAT_INVALID_HANDLE_EVD_CONN, &ep->connect_evd); rc)
    return rc;
  if (with_srq) {
    ep->srq = std::static_pointer_cast<Srq>(lookup(srqh, Kind::srq));
    if (!ep->srq || ep->srq->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
    if (ep->srq->pz != ep->pz) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  }
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
  ep->attr = attr ? *attr : default_attr();
  if (attr && ep->attr.max_message_size == 0) ep->attr.max_message_size = 65536;
  if (auto rc = check_attr(ep->attr); rc) return rc;
  if (auto rc = build(ep); rc) return rc;
  attach(ep);
  add_handle(ep);
  *out = ep.get();
  return DAT_SUCCESS;
}

enum class Op { send, recv, read, write };

DAT_RETURN post(DAT_EP_HANDLE h, Op op, DAT_COUNT n, const DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE cookie,
                const DAT_RMR_TRIPLET* rmr, DAT_COMPLETION_FLAGS flags) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (static_cast<DAT_UINT32>(flags) & ~kFlagMask) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
  const DAT_COMPLETION_FLAGS allowed =
      op == Op::recv ? ep->attr.recv_completion_flags : ep->attr.request_completion_flags;
  if ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) && !(allowed & DAT_COMPLETION_UNSIGNALLED_FLAG))
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
  const DAT_COUNT max_iov = op == Op::recv   ? ep->attr.max_recv_iov
                            : op == Op::send ? ep->attr.max_request_iov
                            : op == Op::read ? std::max(ep->attr.max_rdma_read_iov, ep->attr.max_request_iov)
                                             : std::max(ep->attr.max_rdma_write_iov, ep->attr.max_request_iov);
  if (n < 0 || n > max_iov || n > kMaxIov) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (n > 0 && iov == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  const bool rdma = op == Op::read || op == Op::write;
  if (rdma && rmr == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
  if (!ep->rep.valid()) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
  const DAT_EP_STATE st = ep_state(*ep);
  if (op == Op::recv) {
    if (ep->srq) return err(DAT_INVALID_STATE, 0);
    if (!ep->recv_evd) return err(DAT_INVALID_STATE, 0);
  } else {
    if (st != DAT_EP_STATE_CONNECTED && st != DAT_EP_STATE_DISCONNECTED)
      return err(DAT_INVALID_STATE, st == DAT_EP_STATE_UNCONNECTED ? DAT_INVALID_STATE_EP_UNCONNECTED : 0);
    if (!ep->request_evd) return err(DAT_INVALID_STATE, 0);
  }
  // Sources of sends and RDMA writes need no privilege (InfiniBand has no
  // local-read bit and DAT 1.2 providers never refused one; every LMR is
  // registered readable); receive and RDMA-read destinations need local write.
  const bool source = op == Op::write || op == Op::send;
  remora::Segment segs[kMaxIov];
  DAT_VLEN total = 0;
  DAT_COUNT kept = 0;  // segments after dropping the zero-length ones
  for (DAT_COUNT i = 0; i < n; ++i) {
    // A zero-length segment carries nothing: its context and address are
    // ignored, as the DAT 1.2 specification says.
    if (iov[i].segment_length == 0) continue;
    auto l = lmr_by_context(iov[i].lmr_context);
    if (!l || l->ia != ep->ia) return err(DAT_PRIVILEGES_VIOLATION, 0);
    if (l->pz != ep->pz) return err(DAT_PROTECTION_VIOLATION, 0);
    if (!l->contains(iov[i].virtual_address, iov[i].segment_length))
      return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (!source && !(l->priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG)) return err(DAT_PRIVILEGES_VIOLATION, 0);
    segs[kept++] =
        remora::Segment::at(l->mr, reinterpret_cast<const void*>(iov[i].virtual_address), iov[i].segment_length);
    total += iov[i].segment_length;
  }
  DAT_COUNT used = kept;
  if (op == Op::send && ep->attr.max_message_size && total > ep->attr.max_message_size) return err(DAT_LENGTH_ERROR, 0);
  if (rdma && ep->attr.max_rdma_size && std::min<DAT_VLEN>(total, rmr->segment_length) > ep->attr.max_rdma_size)
    return err(DAT_LENGTH_ERROR, 0);
  if (op == Op::write && total > rmr->segment_length) return err(DAT_LENGTH_ERROR, 0);
  if (op == Op::read) {
    // The whole remote buffer is read; the local vector must hold it.
    if (total < rmr->segment_length) return err(DAT_LENGTH_ERROR, 0);
    DAT_VLEN left = rmr->segment_length;
    used = 0;
    for (DAT_COUNT i = 0; i < kept && left > 0; ++i, ++used) {
      if (segs[i].length > left) segs[i].length = left;
      left -= segs[i].length;
    }
  }
  std::uint64_t token = 0;
  SlotTable& table = op == Op::recv ? ep->rcv : ep->req;
  if (!table.take(op == Op::recv ? kTokenRecv : 0, cookie, flags, &token))
    return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
  const remora::PostFlags pf =
      (flags & DAT_COMPLETION_BARRIER_FENCE_FLAG) ? remora::PostFlags::fence : remora::PostFlags::none;
  std::span<const remora::Segment> s(segs, static_cast<std::size_t>(used));
  // remora-check reports the DAT cookie; a suppressed completion is never
  // reaped by the consumer (the core's is taken by the EVD and dropped).
  remora::detail::check::FaceCookie named(cookie.as_64, (flags & DAT_COMPLETION_SUPPRESS_FLAG) != 0);
  remora::Result<void> r;
  switch (op) {
    case Op::send: r = ep->rep.send(s, token, pf); break;
    case Op::recv: r = ep->rep.recv(s, token); break;
    case Op::write:
    case Op::read: {
      remora::RemoteRegion rr(rmr->target_address, rmr->segment_length, rmr->rmr_context,
                              remora::Access::remote_read | remora::Access::remote_write, false);
      r = op == Op::write ? ep->rep.write(s, rr, 0, token, pf) : ep->rep.read(s, rr, 0, token, pf);
      break;
    }
  }
  if (!r) {
    table.undo(token);
    return from_errc(r.error(), DAT_INVALID_HANDLE_EP);
  }
  return DAT_SUCCESS;
}

bool modifiable(const Ep& ep) {
  switch (ep_state(ep)) {
    case DAT_EP_STATE_UNCONNECTED:
    case DAT_EP_STATE_UNCONFIGURED_UNCONNECTED:
    case DAT_EP_STATE_RESERVED:
    case DAT_EP_STATE_UNCONFIGURED_RESERVED:
    case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_UNCONFIGURED_TENTATIVE: return true;
    default: return false;
  }
}

DAT_RETURN start_connect(const std::shared_ptr<Ep>& ep, const sockaddr_in& to, DAT_CONN_QUAL qual, DAT_TIMEOUT timeout,
                         DAT_COUNT psize, const void* pdata) {
  if (qual == 0) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  const std::uint16_t port = qual_port(qual);
  if (psize < 0 || static_cast<std::size_t>(psize) > remora::kMaxPrivateData || (psize > 0 && !pdata))
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
  if (!ep->connect_evd) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
  if (!ep->rep.valid() || ep_state(*ep) != DAT_EP_STATE_UNCONNECTED)
    return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &to.sin_addr, host, sizeof host);
  auto r = ep->rep.connect(
      host, port,
      std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(pdata), static_cast<std::size_t>(psize)));
  if (!r) return from_errc(r.error(), DAT_INVALID_HANDLE_EP);
  ep->role = Role::active;
  ep->remote = to;
  ep->remote.sin_port = htons(port);
  ep->remote_known = true;
  ep->remote_qual = qual;
  ep->has_deadline = timeout != DAT_TIMEOUT_INFINITE;
  ep->deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout);
  return DAT_SUCCESS;
}

DAT_RETURN create_sp(DAT_IA_HANDLE iah, DAT_CONN_QUAL qual, bool any, DAT_EVD_HANDLE evdh, DAT_PSP_FLAGS flags,
                     std::shared_ptr<Sp>* out, Kind kind) {
  auto ia = std::static_pointer_cast<Ia>(lookup(iah, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  auto e = std::static_pointer_cast<Evd>(lookup(evdh, Kind::evd));
  if (!e || e->ia != ia || !(e->flags & DAT_EVD_CR_FLAG)) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
  if (flags != DAT_PSP_CONSUMER_FLAG && flags != DAT_PSP_PROVIDER_FLAG)
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
  if (!any && qual == 0) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &ia->addr.sin_addr, host, sizeof host);
  auto l = ia->cm_zone.listen(host, any ? 0 : qual_port(qual));
  if (!l) return from_errc(l.error());
  auto sp = std::make_shared<Sp>(kind);
  sp->ia = ia;
  sp->evd = e;
  sp->flags = flags;
  sp->listener = std::move(*l);
  // The qualifier asked for (reported by queries and CR events), or the port
  // the transport chose for dat_psp_create_any.
  sp->conn_qual = any ? sp->listener.port() : qual;
  e->refs++;
  e->sps.push_back(sp);
  *out = sp;
  return DAT_SUCCESS;
}

}  // namespace

std::shared_ptr<Ep> make_provider_ep(const std::shared_ptr<Ia>& ia) {
  auto ep = std::make_shared<Ep>();
  ep->ia = ia;
  ep->attr = default_attr();
  ep->tentative = true;
  add_handle(ep);
  return ep;
}

namespace {
/// Free the EP the provider made for a request the consumer did not accept
/// on it (unless the consumer freed it already).
void drop_provider_ep(Cr& cr) {
  if (cr.provider_ep && lookup(cr.provider_ep.get(), Kind::ep)) destroy(cr.provider_ep);
  cr.provider_ep.reset();
}
}  // namespace

void destroy(const std::shared_ptr<Obj>& o) {
  switch (o->kind) {
    case Kind::ia: break;
    case Kind::pz: std::static_pointer_cast<Pz>(o)->zone.close(); break;
    case Kind::lmr:
    case Kind::rmr: destroy_memory(o); break;
    case Kind::evd: {
      auto e = std::static_pointer_cast<Evd>(o);
      if (e->cno) e->cno->refs--;
      e->cno.reset();
      e->queue.clear();
      break;
    }
    case Kind::cno: break;
    case Kind::ep: {
      auto ep = std::static_pointer_cast<Ep>(o);
      if (ep->rid) unregister_ep_rid(ep->rid);
      ep->rep.close();
      detach(ep);
      break;
    }
    case Kind::psp:
    case Kind::rsp: {
      auto sp = std::static_pointer_cast<Sp>(o);
      sp->listener.close();
      if (sp->evd) {
        sp->evd->refs--;
        std::erase_if(sp->evd->sps, [&](auto& w) {
          auto p = w.lock();
          return !p || p == sp;
        });
      }
      if (sp->ep) {
        sp->ep->reserved = false;
        sp->ep->tentative = false;
      }
      break;
    }
    case Kind::cr: {
      auto cr = std::static_pointer_cast<Cr>(o);
      if (cr->req.valid()) (void)cr->req.reject();
      break;
    }
    case Kind::srq: {
      auto s = std::static_pointer_cast<Srq>(o);
      if (s->pz) s->pz->refs--;
      break;
    }
  }
  remove_handle(o.get());
}

}  // namespace remora_dat

using namespace remora_dat;

extern "C" {

DAT_RETURN dat_ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv, DAT_EVD_HANDLE req,
                         DAT_EVD_HANDLE conn, const DAT_EP_ATTR* attr, DAT_EP_HANDLE* out) {
  return create_ep(ia, pz, recv, req, conn, nullptr, false, attr, out);
}

DAT_RETURN dat_ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv, DAT_EVD_HANDLE req,
                                  DAT_EVD_HANDLE conn, DAT_SRQ_HANDLE srq, const DAT_EP_ATTR* attr,
                                  DAT_EP_HANDLE* out) {
  return create_ep(ia, pz, recv, req, conn, srq, true, attr, out);
}

DAT_RETURN dat_ep_query(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK, DAT_EP_PARAM* p) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  std::memset(p, 0, sizeof *p);
  p->ia_handle = ep->ia.get();
  p->ep_state = ep_state(*ep);
  p->local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep->ia->addr);
  p->local_port_qual = 0;
  p->remote_ia_address_ptr = ep->remote_known ? reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep->remote) : nullptr;
  p->remote_port_qual = ep->remote_qual;
  p->pz_handle = ep->pz.get();
  p->recv_evd_handle = ep->recv_evd.get();
  p->request_evd_handle = ep->request_evd.get();
  p->connect_evd_handle = ep->connect_evd.get();
  p->srq_handle = ep->srq.get();
  p->ep_attr = ep->attr;
  return DAT_SUCCESS;
}

DAT_RETURN dat_ep_modify(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM* p) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  const DAT_EP_PARAM_MASK fixed = DAT_EP_FIELD_IA_HANDLE | DAT_EP_FIELD_EP_STATE | DAT_EP_FIELD_LOCAL_IA_ADDRESS_PTR |
                                  DAT_EP_FIELD_LOCAL_PORT_QUAL | DAT_EP_FIELD_REMOTE_IA_ADDRESS_PTR |
                                  DAT_EP_FIELD_REMOTE_PORT_QUAL | DAT_EP_FIELD_SRQ_HANDLE;
  if ((mask & fixed) || (mask & ~DAT_EP_FIELD_ALL)) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (!modifiable(*ep)) return err(DAT_INVALID_STATE, 0);
  std::shared_ptr<Pz> pz = ep->pz;
  std::shared_ptr<Evd> rcv = ep->recv_evd, req = ep->request_evd, con = ep->connect_evd;
  if (mask & DAT_EP_FIELD_PZ_HANDLE) {
    pz.reset();
    if (p->pz_handle) {
      pz = std::static_pointer_cast<Pz>(lookup(p->pz_handle, Kind::pz));
      if (!pz || pz->ia != ep->ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    }
  }
  if (mask & DAT_EP_FIELD_RECV_EVD_HANDLE)
    if (auto rc = get_evd(p->recv_evd_handle, ep->ia, DAT_EVD_DTO_FLAG, DAT_INVALID_HANDLE_EVD_RECV, &rcv); rc)
      return rc;
  if (mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE)
    if (auto rc = get_evd(p->request_evd_handle, ep->ia, DAT_EVD_DTO_FLAG, DAT_INVALID_HANDLE_EVD_REQUEST, &req); rc)
      return rc;
  if (mask & DAT_EP_FIELD_CONNECT_EVD_HANDLE)
    if (auto rc = get_evd(p->connect_evd_handle, nullptr, DAT_EVD_CONNECTION_FLAG, DAT_INVALID_HANDLE_EVD_CONN, &con);
        rc)
      return rc;
  DAT_EP_ATTR a = ep->attr;
  const DAT_EP_ATTR& n = p->ep_attr;
  if (mask & DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE) a.service_type = n.service_type;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE) a.max_message_size = n.max_message_size;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE) a.max_rdma_size = n.max_rdma_size;
  if (mask & DAT_EP_FIELD_EP_ATTR_QOS) a.qos = n.qos;
  if (mask & DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS) a.recv_completion_flags = n.recv_completion_flags;
  if (mask & DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS) a.request_completion_flags = n.request_completion_flags;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS) a.max_recv_dtos = n.max_recv_dtos;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS) a.max_request_dtos = n.max_request_dtos;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV) a.max_recv_iov = n.max_recv_iov;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV) a.max_request_iov = n.max_request_iov;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN) a.max_rdma_read_in = n.max_rdma_read_in;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT) a.max_rdma_read_out = n.max_rdma_read_out;
  if (mask & DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW) a.srq_soft_hw = n.srq_soft_hw;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV) a.max_rdma_read_iov = n.max_rdma_read_iov;
  if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV) a.max_rdma_write_iov = n.max_rdma_write_iov;
  if (auto rc = check_attr(a); rc) return rc;
  if (ep->srq && pz != ep->srq->pz) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  detach(ep);
  ep->pz = pz;
  ep->recv_evd = rcv;
  ep->request_evd = req;
  ep->connect_evd = con;
  ep->attr = a;
  DAT_RETURN rc = build(ep);
  attach(ep);
  return rc;
}

DAT_RETURN dat_ep_connect(DAT_EP_HANDLE h, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL qual, DAT_TIMEOUT timeout,
                          DAT_COUNT psize, const DAT_PVOID pdata, DAT_QOS qos, DAT_CONNECT_FLAGS flags) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (!addr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (addr->sa_family != AF_INET) return err(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
  if ((static_cast<DAT_UINT32>(flags) & ~static_cast<DAT_UINT32>(DAT_CONNECT_MULTIPATH_FLAG)) != 0 ||
      (static_cast<DAT_UINT32>(qos) & ~0x0Fu) != 0)
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
  sockaddr_in to;
  std::memcpy(&to, addr, sizeof to);
  return start_connect(ep, to, qual, timeout, psize, pdata);
}

DAT_RETURN dat_ep_dup_connect(DAT_EP_HANDLE h, DAT_EP_HANDLE duph, DAT_TIMEOUT timeout, DAT_COUNT psize,
                              const DAT_PVOID pdata, DAT_QOS qos) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  auto dup = std::static_pointer_cast<Ep>(lookup(duph, Kind::ep));
  if (!dup) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if ((static_cast<DAT_UINT32>(qos) & ~0x0Fu) != 0) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
  if (ep_state(*dup) != DAT_EP_STATE_CONNECTED) return err(DAT_INVALID_STATE, 0);
  // The peer's listening port is known for connections this process
  // initiated (a passive EP knows the peer's source port only).
  if (!dup->remote_known || dup->role != Role::active) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  return start_connect(ep, dup->remote, dup->remote_qual, timeout, psize, pdata);
}

DAT_RETURN dat_ep_disconnect(DAT_EP_HANDLE h, DAT_CLOSE_FLAGS flags) {
  AgentScope agents;  // may trigger a CNO
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  switch (ep_state(*ep)) {
    case DAT_EP_STATE_CONNECTED:
    case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
    case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING: break;
    case DAT_EP_STATE_DISCONNECTED: return DAT_SUCCESS;
    default: return err(DAT_INVALID_STATE, 0);
  }
  ep->has_deadline = false;
  if (flags == DAT_CLOSE_GRACEFUL_FLAG && ep_state(*ep) == DAT_EP_STATE_CONNECTED && ep->request_evd) {
    // Graceful: let the posted requests finish first. Their completions are
    // moved into the request EVD (where the consumer finds them) until none
    // is outstanding, the connection breaks, or a bound of 5 s passes.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ep->req.busy > 0 && ep_state(*ep) == DAT_EP_STATE_CONNECTED && std::chrono::steady_clock::now() < until &&
           ep->request_evd->queue.size() < static_cast<std::size_t>(ep->request_evd->qlen)) {
      const std::size_t before = ep->req.busy;
      collect(*ep->request_evd);
      if (ep->req.busy == before) {
        g_mu.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        g_mu.lock();
      }
    }
  }
  auto r = ep->rep.disconnect();
  return r ? DAT_RETURN{DAT_SUCCESS} : from_errc(r.error(), DAT_INVALID_HANDLE_EP);
}

DAT_RETURN dat_ep_post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE c,
                            DAT_COMPLETION_FLAGS f) {
  return post(ep, Op::send, n, iov, c, nullptr, f);
}

DAT_RETURN dat_ep_post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE c,
                            DAT_COMPLETION_FLAGS f) {
  return post(ep, Op::recv, n, iov, c, nullptr, f);
}

DAT_RETURN dat_ep_post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE c,
                                 const DAT_RMR_TRIPLET* r, DAT_COMPLETION_FLAGS f) {
  return post(ep, Op::read, n, iov, c, r, f);
}

DAT_RETURN dat_ep_post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE c,
                                  const DAT_RMR_TRIPLET* r, DAT_COMPLETION_FLAGS f) {
  return post(ep, Op::write, n, iov, c, r, f);
}

DAT_RETURN dat_ep_get_status(DAT_EP_HANDLE h, DAT_EP_STATE* st, DAT_BOOLEAN* recv_idle, DAT_BOOLEAN* req_idle) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (st) *st = ep_state(*ep);
  if (recv_idle) *recv_idle = ep->rcv.busy == 0 ? DAT_TRUE : DAT_FALSE;
  if (req_idle) *req_idle = ep->req.busy == 0 ? DAT_TRUE : DAT_FALSE;
  return DAT_SUCCESS;
}

DAT_RETURN dat_ep_free(DAT_EP_HANDLE h) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (ep->reserved) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_RESERVED);
  destroy(ep);
  return DAT_SUCCESS;
}

DAT_RETURN dat_ep_reset(DAT_EP_HANDLE h) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  const DAT_EP_STATE st = ep_state(*ep);
  if (st == DAT_EP_STATE_UNCONNECTED || st == DAT_EP_STATE_UNCONFIGURED_UNCONNECTED) return DAT_SUCCESS;
  if (st != DAT_EP_STATE_DISCONNECTED) return err(DAT_INVALID_STATE, 0);
  auto r = ep->rep.reset();
  if (!r) return from_errc(r.error(), DAT_INVALID_HANDLE_EP);
  ep->role = Role::none;
  ep->remote_known = false;
  ep->remote_qual = 0;
  return DAT_SUCCESS;
}

DAT_RETURN dat_ep_recv_query(DAT_EP_HANDLE h, DAT_COUNT* nbufs, DAT_COUNT* span) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  const auto busy = static_cast<DAT_COUNT>(ep->srq ? ep->srq->slots.busy : ep->rcv.busy);
  if (nbufs) *nbufs = busy;
  if (span) *span = busy;
  return DAT_SUCCESS;
}

DAT_RETURN dat_ep_set_watermark(DAT_EP_HANDLE h, DAT_COUNT soft, DAT_COUNT hard) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(h, Kind::ep));
  if (!ep) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (soft < 0 || hard < 0) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  ep->soft_hw = soft;
  ep->hard_hw = hard;
  return DAT_SUCCESS;
}

// ---------------------------------------------------------------- PSP / RSP / CR

DAT_RETURN dat_psp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL qual, DAT_EVD_HANDLE evd, DAT_PSP_FLAGS flags,
                          DAT_PSP_HANDLE* out) {
  Lock lock(g_mu);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
  std::shared_ptr<Sp> sp;
  if (auto rc = create_sp(ia, qual, false, evd, flags, &sp, Kind::psp); rc) return rc;
  add_handle(sp);
  *out = sp.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_psp_create_any(DAT_IA_HANDLE ia, DAT_CONN_QUAL* qual, DAT_EVD_HANDLE evd, DAT_PSP_FLAGS flags,
                              DAT_PSP_HANDLE* out) {
  Lock lock(g_mu);
  if (!out || !qual) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  std::shared_ptr<Sp> sp;
  if (auto rc = create_sp(ia, 0, true, evd, flags, &sp, Kind::psp); rc) return rc;
  add_handle(sp);
  *qual = sp->conn_qual;
  *out = sp.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_psp_query(DAT_PSP_HANDLE h, DAT_PSP_PARAM_MASK, DAT_PSP_PARAM* p) {
  Lock lock(g_mu);
  auto sp = std::static_pointer_cast<Sp>(lookup(h, Kind::psp));
  if (!sp) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = sp->ia.get();
  p->conn_qual = sp->conn_qual;
  p->evd_handle = sp->evd.get();
  p->psp_flags = sp->flags;
  return DAT_SUCCESS;
}

DAT_RETURN dat_psp_free(DAT_PSP_HANDLE h) {
  Lock lock(g_mu);
  auto sp = lookup(h, Kind::psp);
  if (!sp) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
  destroy(sp);
  return DAT_SUCCESS;
}

DAT_RETURN dat_rsp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL qual, DAT_EP_HANDLE eph, DAT_EVD_HANDLE evd,
                          DAT_RSP_HANDLE* out) {
  Lock lock(g_mu);
  auto ep = std::static_pointer_cast<Ep>(lookup(eph, Kind::ep));
  if (!lookup(ia, Kind::ia)) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  if (!ep || ep->ia.get() != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (!out) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
  const DAT_EP_STATE st = ep_state(*ep);
  if (st != DAT_EP_STATE_UNCONNECTED && st != DAT_EP_STATE_UNCONFIGURED_UNCONNECTED) return err(DAT_INVALID_STATE, 0);
  std::shared_ptr<Sp> sp;
  if (auto rc = create_sp(ia, qual, false, evd, DAT_PSP_CONSUMER_FLAG, &sp, Kind::rsp); rc) return rc;
  sp->ep = ep;
  ep->reserved = true;
  add_handle(sp);
  *out = sp.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_rsp_query(DAT_RSP_HANDLE h, DAT_RSP_PARAM_MASK, DAT_RSP_PARAM* p) {
  Lock lock(g_mu);
  auto sp = std::static_pointer_cast<Sp>(lookup(h, Kind::rsp));
  if (!sp) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = sp->ia.get();
  p->conn_qual = sp->conn_qual;
  p->evd_handle = sp->evd.get();
  p->ep_handle = sp->ep.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_rsp_free(DAT_RSP_HANDLE h) {
  Lock lock(g_mu);
  auto sp = lookup(h, Kind::rsp);
  if (!sp) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP);
  destroy(sp);
  return DAT_SUCCESS;
}

DAT_RETURN dat_cr_query(DAT_CR_HANDLE h, DAT_CR_PARAM_MASK, DAT_CR_PARAM* p) {
  Lock lock(g_mu);
  auto cr = std::static_pointer_cast<Cr>(lookup(h, Kind::cr));
  if (!cr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  // The peer's address and (ephemeral) source port, as the transport saw them.
  p->remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&cr->remote);
  p->remote_port_qual = ntohs(cr->remote.sin_port);
  p->private_data_size = static_cast<DAT_COUNT>(cr->pdata.size());
  p->private_data = cr->pdata.empty() ? nullptr : cr->pdata.data();
  p->local_ep_handle = cr->sp && cr->sp->kind == Kind::rsp ? cr->sp->ep.get() : cr->provider_ep.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_cr_accept(DAT_CR_HANDLE h, DAT_EP_HANDLE eph, DAT_COUNT psize, const DAT_PVOID pdata) {
  Lock lock(g_mu);
  auto cr = std::static_pointer_cast<Cr>(lookup(h, Kind::cr));
  if (!cr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
  const bool rsp = cr->sp && cr->sp->kind == Kind::rsp;
  if (eph == DAT_HANDLE_NULL && rsp) eph = cr->sp->ep.get();
  if (eph == DAT_HANDLE_NULL && cr->provider_ep) eph = cr->provider_ep.get();
  auto ep = std::static_pointer_cast<Ep>(lookup(eph, Kind::ep));
  if (!ep || ep->ia != cr->ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
  if (rsp && ep != cr->sp->ep) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (psize < 0 || static_cast<std::size_t>(psize) > remora::kMaxPrivateData || (psize > 0 && !pdata))
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  const DAT_EP_STATE st = ep_state(*ep);
  const bool own = rsp || (cr->provider_ep && ep == cr->provider_ep);  // the SP's EP
  const bool ok = st == DAT_EP_STATE_UNCONNECTED ||
                  (own && (st == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING || st == DAT_EP_STATE_RESERVED));
  if (!ok || !ep->connect_evd) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
  auto r = cr->req.accept_any_zone(
      ep->rep, std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(pdata), static_cast<std::size_t>(psize)));
  if (!r) return from_errc(r.error(), DAT_INVALID_HANDLE_CR);
  ep->role = Role::passive;
  // dat_ep_query reports the peer as dat_cr_query does: its address and
  // (ephemeral) source port.
  ep->remote = cr->remote;
  ep->remote_known = true;
  ep->remote_qual = ntohs(cr->remote.sin_port);
  ep->reserved = false;
  ep->tentative = false;
  if (rsp) cr->sp->ep.reset();
  if (cr->provider_ep == ep)
    cr->provider_ep.reset();
  else
    drop_provider_ep(*cr);
  cr->req = remora::ConnectionRequest();
  destroy(cr);
  return DAT_SUCCESS;
}

DAT_RETURN dat_cr_reject(DAT_CR_HANDLE h) {
  Lock lock(g_mu);
  auto cr = std::static_pointer_cast<Cr>(lookup(h, Kind::cr));
  if (!cr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
  if (cr->req.valid()) (void)cr->req.reject();
  cr->req = remora::ConnectionRequest();
  if (cr->sp && cr->sp->kind == Kind::rsp && cr->sp->ep) cr->sp->ep->tentative = false;
  drop_provider_ep(*cr);
  destroy(cr);
  return DAT_SUCCESS;
}

DAT_RETURN dat_cr_handoff(DAT_CR_HANDLE h, DAT_CONN_QUAL qual) {
  AgentScope agents;  // may trigger a CNO
  Lock lock(g_mu);
  auto cr = std::static_pointer_cast<Cr>(lookup(h, Kind::cr));
  if (!cr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
  std::shared_ptr<Sp> target;
  for (auto& o : children_of(cr->ia.get()))
    if (o->kind == Kind::psp) {
      auto sp = std::static_pointer_cast<Sp>(o);
      if (sp->conn_qual == qual && sp != cr->sp) target = sp;
    }
  if (!target) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  auto moved = std::make_shared<Cr>();
  moved->ia = cr->ia;
  moved->sp = target;
  moved->pdata = cr->pdata;
  moved->remote = cr->remote;
  moved->req = std::move(cr->req);
  if (target->flags == DAT_PSP_PROVIDER_FLAG) moved->provider_ep = make_provider_ep(target->ia);
  cr->req = remora::ConnectionRequest();
  drop_provider_ep(*cr);
  destroy(cr);
  add_handle(moved);
  DAT_EVENT ev{};
  ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
  ev.evd_handle = target->evd.get();
  auto& d = ev.event_data.cr_arrival_event_data;
  d.local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&target->ia->addr);
  d.conn_qual = target->conn_qual;
  if (target->kind == Kind::rsp)
    d.sp_handle.rsp_handle = target.get();
  else
    d.sp_handle.psp_handle = target.get();
  d.cr_handle = moved.get();
  push_event(*target->evd, ev, true);
  return DAT_SUCCESS;
}

// ---------------------------------------------------------------- SRQ

DAT_RETURN dat_srq_create(DAT_IA_HANDLE iah, DAT_PZ_HANDLE pzh, DAT_SRQ_ATTR* a, DAT_SRQ_HANDLE* out) {
  Lock lock(g_mu);
  auto ia = std::static_pointer_cast<Ia>(lookup(iah, Kind::ia));
  if (!ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
  auto pz = std::static_pointer_cast<Pz>(lookup(pzh, Kind::pz));
  if (!pz || pz->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
  if (!a || !out || a->max_recv_dtos <= 0 || a->max_recv_dtos > 65536 || a->max_recv_iov <= 0 ||
      a->max_recv_iov > kMaxIov || a->low_watermark < 0)
    return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  auto q = pz->zone.create_srq(65536);
  if (!q) return from_errc(q.error());
  auto s = std::make_shared<Srq>();
  s->ia = ia;
  s->pz = pz;
  s->q = std::move(*q);
  s->slots.init(static_cast<std::size_t>(a->max_recv_dtos), 65536);
  s->max_recv_iov = a->max_recv_iov;
  s->low_watermark = a->low_watermark;
  pz->refs++;
  add_handle(s);
  *out = s.get();
  return DAT_SUCCESS;
}

DAT_RETURN dat_srq_free(DAT_SRQ_HANDLE h) {
  Lock lock(g_mu);
  auto s = std::static_pointer_cast<Srq>(lookup(h, Kind::srq));
  if (!s) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
  if (s->refs > 0) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
  destroy(s);
  return DAT_SUCCESS;
}

DAT_RETURN dat_srq_post_recv(DAT_SRQ_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE cookie) {
  Lock lock(g_mu);
  auto s = std::static_pointer_cast<Srq>(lookup(h, Kind::srq));
  if (!s) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
  if (n < 0 || n > s->max_recv_iov || (n > 0 && !iov)) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  remora::Segment segs[kMaxIov];
  for (DAT_COUNT i = 0; i < n; ++i) {
    auto l = lmr_by_context(iov[i].lmr_context);
    if (!l || l->ia != s->ia) return err(DAT_PRIVILEGES_VIOLATION, 0);
    if (l->pz != s->pz) return err(DAT_PROTECTION_VIOLATION, 0);
    if (!l->contains(iov[i].virtual_address, iov[i].segment_length))
      return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (!(l->priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG)) return err(DAT_PRIVILEGES_VIOLATION, 0);
    segs[i] = remora::Segment::at(l->mr, reinterpret_cast<const void*>(iov[i].virtual_address), iov[i].segment_length);
  }
  std::uint64_t token;
  if (!s->slots.take(kTokenSrq, cookie, DAT_COMPLETION_DEFAULT_FLAG, &token))
    return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
  auto r = s->q.recv(std::span<const remora::Segment>(segs, static_cast<std::size_t>(n)), token);
  if (!r) {
    s->slots.undo(token);
    return from_errc(r.error(), DAT_INVALID_HANDLE_SRQ);
  }
  return DAT_SUCCESS;
}

DAT_RETURN dat_srq_query(DAT_SRQ_HANDLE h, DAT_SRQ_PARAM_MASK, DAT_SRQ_PARAM* p) {
  Lock lock(g_mu);
  auto s = std::static_pointer_cast<Srq>(lookup(h, Kind::srq));
  if (!s) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
  if (!p) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
  p->ia_handle = s->ia.get();
  p->srq_state = DAT_SRQ_STATE_OPERATIONAL;
  p->pz_handle = s->pz.get();
  p->max_recv_dtos = static_cast<DAT_COUNT>(s->slots.limit);
  p->max_recv_iov = s->max_recv_iov;
  p->low_watermark = s->low_watermark;
  p->available_dto_count = static_cast<DAT_COUNT>(s->q.posted());
  p->outstanding_dto_count = static_cast<DAT_COUNT>(s->slots.busy);
  return DAT_SUCCESS;
}

DAT_RETURN dat_srq_resize(DAT_SRQ_HANDLE h, DAT_COUNT n) {
  Lock lock(g_mu);
  auto s = std::static_pointer_cast<Srq>(lookup(h, Kind::srq));
  if (!s) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
  if (n <= 0 || n > 65536) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  if (static_cast<std::size_t>(n) < s->slots.busy) return err(DAT_INVALID_STATE, 0);
  s->slots.limit = static_cast<std::size_t>(n);
  return DAT_SUCCESS;
}

DAT_RETURN dat_srq_set_lw(DAT_SRQ_HANDLE h, DAT_COUNT lw) {
  Lock lock(g_mu);
  auto s = std::static_pointer_cast<Srq>(lookup(h, Kind::srq));
  if (!s) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
  if (lw < 0 || static_cast<std::size_t>(lw) > s->slots.limit) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
  s->low_watermark = lw;
  return DAT_SUCCESS;
}

}  // extern "C"
