// src/core/impl.hpp - internal object model behind the public handles.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <span>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "check/check.hpp"
#include "core/direct/copier.hpp"
#include "core/direct/direct.hpp"
#include "core/direct/huge_pages.hpp"
#include "core/direct/ring.hpp"
#include "core/direct/split_choice.hpp"
#include "core/protocol/wire.hpp"
#include "core/sync.hpp"
#include "fabric/backend.hpp"
#include "remora/remora.hpp"

namespace remora::detail {

class Agent;
struct EndpointImpl;
struct ListenerImpl;

/// An eventfd that is readable while a queue is non-empty. The eventfd is
/// made the first time someone asks for it (fd()): most queues are never
/// waited on through an fd, and an idle connection should not cost one.
/// raise() and clear() are called under the queue's own lock.
class Signal {
 public:
  Signal() = default;
  ~Signal();
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;
  /// Make it readable (nothing to do when it is already).
  void raise() noexcept;
  /// Make it unreadable (nothing to do when it is not raised).
  void clear() noexcept;
  /// Read whatever it holds, also what other processes wrote to it (a
  /// same-host peer rings a zone's doorbell with a write of its own).
  void drain() noexcept;
  /// The eventfd, made now if it does not exist yet; -1 if it cannot be.
  int fd() const noexcept;

 private:
  mutable std::mutex mu_;
  mutable int fd_ = -1;  // written under mu_
  bool raised_ = false;  // under mu_
};

/// Anonymous memory reserved without being touched (MAP_NORESERVE): its
/// pages cost nothing until something is written to them. The receive
/// buffers of a connection, most of which an idle connection never uses.
class LazyBuffer {
 public:
  LazyBuffer() = default;
  ~LazyBuffer();
  LazyBuffer(LazyBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  LazyBuffer& operator=(LazyBuffer&& o) noexcept;
  /// False when the address space is exhausted.
  bool reserve(std::size_t bytes) noexcept;
  std::uint8_t* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }

 private:
  std::uint8_t* p_ = nullptr;
  std::size_t n_ = 0;
};

struct FabricImpl {
  std::shared_ptr<backend::Transport> transport;
  FabricOptions options;
  // remora-check (docs/check.md): null when checking is off.
  std::shared_ptr<check::Checker> check;
  std::optional<FabricInfo> info;  // the transport's, as the checks change it
};

struct RegionImpl;

struct ZoneImpl : std::enable_shared_from_this<ZoneImpl> {
  ~ZoneImpl();
  std::shared_ptr<FabricImpl> fabric;
  std::unique_ptr<backend::Domain> domain;
  std::uint64_t id = 0;
  bool busy_poll = false;
  std::uint64_t key_mask = ~std::uint64_t{0};
  std::shared_ptr<Agent> agent;
  check::Checker* check = nullptr;  // the fabric's; null when checking is off

  // Held shared by every thread inside the transport's progress (reading a
  // queue, where the provider also serves incoming reads from registered
  // memory); a deregistration takes it exclusively once, after the provider
  // dropped the registration, so no such call still reads the region's
  // memory when MemoryRegion::close returns. Order: an endpoint's mu, then
  // this, then regions_mu.
  std::shared_mutex transport_mu;

  // Regions by remote key, for the agent's checks of incoming requests.
  std::shared_mutex regions_mu;
  std::map<std::uint64_t, RegionImpl*> regions;

  // Connection-management routing: transport identity -> object. A
  // transport identity is an address the provider may give a later
  // connection once this one is closed, so an endpoint's entry carries the
  // generation of the connection it was made for (EndpointImpl::conn_gen),
  // and the agent reads an event and resolves its identity under cm_mu in
  // one step: an entry is erased before its connection closes, and closing
  // discards the connection's queued events, so an event is never resolved
  // to a later connection at the same address.
  Mutex cm_mu;
  struct CmOwner {
    std::weak_ptr<EndpointImpl> ep;
    std::uint64_t gen = 0;
  };
  std::map<const void*, CmOwner> cm_endpoints REMORA_GUARDED_BY(cm_mu);
  std::map<const void*, std::weak_ptr<ListenerImpl>> cm_listeners REMORA_GUARDED_BY(cm_mu);

  Mutex rng_mu;
  std::mt19937_64 rng REMORA_GUARDED_BY(rng_mu){std::random_device{}()};
  std::uint64_t random_key();

  // Same-host direct path (docs/design.md, "Same-host direct path"): the
  // zone's region table, which same-host peers map; null when the path is
  // off (FabricOptions::same_host, REMORA_SAMEHOST=0, the in-memory transport)
  // or the table could not be made (`direct_why_not` says which). Set at
  // creation, then constant.
  std::unique_ptr<direct::Table> direct;
  /// The table's count of bells its peers rang (direct::RingWatch); 0
  /// without the path.
  std::uint64_t rings_rung() const noexcept { return direct ? direct->rung() : 0; }
  std::string direct_why_not;
  // Large cross-memory transfers of this zone's connections split over two
  // threads (src/core/direct/copier.hpp), unless REMORA_COPY_HELPER=0 when
  // the zone was made. Set at creation, then constant.
  bool direct_split = true;
  // Writes (and reads) posted back to back while a user polls placed
  // together (EndpointImpl::gatherable), unless REMORA_GATHER_WRITES=0 when
  // the zone was made. Set at creation, then constant.
  bool direct_gather = true;
  // Registration moves the pages of a region same-host peers reach by
  // cross-memory attach into huge pages (direct::HugePageJob), unless
  // REMORA_HUGEPAGES=0 when the zone was made. Set at creation, then
  // constant.
  bool direct_huge = true;
  // Writes of at least kRingWriteMin bytes into memory same-host peers do
  // not share go over the connection's message ring, where the peer's
  // progress copies them (EndpointImpl::try_ring_write), when
  // REMORA_RING_WRITES=1 when the zone was made (off by default: bench/
  // README.md, "Writes over the message ring"). Set at creation, then
  // constant.
  bool ring_writes = false;
  // The second part of a large cross-memory transfer (copier.hpp) is offered
  // to the same-host peer over the connection's ring, which moves it from its
  // side, and this zone moves its peers' parts (docs/design.md, "The peer
  // moves half"), unless REMORA_PEER_HELPER=0 when the zone was made. Set at
  // creation, then constant.
  bool direct_pull = true;
  // Files that registered ranges of this zone are shared mappings of
  // (find_shared_file): one descriptor per file and open mode, however many
  // regions lie in it (a program registering thousands of ranges of one
  // mapped file must not hold thousands of descriptors). `fd` closes when
  // the last such region closes (release_shared_file).
  struct SharedFile {
    int fd = -1;
    std::size_t regions = 0;
  };
  std::mutex shared_files_mu;                                                         // a leaf
  std::map<std::tuple<std::uint64_t, std::uint64_t, bool>, SharedFile> shared_files;  // (dev, inode, writable)
  void release_shared_file(int fd) noexcept;
  /// A shareable region of this zone was revoked in `direct`: every peer
  /// that may have mapped it (a connection whose peer took this zone's
  /// direct offer) is asked to drop the mapping, and this waits for the
  /// answers (bounded, 1 s; not on the agent thread, which takes them, nor
  /// in a zone without one, whose answers wait for the next progress call).
  void revoke_at_peers() noexcept;
};

struct RegionImpl : std::enable_shared_from_this<RegionImpl> {
  ~RegionImpl();
  void close() noexcept;
  Result<void> persist(std::uint64_t addr, std::uint64_t len) const;
  /// persist() for a peer's PERSISTENT flush, run by the zone's durability
  /// worker: remote_access once the region was closed. close() waits for a
  /// call already running, so the mapping is never unmapped under it.
  Result<void> persist_for_peer(std::uint64_t addr, std::uint64_t len);
  bool contains(const void* addr, std::size_t len) const noexcept {
    auto a = reinterpret_cast<std::uintptr_t>(addr);
    auto b = reinterpret_cast<std::uintptr_t>(base);
    return a >= b && len <= length && a - b <= length - len;
  }

