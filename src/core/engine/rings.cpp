// Same-host message rings at the endpoint (docs/design.md, "Same-host
// message rings"): the offer of this side's inbox, the mapping of the
// peer's, sends and writes placed in it, and the messages, writes and
// acknowledgements taken from them; parts of split transfers offered to
// the peer and moved for it. Runs with the endpoint's `mu` held.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/impl.hpp"

namespace remora::detail {

void EndpointImpl::offer_inbox() {
  if (inbox || !conn || !zone->direct) return;
  // Slots for the receives, as long as the longest message; when the zone
  // takes writes over the ring, at least kRingWriteSlots of them, each
  // holding a 64 KiB piece.
  std::size_t slot_size = rx_buf_len, want = options.max_recv;
  if (zone->ring_writes) {
    slot_size = std::max(slot_size, kRingWriteSlot);
    want = std::max(want, kRingWriteSlots);
  }
  const std::size_t slots = direct::ring_slots(want, slot_size);
  if (slots == 0) return;  // messages too large for a ring: the transport carries them
  std::string why;
  inbox = direct::Inbox::create(slots, slot_size, why);
  if (!inbox) return;  // the transport carries the messages; nothing is lost
  const std::uint64_t fds =
      static_cast<std::uint32_t>(inbox->fd()) | (std::uint64_t{static_cast<std::uint32_t>(inbox->bell_fd())} << 32);
  wire::Ctl offer = wire::make_ctl(wire::op_ring_offer, fds, inbox->nonce(), slots);
  offer.value = slot_size;
  if (zone->ring_writes) offer.flush_type = wire::kRingTakesWrites;  // take_ring copies them
  if (zone->direct_pull) offer.flush_type |= wire::kRingTakesPulls;  // take_pull moves them
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
    if (outbox) {
      rep.status = 0;
      outbox_takes_writes = zone->ring_writes && (offer.flush_type & wire::kRingTakesWrites) != 0;
      outbox_takes_pulls = zone->direct_pull && (offer.flush_type & wire::kRingTakesPulls) != 0;
    }
  }
  pending_replies.push_back(rep);
  flush_replies();
}

