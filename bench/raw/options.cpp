#include "options.hpp"

#include <algorithm>
#include <array>

#include "cli.hpp"

namespace rbench {
namespace {

using remora::tools::Option;
namespace opt = remora::perf::options;

constexpr std::array<Option<Config>, 18> kOptions{{
    opt::server<Config>(),
    opt::client<Config>(),
    opt::port<Config, false>("TCP port of the server (both sides)"),
    opt::address<Config>("server: address to listen on (default 0.0.0.0)"),
    opt::provider<Config>(),
    opt::busy_poll<Config>("server: busy-poll fi_cq_read, not asleep in fi_cq_sread\n"
                           "(the client busy-polls unless --wait)"),
    opt::wait<Config>("client: sleep in fi_cq_sread on an FI_WAIT_FD queue\n"
                      "whenever no completion is ready (event-driven)"),
    opt::op<Config>(),
    opt::sizes<Config>("message sizes, run in sequence on one connection"),
    opt::all<Config>(),
    opt::all_max<Config>(),
    opt::qd<Config>(),
    opt::iters<Config>("measured operations per size (default: 1000 for\n"
                       "latency ops, about 256 MiB for the others)"),
    opt::duration<Config>(),
    opt::report_gbits<Config>(),
    opt::json<Config>(),
    {"--completion", "default|delivery",
     "write/send completion: plain post, or\n"
     "FI_DELIVERY_COMPLETE (the default)",
     [](Config& c, std::string_view v) {
       if (v == "default")
         c.completion = Completion::standard;
       else if (v == "delivery")
         c.completion = Completion::delivery;
       else
         throw UsageError("--completion: must be 'default' or 'delivery'");
     }},
    opt::help<Config>(),
}};

}  // namespace

Config parse_command_line(int argc, const char* const* argv) {
  Config c;
  remora::tools::parse_options<Config>(kOptions, argc, argv, c);
  if (remora::perf::validate_role(c)) remora::perf::validate_client(c);
  return c;
}

std::string usage_text(std::string_view program) {
  const std::string indent(program.size(), ' ');
  std::string out = "usage:\n";
  out.append("  ").append(program).append(" --server --port P [--provider NAME] [--address A] [--busy-poll]\n");
  out.append("  ").append(program).append(
      " --client HOST --port P --op OP (--size BYTES[,BYTES...] | -a [--all-max BYTES])\n");
  out.append("  ").append(indent).append(" [--qd N] [--iters N | -D SECONDS] [--report_gbits] [--json]\n");
  out.append("  ").append(indent).append(
      " [--provider NAME] [--busy-poll] [--wait] [--completion default|delivery]\n\n");
  out +=
      "Raw libfabric baseline for remora-perf (engine \"raw-libfabric\"): the same command line,\n"
      "table and JSON (results and \"settings\"), one connection, no --bidirectional.\n\n"
      "options:\n";
  out += remora::tools::options_help<Config>(kOptions);
  return out;
}

std::string_view completion_name(const Config& cfg) {
  return remora::perf::completion_name(cfg.op, cfg.completion == Completion::standard);
}

std::uint64_t default_iters(Op op, std::size_t size) {
  if (op_is_latency(op)) return 1000;
  // Bandwidth ops: move about 256 MiB per size, at least 1000 and at most
  // 100000 operations.
  const std::uint64_t by_volume = (std::uint64_t{256} << 20) / size;
  return std::clamp<std::uint64_t>(by_volume, 1000, 100'000);
}

}  // namespace rbench
