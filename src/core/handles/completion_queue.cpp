// CompletionQueue: a software queue fed by the endpoints that use it.
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include "core/impl.hpp"

namespace remora {
namespace detail {

// How long after a user's poll the agent leaves the queue's endpoints to
// that user instead of competing with it for them.
constexpr std::chrono::microseconds kUserDriveWindow{1000};

namespace {
// The queue whose drive_and_take() runs on this thread, if any.
thread_local const CqImpl* tl_taking = nullptr;
}  // namespace

void CqImpl::push(Completion c, check::RecordPtr check) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (queue.empty() && fd_in_use && tl_taking != this) signal.raise();
    queue.push_back({std::move(c), std::move(check)});
    queued.store(queue.size(), std::memory_order_relaxed);
  }
  cv.notify_all();
}

std::size_t CqImpl::drive_and_take(std::span<Completion> out) {
  struct Taking {
    const CqImpl* prev;
    explicit Taking(const CqImpl* q) : prev(std::exchange(tl_taking, q)) {}
    ~Taking() { tl_taking = prev; }
    Taking(const Taking&) = delete;
    Taking& operator=(const Taking&) = delete;
  };
  {
    const Taking taking(this);
    drive();
  }
  return take(out);  // raises the eventfd for what this thread made and did not take
}

std::size_t CqImpl::take(std::span<Completion> out) {
  std::vector<check::RecordPtr> reaped;  // remora-check's, compared below
  std::unique_lock<std::mutex> lock(mu);
  std::size_t n = std::min(out.size(), queue.size());
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = std::move(queue.front().c);
    if (queue.front().check) reaped.push_back(std::move(queue.front().check));
    queue.pop_front();
  }
  queued.store(queue.size(), std::memory_order_relaxed);
  // The eventfd follows the queue's level: cleared once it is empty, and
  // raised while something is left (completions a drive_and_take made
  // without raising it; a no-op when it is raised already). Taking nothing
  // (n == 0: the queue was empty) changes neither.
  if (n > 0 && fd_in_use) {
    if (queue.empty())
      signal.clear();
    else
      signal.raise();
  }
  lock.unlock();
  for (auto& r : reaped) check::on_reap(*r);
  return n;
}

namespace {
thread_local std::uint64_t polls_here = 0;  // polls_by_this_thread()
}  // namespace

void CqImpl::claim() {
  // A thread that uses the queue's descriptor sleeps on it between polls;
  // the agent keeps driving the endpoints meanwhile (it also wakes for
  // their transports), so nothing waits on a thread that is asleep.
  // A thread that only polls and calls wait() claims: wait() drives what
  // it waits for itself.
  if (fd_given.load(std::memory_order_relaxed)) return;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  user_until.store((now + std::chrono::nanoseconds(kUserDriveWindow)).count(), std::memory_order_relaxed);
  ++polls_here;
}

std::uint64_t polls_by_this_thread() noexcept { return polls_here; }

CqImpl::~CqImpl() {
  MutexLock lock(watch_mu);
  if (epfd >= 0) ::close(epfd);
}

namespace {
void epoll_add(int epfd, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  (void)epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}
}  // namespace

void CqImpl::watch(int fd) {
  if (fd < 0) return;  // a busy-polling zone: nothing to sleep on
  MutexLock lock(watch_mu);
  // The connections of a shared transport queue have one fd.
  if (transport_fds[fd]++ == 0 && epfd >= 0) epoll_add(epfd, fd);
}

void CqImpl::unwatch(int fd) {
  if (fd < 0) return;
  MutexLock lock(watch_mu);
  auto it = transport_fds.find(fd);
  if (it == transport_fds.end()) return;
  if (--it->second > 0) return;
  transport_fds.erase(it);
  if (epfd >= 0) (void)epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
}

int CqImpl::wait_fd() {
  {
    // From now on the eventfd follows the queue (push raises it).
    std::lock_guard<std::mutex> lock(mu);
    if (!fd_in_use) {
      fd_in_use = true;
      if (!queue.empty()) signal.raise();
    }
  }
  MutexLock lock(watch_mu);
  if (epfd >= 0) return epfd;
  const int ev = signal.fd();
  if (ev < 0) return -1;
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return -1;
  epoll_add(ep, ev);
  for (const auto& [fd, users] : transport_fds) epoll_add(ep, fd);
  epfd = ep;
  return epfd;
}

