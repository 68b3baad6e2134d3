// The peer moves half (docs/design.md, "The peer moves half"): the second
// part of a large same-host transfer offered to the peer process, which
// moves it with the opposite call (copier.hpp FarHand, EndpointImpl::
// take_pull, Table::move_for_peer).
//
// - the copier with a second hand that moves, refuses, gives back or comes
//   up short: every byte lands once the call returns, whoever moved it;
// - the owner's checks (Table::move_for_peer): a forged key, a range outside
//   its region, a missing privilege move nothing;
// - over a connection between two zones of this process: large writes and
//   reads half moved by the target, REMORA_PEER_HELPER=0 turning it off, and
//   what a broken or hostile initiator could put in the ring (a forged key,
//   a malformed message).
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "core/direct/copier.hpp"
#include "core/impl.hpp"
#include "unit_support.hpp"

namespace {

using namespace remora;
using namespace unit;
using detail::direct::copies_helped;
using detail::direct::copies_moved_by_peer;
using detail::direct::copies_taken_back;
using detail::direct::cross_memory;
using detail::direct::FarHand;
using detail::direct::kSplitBytes;
using detail::direct::write_ranges;

constexpr std::size_t kMiB = 1 << 20;

std::vector<std::uint8_t> bytes_of(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 151 + seed * 13 + (i >> 12)) & 0xff);
  return v;
}

/// A second hand that stands in for the peer process (this one: the
/// transfers go to this process's own pid). With `tails` other than none it
/// takes a batch's last bytes with the part: `place` copies them after its
/// part once the gate is open, `unplaced` opens the gate but places nothing.
class FakeFar : public FarHand {
 public:
  enum class Mode { move, refuse, give_back, short_by_half };
  enum class TailsMode { none, place, unplaced };
  explicit FakeFar(Mode m, TailsMode t = TailsMode::none) : mode(m), tails_mode(t) {}
  bool offer(bool write, const std::uint64_t* keys, const iovec* remote, std::size_t nr, const iovec* local,
             std::size_t n, const Tails* tails) noexcept override {
    ++offers;
    if (mode == Mode::refuse) return false;
    w = write;
    ranges.assign(remote, remote + nr);
    segs.assign(local, local + n);
    offered_keys.assign(keys, keys + nr);
    if (tails != nullptr && tails_mode != TailsMode::none) {
      tail_ranges.assign(tails->remote, tails->remote + tails->nr);
      tail_keys.assign(tails->keys, tails->keys + tails->nr);
      tail_bytes.clear();
      for (std::size_t i = 0; i < tails->n; ++i) {
        const auto* b = static_cast<const std::uint8_t*>(tails->local[i].iov_base);
        tail_bytes.insert(tail_bytes.end(), b, b + tails->local[i].iov_len);
      }
    }
    return true;
  }
  bool tails_go(bool whole) noexcept override {
    if (tail_ranges.empty()) return false;
    if (at_gate) at_gate();
    gate_open = whole;
    return whole;
  }
  bool tails_placed() const noexcept override { return placed; }
  ssize_t finish() noexcept override {
    const ssize_t n = move_part();
    if (n >= 0 && gate_open && tails_mode == TailsMode::place) {
      std::size_t at = 0;
      for (const iovec& r : tail_ranges) {
        std::memcpy(r.iov_base, tail_bytes.data() + at, r.iov_len);
        at += r.iov_len;
      }
      placed = true;
    }
    return n;
  }
  ssize_t move_part() noexcept {
    if (mode == Mode::give_back) return -1;
    // The peer's call: it reads our segments into its ranges (a write) or
    // writes its ranges to our segments (a read).
    const pid_t self = ::getpid();
    std::vector<iovec> r = ranges;
    if (mode == Mode::short_by_half) {
      r.resize(1);
      r[0].iov_len /= 2;
      std::size_t total = r[0].iov_len;
      std::vector<iovec> s;
      for (const iovec& g : segs) {
        if (total == 0) break;
        const std::size_t take = std::min(total, g.iov_len);
        s.push_back(iovec{g.iov_base, take});
        total -= take;
      }
      return w ? ::process_vm_readv(self, r.data(), r.size(), s.data(), s.size(), 0)
               : ::process_vm_writev(self, r.data(), r.size(), s.data(), s.size(), 0);
    }
    return w ? ::process_vm_readv(self, r.data(), r.size(), segs.data(), segs.size(), 0)
             : ::process_vm_writev(self, r.data(), r.size(), segs.data(), segs.size(), 0);
  }
  unsigned share() const noexcept override { return peer_share; }
  Mode mode;
  TailsMode tails_mode;
  unsigned peer_share = kHalfShare;
  int offers = 0;
  bool w = false;
  std::vector<iovec> ranges, segs;
  std::vector<std::uint64_t> offered_keys;
  std::vector<iovec> tail_ranges;
  std::vector<std::uint64_t> tail_keys;
  std::vector<std::uint8_t> tail_bytes;
  std::function<void()> at_gate;  // called when the caller opens the gate
  bool gate_open = false, placed = false;
};