  std::shared_ptr<ZoneImpl> zone;
  void* base = nullptr;
  std::size_t length = 0;
  Access access = Access::none;
  bool persistent = false;
  std::unique_ptr<backend::MemoryKey> mkey;
  std::uint64_t key = 0;
  bool registered = false;  // listed in zone->regions
  int direct_slot = -1;     // its entry in zone->direct, or -1
  // Its move into huge pages (direct::HugePageJob), stopped by close();
  // null when there is none. Set at registration, then constant.
  std::shared_ptr<direct::HugePageJob> huge;
  // Set for ProtectionZone::map_file regions.
  struct pmem2_map* map = nullptr;
  void (*persist_fn)(const void*, std::size_t) = nullptr;
  // The file the region's memory is a shared mapping of (map_file and
  // allocate from offset 0; a register_memory range the program mapped from
  // a file, opened again by its name); closed by close(), or given back to
  // the zone's shared_files when `fd_shared`.
  int fd = -1;
  bool fd_shared = false;
  // Set for ProtectionZone::allocate regions: the memfd mapping, unmapped
  // by close().
  void* owned_map = nullptr;
  std::size_t owned_len = 0;
  std::atomic<bool> closed{false};
  std::mutex persist_mu;                                              // held by persist_for_peer; close() waits on it
  std::unique_ptr<check::RegionState, check::RegionStateFree> check;  // remora-check's, or null
};

struct CqImpl {
  ~CqImpl();
  std::shared_ptr<ZoneImpl> zone;
  std::mutex mu;
  std::condition_variable cv;
  // remora-check: the record a completion carries (check::on_reap when it
  // is taken); null when checking is off.
  struct Entry {
    Completion c;
    check::RecordPtr check;
  };
  std::deque<Entry> queue;
  // queue.size(), written under mu, read without it by a poster
  // (EndpointImpl::gatherable).
  std::atomic<std::size_t> queued{0};
  Signal signal;
  std::atomic<bool> fd_in_use{false};  // written under mu
  // The program asked for the descriptor (CompletionQueue::fd()): it may
  // sleep on it between polls, so its polls claim nothing (claim()). The
  // library's own wait() uses the descriptor too, and does not set this.
  std::atomic<bool> fd_given{false};

  // The endpoints feeding this queue whose connection is up, kept by
  // attach() and detach() (EndpointImpl::watch_queues, when a connection is
  // set up and dropped) rather than collected on every drive: drive() and
  // arm() read each distinct shared transport queue once and then visit
  // only the endpoints that read reported, those that said they owe work
  // (note_owing) and those with a transport queue of their own. With
  // thousands of connections on a few shared queues, a poll no longer costs
  // anything per idle connection.
  struct Source {
    std::weak_ptr<EndpointImpl> ep;
    backend::SharedQueue* queue = nullptr;  // null: the connection has its own transport queue
    int refs = 0;                           // 2 when this is both its send and its receive queue
    bool owing = false;                     // listed in `owing`
  };
  Mutex sources_mu;  // a leaf
  std::unordered_map<const EndpointImpl*, Source> sources REMORA_GUARDED_BY(sources_mu);
  // The distinct shared transport queues of `sources`, with how many
  // sources are on each.
  std::unordered_map<backend::SharedQueue*, std::size_t> shared_queues REMORA_GUARDED_BY(sources_mu);
  // The sources with a transport queue of their own (progressed by every
  // drive, as they cannot be read in a batch).
  std::unordered_set<const EndpointImpl*> own_queue REMORA_GUARDED_BY(sources_mu);
  // Sources whose progress() left work only another progress() does
  // (EndpointImpl::owes_work): drive() takes them.
  std::vector<const EndpointImpl*> owing REMORA_GUARDED_BY(sources_mu);
  /// `ep`'s connection, on shared transport queue `q` (null: its own), feeds
  /// this queue. Once per attachment (twice when it is both send and receive
  /// queue), matched by detach().
  void attach(const std::shared_ptr<EndpointImpl>& ep, backend::SharedQueue* q) REMORA_EXCLUDES(sources_mu);
  void detach(const EndpointImpl& ep) REMORA_EXCLUDES(sources_mu);
  /// `ep` owes work (its owes_work was just set): the next drive progresses it.
  void note_owing(const EndpointImpl& ep) REMORA_EXCLUDES(sources_mu);
  // Sources with a same-host message ring, and their inboxes (EndpointImpl::
  // inbox, kept alive here): a drive progresses those whose inbox is not
  // idle (a peer process fills it, or rang its bell; no transport read
  // reports that), and arm() does not sleep while one is not.
  direct::RingWatch ringed REMORA_GUARDED_BY(sources_mu);
  /// `ep` (a source of this queue) got `inbox` (on), or is letting it go
  /// (off): its bell joins or leaves the epoll set.
  void watch_ring(const EndpointImpl& ep, const std::shared_ptr<direct::Inbox>& inbox, bool on)
      REMORA_EXCLUDES(sources_mu);

  // The descriptor a waiter sleeps on (CompletionQueue::fd(), wait()): an
  // epoll set of the queue's eventfd and the transport wait fds of the
  // connections feeding it, so that a sleeping user wakes when its
  // transport has something (and drives progress itself) rather than only
  // after the zone's agent woke, handled it and raised the eventfd: one
  // wake-up instead of two. Made on first use.
  Mutex watch_mu;
  int epfd REMORA_GUARDED_BY(watch_mu) = -1;
  // The transport fds of the feeding connections, each with how many of
  // them use it (the connections on one shared queue have one fd).
  std::unordered_map<int, std::size_t> transport_fds REMORA_GUARDED_BY(watch_mu);
  /// A connection feeding this queue: its transport fd joins the set.
  void watch(int fd);
  /// The connection is going away: its fd leaves the set.
  void unwatch(int fd);
  /// The epoll set, made now if needed (-1 if it cannot be).
  int wait_fd();

  // Until this steady-clock time (ns) a user thread polling this queue
  // drives the progress of its endpoints; the agent stands back.
  std::atomic<std::int64_t> user_until{0};
  // Threads asleep on wait_fd() that drive the queue each time they wake
  // (CompletionQueue::Sleeper, held by wait() and the faces' waits): while
  // there is one, the agent stands back too, so a completion is made by the
  // thread that waits for it, with one wake-up.
  std::atomic<int> sleepers{0};