void CqImpl::attach(const std::shared_ptr<EndpointImpl>& ep, backend::SharedQueue* q) {
  MutexLock lock(sources_mu);
  Source& s = sources[ep.get()];
  if (s.refs++ > 0) return;  // this is its send and its receive queue
  s.ep = ep;
  s.queue = q;
  if (q != nullptr)
    ++shared_queues[q];
  else
    own_queue.insert(ep.get());
  // Work it owed before (a connection dropped and set up again): the next
  // drive looks.
  if (ep->owes_work.load(std::memory_order_relaxed)) {
    s.owing = true;
    owing.push_back(ep.get());
  }
}

void CqImpl::detach(const EndpointImpl& ep) {
  MutexLock lock(sources_mu);
  auto it = sources.find(&ep);
  if (it == sources.end() || --it->second.refs > 0) return;
  if (auto* q = it->second.queue) {
    if (auto qi = shared_queues.find(q); qi != shared_queues.end() && --qi->second == 0) shared_queues.erase(qi);
  } else {
    own_queue.erase(&ep);
  }
  if (it->second.owing) std::erase(owing, &ep);
  sources.erase(it);
}

void CqImpl::watch_ring(const EndpointImpl& ep, const std::shared_ptr<direct::Inbox>& inbox, bool on) {
  {
    MutexLock lock(sources_mu);
    if (on)
      ringed.add(&ep, inbox);
    else
      ringed.remove(&ep);
  }
  if (on)
    watch(inbox->bell_fd());
  else
    unwatch(inbox->bell_fd());
}

void CqImpl::note_owing(const EndpointImpl& ep) {
  MutexLock lock(sources_mu);
  auto it = sources.find(&ep);
  if (it == sources.end() || it->second.owing) return;
  it->second.owing = true;
  owing.push_back(&ep);
}

namespace {
// What a drive or an arm works with, in the calling thread's reused lists
// (called on every empty poll of a spinning user: no allocation each time).
// The caller empties `eps` before returning so it keeps no endpoint alive.
struct DriveLists {
  std::vector<backend::SharedQueue*> queues;
  std::vector<void*> ready;  // owners the read of the queues reported
  std::vector<const EndpointImpl*> others;
  std::vector<std::shared_ptr<EndpointImpl>> eps;
  std::vector<const void*> busy;  // same-host inboxes found not idle
};
DriveLists& drive_lists() {
  thread_local DriveLists l;
  l.queues.clear();
  l.ready.clear();
  l.others.clear();
  l.eps.clear();
  return l;
}

// Read each shared transport queue of `cq` once; `l.ready` gets the owners
// of the connections with entries kept for them (or notes owed).
void read_shared_queues(CqImpl& cq, DriveLists& l) {
  if (l.queues.empty()) return;
  std::shared_lock<std::shared_mutex> transport(cq.zone->transport_mu);
  for (auto* q : l.queues) (void)q->pump(l.ready);
}

// Entries kept for endpoints that feed other queues: the read took them out
// of the transport, so its fd no longer wakes whoever drives those; the
// agent progresses them.
void hand_to_agent(CqImpl& cq, const std::vector<const EndpointImpl*>& others) {
  for (const EndpointImpl* o : others) cq.zone->agent->look_at(o);
}
}  // namespace

