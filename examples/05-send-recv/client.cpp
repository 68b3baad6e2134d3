// 05-send-recv client: N rounds of ping-pong with two-sided messages. Each
// round posts the receive for the answer first, then sends the ping.
//
//   remora-ex05-client <host> <port> [rounds]   (default 5)
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/example.hpp"

using namespace remora;
using example::check;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv, 1, "[rounds]");
  const int rounds = args.extra.empty() ? 5 : std::atoi(args.extra[0].c_str());
  if (rounds < 1 || rounds > 10000) example::die("rounds must be between 1 and 10000");

  Fabric fabric = check(Fabric::open(), "open the fabric");
  ProtectionZone zone = check(fabric.create_zone(), "create a protection zone");
  CompletionQueue send_cq = check(zone.create_cq(), "create the send queue");
  CompletionQueue recv_cq = check(zone.create_cq(), "create the receive queue");
  EndpointOptions options;
  options.send_cq = &send_cq;
  options.recv_cq = &recv_cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");

  std::vector<char> inbox(256), outbox(256);
  MemoryRegion inbox_mr = check(zone.register_memory(inbox.data(), inbox.size(), Access::local_write), "register");
  MemoryRegion outbox_mr = check(zone.register_memory(outbox.data(), outbox.size(), Access::local_read), "register");
  const Segment in(inbox_mr, 0, inbox.size());

  (void)check(ep.connect_and_wait(args.host, args.port, {}, example::kTimeout), "connect");

  for (int round = 1; round <= rounds; ++round) {
    const auto cookie = static_cast<std::uint64_t>(round);
    // The receive for the pong is in place before the ping leaves.
    check(ep.recv({&in, 1}, cookie), "post a receive");

    const std::string ping = "ping " + std::to_string(round);
    std::memcpy(outbox.data(), ping.data(), ping.size());
    const Segment out(outbox_mr, 0, ping.size());
    check(ep.send({&out, 1}, cookie), "post the ping");
    example::wait_completion(send_cq, cookie, "send the ping");

    // The receive completion tells how many bytes arrived.
    const Completion c = example::wait_completion(recv_cq, cookie, "receive the pong");
    const std::string pong(inbox.data(), c.length);
    if (pong != "pong " + std::to_string(round))
      example::die("round " + std::to_string(round) + ": got \"" + pong + "\"");
    std::printf("client: sent \"%s\", got \"%s\"\n", ping.c_str(), pong.c_str());
  }
  std::printf("client: %d rounds of ping-pong done\n", rounds);

  check(ep.disconnect(), "disconnect");
  return 0;
}
