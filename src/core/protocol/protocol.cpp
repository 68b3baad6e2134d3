// The control protocol at both ends of a connection: incoming messages by
// kind (wire.hpp), the target's checks and answers to control requests
// (atomic write, flush, goodbye), replies, receive acknowledgements, and the
// end of a connection whose peer breaks the protocol. Runs with the
// endpoint's `mu` held, inside EndpointImpl::progress.
#include <unistd.h>

#include <cstring>

#include "core/impl.hpp"

namespace remora::detail {

void EndpointImpl::handle_message(RxSlot& rxs, const backend::CqEntry& e) {
  // Every message a Remora peer sends carries its kind in the immediate
  // data; anything else breaks the protocol.
  if (!(e.flags & backend::kCqRemoteData)) return protocol_violation();
  const auto* bytes = static_cast<const std::uint8_t*>(rxs.buf.addr);
  switch (wire::kind_of(e.data)) {
    case wire::user_msg:
    case wire::user_msg_imm: {
      deliver_message({bytes, e.len}, wire::kind_of(e.data) == wire::user_msg_imm, static_cast<std::uint32_t>(e.data));
      ++msgs_handled;
      return;
    }
    case wire::write_imm: {
      // The note of a write with immediate data, sent as a message right
      // behind the write (the libfabric backend does so: a queue shared by
      // several connections cannot place the native event, which has no
      // operation context). The write's data was placed before it. Its
      // payload is empty (the length is the one the data carries) or the
      // write's length, 8 bytes little-endian; anything else breaks the
      // protocol.
      std::uint64_t length = wire::write_imm_length(e.data);
      if (e.len == sizeof(std::uint64_t)) {
        length = 0;
        for (int i = 7; i >= 0; --i) length = (length << 8) | bytes[i];
      } else if (e.len != 0) {
        return protocol_violation();
      } else if (length == wire::kLengthUnknown) {
        length = 0;  // 16 MiB or more, and the note did not say
      }
      Incoming in;
      in.write_imm = true;
      in.has_imm = true;
      in.imm = static_cast<std::uint32_t>(e.data);
      in.length = length;
      deliver(std::move(in));
      ++msgs_handled;
      return;
    }
    case wire::msg_ack:
      if (e.len != 0) return protocol_violation();
      handle_ack(wire::ack_count(e.data));
      return;
    case wire::ctl_request:
    case wire::ctl_reply: {
      wire::Ctl m;
      const auto check = wire::parse_ctl({bytes, e.len}, m);
      if (check == wire::CtlCheck::malformed) return protocol_violation();
      if (wire::kind_of(e.data) == wire::ctl_reply) return handle_reply(m);
      if (check == wire::CtlCheck::ok) return handle_request(m);
      // A well-framed request this version cannot carry out (a newer
      // peer's operation or flush type): answered, not dropped.
      m.status = static_cast<std::uint16_t>(Errc::not_supported);
      pending_replies.push_back(m);
      flush_replies();
      return;
    }
    default: return protocol_violation();
  }
}

void EndpointImpl::protocol_violation() {
  // The peer is not speaking the protocol: the connection ends here (the
  // peer sees it lost), the zone's other connections are not affected.
  fail(nullptr, make_error_code(Errc::malformed), ConnectionEventType::lost);
}

void EndpointImpl::handle_request(const wire::Ctl& req) {
  if (req.op == wire::op_bye) {
    peer_said_bye = true;
    return;
  }
  if (req.op == wire::op_direct_offer) return accept_direct_offer(req);
  if (req.op == wire::op_ring_offer) return accept_ring_offer(req);
  if (req.op == wire::op_direct_revoke) {
    // The peer deregistered a region this side may have mapped, or is
    // closing the connection: the mappings go now (the peer waits for this
    // answer before its deregistration or close returns).
    if (req.flush_type == wire::kRevokeConnection) {
      if (direct_peer) direct_why_not = "the peer closed the connection";
      direct_peer.reset();
      // Its inbox goes too; sends still on it end with the connection.
      outbox.reset();
      inbox_taken = false;
    } else if (direct_peer) {
      direct_peer->drop_revoked();
    }
    wire::Ctl rep = req;
    rep.status = 0;
    pending_replies.push_back(rep);
    flush_replies();
    return;
  }
  wire::Ctl rep = req;
  rep.status = static_cast<std::uint16_t>(Errc::remote_access);
  {
    std::shared_lock<std::shared_mutex> lock(zone->regions_mu);
    auto it = zone->regions.find(req.key);
    // The agent's checks: a known key, the range inside the region and the
    // privilege the operation needs. Nothing is touched otherwise.
    if (it != zone->regions.end()) {
      RegionImpl& r = *it->second;
      const void* p = reinterpret_cast<const void*>(req.addr);
      if (r.contains(p, req.len)) {
        if (req.op == wire::op_atomic_write && has(r.access, Access::remote_write) && req.len == 8 &&
            req.addr % 8 == 0) {
          __atomic_store_n(reinterpret_cast<std::uint64_t*>(req.addr), req.value, __ATOMIC_SEQ_CST);
          rep.status = 0;
        } else if (req.op == wire::op_flush &&
                   (has(r.access, Access::remote_write) || has(r.access, Access::remote_read))) {
          if (req.flush_type == static_cast<std::uint8_t>(FlushType::persistent)) {
            // not_supported: the owner did not declare the region
            // persistent (the initiator refuses such a flush itself when
            // its descriptor says so). Otherwise the write-back runs off
            // this thread and outside these locks (Agent::defer_persist);
            // the reply follows when it is done.
            if (!r.persistent) {
              rep.status = static_cast<std::uint16_t>(Errc::not_supported);
            } else if (auto pinned = r.weak_from_this().lock()) {
              // The job sets the status from the write-back's outcome.
              zone->agent->defer_persist(Agent::PersistJob{weak_from_this(), std::move(pinned), rep});
              return;
            }  // else: the region is being destroyed: a refusal
          } else {
            // Earlier writes were placed by this CPU before the request was
            // read from the same ordered connection: they are visible.
            rep.status = 0;
          }
        }
      }
    }
  }
  pending_replies.push_back(rep);
  flush_replies();
}

void EndpointImpl::send_reply(const wire::Ctl& rep) {
  MutexLock lock(mu);
  if (!conn || closed) return;
  pending_replies.push_back(rep);
  flush_replies();
  if (!pending_replies.empty()) owes_work.store(true, std::memory_order_relaxed);
}

void EndpointImpl::flush_replies() {
  while (!pending_replies.empty() && conn) {
    int rc = conn->inject(&pending_replies.front(), sizeof(wire::Ctl), wire::data(wire::ctl_reply));
    if (rc == -EAGAIN) return;
    pending_replies.pop_front();
  }
}

void EndpointImpl::flush_acks() {
  if (!conn || msgs_acked == msgs_handled) return;
  static const std::uint8_t nothing = 0;
  // On -EAGAIN the next progress pass tries again; any other failure means
  // the connection is going away.
  if (conn->inject(&nothing, 0, wire::ack_data(msgs_handled)) == 0) msgs_acked = msgs_handled;
}

void EndpointImpl::handle_ack(std::uint64_t count) {
  if (count <= peer_handled || count > msgs_posted) return;  // stale, or not ours to believe
  peer_handled = count;
  while (!unacked.empty()) {
    auto [index, generation] = unacked.front();
    OpSlot& s = slots[index];
    if (s.generation != generation || s.finished) {  // already failed or flushed
      unacked.pop_front();
      continue;
    }
    if (s.msg_seq > peer_handled) return;
    unacked.pop_front();
    if (s.on_ring) --ring_in_flight;
    // The peer handled it: it completes now, as on RC hardware, where the
    // peer's acknowledgement makes the send's completion, before any answer
    // the peer sends after handling it. If the transport has not reported
    // its own completion yet, the slot stays in flight until it does
    // (report_in_order keeps it, handle() releases it).
    if (!s.posted) --in_flight;
    complete(s, {});
  }
}

void EndpointImpl::handle_reply(const wire::Ctl& rep) {
  // Answers that belong to no slot: to this side's offer and revocations.
  if (rep.op == wire::op_direct_offer) {
    offer_answered = true;
    peer_maps_regions = rep.status == 0;
    return;
  }
  if (rep.op == wire::op_ring_offer) {
    inbox_taken = inbox && rep.status == 0;
    if (inbox_taken) {
      inbox->close_fd();  // mapped by the peer
      pump_deferred();
    } else {
      // Refused (the peer cannot map it, or its rings hold their share of
      // descriptors): nobody will write to it, so it goes with its bell.
      drop_inbox();
    }
    return;
  }
  if (rep.op == wire::op_direct_revoke) {
    revokes_answered = std::max(revokes_answered, std::min(rep.token, revokes_sent));
    return;
  }
  auto idx = static_cast<std::uint32_t>(rep.token);
  auto gen = static_cast<std::uint32_t>(rep.token >> 32);
  if (idx >= slots.size()) return;
  OpSlot& s = slots[idx];
  if (s.kind != OpSlot::Kind::ctl || s.generation != gen || !s.posted) return;
  s.posted = false;
  --in_flight;
  if (rep.status == 0) {
    complete(s, {});
    return;
  }
  // The target's reason reaches the caller: a refusal (key, bounds,
  // privilege), an operation it cannot carry out, or a flush whose
  // write-back failed. Any other value is taken as a refusal.
  Errc why = Errc::remote_access;
  if (rep.status == static_cast<std::uint16_t>(Errc::io_error)) why = Errc::io_error;
  if (rep.status == static_cast<std::uint16_t>(Errc::not_supported)) why = Errc::not_supported;
  fail(&s, make_error_code(why), ConnectionEventType::lost);
}

void EndpointImpl::offer_direct() noexcept {
  if (!zone->direct) direct_why_not = zone->direct_why_not;
  if (!zone->direct || !conn) return;
  const direct::Identity& me = direct::identity();
  // key: pid (low 32 bits) and the table's fd number (high 32); addr: the
  // table's nonce; len: boot-id hash; value: pid namespace.
  const std::uint64_t pid_fd =
      static_cast<std::uint32_t>(::getpid()) | (std::uint64_t{static_cast<std::uint32_t>(zone->direct->fd())} << 32);
  wire::Ctl offer = wire::make_ctl(wire::op_direct_offer, pid_fd, zone->direct->nonce(), me.boot_hash);
  offer.value = me.pidns;
  offer.token = ~std::uint64_t{0};  // names no slot (handle_reply takes the answer by its op)
  // Injected like the goodbye: no slot, no completion. Lost (-EAGAIN): the
  // connection simply stays on the transport.
  if (conn->inject(&offer, sizeof offer, wire::data(wire::ctl_request)) != 0) {
    direct_why_not = "the offer could not be sent";
    offer_answered = true;  // the peer cannot map this zone's table: never asked to revoke
    peer_maps_regions = false;
  }
}

void EndpointImpl::accept_direct_offer(const wire::Ctl& offer) {
  if (direct_peer) return;  // one offer per connection
  if (!zone->direct) {
    direct_why_not = zone->direct_why_not;
  } else {
    std::string why;
    direct_peer = direct::Peer::get(offer.key & 0xffffffffu, offer.key >> 32, offer.addr, offer.len, offer.value, why);
    direct_why_not = direct_peer ? std::string() : why;
  }
  // The answer: 0 when taken (the offerer asks this side to drop its
  // mappings of each region it deregisters: ask_revoke), not_supported when
  // not (it never asks).
  wire::Ctl rep = offer;
  rep.status = direct_peer ? 0 : static_cast<std::uint16_t>(Errc::not_supported);
  pending_replies.push_back(rep);
  flush_replies();
  // The peer is a process of this host this side can reach: offer it this
  // side's inbox for its sends.
  if (direct_peer) offer_inbox();
  // A ring offer that came first is answered now.
  peer_offer_seen = true;
  if (early_ring_offer) {
    const wire::Ctl ring = *early_ring_offer;
    early_ring_offer.reset();
    accept_ring_offer(ring);
  }
}

std::uint64_t EndpointImpl::ask_revoke(std::uint8_t what, std::shared_ptr<direct::Peer>& bell) {
  MutexLock lock(mu);
  // Nothing to ask of a peer that cannot map this zone's table: none was
  // offered (the path is off here), or the peer said it did not take it.
  if (!zone->direct || !conn || closed || state != EndpointState::connected || (offer_answered && !peer_maps_regions))
    return 0;
  wire::Ctl req = wire::make_ctl(wire::op_direct_revoke, 0, 0, 0);
  req.flush_type = what;
  req.token = revokes_sent + 1;
  std::shared_lock<std::shared_mutex> transport(zone->transport_mu);
  // Injected, no slot. Not taken (the provider's queue is full): not asked;
  // the peer drops the mapping at its next miss or when the connection ends.
  if (conn->inject(&req, sizeof req, wire::data(wire::ctl_request)) != 0) return 0;
  // The peer's user may drive this connection without polling now (it
  // polled in the last millisecond, or holds a Sleeper while busy
  // elsewhere): its agent would leave the request to that user until its
  // claim expires. The caller rings the peer's doorbell, and the agent reads
  // the request now.
  bell = direct_peer;
  return ++revokes_sent;
}

void EndpointImpl::release_at_peer() noexcept {
  std::shared_ptr<direct::Peer> bell;
  const std::uint64_t serial = ask_revoke(wire::kRevokeConnection, bell);
  if (bell) bell->ring();
  if (serial == 0 || !zone->agent->serves_others()) return;
  zone->agent->wake();
  wait_revoked(*this, serial);
}

bool EndpointImpl::revoke_answered(std::uint64_t serial) {
  MutexLock lock(mu);
  return !conn || closed || state != EndpointState::connected || revokes_answered >= serial;
}

void EndpointImpl::say_goodbye() noexcept {
  const wire::Ctl bye = wire::make_ctl(wire::op_bye, 0, 0, 0);
  (void)conn->inject(&bye, sizeof bye, wire::data(wire::ctl_request));
}

}  // namespace remora::detail