void CqImpl::drive() {
  backend::ProgressPass pass;  // each shared transport queue is read once
  DriveLists& l = drive_lists();
  {
    MutexLock lock(sources_mu);
    for (const auto& [q, users] : shared_queues) l.queues.push_back(q);
    // Endpoints with a transport queue of their own are each polled, and
    // so are those with a same-host ring (a peer process fills it).
    for (const EndpointImpl* raw : own_queue)
      if (auto p = sources.find(raw)->second.ep.lock()) l.eps.push_back(std::move(p));
    // Of those, the ones whose inbox is not idle: every inbox only when
    // the zone's count of rung bells moved (direct::RingWatch).
    if (!ringed.empty()) {
      l.busy.clear();
      ringed.look(zone->rings_rung(), false, l.busy);
      for (const void* key : l.busy)
        if (auto it = sources.find(static_cast<const EndpointImpl*>(key)); it != sources.end())
          if (auto p = it->second.ep.lock()) l.eps.push_back(std::move(p));
    }
  }
  // Endpoints on shared transport queues are progressed only when the read
  // of their queue left them something or they owe work: with thousands of
  // connections feeding one queue, a poll costs one read per shared queue,
  // nothing per idle connection.
  read_shared_queues(*this, l);
  {
    MutexLock lock(sources_mu);
    for (void* o : l.ready) {
      auto it = sources.find(static_cast<const EndpointImpl*>(o));
      if (it == sources.end()) {
        l.others.push_back(static_cast<const EndpointImpl*>(o));
        continue;
      }
      if (auto p = it->second.ep.lock()) l.eps.push_back(std::move(p));
    }
    for (const EndpointImpl* raw : owing) {
      auto it = sources.find(raw);
      if (it == sources.end()) continue;
      // Unlisted before its progress: if that leaves work again, progress
      // lists it again (EndpointImpl::set_owes_work).
      it->second.owing = false;
      if (auto p = it->second.ep.lock()) l.eps.push_back(std::move(p));
    }
    owing.clear();
  }
  hand_to_agent(*this, l.others);
  std::sort(l.eps.begin(), l.eps.end());
  l.eps.erase(std::unique(l.eps.begin(), l.eps.end()), l.eps.end());
  for (auto& ep : l.eps) ep->progress();
  l.eps.clear();
}

bool CqImpl::arm() {
  DriveLists& l = drive_lists();
  bool ok = true;
  {
    MutexLock lock(sources_mu);
    for (const auto& [q, users] : shared_queues) l.queues.push_back(q);
    for (const EndpointImpl* raw : own_queue)
      if (auto p = sources.find(raw)->second.ep.lock()) l.eps.push_back(std::move(p));
    if (!ringed.empty()) {
      l.busy.clear();
      ringed.look(zone->rings_rung(), false, l.busy);
      if (!l.busy.empty()) ok = false;  // drive again rather than sleep
    }
    // Work owed: drive again rather than sleep. (A listed endpoint is in
    // `sources`, whose entry detach() erases before the endpoint is gone.)
    for (const EndpointImpl* raw : owing)
      if (raw->owes_work.load(std::memory_order_relaxed)) ok = false;
  }
  read_shared_queues(*this, l);
  {
    MutexLock lock(sources_mu);
    for (void* o : l.ready) {
      // Something waiting for one of ours: drive again rather than sleep.
      if (sources.count(static_cast<const EndpointImpl*>(o)) != 0)
        ok = false;
      else
        l.others.push_back(static_cast<const EndpointImpl*>(o));
    }
  }
  hand_to_agent(*this, l.others);
  for (auto& ep : l.eps) ok = ep->ready_to_sleep() && ok;
  if (!l.queues.empty()) {
    // The queue's try-wait re-arms its fd (the same for all its connections).
    std::shared_lock<std::shared_mutex> transport(zone->transport_mu);
    for (auto* q : l.queues) ok = q->try_wait() && ok;
  }
  l.eps.clear();
  return ok;
}

bool CqImpl::expecting() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!queue.empty()) return true;
  }
  std::vector<std::shared_ptr<EndpointImpl>> eps;
  {
    MutexLock lock(sources_mu);
    for (const auto& [raw, s] : sources)
      if (auto p = s.ep.lock()) eps.push_back(std::move(p));
  }
  for (const auto& ep : eps) {
    std::shared_ptr<SrqImpl> srq;
    {
      MutexLock lock(ep->mu);
      // `order` holds every operation posted and not yet reported (in
      // flight, behind a fence, or finished out of order).
      if (ep->send_cq.get() == this && !ep->order.empty()) return true;
      if (ep->recv_cq.get() != this) continue;
      if (!ep->receives.posted.empty()) return true;
      srq = ep->srq;
    }
    if (srq) {
      std::lock_guard<std::mutex> lock(srq->mu);
      if (!srq->queue.posted.empty()) return true;
    }
  }
  // A completion made while the endpoints were looked at.
  std::lock_guard<std::mutex> lock(mu);
  return !queue.empty();
}

}  // namespace detail

bool CompletionQueue::expecting() const {
  if (!impl_) return false;
  return impl_->expecting();
}

