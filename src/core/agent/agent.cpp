// The target agent: one progress thread per protection zone.
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

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

Agent::Agent(ZoneImpl* zone, bool busy_poll) : zone_(zone), busy_(busy_poll) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  wake_fd_ = wake_.fd();
  ev.data.fd = wake_fd_;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  ev.data.fd = zone_->domain->cm_wait_fd();
  epoll_ctl(epfd_, EPOLL_CTL_ADD, ev.data.fd, &ev);
}

Agent::~Agent() {
  stop();
  if (epfd_ >= 0) ::close(epfd_);
}

void Agent::start() {
  started_ = true;
  thread_ = std::thread([self = shared_from_this()] { self->run(); });
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
void run_persist_job(Agent::PersistJob& job) {
  wire::Ctl rep = job.reply;
  auto done = job.region->persist_for_peer(rep.addr, rep.len);
  Errc why = Errc::io_error;  // any failure of the write-back: not durable
  if (!done && (done.error() == Errc::not_supported || done.error() == Errc::remote_access))
    why = static_cast<Errc>(done.error().value());
  rep.status = done ? 0 : static_cast<std::uint16_t>(why);
  if (auto ep = job.ep.lock()) ep->send_reply(rep);
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
    {
      PersistJob job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      run_persist_job(job);
      // The job's references (region, endpoint, and through them the
      // zone) are released here, before the lock is taken again: the
      // zone's destructor stops this agent.
    }
    wake();  // a reply the transport could not take yet is retried by the agent
    lock.lock();
  }
}

void Agent::wake() noexcept { wake_.raise(); }

void Agent::add(const std::shared_ptr<EndpointImpl>& ep, int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  endpoints_.push_back(Watched{ep, ep.get(), fd, fd >= 0});
  if (fd >= 0) {  // a busy-polling zone's queues have nothing to sleep on
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  }
  wake();
}

void Agent::remove(EndpointImpl* ep, int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd >= 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  // Identity and expiry only: locking an endpoint here could make this
  // thread drop its last reference under mu_ (its destructor comes back here).
  std::erase_if(endpoints_, [ep](const Watched& w) { return w.raw == ep || w.ep.expired(); });
}

void Agent::handle_cm(backend::CmEvent& ev) {
  std::shared_ptr<EndpointImpl> ep;
  std::shared_ptr<ListenerImpl> listener;
  {
    std::lock_guard<std::mutex> lock(zone_->cm_mu);
    if (auto it = zone_->cm_endpoints.find(ev.cm_id); it != zone_->cm_endpoints.end()) ep = it->second.lock();
    if (auto it = zone_->cm_listeners.find(ev.cm_id); it != zone_->cm_listeners.end()) listener = it->second.lock();
  }
  if (ep) {
    ep->on_cm_event(ev);
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

bool Agent::next_cm_event(backend::CmEvent& ev) {
  std::shared_lock<std::shared_mutex> transport(zone_->transport_mu);
  return zone_->domain->next_cm_event(ev);
}

std::size_t Agent::dispatch_cm() {
  std::lock_guard<std::mutex> lock(cm_mu_);
  std::size_t n = 0;
  for (backend::CmEvent ev; !stop_ && next_cm_event(ev); ++n) handle_cm(ev);
  return n;
}

std::size_t Agent::run_once() {
  std::size_t work = dispatch_cm();
  // A zone without a progress thread has no durability thread either: its
  // write-backs run here, on the caller's thread, outside every lock.
  if (!started_) work += run_persist_jobs();
  std::vector<std::shared_ptr<EndpointImpl>> eps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : endpoints_)
      if (auto p = w.ep.lock()) eps.push_back(std::move(p));
  }
  for (auto& ep : eps) work += static_cast<std::size_t>(ep->progress());
  return work;
}

