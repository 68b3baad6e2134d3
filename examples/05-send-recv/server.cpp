// 05-send-recv server: answer every "ping N" message with "pong N" until the
// client disconnects. A receive is always posted before the client can send
// the message it is meant for.
//
//   remora-ex05-server <host> <port>      (port 0: any free port)
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/example.hpp"

using namespace remora;
using example::check;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);

  Fabric fabric = check(Fabric::open({.address = args.host}), "open the fabric");
  ProtectionZone zone = check(fabric.create_zone(), "create a protection zone");
  Listener listener = check(zone.listen(args.host, args.port), "listen");
  std::printf("server: listening on %s:%u\n", args.host.c_str(), listener.port());
  std::fflush(stdout);  // run.sh waits for this line

  // Receives complete on their own queue here, sends on another.
  CompletionQueue send_cq = check(zone.create_cq(), "create the send queue");
  CompletionQueue recv_cq = check(zone.create_cq(), "create the receive queue");
  EndpointOptions options;
  options.send_cq = &send_cq;
  options.recv_cq = &recv_cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");

  // Message buffers: a receive fills memory (local_write), a send reads it
  // (local_read).
  std::vector<char> inbox(256), outbox(256);
  MemoryRegion inbox_mr = check(zone.register_memory(inbox.data(), inbox.size(), Access::local_write), "register");
  MemoryRegion outbox_mr = check(zone.register_memory(outbox.data(), outbox.size(), Access::local_read), "register");
  const Segment in(inbox_mr, 0, inbox.size());

  // The first receive goes in before we accept: the client may send its
  // first ping as soon as it sees the connection established.
  check(ep.recv({&in, 1}, /*cookie=*/0), "post the first receive");

  ConnectionRequest request = check(listener.next_request(example::kTimeout), "wait for a connection request");
  check(request.accept(ep), "accept");
  example::expect_event(ep, ConnectionEventType::established, "wait for the connection");

  for (std::uint64_t round = 1;; ++round) {
    Completion c;
    (void)check(recv_cq.wait({&c, 1}, example::kTimeout), "wait for a ping");
    // When the client disconnects, the receive still posted is cancelled.
    if (c.status == Errc::flushed) break;
    if (c.status) example::die("receive: " + c.status.message());
    const std::string ping(inbox.data(), c.length);
    if (ping.rfind("ping ", 0) != 0) example::die("unexpected message \"" + ping + "\"");

    // The next receive goes in before we answer, so it is ready for the
    // client's next ping (the inbox is free again: `ping` is a copy).
    check(ep.recv({&in, 1}, round), "post a receive");

    const std::string pong = "pong " + ping.substr(5);
    std::memcpy(outbox.data(), pong.data(), pong.size());
    const Segment out(outbox_mr, 0, pong.size());
    check(ep.send({&out, 1}, round), "post the pong");
    example::wait_completion(send_cq, round, "send the pong");  // outbox reusable from here
    std::printf("server: got \"%s\", answered \"%s\"\n", ping.c_str(), pong.c_str());
  }

  example::wait_for_client_to_leave(ep);
  return 0;
}
