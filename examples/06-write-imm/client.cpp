// 06-write-imm client: RDMA-write a string into the server's buffer together
// with a 32-bit immediate value that the server receives as a notification.
//
//   remora-ex06-client <host> <port>
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

  const std::vector<std::uint8_t> pdata =
      check(ep.connect_and_wait(args.host, args.port, {}, example::kTimeout), "connect");
  const RemoteRegion remote = check(RemoteRegion::parse(pdata), "parse the server's descriptor");

  const std::string message = "data that came with an immediate";
  std::vector<char> source(message.c_str(), message.c_str() + message.size() + 1);  // with its '\0'
  MemoryRegion source_mr =
      check(zone.register_memory(source.data(), source.size(), Access::local_read), "register the source");

  // Like write(), plus the immediate: here a tag the server could use to
  // tell what the data is, without a separate message.
  constexpr std::uint32_t kImmediate = 0xC0FFEE;
  const Segment src(source_mr, 0, source.size());
  check(ep.write_imm({&src, 1}, remote, 0, kImmediate, /*cookie=*/1), "post the write with immediate");
  example::wait_completion(cq, 1, "write with immediate");
  std::printf("client: wrote \"%s\" (%zu bytes) with immediate %#010x\n", message.c_str(), source.size(), kImmediate);

  check(ep.disconnect(), "disconnect");
  return 0;
}
