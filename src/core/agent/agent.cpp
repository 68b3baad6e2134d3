// The target agent: one progress thread per protection zone.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

#include "core/impl.hpp"

namespace remora::detail {
namespace {

// Agents still running when the process exits are stopped by an exit
// handler: it runs before libfabric's own library destructor, which would
// otherwise tear the provider down under a running progress thread.
std::mutex g_agents_mu;
std::vector<std::weak_ptr<Agent>>& live_agents() {
  static auto* v = new std::vector<std::weak_ptr<Agent>>;  // outlives every static destructor
  return *v;
}

void stop_all_agents() {
  std::vector<std::shared_ptr<Agent>> all;
  {
    std::lock_guard<std::mutex> lock(g_agents_mu);
    for (auto& w : live_agents())
      if (auto a = w.lock()) all.push_back(std::move(a));
    live_agents().clear();
  }
  for (auto& a : all) a->stop();
}

void track(const std::shared_ptr<Agent>& a) {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(stop_all_agents); });
  std::lock_guard<std::mutex> lock(g_agents_mu);
  std::erase_if(live_agents(), [](const auto& w) { return w.expired(); });
  live_agents().push_back(a);
}

}  // namespace

namespace {
// epoll data of the agent's own fds; an endpoint's fd carries the
// endpoint's address (never 0, 1 or 2), a shared queue's its address | 1.
constexpr std::uint64_t kWakeTag = 0, kCmTag = 1, kDoorbellTag = 2;
std::uint64_t tag_of(const EndpointImpl* ep) { return reinterpret_cast<std::uintptr_t>(ep); }
}  // namespace

Agent::Agent(ZoneImpl* zone, bool busy_poll) : zone_(zone), busy_(busy_poll) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  wake_fd_ = wake_.fd();
  ev.data.u64 = kWakeTag;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  ev.data.u64 = kCmTag;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, zone_->domain->cm_wait_fd(), &ev);
}

int Agent::open_doorbell() {
  if (doorbell_fd_ >= 0) return doorbell_fd_;
  const int fd = doorbell_.fd();
  if (fd < 0) return -1;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kDoorbellTag;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return -1;
  doorbell_fd_ = fd;
  return fd;
}

Agent::~Agent() {
  stop();
  if (epfd_ >= 0) ::close(epfd_);
}

void Agent::start() {
  started_ = true;
  thread_ = std::thread([self = shared_from_this()] {
    self->thread_id_.store(std::this_thread::get_id());
    self->run();
  });
  track(shared_from_this());
}

namespace {
void join_or_detach(std::thread& t) noexcept {
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id())
    t.detach();  // the last reference to the zone dropped on this thread
  else
    t.join();
}
}  // namespace

void Agent::stop() noexcept {
  if (stop_.exchange(true)) return;
  wake();
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);  // the durability thread is waiting or will see stop_
  }
  jobs_cv_.notify_all();
  join_or_detach(thread_);
  std::thread worker;
  std::deque<PersistJob> dropped;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    worker = std::move(durability_);
    dropped.swap(jobs_);
  }
  join_or_detach(worker);  // it finishes the write-back it is running
  // Write-backs nobody will run now (the process is exiting): their
  // regions are released here, outside the queue's lock.
}

void Agent::defer_persist(PersistJob job) {
  // Called with the endpoint's and the zone's locks held: nothing here may
  // release a region (its destructor takes regions_mu), so a job is always
  // queued, never dropped.
  std::lock_guard<std::mutex> lock(jobs_mu_);
  jobs_.push_back(std::move(job));
  if (started_ && !stop_ && !durability_.joinable())
    durability_ = std::thread([self = shared_from_this()] { self->durability_loop(); });
  jobs_cv_.notify_one();
}

