// src/core/protocol/wire.hpp - every message Remora peers exchange, defined
// once: the connection Hello, the kinds carried in a message's 64-bit
// immediate data, and the 48-byte control message. Built and parsed in
// wire.cpp only; docs/design.md, "The wire protocol".
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace remora::detail {

/// Wire formats (little-endian hosts only, as libfabric's tcp provider).
namespace wire {
constexpr std::uint32_t kHelloMagic = 0x524d5231;  // "RMR1"
constexpr std::uint32_t kCtlMagic = 0x524d4331;    // "RMC1"
struct Hello {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t header_len;
  std::uint32_t max_message;
  std::uint32_t reserved;
};
static_assert(sizeof(Hello) == 16);
/// The protocol version a Hello announces. 2: receive-consuming messages
/// are acknowledged (msg_ack); a peer of another version is refused, since
/// the two would wait on each other's acknowledgements.
constexpr std::uint16_t kVersion = 2;

/// Our Hello followed by the user's private data.
std::vector<std::uint8_t> make_hello(std::uint32_t max_message, std::span<const std::uint8_t> user);
struct ParsedHello {
  Hello hello{};
  std::span<const std::uint8_t> user;  // the private data after the header
};
/// The peer's Hello at the start of connection private data, or nothing for
/// bytes that are not one (short, another magic, a header length outside
/// [16, size]). The version is the caller's to check.
std::optional<ParsedHello> parse_hello(std::span<const std::uint8_t> bytes);

// ring_write: only in a same-host message ring whose owner offered it with
// kRingTakesWrites; the message is a RingWrite and the bytes to place. It
// counts as handled (the acknowledgement completes the write) but consumes
// no receive.
//
// ring_pull: only in a same-host message ring whose owner offered it with
// kRingTakesPulls; the message is a RingPull followed by its ranges and
// segments, the second part of a split transfer the sender offers the owner
// to move (docs/design.md, "The peer moves half"). It is neither handled nor
// acknowledged: the sender waits on the RingPull's `state` in the ring.
enum Kind : std::uint8_t {
  user_msg = 1,
  user_msg_imm = 2,
  ctl_request = 3,
  ctl_reply = 4,
  write_imm = 5,
  msg_ack = 6,
  ring_write = 7,
  ring_pull = 8
};
struct RingWrite {
  std::uint64_t key;
  std::uint64_t addr;
};
static_assert(sizeof(RingWrite) == 16);
/// A ring_pull message's head, in the ring slot both processes map. `state`
/// (accessed atomically by both) is kPullPosted when sent; the owner swaps it
/// to kPullRunning before it moves anything and stores kPullDone after
/// `moved` and `err`; the sender swaps kPullPosted to kPullTakenBack when it
/// moves the part itself. Then `ranges` PullRange (the owner's memory) and
/// `segments` PullSegment (the sender's), as one process_vm_* call of the
/// owner takes them. `write`: 1 when the owner reads the sender's segments
/// into its ranges, 0 when it writes its ranges to them.
struct RingPull {
  std::uint64_t state;
  std::int64_t moved;
  std::uint32_t err;
  std::uint32_t write;
  std::uint32_t ranges;
  std::uint32_t segments;
};
static_assert(sizeof(RingPull) == 32);
struct PullRange {
  std::uint64_t key, addr, len;
};
struct PullSegment {
  std::uint64_t addr, len;
};
constexpr std::uint64_t kPullPosted = 1, kPullRunning = 2, kPullDone = 3, kPullTakenBack = 4;
/// Optionally after a RingPull's segments: the last bytes of the writes of a
/// split batch (copier.hpp, write_ranges), which the owner copies into its
/// memory after its own part, once the sender's part is done too, so that
/// they land after every byte of the batch. Then `count` PullRange (the
/// owner's ranges, each at most kPullTailBytes) and their bytes, in posting
/// order. `gate` (accessed atomically by both) is kTailsWait when sent; the
/// sender swaps it to kTailsGo when its part is done in full or to kTailsNo
/// when it is not, and the owner to kTailsSender when it stops waiting for
/// either. `placed` (0 when sent) is set by the owner: kTailsPartDone when
/// its part is done and it waits in the gate, kTailsPlaced before kPullDone
/// when it copied every one. An owner that does not know the trailer leaves
/// it alone, and the sender places the last bytes itself.
struct PullTails {
  std::uint64_t gate;
  std::uint64_t placed;
  std::uint32_t count;
  std::uint32_t bytes;
};
static_assert(sizeof(PullTails) == 24);
constexpr std::uint64_t kTailsWait = 1, kTailsGo = 2, kTailsNo = 3, kTailsSender = 4;
constexpr std::uint64_t kTailsPlaced = 1, kTailsPartDone = 2;
constexpr std::size_t kPullTailBytes = 64;
inline std::uint64_t data(Kind k, std::uint32_t imm = 0) { return (std::uint64_t{k} << 56) | imm; }
inline Kind kind_of(std::uint64_t d) { return static_cast<Kind>(d >> 56); }
// A write with immediate also carries its length in bits 32..55 (the tcp
// provider reports 0 for it); kLengthUnknown marks writes of 16 MiB or more.
constexpr std::uint64_t kLengthUnknown = 0xffffff;
inline std::uint64_t write_imm_data(std::uint32_t imm, std::uint64_t len) {
  return data(write_imm, imm) | (std::min(len, kLengthUnknown) << 32);
}
inline std::uint64_t write_imm_length(std::uint64_t d) { return (d >> 32) & kLengthUnknown; }

// Receive acknowledgement: an empty message whose data carries, in its low
// 56 bits, how many receive-consuming messages (sends, writes with
// immediate) of the connection the receiver has handled, i.e. matched with a
// posted receive (its completion queued) or held for the next one.
constexpr std::uint64_t kAckCountMask = (std::uint64_t{1} << 56) - 1;
inline std::uint64_t ack_data(std::uint64_t handled) { return data(msg_ack) | (handled & kAckCountMask); }
inline std::uint64_t ack_count(std::uint64_t d) { return d & kAckCountMask; }

// op_direct_offer (same-host direct path): key = the sender's pid (low 32
// bits) and its region table's fd number in its process (high 32), addr =
// the table's nonce, len = a hash of its boot id, value = its pid-namespace
// inode. Its token names no slot. A peer that took the offer (mapped the
// table) answers it with status 0, so the offerer knows it has a peer that
// may map its regions; a peer that does not know the op answers
// not_supported, and one that could not take it does not answer.
//
// op_direct_revoke (same-host direct path), answered with status 0 and the
// same token, the sender's count of revocations sent on this connection.
// flush_type kRevokeRegions: the sender deregistered a region the receiver
// may have mapped from its table; the receiver drops every mapping whose
// table entry changed. kRevokeConnection: the sender is closing the
// connection; the receiver lets go of the sender's table for it (the last
// connection towards that table to do so unmaps the table and every region
// mapped from it). No other field.
//
// op_ring_offer (same-host message rings), sent by a side that took the
// peer's op_direct_offer: key = its inbox's memfd number (low 32 bits) and
// its bell's eventfd number (high 32) in its process, addr = the ring's
// nonce, len = its slot count, value = its slot size. Its token names no
// slot. Answered with status 0 when the receiver mapped the ring (it may
// then place its sends there and ring the bell), not_supported otherwise.
// flush_type kRingTakesWrites: the offerer also takes ring_write messages
// (0 from an older version, which ends the connection on any message but a
// user's); kRingTakesPulls: it takes ring_pull messages.
enum CtlOp : std::uint8_t {
  op_atomic_write = 1,
  op_flush = 2,
  op_bye = 3,
  op_direct_offer = 4,
  op_direct_revoke = 5,
  op_ring_offer = 6
};
constexpr std::uint8_t kRevokeRegions = 0, kRevokeConnection = 1;
constexpr std::uint8_t kRingTakesWrites = 1, kRingTakesPulls = 2;
struct Ctl {
  std::uint32_t magic;
  std::uint8_t op;
  std::uint8_t flush_type;
  std::uint16_t status;  // Errc value in replies, 0 = success
  std::uint64_t token;
  std::uint64_t key;
  std::uint64_t addr;
  std::uint64_t len;
  std::uint64_t value;
};
static_assert(sizeof(Ctl) == 48);

/// How a control message parsed.
enum class CtlCheck : std::uint8_t {
  ok,
  malformed,     // wrong length or magic: not a control message at all
  unknown_op,    // framed correctly, an operation this version does not know
  unknown_flush  // a flush of a type this version does not know
};
/// Parse a control message (request or reply) of exactly sizeof(Ctl) bytes.
/// `out` is filled whenever the framing is right (ok, unknown_op,
/// unknown_flush), so a request can still be answered.
CtlCheck parse_ctl(std::span<const std::uint8_t> bytes, Ctl& out);
/// A control request (atomic write, flush, goodbye) ready to send.
Ctl make_ctl(CtlOp op, std::uint64_t key, std::uint64_t addr, std::uint64_t len);
}  // namespace wire

}  // namespace remora::detail
