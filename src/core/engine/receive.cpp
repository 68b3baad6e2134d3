// Software receive matching, in order: posted receives meet incoming
// messages (of an endpoint or of a shared receive queue); whichever comes
// first waits for the other.
#include <cstring>

#include "core/impl.hpp"

namespace remora::detail {

namespace {

/// Place `bytes` (the message `in` describes) into `pr`'s segments and
/// report it on in.cq.
void complete_receive(const PostedRecv& pr, const Incoming& in, std::span<const std::uint8_t> bytes) {
  Completion c;
  c.cookie = pr.cookie;
  c.op = in.write_imm ? Opcode::recv_write_imm : Opcode::recv;
  c.imm = in.imm;
  c.has_imm = in.has_imm;
  c.endpoint_id = in.endpoint_id;
  std::size_t copied = 0;
  for (const auto& v : pr.iov) {
    if (copied == bytes.size()) break;
    std::size_t n = std::min(v.len, bytes.size() - copied);
    std::memcpy(v.addr, bytes.data() + copied, n);
    copied += n;
  }
  if (copied < bytes.size()) c.status = make_error_code(Errc::length_error);
  c.length = in.write_imm ? in.length : copied;
  in.cq->push(std::move(c));
}

void complete_receive(const PostedRecv& pr, const Incoming& in) { complete_receive(pr, in, in.bytes); }

}  // namespace

void EndpointImpl::deliver(Incoming in) {
  in.cq = recv_cq;
  in.endpoint_id = id;
  if (srq) {
    std::lock_guard<std::mutex> lock(srq->mu);
    srq->queue.arrive(std::move(in));
    return;
  }
  receives.arrive(std::move(in));
}

void EndpointImpl::deliver_message(std::span<const std::uint8_t> bytes, bool has_imm, std::uint32_t imm) {
  Incoming in;
  in.has_imm = has_imm;
  in.imm = imm;
  in.length = bytes.size();
  in.cq = recv_cq;
  in.endpoint_id = id;
  // A receive is waiting (then no message is: they never wait both): the
  // message goes from the connection's buffer straight into it. Otherwise
  // it is kept, copied, until a receive is posted.
  auto land = [&](RecvQueue& q) {
    if (!q.posted.empty()) {
      PostedRecv pr = std::move(q.posted.front());
      q.posted.pop_front();
      complete_receive(pr, in, bytes);
      return;
    }
    in.bytes.assign(bytes.begin(), bytes.end());
    q.unmatched.push_back(std::move(in));
  };
  if (srq) {
    std::lock_guard<std::mutex> lock(srq->mu);
    land(srq->queue);
    return;
  }
  land(receives);
}

void RecvQueue::post(PostedRecv pr) {
  if (unmatched.empty()) {
    posted.push_back(std::move(pr));
    return;
  }
  Incoming in = std::move(unmatched.front());
  unmatched.pop_front();
  complete_receive(pr, in);
}

void RecvQueue::arrive(Incoming in) {
  if (posted.empty()) {
    unmatched.push_back(std::move(in));
    return;
  }
  PostedRecv pr = std::move(posted.front());
  posted.pop_front();
  complete_receive(pr, in);
}

}  // namespace remora::detail
