// src/check/check.hpp - remora-check: the checking mode (docs/check.md).
//
// Off by default. REMORA_CHECK (read when a Fabric is opened, so unchanged C
// programs get it) or FabricOptions::check turn it on for one fabric: its
// zones then carry a Checker, and the engine's hooks (one null-pointer test
// each on the hot paths) call into it. Everything the checks keep lives
// here; the core only holds opaque pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "remora/result.hpp"

namespace remora::detail {
struct EndpointImpl;
struct OpSlot;
struct Operation;
struct RegionImpl;
struct ZoneImpl;
}  // namespace remora::detail

namespace remora::detail::check {

/// What a checking spec turned on (see parse()).
struct Config {
  bool reuse = false;        ///< check 2: gather/scatter memory changed before completion
  bool strict = false;       ///< check 2, strict: the data at post time is what is sent
  bool crash = false;        ///< check 3: crash images of persistent regions, unflushed writes
  bool noncoherent = false;  ///< check 1: emulated non-coherent memory (requires_sync)
  bool coherent = false;     ///< the program has no sync call (librpma): check 1 stays off
  std::string report;        ///< JSON report written at exit ("" : none)
  std::string crash_dir;     ///< where crash images go ("" : none written)
  /// Crash points: 0 = at the end only; -1 = after every PERSISTENT flush
  /// (pmreorder's "every point"); -2 = one random point; N > 0: after the
  /// N-th PERSISTENT flush the region received.
  long crash_at = 0;
  int exit_code = 99;  ///< exit status forced at exit when there were findings (0: leave it)
  bool any() const noexcept { return reuse || crash || noncoherent; }
};

/// Parse a spec: comma-separated words, `reuse`, `strict` (implies reuse),
/// `crash`, `noncoherent`, `all` (the three checks), `coherent` (the
/// program assumes coherent memory: check 1 stays off), `report=PATH`,
/// `crash_dir=DIR`, `crash_at=end|all|random|N`, `exitcode=N`. Unknown words
/// give invalid_argument. Merges into `into`.
Result<void> parse(std::string_view spec, Config& into);

/// Per-operation record (gather/scatter copies, staging, persistence
/// bookkeeping). Freed by OpRecordFree.
struct OpRecord;
struct OpRecordFree {
  void operator()(OpRecord* r) const noexcept;
};
using RecordPtr = std::unique_ptr<OpRecord, OpRecordFree>;
/// Per-region state (crash images, non-coherent views).
struct RegionState;
struct RegionStateFree {
  void operator()(RegionState* r) const noexcept;
};

/// One fabric's checker. Created by make() when some check is on.
class Checker {
 public:
  explicit Checker(Config c) : config_(std::move(c)) {}
  const Config& config() const noexcept { return config_; }

  // Engine hooks (the endpoint's mu is held in each).
  /// A slot was filled for `op` (before submit): copy the gather/scatter
  /// memory, stage it in strict mode, note writes and flushes to persistent
  /// regions.
  void on_post(EndpointImpl& ep, OpSlot& s, const Operation& op);
  /// The transport is about to take `s` (post_slot).
  void on_take(EndpointImpl& ep, OpSlot& s);
  /// `s` is reported (posting order), status in s.done. Returns the record
  /// when the gather memory is to be compared once more when the consumer
  /// reaps the completion (a successful signalled write or send with no
  /// finding yet): it rides with that completion (CqImpl::push, on_reap).
  RecordPtr on_complete(EndpointImpl& ep, OpSlot& s);
  /// Something arrived for the endpoint (a message or a write with
  /// immediate data): incoming writes before it on the ordered connection
  /// have landed (non-coherent emulation scans the zone's regions).
  void on_incoming(EndpointImpl& ep);
  /// The endpoint is closed: writes to persistent regions it never flushed.
  void on_endpoint_close(EndpointImpl& ep);

  // Region hooks.
  void on_register(RegionImpl& r);
  void on_persist(const RegionImpl& r, std::uint64_t addr, std::uint64_t len);
  void on_close(RegionImpl& r);
  /// MemoryRegion::sync_rdma_write / sync_rdma_read (non-coherent views).
  void on_sync(RegionImpl& r, std::size_t offset, std::size_t len, bool incoming);

 private:
  Config config_;
};

/// The checker for a fabric opened with `spec` (FabricOptions::check) and the
/// environment (REMORA_CHECK, REMORA_CHECK_REPORT); null when every check is
/// off. Errors: invalid_argument for a bad `spec` (a bad environment value
/// is reported on stderr and ignored).
Result<std::shared_ptr<Checker>> make(const std::string& spec);

/// The consumer reaps the completion `r` rode with: the gather memory must
/// still be what was posted.
void on_reap(OpRecord& r);

/// One finding, as reported (tests of the report machinery use it directly).
struct Finding {
  std::string check;  ///< "reuse", "crash", "noncoherent"
  std::string kind;   ///< e.g. "changed_before_completion"
  std::string message;
  bool has_cookie = false;
  std::uint64_t cookie = 0;
  std::uint64_t endpoint = 0;  ///< Endpoint::id, 0 when none
  std::string region;          ///< "key=0x..." of the region concerned
  std::uint64_t offset = 0;    ///< range within that region
  std::uint64_t length = 0;
};
void report(Finding f);
/// Findings so far in this process.
std::size_t findings();
/// The stderr line of a finding (also used by tests).
std::string format_line(const Finding& f);

}  // namespace remora::detail::check