TEST(PeerHelperCopier, EveryByteLandsWhoeverMovesTheSecondPart) {
  const std::size_t len = kMiB + 300, off = 4096 + 77;
  for (FakeFar::Mode mode :
       {FakeFar::Mode::move, FakeFar::Mode::refuse, FakeFar::Mode::give_back, FakeFar::Mode::short_by_half}) {
    SCOPED_TRACE(static_cast<int>(mode));
    std::vector<std::uint8_t> dst(len + 2 * 4096 + 200, 0xA5);
    auto src = bytes_of(len, static_cast<unsigned>(mode));
    iovec local[2] = {{src.data(), len / 3}, {src.data() + len / 3, len - len / 3}};
    FakeFar far(mode);
    const std::uint64_t by_peer = copies_moved_by_peer(), local_splits = copies_helped() + copies_taken_back();
    const ssize_t moved = cross_memory(::getpid(), true, local, 2, iovec{dst.data() + off, len}, true, 42, &far);
    ASSERT_EQ(moved, static_cast<ssize_t>(len));
    EXPECT_EQ(0, std::memcmp(dst.data() + off, src.data(), len));
    EXPECT_EQ(dst[off - 1], 0xA5);
    EXPECT_EQ(dst[off + len], 0xA5);
    EXPECT_EQ(far.offers, 1);
    if (mode == FakeFar::Mode::refuse) {
      // Not offered: this process's helper took it (or gave it back).
      EXPECT_EQ(copies_helped() + copies_taken_back(), local_splits + 1);
      EXPECT_EQ(copies_moved_by_peer(), by_peer);
      continue;
    }
    ASSERT_EQ(far.offered_keys.size(), 1u);
    EXPECT_EQ(far.offered_keys[0], 42u);
    EXPECT_TRUE(far.w);
    // Counted as the peer's only when it moved the whole part; else taken
    // back (moved by the caller), never handed to the local helper too.
    const bool by_far = mode == FakeFar::Mode::move;
    EXPECT_EQ(copies_moved_by_peer(), by_peer + (by_far ? 1 : 0));
    EXPECT_EQ(copies_helped() + copies_taken_back(), local_splits + (by_far ? 0 : 1));
  }
}

TEST(PeerHelperCopier, AReadsSecondPartMovedByThePeerLands) {
  const std::size_t len = 600 * 1024;
  auto far_mem = bytes_of(len, 9);
  std::vector<std::uint8_t> dst(len, 0);
  iovec local{dst.data(), len};
  FakeFar far(FakeFar::Mode::move);
  const std::uint64_t by_peer = copies_moved_by_peer();
  ASSERT_EQ(cross_memory(::getpid(), false, &local, 1, iovec{far_mem.data(), len}, true, 7, &far),
            static_cast<ssize_t>(len));
  EXPECT_EQ(dst, far_mem);
  EXPECT_FALSE(far.w);
  EXPECT_EQ(copies_moved_by_peer(), by_peer + 1);
}

// The peer's share (FarHand::share, in 64ths) sets where the transfer is
// cut: a quarter for the peer, or half of a batch's bytes, at a page
// boundary of the remote range.
TEST(PeerHelperCopier, ThePeersShareSetsTheCut) {
  const std::size_t len = kMiB;
  std::vector<std::uint8_t> dst(len + 8192, 0);
  auto src = bytes_of(len, 2);
  const auto page = reinterpret_cast<std::uintptr_t>(dst.data() + 4095) & ~std::uintptr_t{4095};
  auto* at = reinterpret_cast<std::uint8_t*>(page);
  for (unsigned share : {16u, 32u, 48u}) {
    SCOPED_TRACE(share);
    iovec local{src.data(), len};
    FakeFar far(FakeFar::Mode::move);
    far.peer_share = share;
    ASSERT_EQ(cross_memory(::getpid(), true, &local, 1, iovec{at, len}, true, 1, &far), static_cast<ssize_t>(len));
    EXPECT_EQ(0, std::memcmp(at, src.data(), len));
    ASSERT_EQ(far.ranges.size(), 1u);
    // The caller's part ends at the page boundary below its share of all
    // but the last bytes; the peer's runs from there to those last bytes.
    const std::size_t tail = len - detail::direct::kLastBytes, cut = (tail * (64 - share) / 64) & ~std::size_t{4095};
    EXPECT_EQ(static_cast<std::uint8_t*>(far.ranges[0].iov_base), at + cut);
    EXPECT_EQ(far.ranges[0].iov_len, tail - cut);
  }
}

// The writes of a batch: each range's key goes with its part, and every
// write's bytes land (the last bytes of each after the parts).
TEST(PeerHelperCopier, ABatchsSecondPartCarriesEachWritesKey) {
  constexpr std::size_t kEach = 96 * 1024, kWrites = 4;
  std::vector<std::uint8_t> dst(kWrites * kEach + 4096, 0xA5);
  auto src = bytes_of(kWrites * kEach, 3);
  iovec local[kWrites], remote[kWrites];
  std::uint64_t keys[kWrites];
  for (std::size_t k = 0; k < kWrites; ++k) {
    local[k] = iovec{src.data() + k * kEach, kEach};
    remote[k] = iovec{dst.data() + 100 + k * kEach, kEach};
    keys[k] = 1000 + k;
  }
  ASSERT_GE(kWrites * kEach, kSplitBytes);
  FakeFar far(FakeFar::Mode::move);
  ASSERT_EQ(write_ranges(::getpid(), local, kWrites, remote, kWrites, true, keys, &far),
            static_cast<ssize_t>(kWrites * kEach));
  EXPECT_EQ(0, std::memcmp(dst.data() + 100, src.data(), kWrites * kEach));
  ASSERT_EQ(far.offers, 1);
  ASSERT_EQ(far.ranges.size(), far.offered_keys.size());
  for (std::size_t r = 0; r < far.ranges.size(); ++r) {
    // The range lies in the write whose key it carries.
    const auto at = static_cast<std::uint8_t*>(far.ranges[r].iov_base);
    const std::size_t k = static_cast<std::size_t>(at - (dst.data() + 100)) / kEach;
    EXPECT_EQ(far.offered_keys[r], keys[k]) << r;
  }
}