  void push(Completion c, check::RecordPtr check = nullptr);
  std::size_t take(std::span<Completion> out);
  /// drive(), then take(): what poll() and wait() do. While this thread
  /// drives, the completions it makes for this queue do not raise the
  /// eventfd (it takes them at once: a write and a read of the eventfd per
  /// batch saved); if any are left after the take, take() raises it.
  std::size_t drive_and_take(std::span<Completion> out);
  /// Progress the endpoints feeding this queue that have something to do,
  /// on the calling thread.
  void drive() REMORA_EXCLUDES(sources_mu);
  /// Before a thread sleeps on wait_fd(): false when something is pending
  /// for an endpoint feeding the queue (entries read from a shared transport
  /// queue, work owed, ready_to_sleep() false for one with its own transport
  /// queue, or a transport queue that cannot be slept on): do not sleep.
  bool arm() REMORA_EXCLUDES(sources_mu);
  /// CompletionQueue::expecting(): a completion is queued, or an endpoint
  /// whose connection feeds the queue has an operation in flight (its send
  /// queue) or a receive posted (its receive queue, or its shared receive
  /// queue's).
  bool expecting() REMORA_EXCLUDES(sources_mu);
  /// A user thread is polling: leave the endpoints to it for a short while
  /// (not when the queue's descriptor is in use: such a user sleeps on it
  /// between polls, and the agent keeps driving).
  void claim();
  bool claimed(std::int64_t now) const noexcept { return user_until.load(std::memory_order_relaxed) > now; }
  /// A Sleeper is held: endpoints whose transport has a wait fd (it is in
  /// this queue's epoll set, so it wakes the sleeper) are left to it.
  bool slept_on() const noexcept { return sleepers.load(std::memory_order_relaxed) > 0; }
};

struct ListenerImpl {
  ~ListenerImpl();
  void close() noexcept;
  std::shared_ptr<ZoneImpl> zone;
  std::unique_ptr<backend::PassiveEndpoint> pep;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<struct ConnRequestImpl>> requests;
  Signal signal;
  bool closed = false;
};

struct ConnRequestImpl {
  std::weak_ptr<ListenerImpl> listener;
  std::shared_ptr<void> request;  // backend request info
  std::vector<std::uint8_t> private_data;
  std::uint32_t peer_max_message = 0;
  bool used = false;
  std::string peer_host;  // empty when the transport did not say
  std::uint16_t peer_port = 0;
};

/// What every operation context the core hands the transport starts with:
/// the transport's header (its address is the context) and the kind, which
/// tells a connection's receive buffer (RxSlot) from an operation (OpSlot).
struct SlotBase {
  backend::OpSlotHeader hdr;
  // local: a VISIBILITY flush completed here once every earlier operation
  // has completed (see Endpoint::flush).
  enum class Kind : std::uint8_t { free, write, read, send, ctl, local, recv_buffer } kind = Kind::free;
};
static_assert(std::is_standard_layout_v<SlotBase>, "a context is read as a SlotBase through its header");

/// One of a connection's receive buffers, posted to the transport. An idle
/// connection holds kRxInitial of them; each message that arrives adds one
/// more, up to max_recv (EndpointImpl::grow_rx).
struct RxSlot : SlotBase {
  backend::Iov buf{};
};

/// Receive buffers a connection posts at set-up. The tcp provider keeps a
/// message it has no posted receive for in the socket until one is posted
/// (it is never dropped), so fewer only delay a burst's first messages; each
/// costs the provider a transfer entry (about 460 bytes) and us an RxSlot.
inline constexpr std::size_t kRxInitial = 8;

/// How long gathered same-host writes may wait for their user's next poll
/// before the agent places them (the user stopped polling right after
/// posting; EndpointImpl::gather_look_due).
inline constexpr std::chrono::milliseconds kGatherBound{2};

/// One posted operation.
struct OpSlot : SlotBase {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;
  Completion done;  // cookie/op/length prefilled
  bool signalled = true;
  bool fence = false;
  bool posted = false;
  bool finished = false;  // outcome known, waiting for earlier ones (order)
  // Reported to the user while the transport still holds the slot's context
  // (a message the peer acknowledged before the transport's own completion
  // came): released when that completion comes (handle) or the connection
  // goes (flush_all).
  bool reported = false;
  // Messages consuming a receive at the peer (sends, writes with immediate):
  // their number on the connection (0 for other operations). One the
  // transport finished (no longer `posted`) while the peer's acknowledgement
  // is still due waits in EndpointImpl::unacked.
  std::uint64_t msg_seq = 0;
  // A send placed in the peer's inbox (same-host message ring): in flight
  // until the peer's handled count covers it.
  bool on_ring = false;
  /// Starts (or, for `local`, completes) only once every earlier operation
  /// on the endpoint has completed.
  bool waits_for_earlier() const noexcept { return fence || kind == Kind::local; }
  // Operation description, kept for deferred (fenced) posting.
  backend::Iov iov[kMaxSegments];
  std::size_t iov_count = 0;
  std::uint64_t raddr = 0, rkey = 0, data = 0;
  bool with_data = false;
  wire::Ctl ctl{};
  check::RecordPtr check;  // remora-check's, or null
};

/// Local segments that passed the handle layer's checks.
struct CheckedSegments {
  backend::Iov iov[kMaxSegments];
  std::size_t count = 0;
  std::uint64_t total = 0;
};

/// One operation as the handle layer (handles/endpoint.cpp) checked and
/// described it, for EndpointImpl::post.
struct Operation {
  OpSlot::Kind kind;
  Opcode opcode;
  const CheckedSegments* local = nullptr;
  std::uint64_t length = 0;
  std::uint64_t raddr = 0, rkey = 0;  // RMA: the remote range's start and key
  // remora-check only (read by check::Checker::on_post): the consumer's
  // segments, one per entry of `local`, and the remote region.
  const Segment* segments = nullptr;
  std::uint64_t remote_base = 0;   // RMA, flush: the remote region's start
  bool remote_persistent = false;  // RMA, flush: the remote region is persistent
  bool with_data = false;          // RMA write: with immediate data
  std::uint64_t data = 0;          // immediate data (wire kinds)
  wire::Ctl ctl{};                 // control operations
  /// A VISIBILITY flush: completes here, with no message, when it lies in
  /// the range of the latest write the engine accepted (Endpoint::flush).
  bool may_complete_locally = false;
};

struct PostedRecv {
  std::uint64_t cookie;
  std::vector<backend::Iov> iov;
};

struct Incoming {
  bool write_imm = false;
  bool has_imm = false;
  std::uint32_t imm = 0;
  std::uint64_t length = 0;
  std::vector<std::uint8_t> bytes;
  // Where the receive completes (set for messages held by a shared queue).
  std::shared_ptr<CqImpl> cq;
  std::uint64_t endpoint_id = 0;
};

/// Software receive matching, in order: posted receives meet incoming
/// messages; whichever comes first waits for the other. Used by endpoints
/// and by shared receive queues (the caller holds the owner's lock).
struct RecvQueue {
  std::deque<PostedRecv> posted;
  std::deque<Incoming> unmatched;