void Agent::run() {
  std::vector<std::shared_ptr<EndpointImpl>> eps, held;  // reused every turn
  // After traffic woke it, the agent keeps polling for a short while before
  // sleeping again: the operations of one burst (a write and the read right
  // behind it) then cost one wake-up, not one each. A plain incoming write
  // leaves no completion at the target, so the wake itself is the signal.
  constexpr auto kLinger = std::chrono::microseconds(30);
  auto linger_until = std::chrono::steady_clock::time_point{};
  bool spinning = false;  // the previous turn polled endpoints and did not sleep
  while (!stop_) {
    int work = 0;
    // While it keeps polling (busy, or lingering after traffic) the agent
    // looks at connection management on every 64th turn only: on tcp reading
    // it also runs a progress pass over every connection, which would double
    // the cost of each turn. After a sleep it always looks.
    const bool look_at_cm = !spinning || ++turn_ % 64 == 0;
    if (look_at_cm) work += static_cast<int>(dispatch_cm());
    // The last reference to the zone may have been dropped on this thread
    // (an event's endpoint): the zone is gone, stop() was called.
    if (stop_) break;
    // Endpoints a user thread is polling are left to it: their fds leave the
    // epoll set so the agent neither competes for them nor wakes for them.
    bool user_driven = false;
    eps.clear();
    // Every endpoint looked at stays referenced until the lock is released:
    // one destroyed under it would deregister itself (remove()) and deadlock.
    {
      const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& w : endpoints_) {
        auto p = w.ep.lock();
        if (!p) continue;
        const bool driven = p->send_cq->claimed(now) || p->recv_cq->claimed(now);
        if (w.fd >= 0 && driven == w.armed) {
          epoll_event e{};
          e.events = driven ? 0u : static_cast<std::uint32_t>(EPOLLIN);
          e.data.fd = w.fd;
          epoll_ctl(epfd_, EPOLL_CTL_MOD, w.fd, &e);
          w.armed = !driven;
        }
        user_driven |= driven;
        if (!driven) eps.push_back(p);
        held.push_back(std::move(p));
      }
      // The connection-management fd of some providers (tcp) also turns
      // readable with data traffic; while users drive endpoints it would
      // wake the agent for their traffic, so events are then read on the
      // periodic look instead.
      if (user_driven == cm_armed_) {
        epoll_event e{};
        e.events = user_driven ? 0u : static_cast<std::uint32_t>(EPOLLIN);
        e.data.fd = zone_->domain->cm_wait_fd();
        epoll_ctl(epfd_, EPOLL_CTL_MOD, e.data.fd, &e);
        cm_armed_ = !user_driven;
      }
    }
    held.clear();
    if (stop_) break;
    for (auto& ep : eps) work += ep->progress();
    spinning = !eps.empty();
    if (stop_) break;
    if (!eps.empty() && (busy_ || work > 0 || std::chrono::steady_clock::now() < linger_until)) {
      eps.clear();
      continue;
    }
    // Sleep only when the transport confirms nothing is pending. (While
    // users drive endpoints, the connection-management queue is looked at
    // on each periodic wake instead: its readiness follows their traffic.)
    bool can_sleep = user_driven;
    if (!can_sleep) {
      std::shared_lock<std::shared_mutex> transport(zone_->transport_mu);
      can_sleep = zone_->domain->cm_try_wait();
    }
    for (auto& ep : eps) {
      MutexLock lock(ep->mu);
      std::shared_lock<std::shared_mutex> transport(zone_->transport_mu);
      // An acknowledgement or reply the transport could not take yet is
      // retried on the next turn rather than after a sleep.
      if (ep->conn && (!ep->conn->try_wait() || ep->msgs_acked != ep->msgs_handled || !ep->pending_replies.empty()))
        can_sleep = false;
    }
    eps.clear();  // never keep an endpoint alive while asleep
    if (!can_sleep) continue;
    epoll_event out[16];
    // While users drive endpoints, look again soon (after about twice the
    // drive window) to take them back once the users stop polling.
    timespec ts{0, user_driven ? 2'000'000 : 100'000'000};
    int n = epoll_pwait2(epfd_, out, 16, &ts, nullptr);
    if (n < 0 && errno == ENOSYS) n = epoll_wait(epfd_, out, 16, user_driven ? 1 : 100);
    spinning = false;
    for (int i = 0; i < n; ++i) {
      if (out[i].data.fd == wake_fd_)
        wake_.clear();
      else
        linger_until = std::chrono::steady_clock::now() + kLinger;
    }
  }
}

}  // namespace remora::detail