// A batch's last bytes go with the peer's part: each write's last
// kLastBytes under its key, with their bytes. The caller opens the gate only
// once its own part landed, and the last bytes are not placed before it;
// when the peer placed them the caller makes no call of its own for them,
// and when the peer takes none or places none the caller places them all.
// Every byte lands in every case.
TEST(PeerHelperCopier, ABatchsLastBytesGoWithThePeersPartAndLandLast) {
  constexpr std::size_t kEach = 32 * 1024 + 300, kWrites = 16, kStride = kEach + 4096 + 7;
  const std::size_t last = detail::direct::kLastBytes;
  for (FakeFar::TailsMode mode : {FakeFar::TailsMode::none, FakeFar::TailsMode::place, FakeFar::TailsMode::unplaced}) {
    SCOPED_TRACE(static_cast<int>(mode));
    std::vector<std::uint8_t> dst(kWrites * kStride + 4096, 0xA5);
    auto src = bytes_of(kWrites * kEach, 11 + static_cast<unsigned>(mode));
    iovec local[kWrites], remote[kWrites];
    std::uint64_t keys[kWrites];
    for (std::size_t k = 0; k < kWrites; ++k) {
      local[k] = iovec{src.data() + k * kEach, kEach};
      remote[k] = iovec{dst.data() + 100 + k * kStride, kEach};
      keys[k] = 500 + k;
    }
    FakeFar far(FakeFar::Mode::move, mode);
    bool checked_at_gate = false;
    far.at_gate = [&] {
      // Every byte of the bodies outside the peer's ranges is there, and no
      // write's last bytes.
      for (std::size_t k = 0; k < kWrites; ++k) {
        auto* at = static_cast<std::uint8_t*>(remote[k].iov_base);
        for (std::size_t i = 0; i + last < kEach; ++i) {
          const bool peers = std::any_of(far.ranges.begin(), far.ranges.end(), [&](const iovec& r) {
            auto* b = static_cast<std::uint8_t*>(r.iov_base);
            return at + i >= b && at + i < b + r.iov_len;
          });
          if (!peers) {
            ASSERT_EQ(at[i], src[k * kEach + i]) << "write " << k << " byte " << i;
          }
        }
        for (std::size_t i = kEach - last; i < kEach; ++i) ASSERT_EQ(at[i], 0xA5) << "write " << k;
      }
      checked_at_gate = true;
    };
    const std::uint64_t by_peer = detail::direct::copies_tails_by_peer();
    ASSERT_EQ(write_ranges(::getpid(), local, kWrites, remote, kWrites, true, keys, &far),
              static_cast<ssize_t>(kWrites * kEach));
    for (std::size_t k = 0; k < kWrites; ++k) {
      auto* at = static_cast<std::uint8_t*>(remote[k].iov_base);
      ASSERT_EQ(0, std::memcmp(at, src.data() + k * kEach, kEach)) << "write " << k;
      ASSERT_EQ(at[-1], 0xA5);
      ASSERT_EQ(at[kEach], 0xA5);
    }
    if (mode == FakeFar::TailsMode::none) {
      EXPECT_FALSE(checked_at_gate);
      EXPECT_EQ(detail::direct::copies_tails_by_peer(), by_peer);
      continue;
    }
    EXPECT_TRUE(checked_at_gate);
    ASSERT_EQ(far.tail_ranges.size(), kWrites);
    ASSERT_EQ(far.tail_bytes.size(), kWrites * last);
    for (std::size_t k = 0; k < kWrites; ++k) {
      EXPECT_EQ(far.tail_ranges[k].iov_base, static_cast<std::uint8_t*>(remote[k].iov_base) + kEach - last) << k;
      EXPECT_EQ(far.tail_ranges[k].iov_len, last);
      EXPECT_EQ(far.tail_keys[k], keys[k]);
      EXPECT_EQ(0, std::memcmp(far.tail_bytes.data() + k * last, src.data() + (k + 1) * kEach - last, last)) << k;
    }
    EXPECT_EQ(detail::direct::copies_tails_by_peer(), by_peer + (mode == FakeFar::TailsMode::place ? 1 : 0));
  }
}

// ---- the owner's checks ----

class MoveForPeer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    table = detail::direct::Table::create(why);
    ASSERT_TRUE(table) << why;
    region.assign(64 * 1024, 0x11);
    ro.assign(4096, 0x22);
    ASSERT_GE(table->add(5, reinterpret_cast<std::uint64_t>(region.data()), region.size(), Access::all), 0);
    ASSERT_GE(table->add(6, reinterpret_cast<std::uint64_t>(ro.data()), ro.size(), Access::remote_read), 0);
    src = bytes_of(8192, 4);
  }
  ssize_t pull(std::uint64_t key, void* at, std::size_t len, bool write = true) {
    iovec r{at, len}, s{src.data(), len};
    errno = 0;
    return table->move_for_peer(::getpid(), write, &key, &r, 1, &s, 1);
  }
  bool untouched() const {
    return std::all_of(region.begin(), region.end(), [](std::uint8_t b) { return b == 0x11; }) &&
           std::all_of(ro.begin(), ro.end(), [](std::uint8_t b) { return b == 0x22; });
  }
  std::unique_ptr<detail::direct::Table> table;
  std::vector<std::uint8_t> region, ro, src;
};