  /// Match `pr` with a waiting message (its completion is reported at once)
  /// or keep it.
  void post(PostedRecv pr);
  /// Match `in` with the oldest posted receive or hold it.
  void arrive(Incoming in);
};

struct SrqImpl {
  std::shared_ptr<ZoneImpl> zone;
  std::uint32_t capacity = 0;
  std::mutex mu;
  RecvQueue queue;
};

/// The second hand of an endpoint's split transfers (direct::FarHand): the
/// part offered to the same-host peer as a ring_pull message in its inbox,
/// this side's outbox (docs/design.md, "The peer moves half"). Made on the
/// stack for one transfer, with the endpoint's lock held.
class PullHand final : public direct::FarHand {
 public:
  /// `share`: the endpoint's share of its splits for the peer, in 64ths,
  /// which finish() moves by one towards balance: down when this thread
  /// had to wait for the peer, up when the peer was done first.
  PullHand(direct::Outbox& out, direct::Peer& peer, std::atomic<std::uint64_t>& offered, unsigned& share) noexcept
      : out_(out), peer_(peer), offered_(offered), share_(share) {}
  bool offer(bool write, const std::uint64_t* keys, const iovec* remote, std::size_t nr, const iovec* local,
             std::size_t n, const Tails* tails) noexcept override;
  bool tails_go(bool whole) noexcept override;
  ssize_t finish() noexcept override;
  bool tails_placed() const noexcept override { return placed_; }
  unsigned share() const noexcept override { return share_; }
  static constexpr unsigned kMinShare = 8, kMaxShare = 48;
  /// The peer answered that it cannot reach this process (EPERM, ESRCH):
  /// offer it nothing more.
  bool unreachable() const noexcept { return unreachable_; }
  /// finish() took the part back (the peer had not started it).
  bool taken_back() const noexcept { return taken_back_; }

 private:
  direct::Outbox& out_;
  direct::Peer& peer_;
  std::atomic<std::uint64_t>& offered_;
  unsigned& share_;
  wire::RingPull* pull_ = nullptr;    // the message offered, in the peer's ring
  wire::PullTails* tails_ = nullptr;  // its last bytes' trailer, when it has one
  bool placed_ = false;
  bool gate_seen_ = false;   // tails_go looked at the peer's part
  bool peer_first_ = false;  // and found it done
  bool unreachable_ = false;
  bool taken_back_ = false;
};

struct EndpointImpl : std::enable_shared_from_this<EndpointImpl> {
  ~EndpointImpl();
  std::shared_ptr<ZoneImpl> zone;
  std::uint64_t id = 0;
  EndpointOptions options;
  std::shared_ptr<CqImpl> send_cq, recv_cq;
  std::shared_ptr<SrqImpl> srq;

  // Everything below is guarded by mu, including calls into `conn`.
  Mutex mu;
  std::atomic<EndpointState> state{EndpointState::unconnected};
  std::unique_ptr<backend::Connection> conn REMORA_GUARDED_BY(mu);
  // Counts the connections this endpoint has made (setup_connection): a
  // connection-management event is applied only to the generation it was
  // read for (ZoneImpl::cm_endpoints), never to a connection made after a
  // reset that the event raced with.
  std::uint64_t conn_gen REMORA_GUARDED_BY(mu) = 0;
  // Same-host revocation (ZoneImpl::revoke_at_peers): the peer answered this
  // side's direct offer, and whether it took it (it maps this zone's table,
  // so it may map regions of it); the op_direct_revoke requests sent and
  // answered on this connection. A peer that has not answered yet is asked
  // too.
  bool offer_answered REMORA_GUARDED_BY(mu) = false;
  bool peer_maps_regions REMORA_GUARDED_BY(mu) = false;
  std::uint64_t revokes_sent REMORA_GUARDED_BY(mu) = 0;
  std::uint64_t revokes_answered REMORA_GUARDED_BY(mu) = 0;
  // Made on first use, up to options.max_outstanding (take_slot): an idle
  // connection holds none. A deque never moves its elements as it grows, so
  // the addresses the transport holds as contexts stay valid.
  std::deque<OpSlot> slots REMORA_GUARDED_BY(mu);
  std::vector<std::uint32_t> free_slots REMORA_GUARDED_BY(mu);
  std::uint32_t in_flight REMORA_GUARDED_BY(mu) = 0;         // posted to the transport, not yet completed
  std::deque<std::uint32_t> deferred REMORA_GUARDED_BY(mu);  // waiting behind a fence
  std::deque<std::uint32_t> order REMORA_GUARDED_BY(mu);     // every slot in use, in posting order
  // Receive buffers, all posted: kRxInitial at first, one more per message
  // received up to options.max_recv (post_rx). A deque, so that growing
  // never moves the contexts the transport holds.
  std::deque<RxSlot> rx REMORA_GUARDED_BY(mu);
  LazyBuffer rx_memory REMORA_GUARDED_BY(mu);
  std::size_t rx_buf_len REMORA_GUARDED_BY(mu) = 0;  // each buffer's length and stride in rx_memory
  std::unique_ptr<backend::MemoryKey> rx_key REMORA_GUARDED_BY(mu);