namespace {
// One write-back and its reply, on the calling thread with no lock held.
// Returns the endpoint the reply went to (identity only), if it still exists.
const EndpointImpl* run_persist_job(Agent::PersistJob& job) {
  wire::Ctl rep = job.reply;
  auto done = job.region->persist_for_peer(rep.addr, rep.len);
  Errc why = Errc::io_error;  // any failure of the write-back: not durable
  if (!done && (done.error() == Errc::not_supported || done.error() == Errc::remote_access))
    why = static_cast<Errc>(done.error().value());
  rep.status = done ? 0 : static_cast<std::uint16_t>(why);
  auto ep = job.ep.lock();
  if (!ep) return nullptr;
  ep->send_reply(rep);
  return ep.get();
}
}  // namespace

std::size_t Agent::run_persist_jobs() {
  std::deque<PersistJob> batch;
  {
    std::lock_guard<std::mutex> lock(jobs_mu_);
    batch.swap(jobs_);
  }
  for (auto& job : batch) run_persist_job(job);
  return batch.size();
}

void Agent::durability_loop() {
  std::unique_lock<std::mutex> lock(jobs_mu_);
  while (!stop_) {
    if (jobs_.empty()) {
      jobs_cv_.wait(lock);
      continue;
    }
    const EndpointImpl* replied = nullptr;
    {
      PersistJob job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      replied = run_persist_job(job);
      // The job's references (region, endpoint, and through them the
      // zone) are released here, before the lock is taken again: the
      // zone's destructor stops this agent.
    }
    // A reply the transport could not take yet is retried by the agent.
    if (replied != nullptr && !stop_) look_at(replied);
    lock.lock();
  }
}

void Agent::wake() noexcept { wake_.raise(); }

void Agent::look_by(const EndpointImpl* ep, std::chrono::steady_clock::time_point when) {
  const std::int64_t at = when.time_since_epoch().count();
  {
    MutexLock lock(mu_);
    due_.emplace_back(at, ep);
  }
  if (lower_next_due(at)) {
    const std::int64_t sleep_end = asleep_until_.load(std::memory_order_seq_cst);
    if (sleep_end != 0 && sleep_end > at) wake();
  }
}

bool Agent::lower_next_due(std::int64_t at) noexcept {
  std::int64_t cur = next_due_.load(std::memory_order_seq_cst);
  while (cur == 0 || at < cur)
    if (next_due_.compare_exchange_weak(cur, at, std::memory_order_seq_cst)) return true;
  return false;
}

void Agent::look_at(const EndpointImpl* ep) {
  {
    MutexLock lock(mu_);
    fresh_.push_back(ep);
  }
  wake();
}

namespace {
std::uint64_t tag_of(const backend::SharedQueue* q) { return reinterpret_cast<std::uintptr_t>(q) | 1u; }
bool is_queue_tag(std::uint64_t tag) { return tag != kCmTag && (tag & 1u) != 0; }
// An endpoint's same-host ring bell (Agent::watch_bell).
std::uint64_t bell_tag_of(const EndpointImpl* ep) { return reinterpret_cast<std::uintptr_t>(ep) | 2u; }
bool is_bell_tag(std::uint64_t tag) { return tag != kDoorbellTag && (tag & 3u) == 2u; }
}  // namespace

void Agent::add(const std::shared_ptr<EndpointImpl>& ep, int fd, backend::SharedQueue* queue) {
  MutexLock lock(mu_);
  if (queue != nullptr) {
    // The queue's fd serves every connection on it: watched once.
    WatchedQueue& wq = queues_[queue];
    const int qfd = queue->wait_fd();
    if (wq.endpoints++ == 0 && qfd >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = tag_of(queue);
      epoll_ctl(epfd_, EPOLL_CTL_ADD, qfd, &ev);
      wq.armed = true;
    } else if (!wq.armed) {
      // A new endpoint nobody drives yet: the agent listens again (the next
      // sweep decides anew).
      set_queue_armed(queue, wq, true);
    }
    wq.all_driven = false;
    endpoints_[ep.get()] = Watched{ep, -1, false, queue};
  } else {
    endpoints_[ep.get()] = Watched{ep, fd, fd >= 0, nullptr};
    if (fd >= 0) {  // a busy-polling zone's queues have nothing to sleep on
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = tag_of(ep.get());
      epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    }
  }
  fresh_.push_back(ep.get());
  wake();
}