TEST_F(MoveForPeer, ACheckedRangeIsMoved) {
  ASSERT_EQ(pull(5, region.data() + 10, 8000), 8000);
  EXPECT_EQ(0, std::memcmp(region.data() + 10, src.data(), 8000));
  // A read: the region's bytes to the peer's segments.
  ASSERT_EQ(pull(6, ro.data(), 4096, false), 4096);
  EXPECT_TRUE(std::all_of(src.begin(), src.begin() + 4096, [](std::uint8_t b) { return b == 0x22; }));
}

TEST_F(MoveForPeer, AForgedKeyARangeOutsideAndAMissingPrivilegeMoveNothing) {
  EXPECT_EQ(pull(99, region.data(), 4096), -1);
  EXPECT_EQ(errno, EACCES);
  EXPECT_EQ(pull(5, region.data() + region.size() - 100, 4096), -1) << "past the region's end";
  EXPECT_EQ(errno, EACCES);
  EXPECT_EQ(pull(5, region.data() - 4096, 4096), -1) << "before the region";
  EXPECT_EQ(errno, EACCES);
  EXPECT_EQ(pull(6, ro.data(), 4096), -1) << "a write into a region without remote write";
  EXPECT_EQ(errno, EACCES);
  // The key of one region, the range of another.
  EXPECT_EQ(pull(5, ro.data(), 4096), -1);
  EXPECT_EQ(errno, EACCES);
  EXPECT_TRUE(untouched());
}

TEST_F(MoveForPeer, ALaterRangeThatFailsItsCheckStopsTheWholePart) {
  std::uint64_t keys[2] = {5, 99};
  iovec r[2] = {{region.data(), 4096}, {region.data() + 8192, 4096}}, s{src.data(), 8192};
  EXPECT_EQ(table->move_for_peer(::getpid(), true, keys, r, 2, &s, 1), -1);
  EXPECT_EQ(errno, EACCES);
  EXPECT_TRUE(untouched()) << "the first range was moved though the second was refused";
}

TEST_F(MoveForPeer, LengthsThatDifferOrTooManyRangesAreRefused) {
  std::uint64_t key = 5;
  iovec r{region.data(), 4096}, s{src.data(), 4095};
  EXPECT_EQ(table->move_for_peer(::getpid(), true, &key, &r, 1, &s, 1), -1);
  EXPECT_EQ(errno, EINVAL);
  std::vector<std::uint64_t> keys(detail::direct::kMaxRanges + 1, 5);
  std::vector<iovec> rs(keys.size(), iovec{region.data(), 16});
  iovec all{src.data(), 16 * keys.size()};
  EXPECT_EQ(table->move_for_peer(::getpid(), true, keys.data(), rs.data(), rs.size(), &all, 1), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_TRUE(untouched());
}

// ---- over a connection ----

std::uint64_t pulls_offered(const Endpoint& ep) { return ep.impl()->pulls_offered.load(); }
std::uint64_t moved_for_peer(const Endpoint& ep) { return ep.impl()->pulls_moved_for_peer.load(); }

bool takes_pulls(const Endpoint& ep) {
  detail::MutexLock lock(ep.impl()->mu);
  return ep.impl()->outbox && ep.impl()->inbox_taken && ep.impl()->outbox_takes_pulls;
}

/// A same-host pair with agents; the target zone sees REMORA_PEER_HELPER =
/// `target_env` and REMORA_HUGEPAGES = `huge_env` when it is made (null:
/// unset). 1900 KiB on each side by default: no whole huge page in the
/// target's region, so its owner moves none (kHugeMoves) and every large
/// transfer into it may be offered.
std::unique_ptr<Pair> pull_pair(const char* target_env = nullptr, std::size_t size = 1900 * 1024,
                                const char* huge_env = nullptr) {
  ::setenv("REMORA_SAMEHOST", "1", 1);
  if (target_env != nullptr) ::setenv("REMORA_PEER_HELPER", target_env, 1);
  if (huge_env != nullptr) ::setenv("REMORA_HUGEPAGES", huge_env, 1);
  PairOptions o;
  o.target_size = o.local_size = size;
  o.between_zones = [] {
    ::unsetenv("REMORA_PEER_HELPER");
    ::unsetenv("REMORA_HUGEPAGES");
  };
  auto p = std::make_unique<Pair>(o);
  ::unsetenv("REMORA_SAMEHOST");
  return p;
}

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds timeout = kWait) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Large writes and reads between two zones: the target moves the second
// part of some (its agent takes the offer when it looks in time; otherwise
// the initiator takes it back), and every byte lands, nothing around it.
TEST(PeerHelper, LargeWritesAndReadsAreHalfMovedByTheTargetAndLandExactly) {
  auto p = pull_pair();
  ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); })) << "the target's ring never said it takes parts";
  const std::size_t len = kMiB + 5, at = 4096 + 3;
  const auto until = std::chrono::steady_clock::now() + 20s;
  int rounds = 0;
  for (; moved_for_peer(p->tep) == 0 || rounds < 4; ++rounds) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the target moved no part in 20 s (" << rounds << " writes)";
    const auto src = bytes_of(len, static_cast<unsigned>(rounds));
    std::memcpy(p->local_mem.data(), src.data(), len);
    Segment w[2] = {Segment(p->lmr, 0, len / 2 + 1), Segment(p->lmr, len / 2 + 1, len - len / 2 - 1)};
    ASSERT_OK(p->iep.write(w, p->rr, at, 1));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_FALSE(c[0].status) << describe(c[0]);
    ASSERT_EQ(0, std::memcmp(p->target_mem.data() + at, src.data(), len)) << "write " << rounds;
    ASSERT_EQ(p->target_mem[at - 1], Pair::kTargetFill);
    ASSERT_EQ(p->target_mem[at + len], Pair::kTargetFill);
  }
  EXPECT_GT(pulls_offered(p->iep), 0u);
  // Reads: the target writes its part to the initiator's buffer.
  const std::uint64_t before = moved_for_peer(p->tep);
  for (int r = 0; moved_for_peer(p->tep) == before; ++r) {
    ASSERT_LT(std::chrono::steady_clock::now(), until + 20s) << "the target moved no part of a read";
    const auto want = bytes_of(len, 100 + static_cast<unsigned>(r));
    std::memcpy(p->target_mem.data() + at, want.data(), len);
    std::memset(p->local_mem.data(), 0, p->local_mem.size());
    Segment s(p->lmr, 64, len);
    ASSERT_OK(p->iep.read({&s, 1}, p->rr, at, 2));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    ASSERT_FALSE(c[0].status) << describe(c[0]);
    ASSERT_EQ(0, std::memcmp(p->local_mem.data() + 64, want.data(), len)) << "read " << r;
    ASSERT_EQ(p->local_mem[63], 0);
    ASSERT_EQ(p->local_mem[64 + len], 0);
  }
}

