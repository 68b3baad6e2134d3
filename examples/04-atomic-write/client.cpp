// 04-atomic-write client: append records to the server's log. Each append
// RDMA-writes the record after the valid part, then atomically publishes the
// new length with atomic_write on the 8-byte "used" counter and flushes
// both visible. A reader of the log never sees a torn counter, nor a counter
// that covers a partial record.
//
//   remora-ex04-client <host> <port>
#include <cstdio>
#include <string>
#include <vector>

#include "04-atomic-write/log.hpp"
#include "common/example.hpp"

using namespace remora;
using example::check;
using namespace log_layout;

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
  const RemoteRegion remote_log = check(RemoteRegion::parse(pdata), "parse the server's descriptor");

  // One staging buffer for the record being appended.
  std::vector<char> record(128);
  MemoryRegion record_mr =
      check(zone.register_memory(record.data(), record.size(), Access::local_read), "register the staging buffer");

  const char* const texts[] = {"first entry", "second entry", "third entry"};
  std::uint64_t used = 0;  // we are the only writer: our copy of the counter
  for (std::uint64_t i = 0; i < std::size(texts); ++i) {
    const int len = std::snprintf(record.data(), record.size(), "record %llu: %s\n",
                                  static_cast<unsigned long long>(i + 1), texts[i]);
    const Segment seg(record_mr, 0, static_cast<std::size_t>(len));
    const std::uint64_t new_used = used + static_cast<std::uint64_t>(len);
    const std::uint64_t cookie = 10 * i;  // +1 write, +2 counter, +3 flush

    // 1. The record, after the valid part of the log.
    check(ep.write({&seg, 1}, remote_log, kRecordsOffset + used, cookie + 1), "post the record write");
    // 2. The counter: 8 bytes stored atomically. The fence holds it back
    //    until the write above has completed, so the counter never covers a
    //    record that has not landed.
    check(ep.atomic_write(remote_log, kUsedOffset, new_used, cookie + 2, PostFlags::fence), "post the counter update");
    // 3. Make both visible at the target.
    check(ep.flush(remote_log, 0, kRecordsOffset + new_used, FlushType::visibility, cookie + 3), "post the flush");

    // Fenced, they complete in posting order. The staging buffer may be
    // reused only once its write completed.
    example::wait_completion(cq, cookie + 1, "record write");
    example::wait_completion(cq, cookie + 2, "atomic counter update");
    example::wait_completion(cq, cookie + 3, "visibility flush");
    used = new_used;
    std::printf("client: appended \"%.*s\", used = %llu\n", len - 1, record.data(),
                static_cast<unsigned long long>(used));
  }
  std::printf("client: appended %zu records, used = %llu\n", std::size(texts), static_cast<unsigned long long>(used));

  check(ep.disconnect(), "disconnect");
  return 0;
}