void Agent::watch_ring(const EndpointImpl* ep, const std::shared_ptr<direct::Inbox>& inbox, bool on) {
  MutexLock lock(mu_);
  if (!on) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, inbox->bell_fd(), nullptr);
    rings_.erase(ep);
    ring_watch_.remove(ep);
    return;
  }
  rings_[ep] = WatchedRing{inbox, true};
  ring_watch_.add(ep, inbox);
  // Edge-triggered: one wake per ring. The agent need not empty the bell
  // (the endpoint's progress does), so it can leave an endpoint a user
  // drives to that user without waking again and again meanwhile.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = bell_tag_of(ep);
  epoll_ctl(epfd_, EPOLL_CTL_ADD, inbox->bell_fd(), &ev);
}

void Agent::set_queue_armed(backend::SharedQueue* q, WatchedQueue& wq, bool on) {
  wq.armed = on;
  if (q->wait_fd() < 0) return;
  epoll_event e{};
  e.events = on ? static_cast<std::uint32_t>(EPOLLIN) : 0u;
  e.data.u64 = tag_of(q);
  epoll_ctl(epfd_, EPOLL_CTL_MOD, q->wait_fd(), &e);
}

void Agent::remove(EndpointImpl* ep, int fd, backend::SharedQueue* queue) {
  MutexLock lock(mu_);
  if (queue != nullptr) {
    if (auto it = queues_.find(queue); it != queues_.end() && --it->second.endpoints == 0) {
      if (queue->wait_fd() >= 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, queue->wait_fd(), nullptr);
      queues_.erase(it);
    }
  } else if (fd >= 0) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  }
  // Identity only: locking an endpoint here could make this thread drop its
  // last reference under mu_ (its destructor comes back here).
  endpoints_.erase(ep);
}

bool Agent::next_cm_event(CmRouted& out) {
  // Read and resolved in one step under cm_mu (see ZoneImpl::cm_endpoints).
  MutexLock lock(zone_->cm_mu);
  {
    std::shared_lock<std::shared_mutex> transport(zone_->transport_mu);
    if (!zone_->domain->next_cm_event(out.ev)) return false;
  }
  if (auto it = zone_->cm_endpoints.find(out.ev.cm_id); it != zone_->cm_endpoints.end()) {
    out.ep = it->second.ep.lock();
    out.gen = it->second.gen;
  }
  if (auto it = zone_->cm_listeners.find(out.ev.cm_id); it != zone_->cm_listeners.end())
    out.listener = it->second.lock();
  return true;
}

void Agent::handle_cm(CmRouted& r) {
  auto& ev = r.ev;
  auto& listener = r.listener;
  if (r.ep) {
    r.ep->on_cm_event(ev, r.gen);
    return;
  }
  if (!listener || ev.kind != backend::CmEvent::conn_request) return;
  std::lock_guard<std::mutex> lock(listener->mu);
  if (listener->closed || !listener->pep) return;
  auto h = wire::parse_hello(ev.data);
  if (!h) {
    (void)listener->pep->reject(ev.request, {});  // not a Remora peer
    return;
  }
  if (h->hello.version != wire::kVersion) {
    // A Remora peer speaking another protocol version: refused with our
    // Hello, so it reports `rejected` (its user data is never shown here).
    (void)listener->pep->reject(ev.request, wire::make_hello(0, {}));
    return;
  }
  auto req = std::make_shared<ConnRequestImpl>();
  req->listener = listener;
  req->request = ev.request;
  req->peer_max_message = h->hello.max_message;
  req->private_data.assign(h->user.begin(), h->user.end());
  req->peer_host = ev.peer_host;
  req->peer_port = ev.peer_port;
  if (listener->requests.empty()) listener->signal.raise();
  listener->requests.push_back(std::move(req));
  listener->cv.notify_all();
}

std::size_t Agent::dispatch_cm() {
  MutexLock lock(cm_mu_);
  std::size_t n = 0;
  for (CmRouted r; !stop_ && next_cm_event(r); ++n, r = CmRouted{}) handle_cm(r);
  return n;
}