// REMORA_PEER_HELPER=0 in the target's zone: its ring does not take parts,
// and the initiator offers none (its own helper splits as before).
TEST(PeerHelper, OffInTheTargetsZoneTheInitiatorOffersNothing) {
  auto p = pull_pair("0");
  ASSERT_TRUE(wait_for([&] {
    detail::MutexLock lock(p->iep.impl()->mu);
    return p->iep.impl()->outbox && p->iep.impl()->inbox_taken;
  })) << "no rings";
  EXPECT_FALSE(takes_pulls(p->iep));
  const auto src = bytes_of(kMiB, 5);
  std::memcpy(p->local_mem.data(), src.data(), kMiB);
  Segment s(p->lmr, 0, kMiB);
  ASSERT_OK(p->iep.write({&s, 1}, p->rr, 0, 1));
  auto c = collect(p->icq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].status) << describe(c[0]);
  EXPECT_EQ(0, std::memcmp(p->target_mem.data(), src.data(), kMiB));
  EXPECT_EQ(pulls_offered(p->iep), 0u);
  EXPECT_EQ(moved_for_peer(p->tep), 0u);
}

// A transfer into the whole huge pages of a region whose owner moves them
// into huge pages (kHugeMoves) is split over the initiator's own threads:
// there the two parts pin one page per 2 MiB each, without the owner's work.
// With REMORA_HUGEPAGES=0 in the owner's zone the same transfer is offered.
TEST(PeerHelper, ATransferIntoTheOwnersHugePagesStaysWithTheInitiator) {
  const std::size_t huge = detail::direct::huge_page_size();
  if (huge == 0) GTEST_SKIP() << "the kernel has no transparent huge pages";
  for (const char* huge_env : {static_cast<const char*>(nullptr), "0"}) {
    SCOPED_TRACE(huge_env == nullptr ? "huge pages on" : "REMORA_HUGEPAGES=0");
    auto p = pull_pair(nullptr, 3 * huge + kMiB, huge_env);
    ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
    // The first whole huge page of the target's region.
    const auto base = reinterpret_cast<std::uintptr_t>(p->target_mem.data());
    const std::size_t at = ((base + huge - 1) & ~(huge - 1)) - base;
    const auto src = bytes_of(kMiB, 8);
    const std::uint64_t offered = pulls_offered(p->iep);
    const std::uint64_t splits = copies_helped() + copies_taken_back() + copies_moved_by_peer();
    std::memcpy(p->local_mem.data(), src.data(), kMiB);
    Segment s(p->lmr, 0, kMiB);
    ASSERT_OK(p->iep.write({&s, 1}, p->rr, at, 1));
    auto c = collect(p->icq, 1);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_FALSE(c[0].status) << describe(c[0]);
    EXPECT_EQ(0, std::memcmp(p->target_mem.data() + at, src.data(), kMiB));
    EXPECT_GT(copies_helped() + copies_taken_back() + copies_moved_by_peer(), splits) << "not split";
    if (huge_env == nullptr)
      EXPECT_EQ(pulls_offered(p->iep), offered) << "offered to the owner, which moves its huge pages";
    else
      EXPECT_EQ(pulls_offered(p->iep), offered + 1) << "not offered, though the owner moves no huge page";
  }
}

