// Same-host message rings at the endpoint (docs/design.md, "Same-host
// message rings"): the offer of this side's inbox, the mapping of the
// peer's, sends placed in it, and the messages and acknowledgements taken
// from them. Runs with the endpoint's `mu` held.
#include "core/impl.hpp"

namespace remora::detail {

void EndpointImpl::offer_inbox() {
  if (inbox || !conn || !zone->direct) return;
  const std::size_t slots = direct::ring_slots(options.max_recv, rx_buf_len);
  if (slots == 0) return;  // messages too large for a ring: the transport carries them
  std::string why;
  inbox = direct::Inbox::create(slots, rx_buf_len, why);
  if (!inbox) return;  // the transport carries the messages; nothing is lost
  const std::uint64_t fds =
      static_cast<std::uint32_t>(inbox->fd()) | (std::uint64_t{static_cast<std::uint32_t>(inbox->bell_fd())} << 32);
  wire::Ctl offer = wire::make_ctl(wire::op_ring_offer, fds, inbox->nonce(), slots);
  offer.value = rx_buf_len;
  offer.token = ~std::uint64_t{0};  // names no slot (handle_reply takes the answer by its op)
  if (conn->inject(&offer, sizeof offer, wire::data(wire::ctl_request)) != 0) {
    inbox.reset();  // not offered: nobody will write to it
    return;
  }
  // From now on a peer process may ring the bell: the agent and the
  // completion queues' sleepers watch it, and drives progress this
  // endpoint.
  zone->agent->watch_ring(this, inbox, true);
  for (CqImpl* cq : {send_cq.get(), recv_cq.get()}) cq->watch_ring(*this, inbox, true);
}

void EndpointImpl::accept_ring_offer(const wire::Ctl& offer) {
  // Before the peer's own direct offer: answered once that is handled
  // (accept_direct_offer), when this side knows whether it can reach the
  // peer's memory. (With the path off here, it cannot: answered now. A peer
  // that offers a ring and never its table gets no answer, and its sends
  // stay on the transport.)
  if (zone->direct && !peer_offer_seen && !early_ring_offer) {
    early_ring_offer = offer;
    return;
  }
  wire::Ctl rep = offer;
  rep.status = static_cast<std::uint16_t>(Errc::not_supported);
  if (!outbox && direct_peer) {
    std::string why;
    outbox = direct::Outbox::open(direct_peer, static_cast<int>(offer.key & 0x7fffffffu),
                                  static_cast<int>((offer.key >> 32) & 0x7fffffffu), offer.addr, offer.len, offer.value,
                                  why);
    if (outbox) rep.status = 0;
  }
  pending_replies.push_back(rep);
  flush_replies();
}

EndpointImpl::RingPut EndpointImpl::try_ring(OpSlot& s) {
  if (s.kind != OpSlot::Kind::send || !outbox || !inbox_taken || state != EndpointState::connected) return RingPut::no;
  // Everything in flight is on the ring too (a send placed now cannot pass
  // an earlier operation still in the transport).
  if (in_flight != ring_in_flight) return RingPut::no;
  if (s.done.length > outbox->slot_size()) return RingPut::no;
  if (outbox->full()) return RingPut::full;
  if (s.check) zone->check->on_take(*this, s);
  if (!outbox->put({s.iov, s.iov_count}, s.done.length, s.data)) return RingPut::full;  // not reached: checked above
  s.on_ring = true;
  s.posted = false;  // no transport completion: the peer's count ends it (handle_ack)
  ++in_flight;
  ++ring_in_flight;
  s.msg_seq = ++msgs_posted;
  unacked.emplace_back(s.index, s.generation);
  ring_sent.fetch_add(1, std::memory_order_relaxed);
  return RingPut::sent;
}

void EndpointImpl::take_ring_acks() {
  if (!outbox) return;
  const std::uint64_t h = outbox->handled();
  if (h > peer_handled) handle_ack(h);
}

int EndpointImpl::take_ring() {
  int taken = 0;
  if (inbox && (state == EndpointState::connected || state == EndpointState::connect_pending)) {
    inbox->quiet_bell();
    const std::uint64_t acked_before = msgs_acked, handled_before = msgs_handled;
    std::span<const std::uint8_t> bytes;
    std::uint64_t data = 0;
    for (;;) {
      const auto next = inbox->next(bytes, data);
      if (next == direct::Inbox::Next::none) break;
      // The peer published its handled count before it could answer what
      // it handled (both under its endpoint's lock), and this side saw the
      // message (an acquire of the ring's tail): the count read now covers
      // every send the message may answer, which completes first, as on
      // RC hardware (librpma's 12scch example checks it).
      take_ring_acks();
      // Only user messages travel on the ring; anything else breaks the
      // protocol.
      const wire::Kind kind = wire::kind_of(data);
      if (next == direct::Inbox::Next::broken || (kind != wire::user_msg && kind != wire::user_msg_imm)) {
        protocol_violation();
        return 0;
      }
      if (zone->check) zone->check->on_incoming(*this);
      deliver_message(bytes, kind == wire::user_msg_imm, static_cast<std::uint32_t>(data));
      ++msgs_handled;
      inbox->pop();
      ++taken;
    }
    if (taken > 0) {
      ring_taken.fetch_add(static_cast<std::uint64_t>(taken), std::memory_order_relaxed);
      inbox->publish_handled(msgs_handled);
      // The count in the ring is the acknowledgement; one over the
      // transport is owed only for messages that came that way.
      if (acked_before == handled_before) msgs_acked = msgs_handled;
      if (outbox) outbox->ring();
    }
  }
  take_ring_acks();
  return taken;
}

bool EndpointImpl::ring_idle() {
  if (inbox && !inbox->idle()) return false;
  return !outbox || outbox->handled() <= peer_handled;
}

void EndpointImpl::drop_rings() {
  outbox.reset();
  inbox_taken = false;
  ring_in_flight = 0;
  drop_inbox();
}

void EndpointImpl::drop_inbox() {
  if (!inbox) return;
  zone->agent->watch_ring(this, inbox, false);
  for (CqImpl* cq : {send_cq.get(), recv_cq.get()}) cq->watch_ring(*this, inbox, false);
  inbox.reset();
}

}  // namespace remora::detail
