// 01-connect server: accept one connection, read the client's greeting from
// the request's private data, answer in the accept's private data, then wait
// for the client's graceful disconnect.
//
//   remora-ex01-server <host> <port>      (port 0: any free port)
#include <cstdio>
#include <string>

#include "common/example.hpp"

using namespace remora;
using example::check;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);

  // A fabric on the interface we listen on, and a protection zone: every
  // queue, endpoint and listener below belongs to this zone.
  Fabric fabric = check(Fabric::open({.address = args.host}), "open the fabric");
  ProtectionZone zone = check(fabric.create_zone(), "create a protection zone");
  Listener listener = check(zone.listen(args.host, args.port), "listen");
  std::printf("server: listening on %s:%u\n", args.host.c_str(), listener.port());
  std::fflush(stdout);  // run.sh waits for this line

  // The endpoint that will carry the connection. Its completion queue is
  // required even though this example posts no operation.
  CompletionQueue cq = check(zone.create_cq(), "create a completion queue");
  EndpointOptions options;
  options.send_cq = &cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");

  // A request carries the client's private data (up to kMaxPrivateData bytes).
  ConnectionRequest request = check(listener.next_request(example::kTimeout), "wait for a connection request");
  const std::string greeting(request.private_data().begin(), request.private_data().end());
  std::printf("server: client says \"%s\"\n", greeting.c_str());

  // Accepting sends our own private data back; `established` follows.
  const std::string answer = "welcome, " + std::to_string(greeting.size()) + "-byte greeting received";
  check(request.accept(ep, example::bytes(answer)), "accept");
  example::expect_event(ep, ConnectionEventType::established, "wait for the connection");
  std::printf("server: answered \"%s\"\n", answer.c_str());

  // The client disconnects gracefully: we must see `disconnected`, not `lost`.
  if (example::wait_for_client_to_leave(ep) != ConnectionEventType::disconnected)
    example::die("the client's disconnect was not graceful");
  return 0;
}