// What a broken or hostile initiator could put in the target's ring as a
// part to move, offered through the initiator's own hand: the target
// checks it against its table and moves nothing outside a grant; the
// initiator's finish() then reports the part as its own to move.
TEST(PeerHelper, APartUnderAForgedKeyOrOutsideItsRegionMovesNothing) {
  auto p = pull_pair();
  ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
  std::vector<std::uint8_t> src(64 * 1024, 0x99);
  const auto base = reinterpret_cast<std::uint64_t>(p->target_mem.data());
  struct Case {
    std::uint64_t key, addr;
    const char* what;
  } cases[] = {{p->rr.key() ^ 0x5a5a, base, "a forged key"},
               {p->rr.key(), base + p->target_mem.size() - 100, "past the region's end"},
               {p->rr.key(), base - 8192, "before the region"}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const std::uint64_t refused_before = moved_for_peer(p->tep);
    // Offered until the target's agent took one (rather than the hand
    // taking it back because the agent had not looked yet).
    bool answered = false;
    for (int attempt = 0; attempt < 200 && !answered; ++attempt) {
      detail::MutexLock lock(p->iep.impl()->mu);
      detail::EndpointImpl& ep = *p->iep.impl();
      ASSERT_TRUE(ep.outbox && ep.direct_peer);
      std::atomic<std::uint64_t> offered{0};
      unsigned share = detail::direct::FarHand::kHalfShare;
      detail::PullHand hand(*ep.outbox, *ep.direct_peer, offered, share);
      iovec r{reinterpret_cast<void*>(k.addr), src.size()}, s{src.data(), src.size()};
      ASSERT_TRUE(hand.offer(true, &k.key, &r, 1, &s, 1, nullptr));
      std::this_thread::sleep_for(20ms);
      EXPECT_EQ(hand.finish(), -1);
      answered = !hand.taken_back();
    }
    ASSERT_TRUE(answered) << "the target's agent never took the part";
    EXPECT_TRUE(
        std::all_of(p->target_mem.begin(), p->target_mem.end(), [](std::uint8_t b) { return b == Pair::kTargetFill; }));
    EXPECT_EQ(moved_for_peer(p->tep), refused_before);
    EXPECT_EQ(p->tep.state(), EndpointState::connected) << "a refused part is answered, not a broken protocol";
  }
}

// The endpoint's share for the peer grows by one 64th when the peer was
// done before the initiator looked, up to PullHand::kMaxShare.
TEST(PeerHelper, APeerDoneFirstGetsALargerShareUpToTheBound) {
  auto p = pull_pair();
  ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
  const auto src = bytes_of(64 * 1024, 6);
  for (unsigned start : {detail::direct::FarHand::kHalfShare, detail::PullHand::kMaxShare}) {
    SCOPED_TRACE(start);
    unsigned share = start;
    bool moved = false;
    for (int attempt = 0; attempt < 200 && !moved; ++attempt) {
      detail::MutexLock lock(p->iep.impl()->mu);
      detail::EndpointImpl& ep = *p->iep.impl();
      std::atomic<std::uint64_t> offered{0};
      detail::PullHand hand(*ep.outbox, *ep.direct_peer, offered, share);
      EXPECT_EQ(hand.share(), start);
      const std::uint64_t key = p->rr.key();
      iovec r{p->target_mem.data() + 100, src.size()}, s{const_cast<std::uint8_t*>(src.data()), src.size()};
      ASSERT_TRUE(hand.offer(true, &key, &r, 1, &s, 1, nullptr));
      std::this_thread::sleep_for(20ms);
      const ssize_t n = hand.finish();
      moved = !hand.taken_back();
      if (moved) {
        EXPECT_EQ(n, static_cast<ssize_t>(src.size()));
      }
    }
    ASSERT_TRUE(moved) << "the target's agent never took the part";
    EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 100, src.data(), src.size()));
    EXPECT_EQ(share, std::min(start + 1, detail::PullHand::kMaxShare));
  }
}

// ---- a batch's last bytes, placed by the target (wire::PullTails) ----

std::uint64_t tails_placed_for_peer(const Endpoint& ep) { return ep.impl()->tails_placed_for_peer.load(); }

/// One offer through the initiator's own hand: `len` bytes of `src` into the
/// target at `at` under the region's key, with one last-bytes range of
/// `tail` (its bytes) at `tail_at` under `tail_key`; `gate` runs right after
/// the offer (false: the round does not count), `late` once the target had
/// 20 ms, `after` when finish() returned. Repeated until the target's agent took the part (rather than the
/// hand taking it back) in a round that counts: false when it never did.
/// (A gate opened right after the offer can still find the target given up:
/// this thread descheduled for longer than the target waits, when the bell
/// woke the target's agent on this thread's CPU.)
bool offer_with_tail(Pair& p, const std::vector<std::uint8_t>& src, std::size_t at, std::uint64_t tail_key,
                     std::uint64_t tail_at, const std::vector<std::uint8_t>& tail,
                     const std::function<bool(detail::PullHand&)>& gate,
                     const std::function<void(detail::PullHand&, ssize_t)>& after,
                     const std::function<void(detail::PullHand&)>& late = nullptr) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    detail::MutexLock lock(p.iep.impl()->mu);
    detail::EndpointImpl& ep = *p.iep.impl();
    std::atomic<std::uint64_t> offered{0};
    unsigned share = FarHand::kHalfShare;
    detail::PullHand hand(*ep.outbox, *ep.direct_peer, offered, share);
    const std::uint64_t key = p.rr.key();
    iovec r{p.target_mem.data() + at, src.size()}, s{const_cast<std::uint8_t*>(src.data()), src.size()};
    iovec tr{reinterpret_cast<void*>(tail_at), tail.size()}, ts{const_cast<std::uint8_t*>(tail.data()), tail.size()};
    const FarHand::Tails tails{&tail_key, &tr, 1, &ts, 1};
    if (!hand.offer(true, &key, &r, 1, &s, 1, &tails)) return false;
    const bool counts = !gate || gate(hand);
    std::this_thread::sleep_for(20ms);
    if (late) late(hand);
    const ssize_t n = hand.finish();
    if (hand.taken_back() || !counts) continue;
    after(hand, n);
    return true;
  }
  return false;
}