  RecvQueue receives REMORA_GUARDED_BY(mu);  // unless srq
  std::deque<wire::Ctl> pending_replies REMORA_GUARDED_BY(mu);
  // Receive order across connections. A message that consumes a receive
  // completes at its sender only once the receiver acknowledged it as
  // handled (its receive completion queued, or the message held), as an RC
  // receive completion is written before the sender's acknowledgement: a
  // sender that waits for a send's completion before sending on another
  // connection is sure the receiver sees the two in that order.
  std::uint64_t msgs_posted REMORA_GUARDED_BY(mu) = 0;   // sender: receive-consuming messages posted
  std::uint64_t peer_handled REMORA_GUARDED_BY(mu) = 0;  // sender: the peer's latest acknowledgement
  std::deque<std::pair<std::uint32_t, std::uint32_t>> unacked
      REMORA_GUARDED_BY(mu);                             // sender: (slot, generation), posting order
  std::uint64_t msgs_handled REMORA_GUARDED_BY(mu) = 0;  // receiver: messages handled
  std::uint64_t msgs_acked REMORA_GUARDED_BY(mu) = 0;    // receiver: the count last acknowledged
  std::uint32_t peer_max_message REMORA_GUARDED_BY(mu) = 0;
  bool active REMORA_GUARDED_BY(mu) = false;  // this side connected (the peer's Hello comes with `connected`)
  // The latest write posted: key and remote range (Endpoint::flush).
  std::uint64_t last_write_key REMORA_GUARDED_BY(mu) = 0, last_write_addr REMORA_GUARDED_BY(mu) = 0,
                               last_write_len REMORA_GUARDED_BY(mu) = 0;
  bool peer_said_bye REMORA_GUARDED_BY(mu) = false;
  bool closed REMORA_GUARDED_BY(mu) = false;
  // Gathered writes and the agent's bound on their wait, read by the agent
  // thread without `mu` (gather_look_due): the steady-clock time of the
  // first write of the batch gathered now (0: none; also what gatherable
  // and note_gather_wait read, under `mu`), and the time of the
  // look last asked of the agent (Agent::look_by; 0: none pending), asked
  // at most once per kGatherBound.
  std::atomic<std::int64_t> gather_since{0};
  std::atomic<std::int64_t> gather_look_at{0};
  // Same-host direct path: the peer zone's region table, mapped once its
  // offer was accepted (null: everything goes over the transport), and why
  // it is not used when it is not (diagnostics).
  std::shared_ptr<direct::Peer> direct_peer REMORA_GUARDED_BY(mu);
  std::string direct_why_not REMORA_GUARDED_BY(mu);
  // Operations placed by the direct path (tests look at it).
  std::atomic<std::uint64_t> direct_ops{0};
  // Of those, the ones copied (or atomically stored) through this process's
  // own mapping of a shareable region (tests look at it).
  std::atomic<std::uint64_t> direct_mapped_ops{0};
  // Writes posted back to back while a user thread polls the completion
  // queue, placed together at the next post of another kind, the next
  // drive of the endpoint, or when Peer::kMaxBatch / kGatherBytes are reached
  // (docs/design.md, "Writes posted back to back"): their slots, in posting
  // order, and their bytes. VISIBILITY flushes the table allows join them
  // (joins_gathered), completed once the writes before them are placed; the
  // writes among the slots are counted. Reads are gathered the same way, a
  // batch holding reads only (no flush joins them). Writes or reads placed
  // in a batch of two or more, flushes that joined one, and writes or reads
  // of a batch sent over the transport instead (tests look at them).
  static constexpr std::size_t kMaxGathered = 2 * direct::Peer::kMaxBatch;
  // Writes go over the message ring from this many bytes (try_ring_write),
  // in pieces of more than kRingWritePiece bytes (a ring of smaller slots
  // carries none).
  static constexpr std::size_t kRingWriteMin = 16384;
  static constexpr std::size_t kRingWritePiece = 4096;
  // The inbox of a zone that takes writes: at least this many slots, of at
  // least a 64 KiB piece and its RingWrite each (offer_inbox).
  static constexpr std::size_t kRingWriteSlot = 65536 + sizeof(wire::RingWrite);
  static constexpr std::size_t kRingWriteSlots = 32;
  std::vector<std::uint32_t> gathered REMORA_GUARDED_BY(mu);
  std::uint64_t gathered_bytes REMORA_GUARDED_BY(mu) = 0;
  std::size_t gathered_writes REMORA_GUARDED_BY(mu) = 0;
  // Writes posted since the posting thread's own poll count was last seen
  // to change (polls_by_this_thread), and in the stretch before that: a
  // thread that posts one write per poll (one in flight, the usual latency
  // loop) has each placed at once, as gathering would only hold it until
  // that poll (EndpointImpl::note_write, gatherable). A thread that never
  // polls (another thread reaps its completions) goes on gathering. The
  // stretch before the first counts as many, so the first writes a program
  // posts are gathered.
  static constexpr std::uint64_t kNoWriteYet = UINT64_MAX;
  std::uint64_t burst_polls REMORA_GUARDED_BY(mu) = kNoWriteYet;
  std::uint32_t burst_writes REMORA_GUARDED_BY(mu) = 0;
  std::uint32_t last_burst_writes REMORA_GUARDED_BY(mu) = 2;
  std::atomic<std::uint64_t> direct_batched{0};
  std::atomic<std::uint64_t> flushes_joined{0};
  std::atomic<std::uint64_t> gathered_by_transport{0};
  // Gathered writes that sat idle too long: once a drive found a batch
  // that had waited kGatherLate or more since its first write
  // (gather_since, whose time the writes joining it take) because the
  // program posted and went off to do something else (such as spin on
  // memory the peer writes), no write is gathered until gather_off_until; each such batch doubles the
  // pause (gather_off_for, kGatherOffMin to kGatherOffMax), a batch placed
  // in time ends the doubling (note_gather_wait). Late batches are counted
  // (tests look at it).
  std::int64_t gather_off_until REMORA_GUARDED_BY(mu) = 0;
  std::int64_t gather_off_for REMORA_GUARDED_BY(mu) = 0;
  std::atomic<std::uint64_t> gathers_late{0};
  // Same-host message rings (docs/design.md, "Same-host message rings"):
  // this side's inbox (made and offered once the peer's table was taken;
  // its bell is watched by the agent and the completion queues), the peer's
  // inbox mapped as this side's outbox, whether the peer took this side's
  // inbox (only then may sends use the outbox: the peer can ring this
  // side's bell when it handled them), and the sends on the ring the peer
  // has not acknowledged yet. While any is, every later operation that
  // does not go on the ring waits (deferred), and a send goes on the ring
  // only when nothing else is in flight: the peer sees one order.
  std::shared_ptr<direct::Inbox> inbox REMORA_GUARDED_BY(mu);
  std::unique_ptr<direct::Outbox> outbox REMORA_GUARDED_BY(mu);
  bool inbox_taken REMORA_GUARDED_BY(mu) = false;
  // The peer's direct offer was handled (taken or not), and a ring offer
  // that came before it, kept until then: the passive side may take this
  // side's direct offer and offer its ring before it sends its own direct
  // offer (it handles its established event after the data), and without a
  // direct peer this side could not map the ring yet.
  bool peer_offer_seen REMORA_GUARDED_BY(mu) = false;
  std::optional<wire::Ctl> early_ring_offer REMORA_GUARDED_BY(mu);
  std::uint32_t ring_in_flight REMORA_GUARDED_BY(mu) = 0;
  // The peer's inbox takes writes (its offer said kRingTakesWrites), and
  // this zone sends them there (ZoneImpl::ring_writes).
  bool outbox_takes_writes REMORA_GUARDED_BY(mu) = false;
  // The peer's inbox takes parts of split transfers (its offer said
  // kRingTakesPulls, and this zone offers them: ZoneImpl::direct_pull);
  // cleared when the peer could not reach this process (EPERM, ESRCH).
  bool outbox_takes_pulls REMORA_GUARDED_BY(mu) = false;
  // Parts of split transfers this side offered the peer and the peer moved,
  // and the peer's parts this side moved (tests).
  std::atomic<std::uint64_t> pulls_offered{0};
  std::atomic<std::uint64_t> pulls_moved_for_peer{0};
  // The peer's batches whose last bytes this side placed (wire::PullTails).
  std::atomic<std::uint64_t> tails_placed_for_peer{0};
  // The peer's share of this endpoint's splits, in 64ths (PullHand).
  unsigned pull_share REMORA_GUARDED_BY(mu) = direct::FarHand::kHalfShare;
  // Whether this endpoint's large cross-memory transfers are split or moved
  // whole, by what each way took lately (split_choice.hpp): reads, writes.
  // Splits made and transfers moved whole by that choice (tests).
  direct::SplitChoice split_choice[2] REMORA_GUARDED_BY(mu);
  std::atomic<std::uint64_t> chose_split{0};
  std::atomic<std::uint64_t> chose_whole{0};
  // Sends placed in the peer's inbox, and messages taken from this side's
  // (tests look at them); writes placed in the peer's inbox, and the
  // peer's writes this side copied from its own.
  std::atomic<std::uint64_t> ring_sent{0};
  std::atomic<std::uint64_t> ring_taken{0};
  std::atomic<std::uint64_t> ring_writes_sent{0};
  std::atomic<std::uint64_t> ring_writes_taken{0};

  // Read without mu by CqImpl::drive and arm, which then progress only the
  // endpoints that have something: the shared transport queue of the
  // current connection (null when it has its own queue or none; a queue
  // outlives its connections), and whether progress() left work only
  // another progress() does (an acknowledgement, reply or deferred
  // operation the transport could not take yet).
  std::atomic<backend::SharedQueue*> shared_queue{nullptr};
  std::atomic<bool> owes_work{false};
  // Calls of progress() that found a connection (tests look at it: an idle
  // connection on a shared queue is not progressed by polls or sweeps).
  std::atomic<std::uint64_t> progress_calls{0};
  /// Store owes_work; when true, the endpoint's completion queues list it
  /// (CqImpl::note_owing), so their drive need not look at every endpoint.
  void set_owes_work(bool v) REMORA_REQUIRES(mu);

  // Connection events.
  std::mutex ev_mu;
  std::condition_variable ev_cv;
  std::deque<ConnectionEvent> events;
  Signal ev_signal;

