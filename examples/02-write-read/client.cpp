// 02-write-read client: RDMA-write a string into the server's buffer, RDMA-
// read it back into a second local buffer, and compare.
//
//   remora-ex02-client <host> <port>
#include <cstdio>
#include <string>
#include <vector>

#include "common/example.hpp"

using namespace remora;
using example::check;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);

  Fabric fabric = check(Fabric::open(), "open the fabric");
  ProtectionZone zone = check(fabric.create_zone(), "create a protection zone");
  CompletionQueue cq = check(zone.create_cq(), "create a completion queue");
  EndpointOptions options;
  options.send_cq = &cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");

  // The server's private data is the descriptor of its buffer.
  const std::vector<std::uint8_t> pdata =
      check(ep.connect_and_wait(args.host, args.port, {}, example::kTimeout), "connect");
  const RemoteRegion remote = check(RemoteRegion::parse(pdata), "parse the server's descriptor");

  // Local memory must be registered too: a write's source needs local_read,
  // a read's destination local_write. The trailing '\0' travels along.
  const std::string message = "hello, remote memory";
  std::vector<char> source(message.c_str(), message.c_str() + message.size() + 1);
  std::vector<char> readback(source.size(), 'x');
  MemoryRegion source_mr =
      check(zone.register_memory(source.data(), source.size(), Access::local_read), "register the source");
  MemoryRegion readback_mr =
      check(zone.register_memory(readback.data(), readback.size(), Access::local_write), "register the readback");

  // Write to offset 0 of the server's buffer. The completion (matched by
  // its cookie) means the data has reached the target.
  const Segment src(source_mr, 0, source.size());
  check(ep.write({&src, 1}, remote, 0, /*cookie=*/1), "post the write");
  example::wait_completion(cq, 1, "write");
  std::printf("client: wrote \"%s\" (%zu bytes)\n", message.c_str(), source.size());

  // Read the same range back into the other buffer.
  const Segment dst(readback_mr, 0, readback.size());
  check(ep.read({&dst, 1}, remote, 0, /*cookie=*/2), "post the read");
  example::wait_completion(cq, 2, "read");
  if (readback != source) example::die("read back something else than what was written");
  std::printf("client: read back \"%s\": match\n", readback.data());

  check(ep.disconnect(), "disconnect");
  return 0;
}
