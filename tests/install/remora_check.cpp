// tests/install/remora_check.cpp - a program outside the source tree using
// the installed C++ API (#include <remora/remora.hpp>, -lremora).
//
//   remora_check server ADDRESS        listen on a free port (printed as
//                                      "PORT n"), serve one client, then check
//                                      the bytes it wrote
//   remora_check client ADDRESS PORT   write a pattern into the server's
//                                      buffer, flush it (visibility), read it
//                                      back and compare
//
// Exit status 0 only if every step succeeded and the data matched.
#include <remora/remora.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
constexpr std::size_t kSize = 4096;
constexpr auto kWait = 20s;

[[noreturn]] void fail(const char* what, std::error_code ec = {}) {
  std::fprintf(stderr, "remora_check: %s%s%s\n", what, ec ? ": " : "", ec ? ec.message().c_str() : "");
  std::exit(1);
}

template <class T>
T need(remora::Result<T> r, const char* what) {
  if (!r) fail(what, r.error());
  return std::move(r).value();
}

void need(remora::Result<void> r, const char* what) {
  if (!r) fail(what, r.error());
}

std::vector<std::uint8_t> pattern() {
  std::vector<std::uint8_t> v(kSize);
  for (std::size_t i = 0; i < kSize; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return v;
}

// Wait for the completion carrying `cookie`; it must have succeeded.
void complete(remora::CompletionQueue& cq, std::uint64_t cookie, const char* what) {
  remora::Completion c;
  const std::size_t n = need(cq.wait({&c, 1}, kWait), what);
  if (n != 1) fail(what, make_error_code(remora::Errc::timeout));
  if (c.cookie != cookie) fail("a completion for another operation");
  if (c.status) fail(what, c.status);
}

int server(const std::string& address) {
  remora::Fabric fabric = need(remora::Fabric::open({.address = address}), "open the fabric");
  remora::ProtectionZone zone = need(fabric.create_zone(), "create a zone");
  remora::Listener listener = need(zone.listen(address, 0), "listen");
  std::vector<std::uint8_t> buffer(kSize, 0);
  remora::MemoryRegion region = need(
      zone.register_memory(buffer.data(), buffer.size(), remora::Access::remote_write | remora::Access::remote_read),
      "register the target buffer");
  const std::vector<std::uint8_t> descriptor = need(region.remote(), "describe the buffer").serialize();
  remora::CompletionQueue cq = need(zone.create_cq(), "create a completion queue");
  remora::EndpointOptions options;
  options.send_cq = &cq;
  remora::Endpoint ep = need(zone.create_endpoint(options), "create an endpoint");

  std::printf("PORT %u\n", static_cast<unsigned>(listener.port()));
  std::fflush(stdout);

  remora::ConnectionRequest request = need(listener.next_request(kWait), "wait for the client");
  need(request.accept(ep, descriptor), "accept");
  for (bool connected = false;;) {
    const remora::ConnectionEvent event = need(ep.next_event(kWait), "wait for a connection event");
    if (event.type == remora::ConnectionEventType::established) {
      connected = true;
      continue;
    }
    if (!connected) fail("the connection was not established");
    if (event.type == remora::ConnectionEventType::disconnected) break;
    fail(remora::to_string(event.type));
  }
  if (buffer != pattern()) fail("the buffer does not hold what the client wrote");
  std::printf("server: the client's %zu bytes arrived\n", buffer.size());
  return 0;
}

int client(const std::string& address, std::uint16_t port) {
  remora::Fabric fabric = need(remora::Fabric::open({.address = address}), "open the fabric");
  remora::ProtectionZone zone = need(fabric.create_zone(), "create a zone");
  remora::CompletionQueue cq = need(zone.create_cq(), "create a completion queue");
  remora::EndpointOptions options;
  options.send_cq = &cq;
  remora::Endpoint ep = need(zone.create_endpoint(options), "create an endpoint");
  const std::vector<std::uint8_t> pdata = need(ep.connect_and_wait(address, port, {}, kWait), "connect");
  const remora::RemoteRegion remote = need(remora::RemoteRegion::parse(pdata), "parse the server's descriptor");
  if (remote.length() < kSize) fail("the server's buffer is too small");

  std::vector<std::uint8_t> source = pattern();
  std::vector<std::uint8_t> readback(kSize, 0);
  remora::MemoryRegion source_mr =
      need(zone.register_memory(source.data(), source.size(), remora::Access::local_read), "register the source");
  remora::MemoryRegion readback_mr = need(
      zone.register_memory(readback.data(), readback.size(), remora::Access::local_write), "register the readback");

  const remora::Segment src(source_mr, 0, source.size());
  need(ep.write({&src, 1}, remote, 0, 1), "post the write");
  complete(cq, 1, "write");
  need(ep.flush(remote, 0, kSize, remora::FlushType::visibility, 2), "post the flush");
  complete(cq, 2, "flush");
  const remora::Segment dst(readback_mr, 0, readback.size());
  need(ep.read({&dst, 1}, remote, 0, 3), "post the read");
  complete(cq, 3, "read");
  if (readback != source) fail("read back something else than what was written");
  need(ep.disconnect(), "disconnect");
  std::printf("client: wrote, flushed and read back %zu bytes\n", source.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "server") == 0) return server(argv[2]);
  if (argc == 4 && std::strcmp(argv[1], "client") == 0)
    return client(argv[2], static_cast<std::uint16_t>(std::atoi(argv[3])));
  std::fprintf(stderr, "usage: remora_check server ADDRESS | client ADDRESS PORT\n");
  return 2;
}