  /// State check, slot, submit: the one entry of a posted operation (takes
  /// mu). In the disconnected/error states it is reported at once as flushed.
  Result<void> post(const Operation& op, std::uint64_t cookie, PostFlags flags) REMORA_EXCLUDES(mu);
  /// post() once: invalid_state while connect_pending.
  Result<void> post_once(const Operation& op, std::uint64_t cookie, PostFlags flags) REMORA_EXCLUDES(mu);

  // Called with mu held.
  Result<void> setup_connection(const std::shared_ptr<void>& request) REMORA_REQUIRES(mu);
  Result<std::uint32_t> take_slot() REMORA_REQUIRES(mu);
  void release_slot(std::uint32_t i) REMORA_REQUIRES(mu);
  int post_slot(OpSlot& s) REMORA_REQUIRES(mu);
  Result<void> submit(std::uint32_t index) REMORA_REQUIRES(mu);
  /// Record the outcome of `s`; outcomes are reported in posting order, as
  /// an RC send queue does.
  void complete(OpSlot& s, std::error_code status) REMORA_REQUIRES(mu);
  void report_in_order() REMORA_REQUIRES(mu);
  void pump_deferred() REMORA_REQUIRES(mu);
  /// `s` may be gathered with the writes (or reads) for one cross-memory
  /// call; when it may, `now` holds the steady clock's reading (ns) it
  /// decided at.
  bool gatherable(const OpSlot& s, std::int64_t& now) const REMORA_REQUIRES(mu);
  /// `s` is a VISIBILITY flush the peer's table allows, which may join the
  /// gathered writes (completed once those before it are placed).
  bool joins_gathered(const OpSlot& s) REMORA_REQUIRES(mu);
  /// A write or read was posted: counts it into those posted since the
  /// posting thread's last poll.
  void note_write() REMORA_REQUIRES(mu);
  /// Place the gathered writes (Peer::write_many) or reads
  /// (Peer::read_many), in posting order; those it could not place go to
  /// the transport in order, a refused one fails the endpoint as the
  /// target's refusal does.
  void flush_gathered() REMORA_REQUIRES(mu);
  /// A drive is about to place the gathered writes: a batch that waited
  /// kGatherLate or more since its latest write pauses gathering.
  void note_gather_wait() REMORA_REQUIRES(mu);
  /// The agent thread, at a look asked through Agent::look_by that is due
  /// (`now`, steady-clock nanoseconds): true when a gathered batch has
  /// waited kGatherBound, so the agent progresses the endpoint and places
  /// it. False when nothing waits (a poll placed it) or the batch waiting
  /// is younger (gathered since the look was asked): `again` is then the
  /// time to look again (0: not needed), which this endpoint records as
  /// asked. Without `mu`: a look at an endpoint its user is posting to
  /// no longer takes the lock from that user, nor places a batch in the
  /// middle of its posting.
  bool gather_look_due(std::int64_t now, std::int64_t& again) noexcept;
  void handle(const backend::CqEntry& e) REMORA_REQUIRES(mu);
  void handle_message(RxSlot& rxs, const backend::CqEntry& e) REMORA_REQUIRES(mu);
  void handle_request(const wire::Ctl& req) REMORA_REQUIRES(mu);
  void handle_reply(const wire::Ctl& rep) REMORA_REQUIRES(mu);
  /// The peer sent something the protocol does not allow: end the connection.
  void protocol_violation() REMORA_REQUIRES(mu);
  void deliver(Incoming in) REMORA_REQUIRES(mu);
  /// A message from the peer, still in the connection's receive buffer:
  /// copied once, into the oldest posted receive if there is one (else kept).
  void deliver_message(std::span<const std::uint8_t> bytes, bool has_imm, std::uint32_t imm) REMORA_REQUIRES(mu);
  void flush_replies() REMORA_REQUIRES(mu);
  /// A reply decided off the agent thread (a write-back's outcome): queued
  /// and sent if the connection is still there.
  void send_reply(const wire::Ctl& rep) REMORA_EXCLUDES(mu);
  /// Acknowledge the messages handled since the last acknowledgement.
  void flush_acks() REMORA_REQUIRES(mu);
  void handle_ack(std::uint64_t count) REMORA_REQUIRES(mu);
  /// Fail `s` (if given) with `status` and, when connected, move to error:
  /// shut the connection, flush everything else, report `ev`.
  void fail(OpSlot* s, std::error_code status, ConnectionEventType ev) REMORA_REQUIRES(mu);
  void flush_all() REMORA_REQUIRES(mu);
  /// Tell the peer this side disconnects on purpose (it then reports
  /// `disconnected` rather than `lost`).
  void say_goodbye() noexcept REMORA_REQUIRES(mu);
  /// Same-host direct path: offer the zone's region table to the peer (an
  /// injected op_direct_offer, no slot, no completion), once connected.
  void offer_direct() noexcept REMORA_REQUIRES(mu);
  /// The peer's offer: map its table if it is on this host.
  void accept_direct_offer(const wire::Ctl& offer) REMORA_REQUIRES(mu);
  /// Ask the peer to drop its mappings of revoked regions of this zone
  /// (op_direct_revoke): the request's serial, or 0 when nothing was asked
  /// (not connected, the peer maps nothing of this zone, the transport did
  /// not take the request). When asked, `*bell` is set to the peer's table
  /// as this side mapped it (null if this side did not take the peer's
  /// offer): the caller rings its doorbell (direct::Peer::ring) once its
  /// requests are sent, outside every lock, and once per peer zone.
  std::uint64_t ask_revoke(std::uint8_t what, std::shared_ptr<direct::Peer>& bell) REMORA_EXCLUDES(mu);
  /// Before this side ends a connected connection on purpose (close,
  /// disconnect): a peer that may map this zone's regions lets go of this
  /// zone's table for it (op_direct_revoke, kRevokeConnection), and this
  /// waits for its answer (bounded as ZoneImpl::revoke_at_peers).
  void release_at_peer() noexcept REMORA_EXCLUDES(mu);
  /// The peer answered revocation `serial`, or the connection is over.
  bool revoke_answered(std::uint64_t serial) REMORA_EXCLUDES(mu);
  /// Place `s` (a write without immediate data, or a read) by the direct
  /// path if it can be: true when `s` is finished (completed or failed).
  /// `deferred_front`: `s` was just taken off the front of `deferred`, whose
  /// later operations wait behind it (pump_deferred): it is not gathered.
  bool try_direct(OpSlot& s, bool deferred_front = false) REMORA_REQUIRES(mu);
  // The operation `s` was decided on the direct path (placed, or refused):
  // counted, and handed to remora-check.
  void direct_taken(OpSlot& s, bool mapped) REMORA_REQUIRES(mu);
  // An operation the direct path decided: completed when `done` (counted as
  // through a mapping when `mapped`), failed with remote_access when
  // `refused` (the connection ends, as when the target refuses); false for
  // anything else (the transport, or the target's agent, takes it).
  bool direct_decided(OpSlot& s, direct::Peer::Outcome outcome, bool mapped) REMORA_REQUIRES(mu);
  /// Same-host message rings. offer_inbox: make this side's inbox and offer
  /// it (once the peer's table was taken); accept_ring_offer: map the
  /// peer's as the outbox and answer.
  void offer_inbox() REMORA_REQUIRES(mu);
  void accept_ring_offer(const wire::Ctl& offer) REMORA_REQUIRES(mu);
  /// Place send or write `s` in the outbox: `sent` (in flight until
  /// acknowledged), `full` (too few free slots: it waits, deferred), `no`
  /// (not for the ring: no outbox, something else in flight, too long).
  enum class RingPut { sent, full, no };
  RingPut try_ring(OpSlot& s) REMORA_REQUIRES(mu);
  /// try_ring's part for write `s`, once nothing is in flight off the ring
  /// (docs/design.md, "Same-host message rings", "Writes over the ring"): in
  /// pieces of at most a slot each, which the peer copies into its memory.
  RingPut try_ring_write(OpSlot& s) REMORA_REQUIRES(mu);
  /// Take what the inbox holds, publish the handled count (ringing the
  /// peer's bell) and believe the peer's count in the outbox. Returns the
  /// messages taken, parts of the peer's transfers (ring_pull) included.
  int take_ring() REMORA_REQUIRES(mu);
  // A ring_pull message from the peer (its bytes in this side's inbox):
  // moved when the peer has not taken it back. False when it is malformed.
  bool take_pull(std::span<const std::uint8_t> bytes) REMORA_REQUIRES(mu);
  // The last bytes of the peer's batch (wire::PullTails; its `count`
  // ranges and their `bytes` checked by take_pull), once this side's part of
  // it moved in full (`started` when it began): waits for the peer's part,
  // at most about as long again, and places them all or says it did not.
  void place_tails(wire::PullTails& t, const wire::PullRange* ranges, std::size_t count, const std::uint8_t* bytes,
                   std::chrono::steady_clock::time_point started) REMORA_REQUIRES(mu);
  // place_tails waits for the peer's part at least this long.
  static constexpr std::chrono::microseconds kTailsPatience{50};
  // Whether a same-host transfer of `bytes` (one operation, or a gathered
  // batch) into or from the region of `key` is split now (split_choice):
  // false when splits are off (REMORA_COPY_HELPER=0). `choice` is set to
  // the choice to tell how long it took, or null when there was nothing to
  // choose (splits off, or too short to split).
  bool split_now(bool write, std::uint64_t key, std::uint64_t bytes, direct::SplitChoice*& choice) REMORA_REQUIRES(mu);
  // A same-host transfer of `bytes` (one operation, or a gathered batch)
  // into or from the region of `key`, moved by `move(split, far)` the way
  // split_now chooses, its second part offered to the peer when it may
  // take it (PullHand), and the time it took told to the choice when it
  // asked. `move` returns true when every byte moved.
  template <class Move>
  void move_as_chosen(bool write, std::uint64_t key, std::uint64_t bytes, Move&& move) REMORA_REQUIRES(mu);
  // Whether this endpoint's split transfers may offer their second part to
  // the peer now (PullHand).
  bool pulls_now() const REMORA_REQUIRES(mu) {
    return outbox && outbox_takes_pulls && direct_peer && state == EndpointState::connected;
  }
  /// Believe the handled count the peer published in its inbox (this
  /// side's outbox): sends it covers complete.
  void take_ring_acks() REMORA_REQUIRES(mu);
  /// Nothing waits in either ring and the bell is quiet (the rest of a
  /// sleep check is the transport's).
  bool ring_idle() REMORA_REQUIRES(mu);
  /// Unmap both rings; this side's bell leaves the agent and the queues.
  void drop_rings() REMORA_REQUIRES(mu);
  /// Unmap this side's ring (the peer refused it, or the connection ends);
  /// its bell leaves the agent and the queues.
  void drop_inbox() REMORA_REQUIRES(mu);
  /// Handle every completion the transport already has.
  void drain() REMORA_REQUIRES(mu);
  /// Posts receive buffer `rxs` (again): 0, or the transport's error.
  int repost(RxSlot& rxs) REMORA_REQUIRES(mu);
  // Posts one more receive buffer (the next of rx_memory's max_recv):
  // 0, or the transport's error.
  int post_rx() REMORA_REQUIRES(mu);
  /// The connection (transport fd `fd`, shared transport queue `q` or
  /// null) starts (on) or stops feeding the endpoint's completion queues:
  /// its fd joins or leaves their epoll sets (CqImpl::watch), the endpoint
  /// their sources (CqImpl::attach).
  void watch_queues(int fd, backend::SharedQueue* q, bool on);
  /// Connecting or accepting failed right after setup_connection: the
  /// connection is dropped, and the agent and the queues forget its fd.
  void abandon_connection() REMORA_REQUIRES(mu);

