// remora-perf: perftest-style benchmark of Remora (the command line; the
// engine is perf_engine.cpp). Same command line and output as the raw
// libfabric baseline bench/raw_fabric_perf.cpp (remora-bench-raw): the
// options both have, the statistics and the output are shared with it
// (perf_cli.hpp, perf_report.hpp, watchdog.hpp).
//
//   remora-perf --server --port P [--provider NAME] [--address A] [--busy-poll] [--size-max BYTES]
//   remora-perf --client HOST --port P --op OP (--size BYTES[,BYTES...] | -a [--all-max BYTES])
//               [--qd N] [--iters N | -D SECONDS] [--connections N] [--bidirectional]
//               [--report_gbits] [--json] [--plot FILE] [--provider NAME] [--address A] [--busy-poll] [--wait]
//   remora-perf --plot-json FILE[=LABEL][,FILE[=LABEL]...] --plot OUT.svg [--report_gbits]
//
// Exit status: 0 success, 1 run-time error, 2 bad command line, 3 watchdog.
#include <array>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "cli.hpp"
#include "perf_cli.hpp"
#include "perf_engine.hpp"
#include "perf_plot.hpp"
#include "watchdog.hpp"

namespace {

using remora::perf::Config;
using remora::perf::Role;
using remora::tools::Option;
using remora::tools::UsageError;
namespace opt = remora::perf::options;

constexpr std::string_view kProgram = "remora-perf";

// ---- the option table ---------------------------------------------------------

constexpr std::array<Option<Config>, 26> kOptions{{
    opt::server<Config>(),
    opt::client<Config>(),
    opt::port<Config, true>("TCP port of the server (server: 0 picks a free one)"),
    opt::address<Config>("local address: the server listens on it (default 0.0.0.0);\n"
                         "the client binds to it (default: the one routing to HOST)"),
    opt::provider<Config>(),
    opt::busy_poll<Config>("target agents spin instead of sleeping (FabricOptions::\n"
                           "busy_poll); the client busy-polls its queue unless --wait"),
    opt::wait<Config>("client: sleep on the completion queue's fd (poll(2))\n"
                      "whenever no completion is ready (event-driven)"),
    {"--shared-target", "",
     "server: the target buffer is memory the zone allocates\n"
     "(ProtectionZone::allocate, a memfd): same-host clients map\n"
     "it and copy into it directly (unless REMORA_SAMEHOST=0)",
     [](Config& c, std::string_view) { c.shared_target = true; }},
    {"--target-span", "BYTES",
     "server: the target buffer is this long when the client's\n"
     "largest size is shorter; the client's writes and reads then\n"
     "walk it, each at the offset after the last one's",
     [](Config& c, std::string_view v) {
       c.target_span = remora::tools::parse_size("--target-span", v, remora::perf::kMaxSize);
     }},
    {"--size-max", "BYTES", "server: largest buffer a client may ask for (default 1g)",
     [](Config& c, std::string_view v) {
       c.size_max = remora::tools::parse_size("--size-max", v, remora::perf::kMaxSize);
       c.size_max_set = true;
     }},
    opt::op<Config>(),
    opt::sizes<Config>("message sizes (suffix k, m, g), run in sequence\n"
                       "on the same connections"),
    opt::all<Config>(),
    opt::all_max<Config>(),
    opt::qd<Config>(),
    opt::iters<Config>("measured operations per size (default: calibrated to\n"
                       "1.5-2 s, at least 1000 for latency ops)"),
    opt::duration<Config>(),
    {"--connections", "N",
     "open N connections to the server (default 1) and spread\n"
     "the operations over them, --qd outstanding on each;\n"
     "reports the set-up time per connection and the total",
     [](Config& c, std::string_view v) {
       const auto n = remora::tools::parse_u64("--connections", v);
       if (n == 0 || n > Config::kMaxConnections)
         throw UsageError("--connections: must be 1.." + std::to_string(Config::kMaxConnections));
       c.connections = static_cast<unsigned>(n);
       c.connections_set = true;
     }},
    {"--bidirectional", "",
     "write, read, send: the server runs the same operation\n"
     "towards the client at the same time (a control connection\n"
     "starts each run); bandwidth and Mops are the sum of both\n"
     "directions, latency is the client's",
     [](Config& c, std::string_view) { c.bidirectional = true; }},
    opt::report_gbits<Config>(),
    opt::json<Config>(),
    {"--plot", "FILE",
     "client: also draw the results (bandwidth and p50 latency\n"
     "against size) as an SVG picture in FILE; with --plot-json:\n"
     "the picture to write",
     [](Config& c, std::string_view v) {
       if (v.empty()) throw UsageError("--plot: empty file name");
       c.plot = v;
     }},
    {"--plot-json", "FILE[=LABEL],...",
     "run nothing: draw the JSON lines of these files (from --json\n"
     "of remora-perf or remora-bench-raw, e.g. as bench/compare.sh\n"
     "keeps them) into --plot, one series per file, named LABEL\n"
     "or after its engine, op and completion",
     [](Config& c, std::string_view v) {
       while (true) {
         const auto comma = v.find(',');
         const std::string_view item = v.substr(0, comma);
         if (item.empty() || item.front() == '=') throw UsageError("--plot-json: empty file name");
         c.plot_json.emplace_back(item);
         if (comma == std::string_view::npos) break;
         v.remove_prefix(comma + 1);
       }
     }},
    {"--plot-title", "TEXT", "title of the --plot picture", [](Config& c, std::string_view v) { c.plot_title = v; }},
    {"--completion", "delivery",
     "accepted for remora-bench-raw compatibility: Remora writes\n"
     "and sends always complete at delivery",
     [](Config&, std::string_view v) {
       if (v == "delivery") return;
       if (v == "default")
         throw UsageError(
             "--completion default: Remora has no such mode (its writes and sends always complete "
             "at delivery); only remora-bench-raw has it");
       throw UsageError("--completion: must be 'default' or 'delivery'");
     }},
    opt::help<Config>(),
}};

std::string usage() {
  std::string out;
  out += "usage:\n";
  out += "  remora-perf --server --port P [--provider NAME] [--address A] [--busy-poll]\n";
  out += "              [--size-max BYTES]\n";
  out += "  remora-perf --client HOST --port P --op OP (--size BYTES[,BYTES...] | -a [--all-max BYTES])\n";
  out += "              [--qd N] [--iters N | -D SECONDS] [--connections N] [--bidirectional]\n";
  out += "              [--report_gbits] [--json] [--plot FILE [--plot-title TEXT]]\n";
  out += "              [--provider NAME] [--address A] [--busy-poll] [--wait]\n";
  out += "  remora-perf --plot-json FILE[=LABEL][,FILE[=LABEL]...] --plot OUT.svg\n";
  out += "              [--plot-title TEXT] [--report_gbits]\n\n";
  out +=
      "perftest-style benchmark of Remora (engine \"remora\"); same command line and output as\n"
      "remora-bench-raw (which lacks --connections, --bidirectional and the --plot options).\n"
      "The server registers a buffer (and, for write_flush_persistent, a file-backed\n"
      "persistent region under $TMPDIR or /tmp) and leaves everything but receives to its\n"
      "target agent; it serves one client (all its connections) and exits when it leaves.\n"
      "Latencies are per operation, post to completion, in microseconds. write_flush_*: a\n"
      "write of SIZE then a flush of the same range, timed to the flush's completion.\n"
      "atomic_write: 8-byte atomic writes (--size 8). Runs of more than 2 s print a\n"
      "progress line on stderr every second.\n\n"
      "JSON (--json): one object per size and line: the results (gbps in GB/s, gbits in\n"
      "Gb/s, mops, lat_p50_us, lat_p99_us, lat_p999_us, seconds, cpu_us_per_op: this\n"
      "process's CPU over the measured operations, steal_pct: the host's CPU time a\n"
      "hypervisor gave to other guests meanwhile, in percent, set-up times) and\n"
      "\"settings\": every effective setting (provider, addresses, port, op, sizes, qd,\n"
      "iterations or duration, target mode, completion, connections, bidirectional),\n"
      "the Remora and libfabric versions, the host name and its CPU count.\n\n"
      "environment: REMORA_PERF_WATCHDOG_S (or REMORA_BENCH_WATCHDOG_S): give up after that\n"
      "many seconds (default 900).\n\noptions:\n";
  out += remora::tools::options_help<Config>(kOptions);
  return out;
}

void validate(Config& c) {
  if (!c.plot_json.empty()) {
    if (c.role != Role::none) throw UsageError("--plot-json runs nothing: no --server or --client");
    if (c.plot.empty()) throw UsageError("--plot-json needs --plot FILE (the picture to write)");
    return;
  }
  const bool server = c.role == Role::server;
  if (server && (c.connections_set || c.bidirectional || !c.plot.empty() || !c.plot_title.empty()))
    throw UsageError("--connections, --bidirectional, --plot and --plot-title are client options");
  if (!remora::perf::validate_role(c)) return;
  if (c.size_max_set) throw UsageError("--size-max is a server option");
  if (c.shared_target) throw UsageError("--shared-target is a server option");
  if (c.target_span != 0) throw UsageError("--target-span is a server option");
  if (c.port == 0) throw UsageError("--port: the client needs the server's port (1..65535)");
  remora::perf::validate_client(c);
  using remora::perf::Op;
  if (c.bidirectional && c.op != Op::write && c.op != Op::read && c.op != Op::send)
    throw UsageError("--bidirectional: only for --op write, read or send");
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  try {
    remora::tools::parse_options<Config>(kOptions, argc, argv, cfg);
    validate(cfg);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", kProgram.data(), e.what());
    return 2;
  }
  if (cfg.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    remora::tools::Watchdog watchdog(
        remora::tools::watchdog_limit({"REMORA_PERF_WATCHDOG_S", "REMORA_BENCH_WATCHDOG_S"}), kProgram,
        remora::perf::emergency_cleanup);
    if (!cfg.plot_json.empty())
      remora::perf::plot_json_files(cfg.plot_json, cfg.plot, cfg.report_gbits, cfg.plot_title);
    else if (cfg.role == Role::server)
      remora::perf::run_server(cfg);
    else
      remora::perf::run_client(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram.data(), e.what());
    return 1;
  }
  return 0;
}