EndpointImpl::RingPut EndpointImpl::try_ring(OpSlot& s) {
  if (!outbox || !inbox_taken || state != EndpointState::connected) return RingPut::no;
  if (s.kind != OpSlot::Kind::send && s.kind != OpSlot::Kind::write) return RingPut::no;
  // Everything in flight is on the ring too (an operation placed now cannot
  // pass an earlier one still in the transport).
  if (in_flight != ring_in_flight) return RingPut::no;
  if (s.kind == OpSlot::Kind::write) return try_ring_write(s);
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

EndpointImpl::RingPut EndpointImpl::try_ring_write(OpSlot& s) {
  if (!outbox_takes_writes || !direct_peer || s.with_data || s.check || s.done.length < kRingWriteMin)
    return RingPut::no;
  // Each piece a RingWrite and at most `room` bytes, the pieces as even as
  // can be; a write that needs more than half the ring goes the direct way.
  if (outbox->slot_size() <= sizeof(wire::RingWrite) + kRingWritePiece) return RingPut::no;
  const std::size_t room = outbox->slot_size() - sizeof(wire::RingWrite);
  const std::size_t pieces = (s.done.length + room - 1) / room;
  if (pieces > outbox->slots() / 2) return RingPut::no;
  if (!direct_peer->ring_writable(s.rkey, s.raddr, s.done.length)) return RingPut::no;  // try_direct decides
  if (outbox->free_slots() < pieces) return RingPut::full;
  const std::size_t each = (s.done.length + pieces - 1) / pieces;
  std::size_t seg = 0, seg_off = 0, off = 0;
  for (std::size_t p = 0; p < pieces; ++p) {
    const std::size_t n = std::min(each, s.done.length - off);
    wire::RingWrite head{s.rkey, s.raddr + off};
    backend::Iov iov[kMaxSegments + 1];
    std::size_t count = 0;
    iov[count++] = backend::Iov{&head, sizeof head};
    for (std::size_t left = n; left > 0;) {
      const backend::Iov& v = s.iov[seg];
      const std::size_t take = std::min(left, v.len - seg_off);
      if (take > 0) iov[count++] = backend::Iov{static_cast<char*>(v.addr) + seg_off, take};
      left -= take;
      seg_off += take;
      if (seg_off == v.len) {
        ++seg;
        seg_off = 0;
      }
    }
    // The last piece says so: the peer publishes its handled count then.
    const bool last = p + 1 == pieces;
    if (!outbox->put({iov, count}, sizeof head + n, wire::data(wire::ring_write, last ? 1 : 0)))
      return RingPut::full;  // not reached: the slots were counted above
    off += n;
  }
  s.on_ring = true;
  s.posted = false;  // no transport completion: the peer's count ends it (handle_ack)
  ++in_flight;
  ++ring_in_flight;
  msgs_posted += pieces;
  s.msg_seq = msgs_posted;
  unacked.emplace_back(s.index, s.generation);
  ring_writes_sent.fetch_add(1, std::memory_order_relaxed);
  return RingPut::sent;
}

void EndpointImpl::take_ring_acks() {
  if (!outbox) return;
  const std::uint64_t h = outbox->handled();
  if (h > peer_handled) handle_ack(h);
}

int EndpointImpl::take_ring() {
  int taken = 0, pulls = 0;
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
      // Only user messages and writes travel on the ring; anything else
      // breaks the protocol.
      const wire::Kind kind = wire::kind_of(data);
      if (next == direct::Inbox::Next::message && kind == wire::ring_pull) {
        // Part of a split transfer the peer offered: not a message of the
        // connection (nothing handled, nothing acknowledged).
        if (!zone->direct_pull || !take_pull(bytes)) {
          protocol_violation();
          return 0;
        }
        inbox->pop();
        ++pulls;
        continue;
      }
      if (next == direct::Inbox::Next::message && kind == wire::ring_write) {
        // A write the peer checked against this zone's table: checked again
        // (the region may have been deregistered since) and copied. A
        // refusal ends the connection, as a remote access error does.
        wire::RingWrite head{};
        if (bytes.size() < sizeof head) {
          protocol_violation();
          return 0;
        }
        std::memcpy(&head, bytes.data(), sizeof head);
        if (!zone->direct || !zone->direct->place(head.key, head.addr, bytes.subspan(sizeof head))) {
          protocol_violation();
          return 0;
        }
        ++msgs_handled;
        inbox->pop();
        ++taken;
        ring_writes_taken.fetch_add(1, std::memory_order_relaxed);
        // A write's last piece: its initiator may complete it now.
        if ((data & 1) != 0) inbox->publish_handled(msgs_handled);
        continue;
      }
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
  return taken + pulls;
}

namespace {

std::atomic_ref<std::uint64_t> pull_state(wire::RingPull& p) noexcept {
  return std::atomic_ref<std::uint64_t>(p.state);
}
std::atomic_ref<std::uint64_t> tails_gate(wire::PullTails& t) noexcept {
  return std::atomic_ref<std::uint64_t>(t.gate);
}
std::atomic_ref<std::uint64_t> placed_word(wire::PullTails& t) noexcept {
  return std::atomic_ref<std::uint64_t>(t.placed);
}

static_assert(wire::kPullTailBytes == direct::kLastBytes);

}  // namespace

bool PullHand::offer(bool write, const std::uint64_t* keys, const iovec* remote, std::size_t nr, const iovec* local,
                     std::size_t n, const Tails* tails) noexcept {
  // Only while at least half the ring is free: a part the peer has not
  // taken yet (asleep, busy) keeps its slot until the peer looks, and sends
  // must still find room.
  if (pull_ != nullptr || nr == 0 || 2 * out_.free_slots() <= out_.slots()) return false;
  const std::size_t part = sizeof(wire::RingPull) + nr * sizeof(wire::PullRange) + n * sizeof(wire::PullSegment);
  if (part > out_.slot_size() || nr > direct::kMaxRanges || n > direct::kListSegments) return false;
  wire::RingPull head{
      wire::kPullPosted, 0, 0, write ? 1u : 0u, static_cast<std::uint32_t>(nr), static_cast<std::uint32_t>(n)};
  wire::PullRange ranges[direct::kMaxRanges];
  wire::PullSegment segs[direct::kListSegments];
  for (std::size_t k = 0; k < nr; ++k)
    ranges[k] = wire::PullRange{keys[k], reinterpret_cast<std::uint64_t>(remote[k].iov_base), remote[k].iov_len};
  for (std::size_t i = 0; i < n; ++i)
    segs[i] = wire::PullSegment{reinterpret_cast<std::uint64_t>(local[i].iov_base), local[i].iov_len};
  backend::Iov iov[5 + direct::kListSegments];  // filled up to `count`
  iov[0] = {&head, sizeof head, nullptr};
  iov[1] = {ranges, nr * sizeof(wire::PullRange), nullptr};
  iov[2] = {segs, n * sizeof(wire::PullSegment), nullptr};
  std::size_t count = 3, bytes = part;
  // The batch's last bytes after it, when it is a write and they fit: the
  // trailer, the peer's ranges, then the bytes themselves, copied from this
  // process's segments now (the sources stay as they are until the writes
  // complete).
  wire::PullTails trailer{wire::kTailsWait, 0, 0, 0};
  wire::PullRange tail_ranges[direct::kMaxRanges];
  std::size_t tail_bytes = 0;
  if (write && tails != nullptr && tails->nr > 0 && tails->nr <= direct::kMaxRanges &&
      tails->n <= direct::kListSegments) {
    bool fits = true;
    for (std::size_t k = 0; k < tails->nr; ++k) {
      fits = fits && tails->remote[k].iov_len <= wire::kPullTailBytes;
      tail_ranges[k] = wire::PullRange{tails->keys[k], reinterpret_cast<std::uint64_t>(tails->remote[k].iov_base),
                                       tails->remote[k].iov_len};
      tail_bytes += tails->remote[k].iov_len;
    }
    std::size_t from_local = 0;
    for (std::size_t i = 0; i < tails->n; ++i) from_local += tails->local[i].iov_len;
    const std::size_t with = part + sizeof trailer + tails->nr * sizeof(wire::PullRange) + tail_bytes;
    if (fits && from_local == tail_bytes && with <= out_.slot_size()) {
      trailer.count = static_cast<std::uint32_t>(tails->nr);
      trailer.bytes = static_cast<std::uint32_t>(tail_bytes);
      iov[count++] = {&trailer, sizeof trailer, nullptr};
      iov[count++] = {tail_ranges, tails->nr * sizeof(wire::PullRange), nullptr};
      for (std::size_t i = 0; i < tails->n; ++i)
        iov[count++] = {tails->local[i].iov_base, tails->local[i].iov_len, nullptr};
      bytes = with;
    }
  }
  std::uint8_t* at = out_.put({iov, count}, bytes, wire::data(wire::ring_pull));
  if (at == nullptr) return false;
  pull_ = reinterpret_cast<wire::RingPull*>(at);
  tails_ = bytes > part ? reinterpret_cast<wire::PullTails*>(at + part) : nullptr;
  placed_ = gate_seen_ = peer_first_ = false;
  offered_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool PullHand::tails_go(bool whole) noexcept {
  if (tails_ == nullptr) return false;
  // Whether the peer's part was done before this thread's, for the share
  // (finish): the peer then waits in the gate, so its part is not done when
  // finish() looks.
  gate_seen_ = true;
  peer_first_ = placed_word(*tails_).load(std::memory_order_acquire) != 0;
  std::uint64_t expected = wire::kTailsWait;
  // Lost to the peer only when it stopped waiting (kTailsSender).
  return tails_gate(*tails_).compare_exchange_strong(expected, whole ? wire::kTailsGo : wire::kTailsNo,
                                                     std::memory_order_acq_rel) &&
         whole;
}

ssize_t PullHand::finish() noexcept {
  if (pull_ == nullptr) return -1;
  wire::RingPull& p = *pull_;
  wire::PullTails* tails = tails_;
  pull_ = nullptr;
  tails_ = nullptr;
  std::uint64_t expected = wire::kPullPosted;
  if (pull_state(p).compare_exchange_strong(expected, wire::kPullTakenBack, std::memory_order_acq_rel)) {
    taken_back_ = true;
    return -1;
  }
  // The peer is moving it: wait for it (bounded by its copy), looking now
  // and then whether it still lives, and sleeping between looks once the
  // wait is long (a peer stopped by a signal). The peer's share of the next
  // split moves towards the two parts ending together: with last bytes
  // offered, as tails_go saw the peer's part.
  if (gate_seen_ ? peer_first_ : pull_state(p).load(std::memory_order_acquire) == wire::kPullDone) {
    if (share_ < kMaxShare) ++share_;
  } else if (share_ > kMinShare) {
    --share_;
  }
  for (std::uint64_t spins = 1; pull_state(p).load(std::memory_order_acquire) != wire::kPullDone; ++spins) {
    direct::relax();
    if (spins % 1024 != 0) continue;
    if (!peer_.alive()) return -1;
    if (spins < (1u << 20)) {
      std::this_thread::yield();
    } else {
      const timespec pause{0, 50000};
      ::nanosleep(&pause, nullptr);
    }
  }
  out_.acquire_from_owner();
  const std::int64_t moved = p.moved;
  placed_ = tails != nullptr && placed_word(*tails).load(std::memory_order_acquire) == wire::kTailsPlaced;
  if (moved < 0 && (p.err == EPERM || p.err == ESRCH)) unreachable_ = true;
  return static_cast<ssize_t>(moved);
}

bool EndpointImpl::take_pull(std::span<const std::uint8_t> bytes) {
  wire::RingPull head{};
  if (bytes.size() < sizeof head) return false;
  std::memcpy(&head, bytes.data(), sizeof head);
  if (head.ranges == 0 || head.ranges > direct::kMaxRanges || head.segments > direct::kListSegments ||
      bytes.size() < sizeof head + head.ranges * sizeof(wire::PullRange) + head.segments * sizeof(wire::PullSegment))
    return false;
  // The message lies in this side's inbox, which both processes map and
  // write: the state is swapped there.
  auto& p = *reinterpret_cast<wire::RingPull*>(const_cast<std::uint8_t*>(bytes.data()));
  std::uint64_t expected = wire::kPullPosted;
  if (!pull_state(p).compare_exchange_strong(expected, wire::kPullRunning, std::memory_order_acq_rel))
    return true;  // taken back: the peer moved it
  std::uint64_t keys[direct::kMaxRanges];
  iovec ranges[direct::kMaxRanges], segs[direct::kListSegments];
  const std::uint8_t* at = bytes.data() + sizeof head;
  for (std::size_t k = 0; k < head.ranges; ++k, at += sizeof(wire::PullRange)) {
    wire::PullRange r{};
    std::memcpy(&r, at, sizeof r);
    keys[k] = r.key;
    ranges[k] = iovec{reinterpret_cast<void*>(r.addr), static_cast<std::size_t>(r.len)};
  }
  for (std::size_t i = 0; i < head.segments; ++i, at += sizeof(wire::PullSegment)) {
    wire::PullSegment g{};
    std::memcpy(&g, at, sizeof g);
    segs[i] = iovec{reinterpret_cast<void*>(g.addr), static_cast<std::size_t>(g.len)};
  }
  // The batch's last bytes, when the peer sent them (wire::PullTails): checked
  // here, placed below once both parts are done.
  // (Read once: the peer could change the ring's copy after the checks.)
  wire::PullTails* tails = nullptr;
  wire::PullRange tail_ranges[direct::kMaxRanges];
  std::size_t tail_count = 0;
  const std::uint8_t* tail_bytes = nullptr;
  if (const std::size_t rest = static_cast<std::size_t>(bytes.data() + bytes.size() - at); rest > 0) {
    wire::PullTails t{};
    if (head.write == 0 || rest < sizeof t) return false;
    std::memcpy(&t, at, sizeof t);
    if (t.count == 0 || t.count > direct::kMaxRanges ||
        rest != sizeof t + t.count * sizeof(wire::PullRange) + std::size_t{t.bytes})
      return false;
    std::size_t sum = 0;
    for (std::size_t k = 0; k < t.count; ++k) {
      std::memcpy(&tail_ranges[k], at + sizeof t + k * sizeof(wire::PullRange), sizeof(wire::PullRange));
      if (tail_ranges[k].len == 0 || tail_ranges[k].len > wire::kPullTailBytes) return false;
      sum += tail_ranges[k].len;
    }
    if (sum != t.bytes) return false;
    tails = reinterpret_cast<wire::PullTails*>(const_cast<std::uint8_t*>(at));
    tail_count = t.count;
    tail_bytes = at + sizeof t + t.count * sizeof(wire::PullRange);
  }
  std::size_t want = 0;
  for (std::size_t k = 0; k < head.ranges; ++k) want += ranges[k].iov_len;
  ssize_t moved = -1;
  int err = ESRCH;
  const auto started = std::chrono::steady_clock::now();
  if (zone->direct && direct_peer && direct_peer->alive()) {
    moved = zone->direct->move_for_peer(direct_peer->pid(), head.write != 0, keys, ranges, head.ranges, segs,
                                        head.segments);
    err = moved < 0 ? errno : 0;
  }
  if (moved >= 0) pulls_moved_for_peer.fetch_add(1, std::memory_order_relaxed);
  if (tails != nullptr && moved == static_cast<ssize_t>(want))
    place_tails(*tails, tail_ranges, tail_count, tail_bytes, started);
  p.moved = moved;
  p.err = static_cast<std::uint32_t>(err);
  inbox->release_to_sender();
  pull_state(p).store(wire::kPullDone, std::memory_order_release);
  return true;
}

void EndpointImpl::place_tails(wire::PullTails& t, const wire::PullRange* ranges, std::size_t count,
                               const std::uint8_t* bytes, std::chrono::steady_clock::time_point started) {
  // Once the peer's own part is done too (it says so in the gate), each
  // write's last bytes are copied in posting order: after every byte of the
  // batch, as the peer's own last call would place them. The wait is
  // bounded: twice as long as this side's part took, at least kTailsPatience;
  // then the gate says the peer places them itself.
  placed_word(t).store(wire::kTailsPartDone, std::memory_order_release);
  const auto now = std::chrono::steady_clock::now();
  const auto until = now + std::max<std::chrono::steady_clock::duration>(2 * (now - started), kTailsPatience);
  std::uint64_t gate = tails_gate(t).load(std::memory_order_acquire);
  for (unsigned spins = 1; gate == wire::kTailsWait; ++spins) {
    direct::relax();
    if (spins % 256 == 0 && std::chrono::steady_clock::now() > until &&
        tails_gate(t).compare_exchange_strong(gate, wire::kTailsSender, std::memory_order_acq_rel))
      return;
    gate = tails_gate(t).load(std::memory_order_acquire);
  }
  if (gate != wire::kTailsGo) return;
  // The peer's part, made by its process_vm_writev before it opened the
  // gate, is in this process's memory (for ThreadSanitizer, when both
  // sides are in one process: the gate's release and acquire order it).
  std::size_t at = 0;
  for (std::size_t k = 0; k < count; at += ranges[k].len, ++k) {
    if (!zone->direct->place(ranges[k].key, ranges[k].addr, {bytes + at, static_cast<std::size_t>(ranges[k].len)},
                             direct::kStores))
      return;  // not placed: the peer places them all itself
  }
  placed_word(t).store(wire::kTailsPlaced, std::memory_order_release);
  tails_placed_for_peer.fetch_add(1, std::memory_order_relaxed);
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