CompletionQueue::Sleeper::Sleeper(std::shared_ptr<detail::CqImpl> impl) : impl_(std::move(impl)) {
  if (impl_) impl_->sleepers.fetch_add(1, std::memory_order_relaxed);
}

CompletionQueue::Sleeper& CompletionQueue::Sleeper::operator=(Sleeper&& o) noexcept {
  if (this != &o) {
    Sleeper gone(std::move(*this));  // released at the end of this scope
    impl_ = std::move(o.impl_);
  }
  return *this;
}

CompletionQueue::Sleeper::~Sleeper() {
  if (!impl_) return;
  // The thread was driving until now: the agent takes the endpoints back
  // after the usual window, not in the middle of the thread's next poll.
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  impl_->user_until.store((now + std::chrono::nanoseconds(detail::kUserDriveWindow)).count(),
                          std::memory_order_relaxed);
  impl_->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

CompletionQueue::Sleeper CompletionQueue::sleeper() const {
  // In a busy-polling zone the transports have no descriptors to wake a
  // sleeper: the agent must keep driving.
  if (!impl_ || impl_->zone->busy_poll || impl_->wait_fd() < 0) return Sleeper();
  return Sleeper(impl_);
}

std::size_t CompletionQueue::poll(std::span<Completion> out) {
  if (!impl_ || out.empty()) return 0;
  impl_->claim();
  std::size_t n = impl_->take(out);
  if (n > 0) return n;
  return impl_->drive_and_take(out);
}

Result<std::size_t> CompletionQueue::wait(std::span<Completion> out, std::chrono::milliseconds timeout) {
  if (!impl_) return Errc::invalid_handle;
  if (out.empty()) return Errc::invalid_argument;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // A waiter drives its queue's endpoints itself when it wakes, spinning in
  // a busy-polling zone (where it claims them from the agent), else asleep
  // on the wait descriptor, which wakes it for their transports' work; the
  // agent keeps driving them too.
  const int fd = impl_->zone->busy_poll ? -1 : impl_->wait_fd();
  // Asleep on the descriptor, this thread drives the endpoints when it
  // wakes: the agent leaves them to it meanwhile.
  const Sleeper asleep = fd >= 0 ? Sleeper(impl_) : Sleeper();
  for (;;) {
    if (impl_->zone->busy_poll) impl_->claim();
    if (std::size_t n = impl_->take(out); n > 0) return n;
    if (std::size_t n = impl_->drive_and_take(out); n > 0) return n;
    auto now = std::chrono::steady_clock::now();
    if (timeout.count() >= 0 && now >= deadline) return Errc::timeout;
    if (impl_->zone->busy_poll) continue;
    // Sleep until a completion is queued or a connection's transport has
    // something, then drive progress here (the agent may have handled it
    // meanwhile: then the completion is simply there). The slice bounds
    // what a missed wake-up could cost.
    auto until = std::min(deadline, now + std::chrono::milliseconds(20));
    if (timeout.count() < 0) until = now + std::chrono::milliseconds(20);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    if (fd >= 0) {
      if (!impl_->arm()) continue;  // something is pending: drive again
      pollfd p{fd, POLLIN, 0};
      (void)::poll(&p, 1, static_cast<int>(left));
    } else {  // no descriptor (out of fds): the agent notifies
      std::unique_lock<std::mutex> lock(impl_->mu);
      impl_->cv.wait_until(lock, until, [&] { return !impl_->queue.empty(); });
    }
  }
}

int CompletionQueue::fd() const noexcept {
  if (!impl_) return -1;
  // Made on first use: a queue that is only polled costs no system call
  // per completion.
  impl_->fd_given.store(true, std::memory_order_relaxed);
  return impl_->wait_fd();
}

std::size_t CompletionQueue::progress() {
  if (!impl_) return 0;
  if (std::size_t n = size(); n > 0) return n;
  impl_->drive();
  if (std::size_t n = size(); n > 0) return n;
  // Nothing: the caller is about to sleep on fd(). Re-arm the transports'
  // wait fds; when one says something is pending, drive once more.
  if (!impl_->arm()) impl_->drive();
  return size();
}

std::size_t CompletionQueue::size() const noexcept {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->queue.size();
}

}  // namespace remora
