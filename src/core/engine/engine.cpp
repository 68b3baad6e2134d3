// The per-connection engine (EndpointImpl): slots, posting, fences and
// posting-order completion, completion dispatch, failure and flush,
// progress and connection events. Every method runs with `mu` held unless it
// says otherwise. The messages exchanged with the peer are handled in
// protocol/protocol.cpp, receive matching in engine/receive.cpp.
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/direct/copier.hpp"
#include "core/impl.hpp"

namespace remora::detail {
namespace {

// The bytes of the writes gathered for one cross-memory call: placed once
// they reach this. Writes (or reads) of up to half of it are gathered, so a
// stream of 1 MiB writes at a queue depth of 16 is split over the two
// processes once per 16 writes rather than once per write (bench/README.md,
// "Large writes gathered").
constexpr std::uint64_t kGatherBytes = 16 * 1024 * 1024;
// Writes into a region mapped here are gathered from this length on: a full
// batch of them (1 MiB) is split over two threads (bench/README.md,
// "Writes through a mapping gathered").
constexpr std::uint64_t kMappedGather = 64 * 1024;
// A batch a drive finds idle this long after its latest write pauses
// gathering on the endpoint (note_gather_wait): a program that polls after
// posting places its batches within microseconds; one that posts, then
// waits on something else (memory the peer writes, say), would see every
// batch wait for the agent. The pause starts at kGatherOffMin and doubles
// with each late batch up to kGatherOffMax, so such a program pays one late
// batch per kGatherOffMax at most once the pause is long.
constexpr std::chrono::milliseconds kGatherLate{1};
constexpr std::chrono::milliseconds kGatherOffMin{10};
constexpr std::chrono::milliseconds kGatherOffMax{1000};

std::int64_t steady_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

std::error_code status_from_transport(int err) {
  switch (err) {
    case ECANCELED: return make_error_code(Errc::remote_access);
    case ENOTCONN:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ESHUTDOWN: return make_error_code(Errc::flushed);
    default: return make_error_code(Errc::provider_error);
  }
}

std::error_code error_from_post(int rc) {
  if (rc == -EAGAIN) return make_error_code(Errc::queue_full);
  if (rc == -ENOTCONN || rc == -ECONNRESET || rc == -EPIPE) return make_error_code(Errc::not_connected);
  return make_error_code(Errc::provider_error);
}

}  // namespace

Result<void> EndpointImpl::setup_connection(const std::shared_ptr<void>& request) {
  const std::size_t depth = options.max_outstanding;
  const std::size_t nrx = options.max_recv;
  // A busy-polling zone never sleeps on its queues.
  auto c = zone->domain->create_connection(request, depth + 2 * nrx + 16, !zone->busy_poll);
  if (!c) return c.error();
  slots.clear();  // made on first use (take_slot)
  free_slots.clear();
  rx_buf_len = std::max<std::size_t>(options.max_message, sizeof(wire::Ctl));
  // Reserved, not touched: an idle connection's buffers cost no memory.
  if (!rx_memory.reserve(rx_buf_len * nrx)) return Errc::no_memory;
  auto key = zone->domain->register_memory(rx_memory.data(), rx_memory.size(), Access::local_write, zone->random_key());
  if (!key) return key.error();
  rx_key = std::move(*key);
  rx.clear();
  msgs_posted = peer_handled = msgs_handled = msgs_acked = 0;
  unacked.clear();
  direct_peer.reset();
  direct_why_not.clear();
  offer_answered = peer_maps_regions = false;
  peer_offer_seen = false;
  early_ring_offer.reset();
  revokes_sent = revokes_answered = 0;
  conn = std::move(*c);
  conn->set_owner(this);  // identity in the shared queue's ready reports (Agent::look_at)
  shared_queue.store(conn->shared_queue(), std::memory_order_relaxed);
  for (std::size_t i = 0; i < std::min(nrx, kRxInitial); ++i) {
    if (int rc = post_rx(); rc) {
      conn.reset();
      return error_from_post(rc);
    }
  }
  {
    MutexLock lock(zone->cm_mu);
    zone->cm_endpoints[conn->cm_id()] = ZoneImpl::CmOwner{weak_from_this(), ++conn_gen};
  }
  zone->agent->add(shared_from_this(), conn->wait_fd(), conn->shared_queue());
  watch_queues(conn->wait_fd(), conn->shared_queue(), true);
  return {};
}

void EndpointImpl::watch_queues(int fd, backend::SharedQueue* q, bool on) {
  for (CqImpl* cq : {send_cq.get(), recv_cq.get()}) {
    if (on) {
      cq->watch(fd);
      cq->attach(shared_from_this(), q);
    } else {
      cq->unwatch(fd);
      cq->detach(*this);
    }
  }
}

void EndpointImpl::set_owes_work(bool v) {
  owes_work.store(v, std::memory_order_relaxed);
  if (!v) return;
  send_cq->note_owing(*this);
  if (recv_cq != send_cq) recv_cq->note_owing(*this);
}

void EndpointImpl::abandon_connection() {
  zone->agent->remove(this, conn->wait_fd(), conn->shared_queue());
  watch_queues(conn->wait_fd(), conn->shared_queue(), false);
  conn.reset();
}

int EndpointImpl::post_rx() {
  RxSlot& s = rx.emplace_back();
  s.kind = SlotBase::Kind::recv_buffer;
  s.buf = backend::Iov{rx_memory.data() + (rx.size() - 1) * rx_buf_len, rx_buf_len, rx_key->desc()};
  const int rc = repost(s);
  if (rc) rx.pop_back();
  return rc;
}

int EndpointImpl::repost(RxSlot& s) { return conn->recv(s.buf.addr, s.buf.len, s.buf.desc, &s.hdr); }

Result<void> EndpointImpl::post(const Operation& op, std::uint64_t cookie, PostFlags flags) {
  auto r = post_once(op, cookie, flags);
  // Refused as not connected: the connection may be up at the transport
  // with its `connected` event still queued (a peer that sends as soon as
  // it is established can have its message reported here first, and a
  // program answering it posts at once): the queued events are handled,
  // then the post is tried once more.
  if (!r && r.error() == make_error_code(Errc::invalid_state) && settle_pending()) return post_once(op, cookie, flags);
  return r;
}

Result<void> EndpointImpl::post_once(const Operation& op, std::uint64_t cookie, PostFlags flags) {
  EndpointImpl* ep = this;
  MutexLock lock(ep->mu);
  if (ep->closed) return Errc::invalid_handle;
  const EndpointState st = ep->state;
  if (st == EndpointState::disconnected || st == EndpointState::error) {
    Completion c;
    c.cookie = cookie;
    c.op = op.opcode;
    c.status = make_error_code(Errc::flushed);
    c.endpoint_id = ep->id;
    ep->send_cq->push(std::move(c));
    return {};
  }
  if (st != EndpointState::connected) return Errc::invalid_state;
  if (op.kind == OpSlot::Kind::send && op.length > ep->peer_max_message) return Errc::length_error;
  auto idx = ep->take_slot();
  if (!idx) return idx.error();
  OpSlot& s = ep->slots[*idx];
  s.kind = op.kind;
  if (op.may_complete_locally && ep->last_write_key == op.ctl.key && op.ctl.addr >= ep->last_write_addr &&
      op.ctl.addr + op.ctl.len <= ep->last_write_addr + ep->last_write_len)
    s.kind = OpSlot::Kind::local;
  s.done = Completion{};
  s.done.cookie = cookie;
  s.done.op = op.opcode;
  s.done.length = op.length;
  s.done.endpoint_id = ep->id;
  s.signalled = !has(flags, PostFlags::unsignalled);
  s.fence = has(flags, PostFlags::fence);
  s.posted = false;
  s.iov_count = 0;
  if (op.local) {
    std::copy(op.local->iov, op.local->iov + op.local->count, s.iov);
    s.iov_count = op.local->count;
  }
  s.raddr = op.raddr;
  s.rkey = op.rkey;
  s.with_data = op.with_data;
  s.data = op.data;
  s.ctl = op.ctl;
  if (ep->zone->check) ep->zone->check->on_post(*ep, s, op);  // remora-check (docs/check.md)
  ep->order.push_back(*idx);
  if (auto r = ep->submit(*idx); !r) return r;
  if (!ep->deferred.empty()) ep->set_owes_work(true);
  // Recorded only for a write the engine accepted: a flush may complete
  // locally behind it (Endpoint::flush), never behind a refused one.
  if (op.kind == OpSlot::Kind::write) {
    ep->last_write_key = op.rkey;
    ep->last_write_addr = op.raddr;
    ep->last_write_len = op.length;
  }
  return {};
}

Result<std::uint32_t> EndpointImpl::take_slot() {
  if (free_slots.empty()) {
    if (slots.size() >= options.max_outstanding) return Errc::queue_full;
    slots.emplace_back();
    slots.back().index = static_cast<std::uint32_t>(slots.size() - 1);
    return slots.back().index;
  }
  std::uint32_t i = free_slots.back();
  free_slots.pop_back();
  return i;
}

void EndpointImpl::release_slot(std::uint32_t i) {
  OpSlot& s = slots[i];
  s.kind = OpSlot::Kind::free;
  s.posted = false;
  s.finished = false;
  s.reported = false;
  s.msg_seq = 0;
  s.on_ring = false;
  if (s.check) s.check.reset();  // remora-check's record, if any
  ++s.generation;
  free_slots.push_back(i);
}

int EndpointImpl::post_slot(OpSlot& s) {
  if (s.check) zone->check->on_take(*this, s);
  std::span<const backend::Iov> iov(s.iov, s.iov_count);
  int rc = 0;
  switch (s.kind) {
    case OpSlot::Kind::write: rc = conn->write(iov, s.raddr, s.rkey, s.with_data, s.data, &s.hdr); break;
    case OpSlot::Kind::read: rc = conn->read(iov, s.raddr, s.rkey, &s.hdr); break;
    case OpSlot::Kind::send: rc = conn->send(iov, s.data, &s.hdr); break;
    case OpSlot::Kind::ctl:
      s.ctl.token = (std::uint64_t{s.generation} << 32) | s.index;
      rc = conn->inject(&s.ctl, sizeof s.ctl, wire::data(wire::ctl_request));
      break;
    default: return -EINVAL;
  }
  if (rc == 0) {
    s.posted = true;
    ++in_flight;
    if (s.kind == OpSlot::Kind::send || (s.kind == OpSlot::Kind::write && s.with_data)) {
      s.msg_seq = ++msgs_posted;
      unacked.emplace_back(s.index, s.generation);
    }
  }
  return rc;
}

Result<void> EndpointImpl::submit(std::uint32_t index) {
  OpSlot& s = slots[index];
  if (s.kind == OpSlot::Kind::write || s.kind == OpSlot::Kind::read) note_write();
  if (!gathered.empty()) {
    // Another write (or read, after reads) posted back to back joins them;
    // anything else places them first (the operation comes after them in
    // every respect).
    std::int64_t now = 0;
    const OpSlot::Kind batch = slots[gathered.front()].kind;
    if (gathered.size() < kMaxGathered && s.kind == batch && gatherable(s, now) &&
        gathered_bytes + s.done.length <= kGatherBytes) {
      gathered.push_back(index);
      gathered_bytes += s.done.length;
      if (++gathered_writes == direct::Peer::kMaxBatch || gathered_bytes == kGatherBytes) flush_gathered();
      return {};
    }
    // A VISIBILITY flush the table allows joins them too: it completes once
    // the writes before it are placed, which is all it asks.
    if (batch == OpSlot::Kind::write && gathered.size() < kMaxGathered && joins_gathered(s)) {
      gathered.push_back(index);
      if (gathered.size() == kMaxGathered) flush_gathered();
      return {};
    }
    flush_gathered();
    // A refused write failed the endpoint: this operation was flushed with
    // the others (flush_all).
    if (state != EndpointState::connected) return {};
  }
  if (!deferred.empty() || (s.waits_for_earlier() && in_flight > 0)) {
    deferred.push_back(index);
    return {};
  }
  if (s.kind == OpSlot::Kind::local) {
    complete(s, {});
    return {};
  }
  switch (try_ring(s)) {
    case RingPut::sent: return {};
    case RingPut::full: deferred.push_back(index); return {};
    case RingPut::no: break;
  }
  // Sends on the ring not yet acknowledged: this operation, which goes
  // another way, waits until they are (the peer sees one order).
  if (ring_in_flight > 0) {
    deferred.push_back(index);
    return {};
  }
  if (try_direct(s)) return {};
  if (int rc = post_slot(s); rc) {
    order.pop_back();  // posted last, reported never
    release_slot(index);
    return error_from_post(rc);
  }
  return {};
}

template <class Move>
void EndpointImpl::move_as_chosen(bool write, std::uint64_t key, std::uint64_t bytes, Move&& move) {
  direct::SplitChoice* choice = nullptr;
  const bool split = split_now(write, key, bytes, choice);
  std::optional<PullHand> hand;
  if (split && pulls_now()) hand.emplace(*outbox, *direct_peer, pulls_offered, pull_share);
  const std::int64_t started = choice ? steady_ns() : 0;
  const bool whole = std::forward<Move>(move)(split, hand ? &*hand : nullptr);
  if (choice && whole) choice->took(bytes, split, steady_ns() - started);
  if (hand && hand->unreachable()) outbox_takes_pulls = false;
}

void EndpointImpl::direct_taken(OpSlot& s, bool mapped) {
  if (s.check) zone->check->on_take(*this, s);
  direct_ops.fetch_add(1, std::memory_order_relaxed);
  if (mapped) direct_mapped_ops.fetch_add(1, std::memory_order_relaxed);
}

bool EndpointImpl::direct_decided(OpSlot& s, direct::Peer::Outcome outcome, bool mapped) {
  switch (outcome) {
    case direct::Peer::Outcome::done:
      direct_taken(s, mapped);
      complete(s, {});
      return true;
    case direct::Peer::Outcome::refused:
      direct_taken(s, false);
      fail(&s, make_error_code(Errc::remote_access), ConnectionEventType::lost);
      return true;
    default: return false;
  }
}

bool EndpointImpl::try_direct(OpSlot& s, bool deferred_front) {
  // docs/design.md, "Same-host direct path". Only with nothing of this
  // endpoint in flight or waiting before it: the operation is placed now,
  // so every earlier one must be complete for the ordering guarantees to
  // hold.
  if (!direct_peer || in_flight != 0 || ring_in_flight != 0 || (!deferred_front && !deferred.empty())) return false;
  if (s.kind == OpSlot::Kind::ctl && s.ctl.op == wire::op_flush) {
    // A flush, checked against the table; PERSISTENT written back through
    // this process's mapping of a persistent file region. Whatever the
    // initiator cannot decide goes to the target's agent, which answers it.
    const bool persistent = s.ctl.flush_type == static_cast<std::uint8_t>(FlushType::persistent);
    return direct_decided(s, direct_peer->flush(s.ctl.key, s.ctl.addr, s.ctl.len, persistent), persistent);
  }
  if (s.kind == OpSlot::Kind::ctl) {
    // The atomic write, as an atomic store through the mapping of a
    // shareable region; anything else (and any failed check) goes to the
    // target's agent, which answers it. Refused: the page is gone from the
    // region's file (fault_guard.hpp).
    if (s.ctl.op != wire::op_atomic_write || s.ctl.len != 8) return false;
    return direct_decided(s, direct_peer->atomic_write(s.ctl.key, s.ctl.addr, s.ctl.value), true);
  }
  const bool write = s.kind == OpSlot::Kind::write;
  if (!write && s.kind != OpSlot::Kind::read) return false;
  if (s.done.length == 0) return false;  // nothing to place: the transport's rules apply
  std::int64_t now = 0;
  if (!deferred_front && gatherable(s, now)) {
    // Placed with the writes (or reads) posted right after it, at the latest when the
    // user's next poll drives the endpoint; should the user stop polling,
    // the agent places them within kGatherBound.
    gathered.push_back(s.index);
    gathered_bytes = s.done.length;
    gathered_writes = 1;
    // The polling user's next drive progresses the endpoint. Not
    // owes_work: that would have the agent progress it at every look too,
    // contending with that user for the endpoint's lock.
    send_cq->note_owing(*this);
    // Stored before the pending look is read, and the agent clears that
    // look before it reads this (gather_look_due): the agent sees this
    // batch, or this thread sees no look pending and asks one.
    gather_since.store(now, std::memory_order_seq_cst);
    if (now >= gather_look_at.load(std::memory_order_seq_cst) && zone->agent->serves_others()) {
      const std::chrono::steady_clock::time_point by{std::chrono::nanoseconds(now) + kGatherBound};
      gather_look_at.store(by.time_since_epoch().count(), std::memory_order_seq_cst);
      zone->agent->look_by(this, by);
    }
    return true;
  }
  bool mapped = false;
  direct::Peer::Outcome outcome = direct::Peer::Outcome::tcp;
  direct::Peer& peer = *direct_peer;
  move_as_chosen(write, s.rkey, s.done.length, [&](bool split, direct::FarHand* far) {
    outcome = peer.transfer(write, {s.iov, s.iov_count}, s.done.length, s.raddr, s.rkey, split, &mapped, far);
    return outcome == direct::Peer::Outcome::done;
  });
  if (outcome == direct::Peer::Outcome::done && write && s.with_data) {
    // With immediate data: the data is placed; its note follows on the
    // connection, as the transport path sends it right behind the
    // write (the target reports the note as the write's completion and
    // acknowledges it). The operation completes on that acknowledgement
    // (handle_ack), holding the endpoint's later operations to the
    // transport until then. A note the provider cannot take now: the
    // whole operation goes over the transport, which places the same
    // bytes again.
    std::uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(s.done.length >> (8 * i));
    if (conn->inject(len, sizeof len, s.data) != 0) return false;
    direct_taken(s, mapped);
    ++in_flight;  // no transport completion (posted stays false): handle_ack ends it
    s.msg_seq = ++msgs_posted;
    unacked.emplace_back(s.index, s.generation);
    return true;
  }
  switch (outcome) {
    case direct::Peer::Outcome::done:
    case direct::Peer::Outcome::refused:
      // Refused: what the target's refusal over the transport gives,
      // remote_access, and the connection ends (the peer sees it lost).
      return direct_decided(s, outcome, mapped);
    case direct::Peer::Outcome::broken:
      direct_why_not = "the peer can no longer be reached directly (EPERM, ESRCH or exited)";
      direct_peer.reset();
      return false;
    case direct::Peer::Outcome::tcp: return false;
  }
  return false;
}

bool EndpointImpl::split_now(bool write, std::uint64_t key, std::uint64_t bytes, direct::SplitChoice*& choice) {
  choice = nullptr;
  if (!zone->direct_split) return false;
  // Too short for the copier to split, or a copy through a mapping (split
  // over this process's helper thread: always split, as timing both ways
  // lost a fifth of 1 MiB copies through a mapping to the trials and to the
  // helper asleep after them).
  if (bytes < direct::kSplitBytes || !direct_peer || direct_peer->shareable(key)) return true;
  choice = &split_choice[write ? 1 : 0];
  const direct::SplitChoice::Way way = choice->choose(bytes);
  (way.split ? chose_split : chose_whole).fetch_add(1, std::memory_order_relaxed);
  if (!way.timed) choice = nullptr;
  return way.split;
}

bool EndpointImpl::gatherable(const OpSlot& s, std::int64_t& now) const {
  // A plain write or read of at most half kGatherBytes, while a user
  // thread polls the endpoint's completion queue (CompletionQueue::poll
  // claims it for 1 ms): that thread's next poll places it. A program that
  // sleeps in wait() or on the queue's descriptor has its writes and reads
  // placed at once, as before. Into a region mapped here only writes of
  // kMappedGather or more and smaller than a split transfer (copier.hpp),
  // and only while splits are on: a memcpy through a mapping has no system
  // call to share, but a batch of such writes is copied on two threads, as
  // one long write is. (Reads from a mapping gained little from it for
  // nearly twice the CPU, and writes of 1 MiB through it lost a quarter
  // gathered into lists of 4 MiB: not gathered.)
  if ((s.kind != OpSlot::Kind::write && s.kind != OpSlot::Kind::read) || s.with_data || s.fence || s.check ||
      s.done.length == 0 || s.done.length > kGatherBytes / 2 || !direct_peer || state != EndpointState::connected ||
      !zone->direct_gather)
    return false;
  // One write per poll (the stretch before this write's had one, and it is
  // the first since): the poll right after it would place it alone anyway,
  // unless completions wait in the queue: that poll takes one of them and
  // drives nothing (CompletionQueue::poll), so the writes posted after the
  // polls that follow join this one until a poll finds the queue empty. A
  // program keeping several writes in flight and reaping one completion per
  // poll (fio's librpma engines) has them placed together.
  if (burst_writes <= 1 && last_burst_writes <= 1 && send_cq->queued.load(std::memory_order_relaxed) == 0) return false;
  if ((s.kind != OpSlot::Kind::write || s.done.length < kMappedGather || s.done.length >= direct::kSplitBytes ||
       !zone->direct_split) &&
      direct_peer->shareable(s.rkey))
    return false;
  // Not while a late batch pauses gathering (note_gather_wait). A write
  // joining a batch takes the time of the batch's first write, posted
  // microseconds before (a batch is placed within kGatherBound of it even
  // if no poll comes): one clock read per batch rather than per write (55 ns
  // each on the host of bench/README.md, "One clock read per batch").
  now = gathered.empty() ? steady_ns() : gather_since.load(std::memory_order_relaxed);
  return now >= gather_off_until && send_cq->claimed(now);
}

bool EndpointImpl::gather_look_due(std::int64_t now, std::int64_t& again) noexcept {
  // No look pending from here on (the next batch asks one), then the
  // batch: both sequentially consistent with the posting thread's store of
  // the batch and read of the look (try_direct).
  again = 0;
  gather_look_at.store(0, std::memory_order_seq_cst);
  const std::int64_t since = gather_since.load(std::memory_order_seq_cst);
  if (since == 0) return false;  // placed already (the user's poll): nothing waits
  const std::int64_t due = since + std::chrono::nanoseconds(kGatherBound).count();
  if (now >= due) return true;
  // A batch gathered since the look was asked, which the user's next poll
  // places: looked at again once it is as old as the bound.
  gather_look_at.store(due, std::memory_order_seq_cst);
  again = due;
  return false;
}

void EndpointImpl::note_gather_wait() {
  const std::int64_t now = steady_ns();
  if (now - gather_since.load(std::memory_order_relaxed) < std::chrono::nanoseconds(kGatherLate).count()) {
    gather_off_for = 0;
    return;
  }
  const std::int64_t min = std::chrono::nanoseconds(kGatherOffMin).count();
  const std::int64_t max = std::chrono::nanoseconds(kGatherOffMax).count();
  gather_off_for = gather_off_for == 0 ? min : std::min(2 * gather_off_for, max);
  gather_off_until = now + gather_off_for;
  gathers_late.fetch_add(1, std::memory_order_relaxed);
}

bool EndpointImpl::joins_gathered(const OpSlot& s) {
  // Checked now, before anything is placed: a flush the table refuses (or
  // one only the target can answer) places the writes before it first and
  // goes its usual way, so no write after it is placed ahead of its outcome.
  // A flush is only a range check on this path: the cross-memory call that
  // places the writes before it returns once they are in the target's
  // memory, where the target's loads see them.
  if (s.check || !direct_peer || state != EndpointState::connected) return false;
  // A VISIBILITY flush inside the latest write's range (Endpoint::flush),
  // which the placing of that write answers.
  if (s.kind == OpSlot::Kind::local) return true;
  if (s.kind != OpSlot::Kind::ctl || s.ctl.op != wire::op_flush) return false;
  if (s.ctl.flush_type != static_cast<std::uint8_t>(FlushType::visibility)) return false;
  return direct_peer->flush(s.ctl.key, s.ctl.addr, s.ctl.len, false) == direct::Peer::Outcome::done;
}

void EndpointImpl::note_write() {
  const std::uint64_t polls = polls_by_this_thread();
  if (polls != burst_polls) {
    // (The endpoint's first write: the thread's earlier polls were not
    // about it; the stretch before counts as many.)
    if (burst_polls != kNoWriteYet) last_burst_writes = burst_writes;
    burst_polls = polls;
    burst_writes = 0;
  }
  if (burst_writes < UINT32_MAX) ++burst_writes;
}

void EndpointImpl::flush_gathered() {
  if (gathered.empty()) return;
  std::uint32_t index[kMaxGathered];
  direct::Peer::Item items[direct::Peer::kMaxBatch];
  const std::size_t entries = gathered.size();
  // Writes, with the flushes that joined them, or reads.
  const OpSlot::Kind kind = slots[gathered.front()].kind;
  std::size_t n = 0;
  for (std::size_t k = 0; k < entries; ++k) {
    const OpSlot& s = slots[gathered[k]];
    index[k] = gathered[k];
    if (s.kind != kind) continue;  // a flush that joined the writes
    items[n].local = std::span<const backend::Iov>(s.iov, s.iov_count);
    items[n].total = s.done.length;
    items[n].raddr = s.raddr;
    items[n].key = s.rkey;
    ++n;
  }
  const std::uint64_t bytes = gathered_bytes;  // the batch's writes (or reads) together
  gathered.clear();
  gather_since.store(0, std::memory_order_relaxed);
  gathered_bytes = 0;
  gathered_writes = 0;
  std::size_t placed = 0;
  if (direct_peer && n > 0) {
    const bool write = kind == OpSlot::Kind::write;
    direct::Peer& peer = *direct_peer;
    move_as_chosen(write, items[0].key, bytes, [&](bool split, direct::FarHand* far) {
      placed = write ? peer.write_many({items, n}, split, far) : peer.read_many({items, n}, split, far);
      return placed == n;
    });
  }
  // Every slot up to the first write (or read) not placed completes: the
  // writes or reads, and the flushes, whose writes before them are all
  // placed.
  std::size_t k = 0;
  for (std::size_t w = 0; k < entries; ++k) {
    OpSlot& s = slots[index[k]];
    if (s.kind == kind) {
      if (w == placed) break;
      if (items[w].mapped) direct_mapped_ops.fetch_add(1, std::memory_order_relaxed);
      if (n > 1) direct_batched.fetch_add(1, std::memory_order_relaxed);
      ++w;
    } else {
      flushes_joined.fetch_add(1, std::memory_order_relaxed);
    }
    direct_ops.fetch_add(1, std::memory_order_relaxed);
    complete(s, {});
  }
  if (k == entries) return;
  if (items[placed].outcome == direct::Peer::Outcome::refused) {
    // As the target's refusal over the transport: remote_access, the
    // connection ends, and the operations after it are flushed.
    direct_ops.fetch_add(1, std::memory_order_relaxed);
    fail(&slots[index[k]], make_error_code(Errc::remote_access), ConnectionEventType::lost);
    return;
  }
  if (items[placed].outcome == direct::Peer::Outcome::broken) {
    direct_why_not = "the peer can no longer be reached directly (EPERM, ESRCH or exited)";
    direct_peer.reset();
  }
  // The rest (writes and the flushes after them, or reads) go over the
  // transport, in posting order (nothing else is in flight or deferred while
  // operations are gathered).
  gathered_by_transport.fetch_add(n - placed, std::memory_order_relaxed);
  for (; k < entries; ++k) deferred.push_back(index[k]);
  pump_deferred();
  if (!deferred.empty()) set_owes_work(true);
}

void EndpointImpl::pump_deferred() {
  while (state == EndpointState::connected && !deferred.empty()) {
    OpSlot& s = slots[deferred.front()];
    if (s.waits_for_earlier() && in_flight > 0) return;
    if (s.kind == OpSlot::Kind::local) {
      deferred.pop_front();
      complete(s, {});
      continue;
    }
    const RingPut put = try_ring(s);
    if (put == RingPut::full) return;  // a slot frees when the peer takes a message
    if (put == RingPut::sent) {
      deferred.pop_front();
      continue;
    }
    if (ring_in_flight > 0) return;  // goes on once the ring's sends are acknowledged
    // Waited behind something in flight (a send on the ring, a fence):
    // placed directly now if it can be, as when nothing was before it.
    deferred.pop_front();
    if (try_direct(s, true)) continue;
    int rc = post_slot(s);
    if (rc == -EAGAIN) {
      deferred.push_front(s.index);  // retried after the next completion
      return;
    }
    if (rc) {
      fail(&s, error_from_post(rc), ConnectionEventType::lost);
      return;
    }
  }
}

void EndpointImpl::complete(OpSlot& s, std::error_code status) {
  s.done.status = status;
  s.finished = true;
  report_in_order();
}

void EndpointImpl::report_in_order() {
  while (!order.empty() && slots[order.front()].finished) {
    OpSlot& s = slots[order.front()];
    order.pop_front();
    // remora-check (docs/check.md): a record to compare again when the
    // completion is reaped, riding with it.
    check::RecordPtr later;
    if (s.check) later = zone->check->on_complete(*this, s);
    Completion c = s.done;
    const bool report = c.status || s.signalled;
    if (s.posted)
      s.reported = true;  // the transport still holds its context: released by handle() or flush_all()
    else
      release_slot(s.index);
    if (report) send_cq->push(std::move(c), std::move(later));
  }
}

void EndpointImpl::flush_all() {
  for (std::uint32_t i : order) {
    OpSlot& s = slots[i];
    if (!s.finished) {
      s.done.status = make_error_code(Errc::flushed);
      s.finished = true;
    }
  }
  report_in_order();
  // Reported already, their contexts with a connection that is going away.
  for (OpSlot& s : slots)
    if (s.reported) release_slot(s.index);
  deferred.clear();
  gathered.clear();
  gather_since.store(0, std::memory_order_relaxed);
  gathered_bytes = 0;
  gathered_writes = 0;
  unacked.clear();
  in_flight = 0;
  // Nothing more goes on the peer's ring (this side's inbox stays watched
  // until the connection is dropped: drop_rings).
  outbox.reset();
  inbox_taken = false;
  ring_in_flight = 0;
  while (!receives.posted.empty()) {
    Completion c;
    c.cookie = receives.posted.front().cookie;
    c.op = Opcode::recv;
    c.status = make_error_code(Errc::flushed);
    c.endpoint_id = id;
    receives.posted.pop_front();
    recv_cq->push(std::move(c));
  }
  pending_replies.clear();
  // The connection is over: no operation of it goes direct any more, and
  // the peer's table and regions are unmapped here once no other connection
  // towards that peer holds them (a peer that died leaves nothing mapped).
  direct_peer.reset();
}

void EndpointImpl::fail(OpSlot* s, std::error_code status, ConnectionEventType ev) {
  const bool was_connected = state == EndpointState::connected;
  // The state changes before the failed operation is reported, so a thread
  // that takes the error completion already sees the endpoint in error.
  if (was_connected) state = EndpointState::error;
  if (s != nullptr) complete(*s, status);
  if (!was_connected) return;
  conn->shutdown();
  flush_all();
  push_event(ConnectionEvent{ev, {}});
}

void EndpointImpl::handle(const backend::CqEntry& e) {
  if (e.context == nullptr) {
    // Remote write with immediate data at the target.
    if (e.err != 0 || !(e.flags & backend::kCqRemoteData)) return;
    if (wire::kind_of(e.data) != wire::write_imm) return protocol_violation();
    if (zone->check) zone->check->on_incoming(*this);
    Incoming in;
    in.write_imm = true;
    in.has_imm = true;
    in.imm = static_cast<std::uint32_t>(e.data);
    const std::uint64_t carried = wire::write_imm_length(e.data);
    in.length = e.len != 0 || carried == wire::kLengthUnknown ? e.len : carried;
    deliver(std::move(in));
    ++msgs_handled;
    return;
  }
  // The context is the header at the start of a SlotBase (pointer-
  // interconvertible: SlotBase is standard-layout).
  auto* base = reinterpret_cast<SlotBase*>(e.context);
  if (base->kind == SlotBase::Kind::recv_buffer) {
    auto* s = static_cast<RxSlot*>(base);
    // The peer may send as soon as it sees the connection established, so a
    // message can arrive before this side has handled its own `connected`
    // event: connect_pending receives too.
    auto live = [this] { return state == EndpointState::connected || state == EndpointState::connect_pending; };
    if (e.err != 0 || !live()) return;
    if (zone->check) zone->check->on_incoming(*this);
    handle_message(*s, e);
    if (!live()) return;
    // A refusal means the connection is going away; the shutdown event
    // that follows flushes everything.
    (void)repost(*s);
    // A connection that receives grows its posted buffers towards max_recv,
    // one per message (kRxInitial); a refusal means it is going away.
    if (rx.size() < options.max_recv) (void)post_rx();
    return;
  }
  auto* s = static_cast<OpSlot*>(base);
  if (s->kind == OpSlot::Kind::free || !s->posted) return;  // already flushed
  s->posted = false;
  if (s->reported) {
    // Completed when the peer acknowledged it (handle_ack); the transport
    // is done with its context now. Delivered either way: an error the
    // transport reports this late changes nothing.
    --in_flight;
    release_slot(s->index);
    return;
  }
  if (e.err == 0 && s->msg_seq > peer_handled) return;  // delivered; completes on the peer's ack (handle_ack)
  --in_flight;
  if (e.err != 0) {
    // Once the endpoint left `connected` (a local disconnect), the
    // transport's cancellations are flushes, not remote failures.
    const auto status =
        state == EndpointState::connected ? status_from_transport(e.err) : make_error_code(Errc::flushed);
    fail(s, status, ConnectionEventType::lost);
    return;
  }
  complete(*s, {});
}

void EndpointImpl::drain() {
  // Messages the peer put on the ring before it left are delivered too
  // (first, as progress() takes them).
  if (inbox) (void)take_ring();
  std::shared_lock<std::shared_mutex> transport(zone->transport_mu);
  backend::CqEntry entries[16];
  for (int n; conn && (n = conn->poll(entries)) > 0;)
    for (int i = 0; i < n; ++i) handle(entries[i]);
}

int EndpointImpl::progress() {
  MutexLock lock(mu);
  if (!conn || closed) return 0;
  progress_calls.fetch_add(1, std::memory_order_relaxed);
  if (!gathered.empty()) note_gather_wait();
  flush_gathered();
  std::shared_lock<std::shared_mutex> transport(zone->transport_mu);
  int total = 0;
  if (inbox || outbox) total += take_ring();
  backend::CqEntry entries[16];
  for (;;) {
    int n = conn->poll(entries);
    if (n <= 0) break;
    // A message read from the transport may answer a send on the ring: the
    // peer's count in the ring, published before it answered, completes
    // the send first.
    take_ring_acks();
    for (int i = 0; i < n; ++i) handle(entries[i]);
    total += n;
    // Fewer than asked for: nothing more, unless the receive buffers ran
    // out and were posted again, which the transport may need to be called
    // for (Connection::needs_poll).
    if (!conn || (n < 16 && !conn->needs_poll())) break;
  }
  if (conn) {
    // Messages that came by the transport are counted in the ring too,
    // before anything this side sends after handling them: an answer on
    // the ring then finds its request's acknowledgement there (take_ring).
    if (inbox) inbox->publish_handled(msgs_handled);
    flush_acks();
    flush_replies();
    pump_deferred();
  }
  set_owes_work(conn && (msgs_acked != msgs_handled || !pending_replies.empty() || !deferred.empty()));
  return total;
}

bool EndpointImpl::ready_to_sleep() {
  MutexLock lock(mu);
  if (!conn) return true;
  std::shared_lock<std::shared_mutex> transport(zone->transport_mu);
  // An acknowledgement or reply the transport could not take yet is
  // retried rather than left until after a sleep.
  return conn->try_wait() && msgs_acked == msgs_handled && pending_replies.empty() && ring_idle();
}

bool EndpointImpl::quiet_but_queue() {
  MutexLock lock(mu);
  if (!conn) return true;
  std::shared_lock<std::shared_mutex> transport(zone->transport_mu);
  return conn->quiet() && msgs_acked == msgs_handled && pending_replies.empty() && ring_idle();
}

void EndpointImpl::push_event(ConnectionEvent ev) {
  {
    std::lock_guard<std::mutex> lock(ev_mu);
    if (events.empty()) ev_signal.raise();
    events.push_back(std::move(ev));
  }
  ev_cv.notify_all();
}

void EndpointImpl::on_cm_event(backend::CmEvent& ev, std::uint64_t gen) {
  MutexLock lock(mu);
  if (!conn || gen != conn_gen) return;  // for a connection since reset
  const EndpointState st = state;
  switch (ev.kind) {
    case backend::CmEvent::connected: {
      if (st != EndpointState::connect_pending) return;
      std::vector<std::uint8_t> user;
      if (active) {
        // The acceptor's Hello (the passive side read the connector's with
        // the request).
        auto h = wire::parse_hello(ev.data);
        if (!h || h->hello.version != wire::kVersion) {
          // Not a Remora peer of this protocol version: the connection
          // cannot be used. Reported as a rejection.
          conn->shutdown();
          state = EndpointState::disconnected;
          flush_all();
          push_event(ConnectionEvent{ConnectionEventType::rejected, {}});
          return;
        }
        peer_max_message = h->hello.max_message;
        user.assign(h->user.begin(), h->user.end());
      }
      state = EndpointState::connected;
      offer_direct();
      push_event(ConnectionEvent{ConnectionEventType::established, std::move(user)});
      pump_deferred();
      return;
    }
    case backend::CmEvent::shutdown:
    case backend::CmEvent::error: {
      if (st == EndpointState::connect_pending) {
        ConnectionEvent out{ConnectionEventType::unreachable, {}};
        if (ev.kind == backend::CmEvent::error && ev.err == ECONNREFUSED) {
          if (auto h = wire::parse_hello(ev.data)) {
            out.type = ConnectionEventType::rejected;
            out.private_data.assign(h->user.begin(), h->user.end());
          }
        }
        state = EndpointState::disconnected;
        flush_all();
        push_event(std::move(out));
        return;
      }
      if (st != EndpointState::connected) return;
      drain();  // what already arrived first, the peer's goodbye among it
      if (state != EndpointState::connected) return;
      state = peer_said_bye ? EndpointState::disconnected : EndpointState::error;
      flush_all();
      push_event(ConnectionEvent{peer_said_bye ? ConnectionEventType::disconnected : ConnectionEventType::lost, {}});
      return;
    }
    default: return;
  }
}

// Endpoint::~Endpoint / close() already closed it on the owner's thread;
// this only covers an engine object that never had a handle.
EndpointImpl::~EndpointImpl() { close(); }

void EndpointImpl::close() noexcept {
  release_at_peer();  // while still connected
  {
    MutexLock lock(mu);
    if (closed) return;
    closed = true;
  }
  drop_connection();
  if (zone->check) zone->check->on_endpoint_close(*this);
}

bool EndpointImpl::settle_pending() noexcept {
  bool pending = false;
  {
    MutexLock lock(mu);
    pending = conn && !closed && state == EndpointState::connect_pending;
  }
  if (pending) zone->agent->dispatch_cm();
  return pending;
}

void EndpointImpl::settle_accept() noexcept {
  bool pending = false;
  {
    MutexLock lock(mu);
    pending = conn && !closed && !active && state == EndpointState::connect_pending;
  }
  if (pending) zone->agent->dispatch_cm();
}

void EndpointImpl::drop_connection() noexcept {
  std::unique_ptr<backend::Connection> c;
  {
    MutexLock lock(mu);
    if (conn && state == EndpointState::connected) {
      flush_gathered();  // posted before the close: placed, as over the transport
      if (state == EndpointState::connected) say_goodbye();
      conn->shutdown();
    }
    flush_all();
    if (state == EndpointState::connected || state == EndpointState::connect_pending)
      state = EndpointState::disconnected;
    c = std::move(conn);
    receives.unmatched.clear();
    drop_rings();
    direct_peer.reset();
    peer_said_bye = false;
    peer_max_message = 0;
  }
  if (c) {
    zone->agent->remove(this, c->wait_fd(), c->shared_queue());
    watch_queues(c->wait_fd(), c->shared_queue(), false);
    {
      MutexLock lock(zone->cm_mu);
      zone->cm_endpoints.erase(c->cm_id());
    }
  }
}

}  // namespace remora::detail