// The gate opened right after the offer: the target moves its part, then
// copies the last bytes into its memory, and says so.
TEST(PeerHelper, ABatchsLastBytesAreCopiedByTheTargetOnceTheGateIsOpen) {
  auto p = pull_pair();
  ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
  const auto src = bytes_of(64 * 1024, 21), tail = bytes_of(detail::direct::kLastBytes, 22);
  const auto tail_at = reinterpret_cast<std::uint64_t>(p->target_mem.data()) + 100 + src.size();
  const std::uint64_t placed = tails_placed_for_peer(p->tep);
  ASSERT_TRUE(offer_with_tail(
      *p, src, 100, p->rr.key(), tail_at, tail, [](detail::PullHand& h) { return h.tails_go(true); },
      [&](detail::PullHand& h, ssize_t n) {
        EXPECT_EQ(n, static_cast<ssize_t>(src.size()));
        EXPECT_TRUE(h.tails_placed());
      }))
      << "the target's agent never took the part";
  EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 100, src.data(), src.size()));
  EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 100 + src.size(), tail.data(), tail.size()));
  EXPECT_EQ(p->target_mem[99], Pair::kTargetFill);
  EXPECT_EQ(p->target_mem[100 + src.size() + tail.size()], Pair::kTargetFill);
  EXPECT_EQ(tails_placed_for_peer(p->tep), placed + 1);
}

// A gate that stays shut: the target waits for it only so long, then says
// the initiator places them (the initiator's late tails_go is refused), and
// its part is done all the same. Until the target is seen giving up (an
// agent that took the part late, still waiting when the gate opened, placed
// them: that is checked too).
TEST(PeerHelper, TheTargetWaitsForTheInitiatorsGateOnlySoLong) {
  auto p = pull_pair();
  ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
  const auto src = bytes_of(64 * 1024, 23), tail = bytes_of(detail::direct::kLastBytes, 24);
  const auto tail_at = reinterpret_cast<std::uint64_t>(p->target_mem.data()) + 100 + src.size();
  bool gave_up = false;
  for (int round = 0; round < 20 && !gave_up; ++round) {
    std::fill(p->target_mem.begin(), p->target_mem.end(), Pair::kTargetFill);
    const std::uint64_t placed = tails_placed_for_peer(p->tep);
    bool late_go = false, placed_by_target = false;
    ASSERT_TRUE(offer_with_tail(
        *p, src, 100, p->rr.key(), tail_at, tail, nullptr,
        [&](detail::PullHand& h, ssize_t n) {
          EXPECT_EQ(n, static_cast<ssize_t>(src.size()));
          placed_by_target = h.tails_placed();
        },
        [&](detail::PullHand& h) { late_go = h.tails_go(true); }));
    EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 100, src.data(), src.size()));
    const bool tail_there = std::memcmp(p->target_mem.data() + 100 + src.size(), tail.data(), tail.size()) == 0;
    EXPECT_EQ(tail_there, placed_by_target);
    EXPECT_EQ(tails_placed_for_peer(p->tep), placed + (placed_by_target ? 1 : 0));
    if (!placed_by_target) {
      EXPECT_FALSE(late_go) << "the gate opened after the target gave up";
      EXPECT_TRUE(std::all_of(p->target_mem.begin() + 100 + static_cast<std::ptrdiff_t>(src.size()),
                              p->target_mem.end(), [](std::uint8_t b) { return b == Pair::kTargetFill; }));
      gave_up = true;
    }
  }
  EXPECT_TRUE(gave_up) << "the target never stopped waiting";
  EXPECT_EQ(p->tep.state(), EndpointState::connected);
}

// Last bytes the initiator holds back (its own part came up short), or that
// the target's table refuses (a forged key, a range past the region's end):
// none is placed, the part is moved all the same, and the connection stays.
TEST(PeerHelper, LastBytesHeldBackOrRefusedAreNotPlaced) {
  auto p = pull_pair();
  ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
  const auto src = bytes_of(64 * 1024, 25), tail = bytes_of(detail::direct::kLastBytes, 26);
  const auto base = reinterpret_cast<std::uint64_t>(p->target_mem.data());
  struct Case {
    std::uint64_t key, at;
    bool go;
    const char* what;
  } cases[] = {{p->rr.key(), base + 100 + src.size(), false, "held back"},
               {p->rr.key() ^ 0x5a5a, base + 100 + src.size(), true, "a forged key"},
               {p->rr.key(), base + p->target_mem.size() - 10, true, "past the region's end"}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    std::fill(p->target_mem.begin(), p->target_mem.end(), Pair::kTargetFill);
    const std::uint64_t placed = tails_placed_for_peer(p->tep);
    ASSERT_TRUE(offer_with_tail(
        *p, src, 100, k.key, k.at, tail, [&](detail::PullHand& h) { return h.tails_go(k.go) == k.go; },
        [&](detail::PullHand& h, ssize_t n) {
          EXPECT_EQ(n, static_cast<ssize_t>(src.size()));
          EXPECT_FALSE(h.tails_placed());
        }));
    EXPECT_EQ(0, std::memcmp(p->target_mem.data() + 100, src.data(), src.size()));
    EXPECT_TRUE(std::all_of(p->target_mem.begin() + 100 + static_cast<std::ptrdiff_t>(src.size()), p->target_mem.end(),
                            [](std::uint8_t b) { return b == Pair::kTargetFill; }));
    EXPECT_EQ(tails_placed_for_peer(p->tep), placed);
    EXPECT_EQ(p->tep.state(), EndpointState::connected);
  }
}

