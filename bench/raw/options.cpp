#include "options.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <optional>
#include <sstream>

namespace rbench {
namespace {

constexpr std::size_t kMaxSize = std::size_t{1} << 30;  // 1 GiB
constexpr unsigned kMaxQd = 4096;

struct OpName {
    std::string_view name;
    Op op;
};
constexpr std::array<OpName, 6> kOps{{
    {"write", Op::write},
    {"read", Op::read},
    {"write_flush_visibility", Op::write_flush_visibility},
    {"write_flush_persistent", Op::write_flush_persistent},
    {"atomic_write", Op::atomic_write},
    {"send", Op::send},
}};

std::uint64_t parse_u64(std::string_view opt, std::string_view text) {
    std::uint64_t v = 0;
    const char* end = text.data() + text.size();
    auto [p, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc{} || p != end)
        throw UsageError(std::string(opt) + ": not a number: '" + std::string(text) + "'");
    return v;
}

// A size: digits with an optional binary suffix (k, m, g).
std::size_t parse_size(std::string_view text) {
    std::uint64_t mult = 1;
    if (!text.empty()) {
        switch (text.back()) {
            case 'k': case 'K': mult = 1ull << 10; break;
            case 'm': case 'M': mult = 1ull << 20; break;
            case 'g': case 'G': mult = 1ull << 30; break;
            default: break;
        }
        if (mult != 1) text.remove_suffix(1);
    }
    const std::uint64_t v = parse_u64("--size", text);
    if (v == 0 || v > kMaxSize / mult)
        throw UsageError("--size: each size must be between 1 and " + std::to_string(kMaxSize) +
                         " bytes");
    return static_cast<std::size_t>(v * mult);
}

std::vector<std::size_t> parse_sizes(std::string_view list) {
    std::vector<std::size_t> out;
    while (true) {
        const auto comma = list.find(',');
        out.push_back(parse_size(list.substr(0, comma)));
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
    return out;
}

// ---- the option table -----------------------------------------------------

using Apply = void (*)(Config&, std::string_view);

struct OptionSpec {
    std::string_view name;     // long name, with the leading "--"
    std::string_view metavar;  // empty for a flag
    std::string_view help;
    Apply apply;
};

constexpr std::array<OptionSpec, 13> kOptions{{
    {"--server", "", "run the target: serve one connection until it closes",
     [](Config& c, std::string_view) {
         if (c.role == Role::client) throw UsageError("--server and --client are exclusive");
         c.role = Role::server;
     }},
    {"--client", "HOST", "run the initiator against the server at HOST",
     [](Config& c, std::string_view v) {
         if (c.role == Role::server) throw UsageError("--server and --client are exclusive");
         if (v.empty()) throw UsageError("--client: empty host");
         c.role = Role::client;
         c.host = v;
     }},
    {"--port", "P", "TCP port of the server (both sides)",
     [](Config& c, std::string_view v) {
         const auto p = parse_u64("--port", v);
         if (p == 0 || p > 65535) throw UsageError("--port: must be 1..65535");
         c.port = std::to_string(p);
     }},
    {"--address", "A", "server: address to listen on (default 0.0.0.0)",
     [](Config& c, std::string_view v) {
         if (v.empty()) throw UsageError("--address: empty address");
         c.address = v;
     }},
    {"--provider", "NAME", "libfabric provider (default tcp)",
     [](Config& c, std::string_view v) {
         if (v.empty()) throw UsageError("--provider: empty name");
         c.provider = v;
     }},
    {"--busy-poll", "",
     "server: busy-poll fi_cq_read, not asleep in fi_cq_sread\n"
     "                              (the client always busy-polls)",
     [](Config& c, std::string_view) { c.busy_poll = true; }},
    {"--op", "OP",
     "write | read | send | write_flush_visibility |\n"
     "                              write_flush_persistent | atomic_write",
     [](Config& c, std::string_view v) {
         const auto it = std::find_if(kOps.begin(), kOps.end(),
                                      [&](const OpName& o) { return o.name == v; });
         if (it == kOps.end()) throw UsageError("--op: unknown operation '" + std::string(v) + "'");
         c.op = it->op;
         c.op_set = true;
     }},
    {"--size", "BYTES[,BYTES...]", "message sizes, run in sequence on one connection",
     [](Config& c, std::string_view v) { c.sizes = parse_sizes(v); }},
    {"--qd", "N", "operations outstanding (default 16; latency ops force 1)",
     [](Config& c, std::string_view v) {
         const auto q = parse_u64("--qd", v);
         if (q == 0 || q > kMaxQd)
             throw UsageError("--qd: must be 1.." + std::to_string(kMaxQd));
         c.qd = static_cast<unsigned>(q);
         c.qd_set = true;
     }},
    {"--iters", "N", "measured operations per size (default: 1000 for\n"
     "                              latency ops, about 256 MiB for the others)",
     [](Config& c, std::string_view v) {
         const auto n = parse_u64("--iters", v);
         if (n == 0 || n > 100'000'000) throw UsageError("--iters: must be 1..100000000");
         c.iters = n;
     }},
    {"--json", "", "print one JSON object per size instead of the table",
     [](Config& c, std::string_view) { c.json = true; }},
    {"--completion", "default|delivery",
     "write/send completion: plain post, or\n"
     "                              FI_DELIVERY_COMPLETE (the default)",
     [](Config& c, std::string_view v) {
         if (v == "default") c.completion = Completion::standard;
         else if (v == "delivery") c.completion = Completion::delivery;
         else throw UsageError("--completion: must be 'default' or 'delivery'");
     }},
    {"--help", "", "show this help",
     [](Config& c, std::string_view) { c.help = true; }},
}};

const OptionSpec* find_option(std::string_view name) {
    if (name == "-h") name = "--help";
    for (const auto& o : kOptions)
        if (o.name == name) return &o;
    return nullptr;
}

void validate(Config& c) {
    if (c.help) return;
    if (c.role == Role::none) throw UsageError("one of --server or --client HOST is required");
    if (c.port.empty()) throw UsageError("--port is required");
    if (c.role == Role::server) {
        if (c.op_set || !c.sizes.empty() || c.qd_set || c.iters != 0 || c.json)
            throw UsageError("--op, --size, --qd, --iters and --json are client options");
        return;
    }
    if (!c.op_set) throw UsageError("--op is required with --client");
    if (c.sizes.empty()) throw UsageError("--size is required with --client");
    if (c.op == Op::atomic_write &&
        std::any_of(c.sizes.begin(), c.sizes.end(), [](std::size_t s) { return s != 8; }))
        throw UsageError("atomic_write is an 8-byte operation: use --size 8");
    if (op_is_latency(c.op)) c.qd = 1;
}

}  // namespace

Config parse_command_line(int argc, const char* const* argv) {
    Config c;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
        std::optional<std::string_view> inline_value;
        if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
            inline_value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
        }
        const OptionSpec* opt = find_option(arg);
        if (opt == nullptr) throw UsageError("unknown option '" + std::string(arg) + "'");
        std::string_view value;
        if (!opt->metavar.empty()) {
            if (inline_value) {
                value = *inline_value;
            } else {
                if (i + 1 >= argc) throw UsageError(std::string(arg) + " needs a value");
                value = argv[++i];
            }
        } else if (inline_value) {
            throw UsageError(std::string(arg) + " takes no value");
        }
        opt->apply(c, value);
    }
    validate(c);
    return c;
}