  // Thread-safe entry points.
  int progress() REMORA_EXCLUDES(mu);  // returns completions handled
  /// Before a thread sleeps on this endpoint's transport fd: true when the
  /// transport confirms nothing is pending (its try-wait, which also
  /// re-arms the fd) and no acknowledgement or reply waits to be sent.
  bool ready_to_sleep() REMORA_EXCLUDES(mu);
  /// ready_to_sleep() for an endpoint on a shared transport queue, but for
  /// the queue's own try-wait, which the caller makes once for all the
  /// endpoints on it (SharedQueue::try_wait): nothing kept for the
  /// connection or owed by it, no acknowledgement or reply waiting.
  bool quiet_but_queue() REMORA_EXCLUDES(mu);
  void on_cm_event(backend::CmEvent& ev, std::uint64_t gen) REMORA_EXCLUDES(mu);
  void push_event(ConnectionEvent ev);
  void drop_connection() noexcept REMORA_EXCLUDES(mu);
  /// An accepted connection can be established at the transport while its
  /// `connected` event still waits in the zone's queue (the agent thread has
  /// not run yet); closing or disconnecting it then would skip the goodbye
  /// and the peer would see the connection lost. The handle's close and
  /// disconnect call this first: it handles the queued events on the
  /// caller's thread. Never from inside the agent's event handling.
  void settle_accept() noexcept REMORA_EXCLUDES(mu);
  /// The same for either side of a connection still connect_pending, on
  /// a post: a message may have arrived and been reported already (the
  /// transport is connected) while the `connected` event still waits in the
  /// zone's queue. True when events were handled (post again).
  bool settle_pending() noexcept REMORA_EXCLUDES(mu);
  void close() noexcept REMORA_EXCLUDES(mu);
};

/// The zone's progress engine (docs/design.md, "The target agent").
/// Wait (at most 1 s) until the peers answered the op_direct_revoke
/// requests asked (EndpointImpl::ask_revoke's serials), or their
/// connections ended; `asked` keeps those that did not.
void wait_revoked(std::vector<std::pair<std::shared_ptr<EndpointImpl>, std::uint64_t>>& asked) noexcept;
void wait_revoked(EndpointImpl& ep, std::uint64_t serial) noexcept;

class Agent : public std::enable_shared_from_this<Agent> {
 public:
  Agent(ZoneImpl* zone, bool busy_poll);
  ~Agent();
  void start();
  void stop() noexcept;
  /// `queue`: the transport queue the connection shares with others (its
  /// fd is then the queue's, watched once for all of them), or null.
  void add(const std::shared_ptr<EndpointImpl>& ep, int fd, backend::SharedQueue* queue);
  void remove(EndpointImpl* ep, int fd, backend::SharedQueue* queue);
  /// `ep`'s same-host inbox (its bell an eventfd a peer process writes)
  /// joins (on) or leaves the agent's watch: when the bell fires
  /// (edge-triggered), or a turn finds the inbox not idle (while spinning
  /// the agent does not read its epoll set), the agent looks at the
  /// endpoint and progresses it unless a user drives it (the user's own
  /// sleep set has the bell too).
  void watch_ring(const EndpointImpl* ep, const std::shared_ptr<direct::Inbox>& inbox, bool on);
  void wake() noexcept;
  /// The eventfd a same-host peer rings, made and watched now (before
  /// start(): Fabric::create_zone publishes it in the zone's region table
  /// when the agent thread runs and does not busy-poll); -1 if it cannot be.
  int open_doorbell();
  /// Doorbell rings the agent thread handled, and its sweeps (tests).
  std::uint64_t doorbells() const noexcept { return doorbells_.load(std::memory_order_relaxed); }
  std::uint64_t sweeps() const noexcept { return sweeps_.load(std::memory_order_relaxed); }
  /// Reads of shared transport queues made by the agent thread (tests).
  std::uint64_t queue_reads() const noexcept { return queue_reads_.load(std::memory_order_relaxed); }
  /// Have the agent thread look at this endpoint on its next turn (its fd
  /// did not fire: work queued from another thread).
  void look_at(const EndpointImpl* ep);
  /// The same, on its first turn at or after `when` (waking it then if it
  /// would sleep longer): a bound on how long work an endpoint's user is
  /// expected to do (gathered writes) can wait if that user stops.
  void look_by(const EndpointImpl* ep, std::chrono::steady_clock::time_point when);
  /// Some look_by is not yet due or not yet taken by a turn (tests).
  bool looks_due() const noexcept { return next_due_.load(std::memory_order_seq_cst) != 0; }
  /// One pass on the calling thread: connection management, then every
  /// endpoint (ProtectionZone::progress). Returns the work done.
  std::size_t run_once();
  /// The zone's endpoints that are still alive.
  std::vector<std::shared_ptr<EndpointImpl>> live_endpoints();
  /// The agent thread runs and is not the calling thread: answers from
  /// peers are taken while the caller waits.
  bool serves_others() const noexcept {
    return started_.load(std::memory_order_relaxed) && thread_id_.load() != std::this_thread::get_id();
  }
  /// Read and handle every queued connection-management event on the
  /// calling thread. One thread at a time (cm_mu_), so the events of one
  /// connection are handled in the order they were read. Returns how many.
  /// Called with no endpoint or listener lock held: handling takes them.
  std::size_t dispatch_cm();

