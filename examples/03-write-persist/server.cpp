// 03-write-persist server: map a file as a persistent region the client may
// write, let the client write and flush it to persistence, then, after the
// client left, read the file back with plain read() to show what is durable.
//
//   remora-ex03-server <host> <port> [file]   (default file /tmp/remora-03.dat)
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/example.hpp"

using namespace remora;
using example::check;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv, 1, "[file]");
  const std::string path = args.extra.empty() ? "/tmp/remora-03.dat" : args.extra[0];
  constexpr std::size_t kSize = 4096;

  Fabric fabric = check(Fabric::open({.address = args.host}), "open the fabric");
  ProtectionZone zone = check(fabric.create_zone(), "create a protection zone");
  // Start from an empty file so that whatever we find in it at the end was
  // written by this run. map_file() creates it, sizes it, maps it (libpmem2)
  // and registers the mapping as a *persistent* region: its descriptor says
  // so, and the client may then ask for FlushType::persistent.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) example::die("cannot remove " + path + ": " + strerror(errno));
  MemoryRegion region = check(zone.map_file(path, kSize, Access::remote_write), ("map " + path).c_str());
  const std::vector<std::uint8_t> descriptor = check(region.remote(), "describe the region").serialize();
  std::printf("server: mapped %s (%zu bytes, persistent: %s)\n", path.c_str(), kSize,
              region.persistent() ? "yes" : "no");

  Listener listener = check(zone.listen(args.host, args.port), "listen");
  std::printf("server: listening on %s:%u\n", args.host.c_str(), listener.port());
  std::fflush(stdout);  // run.sh waits for this line

  CompletionQueue cq = check(zone.create_cq(), "create a completion queue");
  EndpointOptions options;
  options.send_cq = &cq;
  Endpoint ep = check(zone.create_endpoint(options), "create an endpoint");
  ConnectionRequest request = check(listener.next_request(example::kTimeout), "wait for a connection request");
  check(request.accept(ep, descriptor), "accept");
  example::expect_event(ep, ConnectionEventType::established, "wait for the connection");

  example::wait_for_client_to_leave(ep);

  // Unmap the file, then look at it the ordinary way.
  region.close();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) example::die("cannot open " + path + ": " + strerror(errno));
  std::vector<char> content(kSize);
  const ssize_t n = ::read(fd, content.data(), content.size());
  ::close(fd);
  if (n < 0) example::die("cannot read " + path + ": " + strerror(errno));
  const std::string durable(content.data(), strnlen(content.data(), static_cast<std::size_t>(n)));
  if (durable.empty()) example::die(path + " holds nothing");
  std::printf("server: %s holds \"%s\"\n", path.c_str(), durable.c_str());
  return 0;
}