std::string usage_text(std::string_view program) {
    std::ostringstream out;
    out << "usage:\n"
        << "  " << program << " --server --port P [--provider NAME] [--address A] [--busy-poll]\n"
        << "  " << program
        << " --client HOST --port P --op OP --size BYTES[,BYTES...] [--qd N] [--iters N]\n"
        << "  " << std::string(program.size(), ' ')
        << " [--json] [--provider NAME] [--busy-poll] [--completion default|delivery]\n\n"
        << "Raw libfabric baseline for remora-perf (engine \"raw-libfabric\").\n\noptions:\n";
    for (const auto& o : kOptions) {
        std::size_t width = o.name.size();
        out << "  " << o.name;
        if (!o.metavar.empty()) {
            out << ' ' << o.metavar;
            width += 1 + o.metavar.size();
        }
        if (width < 28) out << std::string(28 - width, ' ');
        else out << "\n" << std::string(30, ' ');
        out << o.help << "\n";
    }
    return out.str();
}

std::string_view op_name(Op op) {
    for (const auto& o : kOps)
        if (o.op == op) return o.name;
    return "?";
}

std::string_view completion_name(Completion c) {
    return c == Completion::delivery ? "delivery" : "default";
}

bool op_is_latency(Op op) {
    return op == Op::write_flush_visibility || op == Op::write_flush_persistent ||
           op == Op::atomic_write;
}

std::uint64_t default_iters(Op op, std::size_t size) {
    if (op_is_latency(op)) return 1000;
    // Bandwidth ops: move about 256 MiB per size, at least 1000 and at most
    // 100000 operations.
    const std::uint64_t by_volume = (std::uint64_t{256} << 20) / size;
    return std::clamp<std::uint64_t>(by_volume, 1000, 100'000);
}

}  // namespace rbench
