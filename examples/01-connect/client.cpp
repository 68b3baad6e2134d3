// 01-connect client: connect with a greeting in the private data, print the
// server's answer (its accept private data), disconnect gracefully.
//
//   remora-ex01-client <host> <port>
#include <cstdio>
#include <string>
#include <vector>

#include "common/example.hpp"

using namespace remora;
using example::check;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);

  // FabricOptions::address picks the local interface; the default
  // (127.0.0.1) suits a server on this host.
  Fabric fabric = check(Fabric::open(), "open the fabric");
  ProtectionZone zone = check(fabric.create_zone(), "create a protection zone");
  CompletionQueue cq = check(zone.create_cq(), "create a completion queue");
  EndpointOptions options;
  options.send_cq = &cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");

  // connect_and_wait() sends our private data with the request and returns
  // the server's once the connection is established.
  const std::string greeting = "hello from the client";
  const std::vector<std::uint8_t> reply =
      check(ep.connect_and_wait(args.host, args.port, example::bytes(greeting), example::kTimeout), "connect");
  const std::string answer(reply.begin(), reply.end());
  std::printf("client: sent \"%s\"\n", greeting.c_str());
  std::printf("client: server answered \"%s\"\n", answer.c_str());
  if (answer.empty()) example::die("the server sent no private data");

  // A graceful disconnect: the server sees `disconnected`, and so do we.
  check(ep.disconnect(), "disconnect");
  example::expect_event(ep, ConnectionEventType::disconnected, "wait for our own disconnect");
  std::printf("client: disconnected\n");
  return 0;
}