std::vector<std::shared_ptr<EndpointImpl>> Agent::live_endpoints() {
  std::vector<std::shared_ptr<EndpointImpl>> eps;
  MutexLock lock(mu_);
  eps.reserve(endpoints_.size());
  for (auto& [raw, w] : endpoints_)
    if (auto p = w.ep.lock()) eps.push_back(std::move(p));
  return eps;
}

std::size_t Agent::run_once() {
  std::size_t work = dispatch_cm();
  // A zone without a progress thread has no durability thread either: its
  // write-backs run here, on the caller's thread, outside every lock.
  if (!started_) work += run_persist_jobs();
  backend::ProgressPass pass;  // each shared transport queue is read once
  for (auto& ep : live_endpoints()) work += static_cast<std::size_t>(ep->progress());
  return work;
}

void Agent::run() {
  std::vector<std::shared_ptr<EndpointImpl>> eps, held;  // reused every turn
  // Which endpoints a turn looks at. Not all of them: with thousands of
  // connections a pass over every one per wake-up made each wake cost O(N)
  // (a provider call per queue) and set-up O(N^2). A turn looks at the
  // endpoints whose fd woke the agent (`fired`), those that still had work
  // or could not sleep on the previous turn (`hot`) and new ones; a sweep
  // over every endpoint happens after a sleep that timed out and at least
  // every kSweep (every kSweepDriven while users drive endpoints, to take
  // them back once they stop), as a safety net and to follow the users'
  // claims.
  std::vector<const EndpointImpl*> fired, hot, look;
  // Endpoints whose transport entries the agent itself read out of a shared
  // queue (or that another thread reported so, look_at): the queue's fd no
  // longer wakes whoever drives them, so the agent progresses them even when
  // a user drives them.
  std::vector<const EndpointImpl*> taken;
  // Endpoints whose look asked through look_by is due (gathered writes):
  // progressed only when a batch has waited the bound
  // (EndpointImpl::gather_look_due), and looked at again (`redue`) when a
  // younger batch waits.
  std::vector<const EndpointImpl*> due_hits;
  std::vector<std::pair<std::int64_t, const EndpointImpl*>> redue;
  // Endpoints whose same-host inbox was not idle at this turn's look.
  std::vector<const EndpointImpl*> rung_eps;
  std::vector<const void*> ring_busy;
  // Shared transport queues whose fd woke the agent, or that could not be
  // slept on after the last turn: read (pumped) at the start of the next.
  std::vector<backend::SharedQueue*> queues_to_pump, pumped, to_try;
  std::vector<void*> ready;
  std::unordered_set<backend::SharedQueue*> queue_undriven;  // queues with an undriven endpoint, per turn
  constexpr auto kSweep = std::chrono::milliseconds(100);
  constexpr auto kSweepDriven = std::chrono::milliseconds(2);
  auto next_sweep = std::chrono::steady_clock::time_point{};
  bool swept = false;  // this turn looked at every endpoint
  bool sweep = true;
  // A same-host peer rang the doorbell (it sent a request it waits for): the
  // next turn sweeps, reads every shared queue (those users drive too) and
  // progresses what the read reported and every endpoint with a queue of its
  // own, whether users drive them or not. Users who drive a connection but
  // do not poll now (a poll in the last millisecond, a Sleeper held while the
  // thread is busy elsewhere) would otherwise keep the request waiting until
  // their claim expires and a sweep takes the endpoint back.
  bool rung = false;
  bool user_driven = false;  // at the last sweep (or since), some endpoint was driven by a user
  // After traffic woke it, the agent keeps polling for a short while before
  // sleeping again (kLinger from the wake, or from the last turn that found
  // work): the operations of one burst (a write and the read right behind
  // it) then cost one wake-up, not one each. A plain incoming write leaves
  // no completion at the target, so the wake itself is the signal.
  constexpr auto kLinger = std::chrono::microseconds(30);
  auto linger_until = std::chrono::steady_clock::time_point{};
  bool spinning = false;  // the previous turn polled endpoints and did not sleep
  auto set_armed = [this](int fd, const EndpointImpl* raw, bool on) {
    epoll_event e{};
    e.events = on ? static_cast<std::uint32_t>(EPOLLIN) : 0u;
    e.data.u64 = tag_of(raw);
    epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &e);
  };

  while (!stop_) {
    int work = 0;
    // While it keeps polling (busy, or lingering after traffic) the agent
    // looks at connection management on every 64th turn only: on tcp reading
    // it also runs a progress pass over every connection, which would double
    // the cost of each turn. After a sleep it always looks, once it has
    // progressed the endpoints that woke it (below): the look costs a
    // system call, which would otherwise delay the traffic that woke it.
    const bool look_at_cm = !spinning || ++turn_ % 64 == 0;
    const auto now_tp = std::chrono::steady_clock::now();
    if (busy_ || now_tp >= next_sweep) sweep = true;
    eps.clear();
    if (sweep) {
      // A sweep reads every shared queue that some endpoint on it leaves to
      // the agent (all_driven: as judged at the previous sweep), and then
      // progresses only the endpoints on shared queues that the read
      // reported or that owe work: nothing per idle connection but a look.
      MutexLock lock(mu_);
      for (auto& [q, wq] : queues_)
        if (!wq.all_driven || rung) queues_to_pump.push_back(q);
    }
    // Shared queues first: what they hold goes to its connections, and the
    // connections that got something are looked at this turn.
    pumped.clear();
    if (!queues_to_pump.empty()) {
      std::sort(queues_to_pump.begin(), queues_to_pump.end());
      queues_to_pump.erase(std::unique(queues_to_pump.begin(), queues_to_pump.end()), queues_to_pump.end());
      {
        // A queue users drive every endpoint of is theirs: its fd left the
        // set at the sweep that found so, and the agent does not read it
        // either, also when it was reading it until then (a burst of traffic
        // keeps the queue's try-wait failing, and reading on would make the
        // agent contend with the users for the queue and the endpoints on
        // every completion). A doorbell turn reads it all the same.
        MutexLock lock(mu_);
        for (auto* q : queues_to_pump)
          if (auto it = queues_.find(q); it != queues_.end() && (!it->second.all_driven || rung)) pumped.push_back(q);
      }
      queues_to_pump.clear();
      // The queues belong to the domain, which outlives this thread.
      std::shared_lock<std::shared_mutex> transport(zone_->transport_mu);
      for (auto* q : pumped) {
        ready.clear();
        queue_reads_.fetch_add(1, std::memory_order_relaxed);
        if (q->pump(ready) > 0) ++work;
        for (void* o : ready) {
          fired.push_back(static_cast<const EndpointImpl*>(o));
          taken.push_back(static_cast<const EndpointImpl*>(o));
        }
      }
    }
    // Every endpoint looked at stays referenced until the lock is released:
    // one destroyed under it would deregister itself (remove()) and deadlock.
    {
      const std::int64_t now = now_tp.time_since_epoch().count();
      MutexLock lock(mu_);
      // Endpoints a user thread is polling or sleeping on are left to it:
      // their fds leave the epoll set so the agent neither competes for them
      // nor wakes for them. New endpoints and those another thread reported
      // (look_at) count as taken: the agent looks at them itself.
      // look_by's endpoints that are due join them.
      if (next_due_.load(std::memory_order_seq_cst) != 0) {
        std::int64_t next = 0;
        std::size_t kept = 0;
        for (const auto& d : due_) {
          if (d.first <= now) {
            due_hits.push_back(d.second);
            continue;
          }
          if (next == 0 || d.first < next) next = d.first;
          due_[kept++] = d;
        }
        due_.resize(kept);
        next_due_.store(next, std::memory_order_seq_cst);
      }
      taken.insert(taken.end(), fresh_.begin(), fresh_.end());
      std::sort(due_hits.begin(), due_hits.end());
      // Same-host inboxes with messages or a rung bell: looked at (a look
      // costs two loads per ring), and progressed unless a user drives
      // them. A spinning agent does not read its epoll set, so this is how
      // it sees them.
      // Every inbox only at a sweep or when the zone's count moved
      // (RingWatch): a look at one reads a page of its own.
      ring_busy.clear();
      if (!ring_watch_.empty()) ring_watch_.look(zone_->rings_rung(), sweep, ring_busy);
      rung_eps.clear();
      for (const void* key : ring_busy) rung_eps.push_back(static_cast<const EndpointImpl*>(key));
      std::sort(rung_eps.begin(), rung_eps.end());
      fired.insert(fired.end(), rung_eps.begin(), rung_eps.end());
      std::sort(taken.begin(), taken.end());
      auto consider = [&](const EndpointImpl* raw, Watched& w, WatchedRing* ring) {
        auto p = w.ep.lock();
        if (!p) return;
        // A thread asleep on a queue's fd (CompletionQueue::Sleeper) wakes
        // for this endpoint only if its transport has a wait fd.
        const bool wakes_sleeper = w.fd >= 0 || (w.queue != nullptr && w.queue->wait_fd() >= 0);
        const bool driven = p->send_cq->claimed(now) || p->recv_cq->claimed(now) ||
                            (wakes_sleeper && (p->send_cq->slept_on() || p->recv_cq->slept_on()));
        if (w.fd >= 0 && driven == w.armed) {
          set_armed(w.fd, raw, !driven);
          w.armed = !driven;
        }
        // The same for a same-host ring's bell: a user who drives the
        // endpoint has it in its own sleep set. (Re-armed, it reports once
        // if the eventfd holds a count: one spare look.)
        if (ring != nullptr && driven == ring->armed) {
          epoll_event e{};
          e.events = driven ? 0u : static_cast<std::uint32_t>(EPOLLIN | EPOLLET);
          e.data.u64 = bell_tag_of(raw);
          epoll_ctl(epfd_, EPOLL_CTL_MOD, ring->box->bell_fd(), &e);
          ring->armed = !driven;
        }
        // A shared queue's fd is left out of the set only while users
        // drive every endpoint on it (decided at each sweep, below).
        if (w.queue != nullptr && !driven) queue_undriven.insert(w.queue);
        user_driven |= driven;
        // Gathered writes whose user may have stopped polling: the agent's
        // only when they waited the bound. A look at a batch its user is
        // still posting to would take the endpoint's lock from that user
        // (who then wakes the agent at each unlock while it waits) and
        // place part of the batch.
        bool gathered_late = false;
        if (std::binary_search(due_hits.begin(), due_hits.end(), raw)) {
          std::int64_t again = 0;
          gathered_late = p->gather_look_due(now, again);
          if (again != 0) redue.emplace_back(again, raw);
        }
        // Work no descriptor announces any more is the agent's even then.
        const bool has_work = p->owes_work.load(std::memory_order_relaxed) || gathered_late ||
                              std::binary_search(taken.begin(), taken.end(), raw) || (rung && w.fd >= 0);
        // In a sweep, an endpoint on a shared queue the read did not report
        // has nothing waiting in the transport (the queue was read this
        // turn, or users drive every endpoint on it), unless its same-host
        // inbox has something.
        const bool idle_shared =
            swept && w.queue != nullptr && !std::binary_search(rung_eps.begin(), rung_eps.end(), raw);
        if (has_work || (!driven && !idle_shared)) eps.push_back(p);
        held.push_back(std::move(p));
      };
      swept = sweep;
      if (sweep) {
        sweeps_.fetch_add(1, std::memory_order_relaxed);
        user_driven = false;
        queue_undriven.clear();
        for (auto it = endpoints_.begin(); it != endpoints_.end();) {
          if (it->second.ep.expired()) {
            it = endpoints_.erase(it);
            continue;
          }
          auto r = rings_.find(it->first);
          consider(it->first, it->second, r == rings_.end() ? nullptr : &r->second);
          ++it;
        }
        sweep = false;
        next_sweep = now_tp + (user_driven ? kSweepDriven : kSweep);
        for (auto& [q, wq] : queues_) {
          const bool was_all_driven = wq.all_driven;
          wq.all_driven = queue_undriven.count(q) == 0;
          // Given back to the agent since the last sweep: not read this
          // turn, so read at the next (before any sleep).
          if (was_all_driven && !wq.all_driven) queues_to_pump.push_back(q);
          if (wq.armed == wq.all_driven) set_queue_armed(q, wq, !wq.all_driven);
        }
        queue_undriven.clear();
      } else {
        look.clear();
        look.insert(look.end(), fired.begin(), fired.end());
        look.insert(look.end(), hot.begin(), hot.end());
        look.insert(look.end(), fresh_.begin(), fresh_.end());
        look.insert(look.end(), due_hits.begin(), due_hits.end());
        std::sort(look.begin(), look.end());
        look.erase(std::unique(look.begin(), look.end()), look.end());
        for (const EndpointImpl* raw : look)
          if (auto it = endpoints_.find(raw); it != endpoints_.end()) {
            auto r = rings_.find(raw);
            consider(raw, it->second, r == rings_.end() ? nullptr : &r->second);
          }
        if (user_driven) next_sweep = std::min(next_sweep, now_tp + kSweepDriven);
      }
      fresh_.clear();
      due_hits.clear();
      // Looks asked again (gather_look_due): kept as look_by keeps them.
      for (const auto& d : redue) {
        due_.push_back(d);
        (void)lower_next_due(d.first);
      }
      redue.clear();
      // An endpoint nobody drives on a queue left out of the set: the agent
      // listens to that queue again at once.
      for (auto* q : queue_undriven) {
        auto it = queues_.find(q);
        if (it != queues_.end() && !it->second.armed) set_queue_armed(q, it->second, true);
      }
      queue_undriven.clear();
      // The connection-management fd of some providers (tcp) also turns
      // readable with data traffic; while users drive endpoints it would
      // wake the agent for their traffic, so events are then read on the
      // periodic look instead.
      if (user_driven == cm_armed_) {
        epoll_event e{};
        e.events = user_driven ? 0u : static_cast<std::uint32_t>(EPOLLIN);
        e.data.u64 = kCmTag;
        epoll_ctl(epfd_, EPOLL_CTL_MOD, zone_->domain->cm_wait_fd(), &e);
        cm_armed_ = !user_driven;
      }
    }
    if (rung && swept) {
      rung = false;
      doorbells_.fetch_add(1, std::memory_order_relaxed);
    }
    held.clear();
    fired.clear();
    taken.clear();
    hot.clear();
    if (stop_) break;
    {
      backend::ProgressPass pass;  // each shared transport queue is read once this turn
      for (auto& ep : eps) {
        const int n = ep->progress();
        work += n;
        if (n > 0) hot.push_back(ep.get());
      }
    }
    if (look_at_cm) work += static_cast<int>(dispatch_cm());
    // The last reference to the zone may have been dropped on this thread
    // (an event's endpoint): the zone is gone, stop() was called.
    if (stop_) break;
    spinning = !eps.empty() || !pumped.empty();
    // The linger runs from the last turn that found work: a peer's part of
    // a large transfer (ring_pull) can keep the agent longer than kLinger,
    // and the peer's next one follows about as long after it.
    if (work > 0) linger_until = std::chrono::steady_clock::now() + kLinger;
    if (spinning && (busy_ || work > 0 || std::chrono::steady_clock::now() < linger_until)) {
      hot.clear();
      for (auto& ep : eps) hot.push_back(ep.get());
      eps.clear();
      queues_to_pump.insert(queues_to_pump.end(), pumped.begin(), pumped.end());
      continue;
    }
    // Sleep only when the transport confirms nothing is pending. (While
    // users drive endpoints, the connection-management queue is looked at
    // on each periodic wake instead: its readiness follows their traffic.)
    // Endpoints not looked at this turn were confirmed before an earlier
    // sleep and their fds have not fired since.
    bool can_sleep = user_driven;
    if (!can_sleep) {
      std::shared_lock<std::shared_mutex> transport(zone_->transport_mu);
      can_sleep = zone_->domain->cm_try_wait();
    }
    // An endpoint on a shared queue is asked only about itself; the queue's
    // try-wait (which re-arms its fd) is made once for all of them.
    to_try.assign(pumped.begin(), pumped.end());
    for (auto& ep : eps) {
      auto* q = ep->shared_queue.load(std::memory_order_relaxed);
      if (q != nullptr) to_try.push_back(q);
      if (!(q != nullptr ? ep->quiet_but_queue() : ep->ready_to_sleep())) {
        can_sleep = false;
        hot.push_back(ep.get());
      }
    }
    if (!to_try.empty()) {
      std::sort(to_try.begin(), to_try.end());
      to_try.erase(std::unique(to_try.begin(), to_try.end()), to_try.end());
      std::shared_lock<std::shared_mutex> transport(zone_->transport_mu);
      for (auto* q : to_try) {
        if (!q->try_wait()) {
          can_sleep = false;
          queues_to_pump.push_back(q);
        }
      }
    }
    // A queue that must be read (one a sweep gave back to the agent): not
    // after a sleep.
    if (!queues_to_pump.empty()) can_sleep = false;
    eps.clear();  // never keep an endpoint alive while asleep
    if (!can_sleep) continue;
    epoll_event out[64];
    // While users drive endpoints, look again soon (after about twice the
    // drive window) to take them back once the users stop polling.
    // A sweep costs O(endpoints): with thousands of them (one user polling
    // a queue they all feed, say) a sweep every 2 ms would keep the agent
    // busy. So the next one comes no sooner than 20 times as long as this
    // one took: sweeping stays under about 5% of the agent's time.
    const auto before_sleep = std::chrono::steady_clock::now();
    if (swept) next_sweep = std::max(next_sweep, before_sleep + 20 * (before_sleep - now_tp));
    std::chrono::nanoseconds nap = std::chrono::milliseconds(100);
    if (user_driven) nap = std::clamp<std::chrono::nanoseconds>(next_sweep - before_sleep, kSweepDriven, nap);
    // Until look_by's earliest endpoint is due, at the latest.
    asleep_until_.store((before_sleep + nap).time_since_epoch().count(), std::memory_order_seq_cst);
    if (const std::int64_t due = next_due_.load(std::memory_order_seq_cst); due != 0)
      nap = std::clamp<std::chrono::nanoseconds>(
          std::chrono::nanoseconds(due - before_sleep.time_since_epoch().count()), std::chrono::nanoseconds(0), nap);
    timespec ts{0, static_cast<long>(nap.count())};
    int n = epoll_pwait2(epfd_, out, 64, &ts, nullptr);
    if (n < 0 && errno == ENOSYS)
      n = epoll_wait(epfd_, out, 64, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(nap).count()));
    asleep_until_.store(0, std::memory_order_seq_cst);
    spinning = false;
    // A timeout: look at everything once (when the sweep's cost allows).
    if (n == 0 && std::chrono::steady_clock::now() >= next_sweep) sweep = true;
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = out[i].data.u64;
      if (tag == kWakeTag) {
        wake_.clear();
        continue;
      }
      if (tag == kDoorbellTag) {
        doorbell_.drain();  // peers write to it directly
        rung = sweep = true;
        continue;
      }
      linger_until = std::chrono::steady_clock::now() + kLinger;
      if (is_bell_tag(tag)) {
        // A peer process put messages in the endpoint's ring or handled
        // ours: looked at next turn (progressed unless a user drives it;
        // the user's own sleep set has the bell, level-triggered).
        fired.push_back(reinterpret_cast<const EndpointImpl*>(static_cast<std::uintptr_t>(tag & ~std::uint64_t{3})));
        continue;
      }
      if (is_queue_tag(tag))
        queues_to_pump.push_back(
            reinterpret_cast<backend::SharedQueue*>(static_cast<std::uintptr_t>(tag & ~std::uint64_t{1})));
      else if (tag != kCmTag)
        fired.push_back(reinterpret_cast<const EndpointImpl*>(static_cast<std::uintptr_t>(tag)));
    }
  }
}

}  // namespace remora::detail
