// Two hosts on one machine: two network namespaces joined by a veth pair
// (198.18.0.1/24 and 198.18.0.2/24, the benchmarking range). The peer runs in
// one as the target, its client mode in the other: write, flush, read back.
// The namespaces (and with them the veth pair) are deleted at the end, also
// on failure. Skipped when namespaces cannot be created here.
#include <unistd.h>

#include <cstring>

#include "harness.hpp"

using namespace remora;
using namespace remora_it;

namespace {

class Namespaces {
 public:
  explicit Namespaces(std::string ip) : ip_(std::move(ip)) {
    const std::string id = std::to_string(getpid());
    a_ = "remora-a-" + id;
    b_ = "remora-b-" + id;
    veth_a_ = "rma" + id;  // interface names: at most 15 characters
    veth_b_ = "rmb" + id;
  }
  ~Namespaces() { remove(); }

  /// Delete namespaces left by earlier runs of this test that were killed
  /// before their cleanup ran (their pid no longer exists).
  void remove_stale() {
    auto list = run_command({ip_, "netns", "list"});
    std::size_t pos = 0;
    while (pos < list.output.size()) {
      std::size_t end = list.output.find('\n', pos);
      if (end == std::string::npos) end = list.output.size();
      std::string name = list.output.substr(pos, end - pos);
      name = name.substr(0, name.find(' '));
      pos = end + 1;
      if (name.rfind("remora-a-", 0) != 0 && name.rfind("remora-b-", 0) != 0) continue;
      const std::string pid = name.substr(9);
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (::access(("/proc/" + pid).c_str(), F_OK) == 0) continue;  // its test still runs
      (void)run_command({ip_, "netns", "del", name});
    }
  }

  /// Empty on success, else why it failed. `skip` is set when the reason is
  /// that this environment does not allow namespaces at all.
  std::string create(bool* skip) {
    *skip = false;
    auto r = run_command({ip_, "netns", "add", a_});
    if (r.status != 0) {
      *skip = true;
      return "`ip netns add` is not permitted here: " + r.output;
    }
    created_a_ = true;
    r = run_command({ip_, "netns", "add", b_});
    if (r.status != 0) return "ip netns add " + b_ + ": " + r.output;
    created_b_ = true;
    // Create the pair with its ends directly inside the namespaces, so it
    // never exists in the host namespace.
    r = run_command({ip_, "link", "add", veth_a_, "netns", a_, "type", "veth", "peer", "name", veth_b_, "netns", b_});
    if (r.status != 0) {
      *skip = r.output.find("Operation not supported") != std::string::npos ||
              r.output.find("Unknown device type") != std::string::npos;
      return "veth pair: " + r.output;
    }
    for (const auto& [ns, dev, addr] : {std::tuple{a_, veth_a_, std::string("198.18.0.1/24")},
                                        std::tuple{b_, veth_b_, std::string("198.18.0.2/24")}}) {
      for (const auto& cmd : std::vector<std::vector<std::string>>{{ip_, "-n", ns, "link", "set", "lo", "up"},
                                                                   {ip_, "-n", ns, "addr", "add", addr, "dev", dev},
                                                                   {ip_, "-n", ns, "link", "set", dev, "up"}}) {
        r = run_command(cmd);
        if (r.status != 0) {
          std::string all;
          for (const auto& w : cmd) all += w + " ";
          return all + ": " + r.output;
        }
      }
    }
    return {};
  }

  void remove() {
    if (created_b_) (void)run_command({ip_, "netns", "del", b_});
    if (created_a_) (void)run_command({ip_, "netns", "del", a_});
    created_a_ = created_b_ = false;
  }

  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string ip_, a_, b_, veth_a_, veth_b_;
  bool created_a_ = false, created_b_ = false;
};

TEST(TwoHosts, WriteReadFlushAcrossNetworkNamespaces) {
  const std::string ip = which("ip");
  if (ip.empty()) GTEST_SKIP() << "the `ip` program (iproute2) is not installed";
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root (CAP_SYS_ADMIN/CAP_NET_ADMIN)";
  Namespaces ns(ip);
  ns.remove_stale();
  bool skip = false;
  const std::string err = ns.create(&skip);
  if (!err.empty() && skip) GTEST_SKIP() << err;
  ASSERT_TRUE(err.empty()) << err;

  std::unique_ptr<Peer> peer;
  {
    auto p = Peer::start({"--listen", "198.18.0.1", "--regions", "rw"}, {ip, "netns", "exec", ns.a()}, 20s);
    ASSERT_TRUE(p) << "target did not start inside " << ns.a();
    peer = std::move(p);
  }
  const RemoteRegion& rw = peer->region("rw");

  auto client = Process::spawn({ip, "netns", "exec", ns.b(), peer_path(), "--client",
                                "198.18.0.1:" + std::to_string(peer->port()), "--bind", "198.18.0.2", "--desc",
                                to_hex(rw.serialize())});
  ASSERT_TRUE(client);
  auto line = client->wait_line("CLIENT ", 30s);
  ASSERT_TRUE(line) << "client gave no verdict\n" << client->transcript();
  EXPECT_EQ(line->rfind("CLIENT ok", 0), 0u) << *line;
  auto st = client->wait_exit(10s);
  ASSERT_TRUE(st) << "client did not exit";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "client status " << *st;

  // A host that does not exist on the link: `unreachable`, in bounded time.
  const auto t0 = std::chrono::steady_clock::now();
  auto nobody = Process::spawn({ip, "netns", "exec", ns.b(), peer_path(), "--client",
                                "198.18.0.99:" + std::to_string(peer->port()), "--bind", "198.18.0.2", "--desc",
                                to_hex(rw.serialize())});
  ASSERT_TRUE(nobody);
  auto verdict = nobody->wait_line("CLIENT ", 30s);
  ASSERT_TRUE(verdict) << "no verdict for an absent host\n" << nobody->transcript();
  EXPECT_EQ(*verdict, "CLIENT unreachable");
  std::printf(
      "connecting to an absent host reported after %lld ms\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()));
  nobody.reset();

  // The target saw the connection from the other namespace and holds the
  // bytes: the client wrote 8192 bytes (0xC3 ^ i*13) at offset 64.
  auto acc = peer->proc().wait_line("ACCEPTED conn=1 ", 5s);
  ASSERT_TRUE(acc);
  EXPECT_EQ(field(*acc, "rc"), "ok");
  std::string guards;
  auto d = peer->dump(&guards);
  ASSERT_TRUE(d);
  EXPECT_EQ(guards, "ok");
  EXPECT_TRUE(guards_intact(*d, 1, peer->region_size()));
  std::vector<std::uint8_t> expect(8192);
  for (std::size_t i = 0; i < expect.size(); ++i) expect[i] = static_cast<std::uint8_t>(0xC3 ^ (i * 13));
  EXPECT_TRUE(region_equals(*d, 0, peer->region_size(), 64, expect));
  auto q = peer->quit();
  ASSERT_TRUE(q);
  EXPECT_TRUE(WIFEXITED(*q) && WEXITSTATUS(*q) == 0) << peer->proc().transcript();
  peer.reset();
  client.reset();
  ns.remove();
  // Nothing left behind.
  auto list = run_command({ip, "netns", "list"});
  EXPECT_EQ(list.output.find(ns.a()), std::string::npos) << list.output;
  EXPECT_EQ(list.output.find(ns.b()), std::string::npos) << list.output;
}

}  // namespace
