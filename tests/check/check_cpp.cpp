// tests/check/check_cpp.cpp - small C++ programs for remora-check, each with
// one deliberate bug or its correct twin (docs/check.md). One process: a
// target zone (with its agent) and an initiator zone without a progress
// thread, so that nothing completes until the program polls: the moment a
// buggy program changes its buffer is always before the completion.
//
//   check_cpp <scenario> [dir]
//
// The program checks what it can see itself (the data at the target) and
// exits 1 when that is wrong; remora-check's report and exit status are
// asserted by tests/check/expect.sh.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <remora/remora.hpp>
#include <string>
#include <vector>
#ifdef CHECK_CPP_FACE
#include "check/face.hpp"  // the C faces' hint (check_cpp_face only)
#endif

using namespace remora;
using namespace std::chrono_literals;

namespace {

[[noreturn]] void die(const char* what, const std::error_code& ec = {}) {
  if (ec)
    std::fprintf(stderr, "check_cpp: %s: %s\n", what, ec.message().c_str());
  else
    std::fprintf(stderr, "check_cpp: %s\n", what);
  std::exit(1);
}

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) die(what, r.error());
  return std::move(*r);
}
void must(Result<void> r, const char* what) {
  if (!r) die(what, r.error());
}

struct Pair {
  Fabric fabric;
  ProtectionZone tz, iz;  // target, initiator
  CompletionQueue tcq, icq;
  Listener listener;
  Endpoint tep, iep;
};

void open_pair(Pair& p) {
  p.fabric = must(Fabric::open({.provider = "tcp", .address = "127.0.0.1"}), "open");
  p.tz = must(p.fabric.create_zone(), "target zone");
  p.iz = must(p.fabric.create_zone({.progress_thread = false}), "initiator zone");
  p.tcq = must(p.tz.create_cq(), "cq");
  p.icq = must(p.iz.create_cq(), "cq");
  p.listener = must(p.tz.listen("127.0.0.1", 0), "listen");
  p.tep = must(p.tz.create_endpoint({.send_cq = &p.tcq}), "endpoint");
  p.iep = must(p.iz.create_endpoint({.send_cq = &p.icq}), "endpoint");
  must(p.iep.connect("127.0.0.1", p.listener.port()), "connect");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  bool accepted = false, established = false;
  while (!(accepted && established)) {
    if (std::chrono::steady_clock::now() > deadline) die("connection timed out");
    (void)p.iz.progress();
    if (!accepted) {
      if (auto req = p.listener.next_request(1ms)) {
        must(req->accept(p.tep), "accept");
        accepted = true;
      }
    }
    if (auto ev = p.iep.next_event(0ms)) {
      if (ev->type != ConnectionEventType::established) die("not established");
      established = true;
    }
  }
  auto ev = must(p.tep.next_event(10s), "target event");
  if (ev.type != ConnectionEventType::established) die("target not established");
}

Completion wait_one(CompletionQueue& cq, std::uint64_t cookie) {
  Completion c[1];
  if (must(cq.wait(c, 10s), "wait") != 1) die("no completion");
  if (c[0].cookie != cookie) die("unexpected cookie");
  if (c[0].status) die("operation failed", c[0].status);
  return c[0];
}

// Check 2: a write's gather buffer changed between the post and the
// completion (bug), or left alone (ok). Under `strict` the target holds the
// data as it was at the post either way.
int reuse(bool bug) {
  Pair p;
  open_pair(p);
  std::vector<char> target(8192, 0), source(8192);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<char>('a' + i % 26);
  const std::vector<char> at_post = source;
  auto tmr = must(p.tz.register_memory(target.data(), target.size(), Access::all), "register");
  auto smr = must(p.iz.register_memory(source.data(), source.size(), Access::local_read), "register");
  auto rr = must(tmr.remote(), "remote");
  Segment seg(smr, 0, 4096);
  must(p.iep.write({&seg, 1}, rr, 0, 0x11), "write");
  if (bug) std::memset(source.data() + 100, 'X', 8);  // before the completion: the bug
  wait_one(p.icq, 0x11);
  const char* strict = std::getenv("CHECK_EXPECT_POST_DATA");
  if (strict && std::memcmp(target.data(), at_post.data(), 4096) != 0) die("target does not hold the post-time data");
  if (!bug && std::memcmp(target.data(), source.data(), 4096) != 0) die("target data wrong");
  return 0;
}

