// src/core/direct/split_choice.hpp - whether a large same-host transfer is
// split over two hands (copier.hpp: this thread and the peer process or the
// helper thread) or moved by this thread alone, chosen from what each way
// took lately (docs/design.md, "Split or whole, by what each took").
//
// A split saves the second half's copy and costs a hand-over: an offer the
// peer must notice, a wait for its part, the last bytes placed after both.
// Which one wins depends on the machine and the moment: on one 2-vCPU VM a
// batch of 16 writes of 64 KiB moved 0.9x as fast split as whole, and 0.47x
// while another process kept one vCPU busy, where a batch of 16 MiB moved
// 1.6x as fast split. So each endpoint times its large transfers both ways
// and keeps to the faster, trying the other now and then.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "core/direct/copier.hpp"

namespace remora::detail::direct {

class SplitChoice {
 public:
  /// Size classes: [256 KiB, 512 KiB), [512 KiB, 1 MiB), ... , 16 MiB and more.
  static constexpr unsigned kClasses = 7;
  /// The first transfers of a class are split (the default way), so that a
  /// short-lived connection behaves as before.
  static constexpr std::uint32_t kWarm = 32;
  /// Then, once per kPeriod transfers, kTrial of them go the way not
  /// preferred (the first time: whole), so that its figure follows the
  /// machine (another process taking a CPU, and then letting it go). Only
  /// the last kTrial - kSettle of a trial are timed: the first ones find
  /// the other hand asleep (the helper thread, the peer's agent) or still
  /// busy from the other way.
  static constexpr std::uint32_t kPeriod = 256, kTrial = 8, kSettle = 4;

  /// How to move a transfer now: split or whole, and whether took() is to
  /// be told how long it took.
  struct Way {
    bool split = true;
    bool timed = true;
  };
  /// The way for a transfer of `bytes` (at least kSplitBytes) now.
  Way choose(std::uint64_t bytes) noexcept {
    Class& c = classes_[index(bytes)];
    const std::uint32_t n = ++c.transfers;
    if (n <= kWarm) return {true, true};
    const std::uint32_t k = (n - kWarm - 1) % kPeriod;  // 0 .. kPeriod-1 in the period
    const bool prefer_split = c.ns_per_kib[kWhole] == 0 || c.ns_per_kib[kSplit] <= c.ns_per_kib[kWhole];
    if (k == 0) c.trial_split = !prefer_split;  // the way not preferred, for the whole trial
    if (k < kTrial) return {c.trial_split, k >= kSettle};
    return {prefer_split, true};
  }
  /// A transfer of `bytes` took `ns` of this thread's time, split or whole.
  void took(std::uint64_t bytes, bool split, std::int64_t ns) noexcept {
    if (bytes < kSplitBytes || ns <= 0) return;
    const double x = static_cast<double>(ns) * 1024.0 / static_cast<double>(bytes);
    double& e = classes_[index(bytes)].ns_per_kib[split ? kSplit : kWhole];
    e = e == 0 ? x : e + (x - e) / 4;
  }
  /// The figure of a way in the class of `bytes`, ns per KiB (0: none yet;
  /// tests and diagnostics).
  double ns_per_kib(std::uint64_t bytes, bool split) const noexcept {
    return classes_[index(bytes)].ns_per_kib[split ? kSplit : kWhole];
  }

 private:
  static constexpr unsigned kSplit = 0, kWhole = 1;
  struct Class {
    double ns_per_kib[2] = {0, 0};
    std::uint32_t transfers = 0;
    bool trial_split = false;
  };
  static unsigned index(std::uint64_t bytes) noexcept {
    const unsigned low = std::bit_width(std::uint64_t{kSplitBytes}) - 1;  // 18
    const unsigned b = bytes == 0 ? 0 : static_cast<unsigned>(std::bit_width(bytes) - 1);
    if (b <= low) return 0;
    return b - low >= kClasses ? kClasses - 1 : b - low;
  }
  Class classes_[kClasses];
};

}  // namespace remora::detail::direct
