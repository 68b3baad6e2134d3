// 03-write-persist client: RDMA-write a string into the server's persistent
// region, then flush the range with FlushType::persistent: its completion
// means the bytes are durable in the server's file, not just delivered.
//
//   remora-ex03-client <host> <port>
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
  // Only a region its owner declared persistent accepts persistent flushes.
  if (!remote.persistent()) example::die("the server's region is not persistent");

  const std::string message = "this line survives a crash";
  std::vector<char> source(message.c_str(), message.c_str() + message.size() + 1);  // with its '\0'
  MemoryRegion source_mr =
      check(zone.register_memory(source.data(), source.size(), Access::local_read), "register the source");

  // 1. The write: when it completes the data has reached the target's
  //    memory, which may still be a volatile cache or page cache.
  const Segment src(source_mr, 0, source.size());
  check(ep.write({&src, 1}, remote, 0, /*cookie=*/1), "post the write");
  example::wait_completion(cq, 1, "write");

  // 2. The flush: makes every earlier write on this endpoint to the range
  //    durable at the target (a cache flush on DAX, msync otherwise).
  check(ep.flush(remote, 0, source.size(), FlushType::persistent, /*cookie=*/2), "post the flush");
  example::wait_completion(cq, 2, "persistent flush");
  std::printf("client: wrote \"%s\" and flushed it to persistence\n", message.c_str());

  check(ep.disconnect(), "disconnect");
  return 0;
}
