// 02-write-read server: register a buffer the client may write and read,
// hand its descriptor over in the accept private data, then stay passive:
// the zone's target agent serves the client's RDMA writes and reads.
//
//   remora-ex02-server <host> <port>      (port 0: any free port)
#include <cstdio>
#include <cstring>
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

  // The target buffer: remote_write lets the peer write it, remote_read
  // lets it read it back. Nothing local touches it until the end.
  std::vector<char> buffer(4096, '\0');
  MemoryRegion region =
      check(zone.register_memory(buffer.data(), buffer.size(), Access::remote_write | Access::remote_read),
            "register the buffer");
  // Address, length, key and privileges, as 40 bytes for the peer.
  const std::vector<std::uint8_t> descriptor = check(region.remote(), "describe the buffer").serialize();

  CompletionQueue cq = check(zone.create_cq(), "create a completion queue");
  EndpointOptions options;
  options.send_cq = &cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");

  ConnectionRequest request = check(listener.next_request(example::kTimeout), "wait for a connection request");
  check(request.accept(ep, descriptor), "accept");
  example::expect_event(ep, ConnectionEventType::established, "wait for the connection");
  std::printf("server: sent a %zu-byte descriptor of %zu bytes at key %#llx\n", descriptor.size(), buffer.size(),
              static_cast<unsigned long long>(region.key()));

  example::wait_for_client_to_leave(ep);
  // The client is gone, so nothing writes the buffer any more.
  std::printf("server: buffer holds \"%.*s\"\n", static_cast<int>(strnlen(buffer.data(), buffer.size())),
              buffer.data());
  return 0;
}