// Writes posted back to back (one batch, split with the target) through
// the public API: the target places their last bytes, and every byte lands.
TEST(PeerHelper, AGatheredBatchsLastBytesArePlacedByTheTarget) {
  constexpr std::size_t kEach = 32 * 1024, kWrites = 16, kStride = kEach + 1000;
  auto p = pull_pair();
  ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
  const std::uint64_t by_peer = detail::direct::copies_tails_by_peer(), placed = tails_placed_for_peer(p->tep);
  const auto until = std::chrono::steady_clock::now() + 20s;
  for (unsigned round = 0; tails_placed_for_peer(p->tep) == placed; ++round) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "no batch's last bytes were placed by the target";
    const auto src = bytes_of(kWrites * kEach, 30 + round);
    std::memcpy(p->local_mem.data(), src.data(), src.size());
    Completion none[1];
    (void)p->icq.poll(none);  // this thread polls the queue: the writes are gathered
    for (std::size_t k = 0; k < kWrites; ++k) {
      Segment seg(p->lmr, k * kEach, kEach);
      ASSERT_OK(p->iep.write({&seg, 1}, p->rr, k * kStride, k));
    }
    auto c = collect(p->icq, kWrites);
    ASSERT_EQ(c.size(), kWrites);
    for (std::size_t k = 0; k < kWrites; ++k) {
      ASSERT_FALSE(c[k].status) << describe(c[k]);
      ASSERT_EQ(c[k].cookie, k);
      ASSERT_EQ(0, std::memcmp(p->target_mem.data() + k * kStride, src.data() + k * kEach, kEach)) << k;
      ASSERT_EQ(p->target_mem[k * kStride + kEach], Pair::kTargetFill);
    }
  }
  EXPECT_GT(detail::direct::copies_tails_by_peer(), by_peer);
}

// A trailer that breaks the ring's rules (no range, lengths that do not add
// up, a range over kLastBytes, last bytes with a read, a cut-off trailer):
// the target ends the connection with nothing written.
TEST(PeerHelper, AMalformedTrailerEndsTheConnection) {
  namespace wire = detail::wire;
  std::vector<std::uint8_t> src(4096, 0x42), bytes(80, 0x43);
  for (int shape = 0; shape < 5; ++shape) {
    SCOPED_TRACE(shape);
    auto p = pull_pair();
    ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
    const auto base = reinterpret_cast<std::uint64_t>(p->target_mem.data());
    wire::RingPull head{wire::kPullPosted, 0, 0, shape == 3 ? 0u : 1u, 1, 1};
    wire::PullRange range{p->rr.key(), base + 100, src.size()};
    wire::PullSegment seg{reinterpret_cast<std::uint64_t>(src.data()), src.size()};
    wire::PullTails t{wire::kTailsWait, 0, 1, 64};
    wire::PullRange tail{p->rr.key(), base + 100 + src.size(), 64};
    if (shape == 0) t.count = 0;
    if (shape == 1) tail.len = 32;  // the trailer says 64 bytes
    if (shape == 2) t.bytes = tail.len = 65;
    std::vector<remora::backend::Iov> v = {{&head, sizeof head, nullptr},
                                           {&range, sizeof range, nullptr},
                                           {&seg, sizeof seg, nullptr},
                                           {&t, shape == 4 ? 8 : sizeof t, nullptr}};
    if (shape != 4) {
      if (t.count != 0) v.push_back({&tail, sizeof tail, nullptr});
      v.push_back({bytes.data(), t.bytes, nullptr});
    }
    std::size_t total = 0;
    for (const auto& e : v) total += e.len;
    {
      detail::MutexLock lock(p->iep.impl()->mu);
      ASSERT_TRUE(p->iep.impl()->outbox->put(v, total, wire::data(wire::ring_pull)) != nullptr);
    }
    ASSERT_TRUE(wait_for([&] { return p->tep.state() == EndpointState::error; })) << "the target kept the connection";
    EXPECT_TRUE(
        std::all_of(p->target_mem.begin(), p->target_mem.end(), [](std::uint8_t b) { return b == Pair::kTargetFill; }));
  }
}

// A part whose message is shorter than it says, or names no range, breaks
// the ring's rules: the target ends the connection with nothing written.
TEST(PeerHelper, AMalformedPartEndsTheConnection) {
  for (int shape = 0; shape < 2; ++shape) {
    SCOPED_TRACE(shape);
    auto p = pull_pair();
    ASSERT_TRUE(wait_for([&] { return takes_pulls(p->iep); }));
    detail::wire::RingPull head{detail::wire::kPullPosted, 0, 0, 1, shape == 0 ? 0u : 3u, 1};
    {
      detail::MutexLock lock(p->iep.impl()->mu);
      remora::backend::Iov v{&head, sizeof head, nullptr};
      ASSERT_TRUE(p->iep.impl()->outbox->put({&v, 1}, sizeof head, detail::wire::data(detail::wire::ring_pull)) !=
                  nullptr);
    }
    ASSERT_TRUE(wait_for([&] { return p->tep.state() == EndpointState::error; })) << "the target kept the connection";
    EXPECT_TRUE(
        std::all_of(p->target_mem.begin(), p->target_mem.end(), [](std::uint8_t b) { return b == Pair::kTargetFill; }));
  }
}

}  // namespace
