// 04-atomic-write server: expose a log (a "used" counter and the records it
// covers) for the client to append to, and print it once the client left.
//
//   remora-ex04-server <host> <port>      (port 0: any free port)
#include <atomic>
#include <cstdio>
#include <vector>

#include "04-atomic-write/log.hpp"
#include "common/example.hpp"

using namespace remora;
using example::check;
using log_layout::Log;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);

  Fabric fabric = check(Fabric::open({.address = args.host}), "open the fabric");
  ProtectionZone zone = check(fabric.create_zone(), "create a protection zone");
  Listener listener = check(zone.listen(args.host, args.port), "listen");
  std::printf("server: listening on %s:%u\n", args.host.c_str(), listener.port());
  std::fflush(stdout);  // run.sh waits for this line

  // The log, empty (used == 0).
  static Log log_area{};
  MemoryRegion region =
      check(zone.register_memory(&log_area, sizeof log_area, Access::remote_write), "register the log");
  const std::vector<std::uint8_t> descriptor = check(region.remote(), "describe the log").serialize();

  CompletionQueue cq = check(zone.create_cq(), "create a completion queue");
  EndpointOptions options;
  options.send_cq = &cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");
  ConnectionRequest request = check(listener.next_request(example::kTimeout), "wait for a connection request");
  check(request.accept(ep, descriptor), "accept");
  example::expect_event(ep, ConnectionEventType::established, "wait for the connection");

  example::wait_for_client_to_leave(ep);

  // Read the counter the way a concurrent reader would (atomically), then
  // only the records it covers.
  const std::uint64_t used = std::atomic_ref<std::uint64_t>(log_area.used).load();
  if (used > sizeof log_area.records) example::die("corrupt log: used = " + std::to_string(used));
  if (used == 0) example::die("the log is empty");
  std::printf("server: log used = %llu bytes:\n%.*s", static_cast<unsigned long long>(used), static_cast<int>(used),
              log_area.records);
  return 0;
}