  /// A peer's PERSISTENT flush that passed the target's checks. The
  /// write-back (msync or cache flushes, which may wait for a device) runs
  /// on the zone's durability thread, or in run_once() for a zone without
  /// a progress thread: never on the agent thread, which serves every
  /// connection of the zone, and under no lock. The reply goes out when it
  /// is done (replies are matched by token, not by order).
  struct PersistJob {
    std::weak_ptr<EndpointImpl> ep;
    std::shared_ptr<RegionImpl> region;  // kept alive; close() waits for a running job
    wire::Ctl reply;
  };
  void defer_persist(PersistJob job);

 private:
  std::size_t run_persist_jobs();
  void durability_loop();
  void run();
  /// A connection-management event and what its identity named when it
  /// was read.
  struct CmRouted {
    backend::CmEvent ev;
    std::shared_ptr<EndpointImpl> ep;
    std::uint64_t gen = 0;  // the endpoint's connection generation
    std::shared_ptr<ListenerImpl> listener;
  };
  void handle_cm(CmRouted& r);
  /// Read one queued connection-management event and resolve its identity
  /// (false: none), under the zone's cm_mu. Reading runs the transport's
  /// progress, so it holds transport_mu (shared); both are released before
  /// the event is handled (that takes endpoint locks).
  bool next_cm_event(CmRouted& out);
  ZoneImpl* zone_;
  bool busy_;
  int epfd_ = -1;
  Signal wake_;
  int wake_fd_ = -1;  // wake_.fd(), made at construction
  // Rung by same-host peers (direct::Peer::ring, through the zone's region
  // table): read every transport queue and serve what is there, users'
  // claims notwithstanding. Made by open_doorbell, only in zones with the
  // same-host path.
  Signal doorbell_;
  int doorbell_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> doorbells_{0}, sweeps_{0}, queue_reads_{0};
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};  // thread_'s, once it runs
  Mutex mu_;
  Mutex cm_mu_;         // dispatch_cm: one reader and handler at a time
  std::mutex jobs_mu_;  // the durability queue and its thread
  std::condition_variable jobs_cv_;
  std::deque<PersistJob> jobs_;
  std::thread durability_;
  std::atomic<bool> started_{false};  // start() was called: jobs go to durability_
  struct Watched {
    std::weak_ptr<EndpointImpl> ep;
    int fd;      // -1 when the endpoint has no fd of its own (busy polling, or a shared queue)
    bool armed;  // fd in the epoll set with EPOLLIN
    backend::SharedQueue* queue = nullptr;
  };
  // Transport queues shared by several connections (backend::SharedQueue):
  // their fd is in the epoll set once, tagged with the queue's address | 1.
  struct WatchedQueue {
    std::size_t endpoints = 0;  // endpoints of this zone on it
    bool armed = true;
    bool all_driven = false;  // at the last sweep, users drove every one of its endpoints
  };
  std::unordered_map<backend::SharedQueue*, WatchedQueue> queues_ REMORA_GUARDED_BY(mu_);
  void set_queue_armed(backend::SharedQueue* q, WatchedQueue& wq, bool on) REMORA_REQUIRES(mu_);
  // Keyed by identity (never dereferenced without the weak reference); the
  // epoll set carries the same key, so a wake names the endpoints to look at.
  std::unordered_map<const EndpointImpl*, Watched> endpoints_ REMORA_GUARDED_BY(mu_);
  std::vector<const EndpointImpl*> fresh_ REMORA_GUARDED_BY(mu_);  // added since the last turn: looked at once
  // look_by's endpoints and when (steady clock, ns), moved to fresh_ once
  // due; the earliest of them (0: none), and when the agent thread's
  // current sleep ends (0: awake). Both sequentially consistent: either
  // look_by sees the sleep and wakes the thread, or the thread sees the
  // time before it sleeps.
  std::vector<std::pair<std::int64_t, const EndpointImpl*>> due_ REMORA_GUARDED_BY(mu_);
  std::atomic<std::int64_t> next_due_{0};
  std::atomic<std::int64_t> asleep_until_{0};
  /// Make `at` the next due look if it is earlier than the one there (or
  /// there is none): true when it was.
  bool lower_next_due(std::int64_t at) noexcept;
  // Same-host inboxes of the zone's endpoints (watch_ring), kept alive here
  // so that a turn can look at them without the endpoints' locks, and
  // whether the bell is in the epoll set (it leaves it while a user drives
  // the endpoint, as an endpoint's transport fd does).
  struct WatchedRing {
    std::shared_ptr<const direct::Inbox> box;
    bool armed = true;
  };
  std::unordered_map<const EndpointImpl*, WatchedRing> rings_ REMORA_GUARDED_BY(mu_);
  // The same inboxes, for the turn's look (every one only when the zone's
  // `rung` count moved or at a sweep).
  direct::RingWatch ring_watch_ REMORA_GUARDED_BY(mu_);
  bool cm_armed_ REMORA_GUARDED_BY(mu_) = true;  // cm_wait_fd in the epoll set with EPOLLIN
  std::uint64_t turn_ = 0;
};

std::uint64_t next_object_id();
/// Polls of a completion queue this thread made that claimed it
/// (CqImpl::claim): an endpoint tells the writes a thread posts back to back
/// between its polls from one write per poll (EndpointImpl::note_write).
std::uint64_t polls_by_this_thread() noexcept;

}  // namespace remora::detail
