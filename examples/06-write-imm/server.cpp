// 06-write-imm server: a write with immediate data lands in our buffer *and*
// notifies us: it consumes a posted receive, whose completion has opcode
// recv_write_imm and carries the 32-bit immediate.
//
//   remora-ex06-server <host> <port>      (port 0: any free port)
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

  std::vector<char> buffer(4096, '\0');
  MemoryRegion region =
      check(zone.register_memory(buffer.data(), buffer.size(), Access::remote_write), "register the buffer");
  const std::vector<std::uint8_t> descriptor = check(region.remote(), "describe the buffer").serialize();

  CompletionQueue cq = check(zone.create_cq(), "create a completion queue");
  EndpointOptions options;
  options.send_cq = &cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");

  // The receive the write will consume, posted before the client can write.
  // It needs no buffer: the data goes where the client writes it.
  check(ep.recv({}, /*cookie=*/7), "post a receive");

  ConnectionRequest request = check(listener.next_request(example::kTimeout), "wait for a connection request");
  check(request.accept(ep, descriptor), "accept");
  example::expect_event(ep, ConnectionEventType::established, "wait for the connection");

  // When the completion arrives, the written data is in the buffer.
  const Completion c = example::wait_completion(cq, 7, "wait for the write with immediate");
  if (c.op != Opcode::recv_write_imm || !c.has_imm)
    example::die(std::string("expected a recv_write_imm completion with an immediate, got ") + to_string(c.op));
  std::printf("server: %s completion, immediate %#010x\n", to_string(c.op), c.imm);
  std::printf("server: buffer holds \"%.*s\"\n", static_cast<int>(strnlen(buffer.data(), buffer.size())),
              buffer.data());

  example::wait_for_client_to_leave(ep);
  return 0;
}