// Check 2 when the completion is made before the change but reaped after
// it (the agent thread of a loaded machine makes it early; here the
// program's own progress() does, without taking it): the write's buffer
// changed before the program reaped the completion (bug), or after (ok).
// With `unsignalled`, an unsignalled write (0x17) goes first, and its
// buffer is changed once both completions are made, before the signalled
// one's is reaped: the checker does not take that for a bug (docs/check.md).
// With `suppressed` (check_cpp_face), the write is signalled but posted as
// a C face posts one whose consumer asked for no completion on success
// (libdat's DAT_COMPLETION_SUPPRESS_FLAG): its buffer changed before the
// reap is not a bug either, as that consumer never reaps it.
int reuse_reaped(bool bug, bool unsignalled = false, bool suppressed = false) {
  Pair p;
  open_pair(p);
  std::vector<char> target(16384, 0), source(16384, 's');
  auto tmr = must(p.tz.register_memory(target.data(), target.size(), Access::all), "register");
  auto smr = must(p.iz.register_memory(source.data(), source.size(), Access::local_read), "register");
  auto rr = must(tmr.remote(), "remote");
  Segment quiet(smr, 8192, 8192), seg(smr, 0, 8192);
  if (unsignalled) must(p.iep.write({&quiet, 1}, rr, 8192, 0x17, PostFlags::unsignalled), "write");
  if (suppressed) {
#ifdef CHECK_CPP_FACE
    const remora::detail::check::FaceCookie hint(0x18, true);
    must(p.iep.write({&seg, 1}, rr, 0, 0x15), "write");
#else
    die("reuse-suppressed-ok needs check_cpp_face");
#endif
  } else {
    must(p.iep.write({&seg, 1}, rr, 0, 0x15), "write");
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (p.icq.progress() == 0)
    if (std::chrono::steady_clock::now() > deadline) die("no completion made");
  if (bug || suppressed) std::memset(source.data() + 300, 'X', 16);  // made, not reaped: the bug
  if (unsignalled) std::memset(source.data() + 9000, 'Y', 16);
  wait_one(p.icq, 0x15);
  if (!bug && !suppressed) std::memset(source.data() + 300, 'X', 16);
  if (std::memcmp(target.data(), std::string(16384, 's').data(), unsignalled ? 16384 : 8192) != 0)
    die("target data wrong");
  return 0;
}

// Check 2 with a fenced write: it waits behind a read until the program
// polls, so the transport takes it after the change (bug). Without `strict`
// the target then holds the changed bytes; with it, the data of the post.
int reuse_fenced() {
  Pair p;
  open_pair(p);
  std::vector<char> target(8192, 0), source(4096), dest(64, 0);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<char>('a' + i % 26);
  const std::vector<char> at_post = source;
  auto tmr = must(p.tz.register_memory(target.data(), target.size(), Access::all), "register");
  auto smr = must(p.iz.register_memory(source.data(), source.size(), Access::local_read), "register");
  auto dmr = must(p.iz.register_memory(dest.data(), dest.size(), Access::local_write), "register");
  auto rr = must(tmr.remote(), "remote");
  Segment rseg(dmr, 0, 64);
  must(p.iep.read({&rseg, 1}, rr, 4096, 0x13), "read");
  Segment seg(smr, 0, 4096);
  must(p.iep.write({&seg, 1}, rr, 0, 0x14, PostFlags::fence), "write");
  std::memset(source.data() + 100, 'X', 8);  // the write is not with the transport yet: the bug
  wait_one(p.icq, 0x13);
  wait_one(p.icq, 0x14);
  if (std::getenv("CHECK_EXPECT_POST_DATA") && std::memcmp(target.data(), at_post.data(), 4096) != 0)
    die("target does not hold the post-time data");
  if (std::getenv("CHECK_EXPECT_NEW_DATA") && std::memcmp(target.data() + 100, "XXXXXXXX", 8) != 0)
    die("target does not hold the changed data");
  return 0;
}

// Check 2 for a read: the consumer writes into the scatter buffer before the
// read completed (bug) or waits (ok).
int reuse_read(bool bug) {
  Pair p;
  open_pair(p);
  std::vector<char> target(4096, 'r'), dest(4096, 0);
  auto tmr = must(p.tz.register_memory(target.data(), target.size(), Access::all), "register");
  auto dmr = must(p.iz.register_memory(dest.data(), dest.size(), Access::local_write), "register");
  auto rr = must(tmr.remote(), "remote");
  Segment seg(dmr, 0, 1024);
  must(p.iep.read({&seg, 1}, rr, 0, 0x12), "read");
  if (bug) dest[512] = 'Z';
  wait_one(p.icq, 0x12);
  if (std::memcmp(dest.data(), target.data(), 1024) != 0) die("read data wrong");
  return 0;
}

// Check 3: write 64 bytes at offset 128 of a persistent region, then a
// PERSISTENT flush of them (ok), of nothing (never flushed) or of another
// range (wrong range). The target region is a file Remora maps.
int crash(const char* how, const std::string& dir) {
  Pair p;
  open_pair(p);
  const std::string path = dir + "/region.bin";
  ::unlink(path.c_str());
  auto tmr = must(p.tz.map_file(path, 4096, Access::all), "map_file");
  static const char record[] = "remora-check: this 64-byte record must survive any crash, always";
  static_assert(sizeof record == 65);
  std::vector<char> source(record, record + 64);
  auto smr = must(p.iz.register_memory(source.data(), source.size(), Access::local_read), "register");
  auto rr = must(tmr.remote(), "remote");
  Segment seg(smr, 0, 64);
  must(p.iep.write({&seg, 1}, rr, 128, 0x21), "write");
  const std::string h = how;
  if (h == "ok") must(p.iep.flush(rr, 128, 64, FlushType::persistent, 0x22), "flush");
  if (h == "wrong-range") must(p.iep.flush(rr, 256, 64, FlushType::persistent, 0x22), "flush");
  if (h == "visibility") must(p.iep.flush(rr, 128, 64, FlushType::visibility, 0x22), "flush");
  wait_one(p.icq, 0x21);
  if (h != "noflush") wait_one(p.icq, 0x22);
  if (std::memcmp(static_cast<char*>(tmr.address()) + 128, source.data(), 64) != 0) die("target data wrong");
  return 0;
}

// Check 1, incoming: the initiator writes into the target's region and then
// sends a message; the target reads the region on the message's arrival,
// after dat_lmr_sync_rdma_write's C++ twin (ok) or without it (bug).
int nc_incoming(bool bug) {
  Pair p;
  open_pair(p);
  std::vector<char> target(4096, 0), msg(64, 0), source(64, 0), note(16, 0);
  auto tmr = must(p.tz.register_memory(target.data(), target.size(), Access::all), "register");
  auto mmr = must(p.tz.register_memory(msg.data(), msg.size(), Access::local_write), "register");
  auto smr = must(p.iz.register_memory(source.data(), source.size(), Access::local_read), "register");
  auto nmr = must(p.iz.register_memory(note.data(), note.size(), Access::local_read), "register");
  auto rr = must(tmr.remote(), "remote");
  Segment rseg(mmr, 0, msg.size());
  must(p.tep.recv({&rseg, 1}, 0x30), "recv");
  std::memcpy(source.data(), "incoming data, 32 bytes long ...", 32);
  must(smr.sync_rdma_read(0, 32), "sync_rdma_read");
  Segment seg(smr, 0, 32);
  must(p.iep.write({&seg, 1}, rr, 64, 0x31), "write");
  std::memcpy(note.data(), "done", 5);
  must(nmr.sync_rdma_read(0, 5), "sync_rdma_read");
  Segment nseg(nmr, 0, 5);
  must(p.iep.send({&nseg, 1}, 0x32), "send");
  wait_one(p.icq, 0x31);
  wait_one(p.icq, 0x32);
  wait_one(p.tcq, 0x30);
  if (!bug) must(tmr.sync_rdma_write(64, 32), "sync_rdma_write");
  const bool seen = std::memcmp(target.data() + 64, source.data(), 32) == 0;
  // Under the emulation the forgotten sync shows poison, never the data.
  if (seen == bug && p.fabric.info().requires_sync)
    die(bug ? "data visible without a sync" : "data not visible after the sync");
  return 0;
}

// Check 1, an outgoing read: its data is in memory at the completion, and
// visible to this CPU after sync_rdma_write (ok) or not (bug).
int nc_read(bool bug) {
  Pair p;
  open_pair(p);
  std::vector<char> target(4096, 'T'), dest(256, 0);
  auto tmr = must(p.tz.register_memory(target.data(), target.size(), Access::all), "register");
  auto dmr = must(p.iz.register_memory(dest.data(), dest.size(), Access::local_write), "register");
  auto rr = must(tmr.remote(), "remote");
  Segment seg(dmr, 32, 100);
  must(p.iep.read({&seg, 1}, rr, 0, 0x51), "read");
  wait_one(p.icq, 0x51);
  if (!bug) must(dmr.sync_rdma_write(32, 100), "sync_rdma_write");
  const bool seen = std::memcmp(dest.data() + 32, target.data(), 100) == 0;
  if (seen == bug && p.fabric.info().requires_sync)
    die(bug ? "read data visible without a sync" : "read data not visible after the sync");
  return 0;
}

// Check 1, outgoing: the CPU writes the gather buffer and posts a write
// without dat_lmr_sync_rdma_read's C++ twin (bug) or after it (ok).
int nc_local(bool bug) {
  Pair p;
  open_pair(p);
  std::vector<char> target(4096, 0), source(256, 0);
  auto tmr = must(p.tz.register_memory(target.data(), target.size(), Access::all), "register");
  auto smr = must(p.iz.register_memory(source.data(), source.size(), Access::local_read), "register");
  auto rr = must(tmr.remote(), "remote");
  std::memset(source.data() + 16, 'L', 48);
  if (!bug) must(smr.sync_rdma_read(16, 48), "sync_rdma_read");
  Segment seg(smr, 0, 128);
  must(p.iep.write({&seg, 1}, rr, 0, 0x41), "write");
  wait_one(p.icq, 0x41);
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: check_cpp <scenario> [dir]\n");
    return 2;
  }
  const std::string s = argv[1];
  const std::string dir = argc > 2 ? argv[2] : ".";
  if (s == "reuse-bug") return reuse(true);
  if (s == "reuse-ok") return reuse(false);
  if (s == "reuse-fenced-bug") return reuse_fenced();
  if (s == "reuse-reaped-bug") return reuse_reaped(true);
  if (s == "reuse-reaped-ok") return reuse_reaped(false);
  if (s == "reuse-unsignalled-ok") return reuse_reaped(false, true);
  if (s == "reuse-suppressed-ok") return reuse_reaped(false, false, true);
  if (s == "reuse-read-bug") return reuse_read(true);
  if (s == "reuse-read-ok") return reuse_read(false);
  if (s == "crash-ok") return crash("ok", dir);
  if (s == "crash-noflush") return crash("noflush", dir);
  if (s == "crash-wrong-range") return crash("wrong-range", dir);
  if (s == "crash-visibility") return crash("visibility", dir);
  if (s == "nc-incoming-bug") return nc_incoming(true);
  if (s == "nc-incoming-ok") return nc_incoming(false);
  if (s == "nc-read-bug") return nc_read(true);
  if (s == "nc-read-ok") return nc_read(false);
  if (s == "nc-local-bug") return nc_local(true);
  if (s == "nc-local-ok") return nc_local(false);
  std::fprintf(stderr, "check_cpp: unknown scenario %s\n", s.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  alarm(60);
  const int rc = run(argc, argv);
  // remora-check may force the exit status at exit: this line tells
  // tests/check/expect.sh that the program itself got to its end.
  if (rc == 0) std::fprintf(stderr, "check-program: done\n");
  return rc;
}
