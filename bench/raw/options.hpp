// Command line of remora-bench-raw: the same options as remora-perf.
// This header and options.cpp know nothing about libfabric; the engine
// (client.cpp, server.cpp) receives a validated Config.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace rbench {

enum class Role { none, server, client };

enum class Op {
    write,
    read,
    write_flush_visibility,
    write_flush_persistent,
    atomic_write,
    send,
};

// --completion: what a write (or send) completion must mean.
enum class Completion {
    delivery,  // FI_DELIVERY_COMPLETE: the data reached the target memory
    standard,  // "default": plain post, completion = the data left the buffer
};

struct Config {
    Role role = Role::none;
    std::string host;              // client: server to connect to
    std::string address = "0.0.0.0";  // server: address to listen on
    std::string port;              // both
    std::string provider = "tcp";  // libfabric provider name
    bool busy_poll = false;        // server: busy-poll target; client: accepted
    Op op = Op::write;
    bool op_set = false;
    std::vector<std::size_t> sizes;
    unsigned qd = 16;
    bool qd_set = false;
    std::uint64_t iters = 0;  // 0 = default for the op and size
    bool json = false;
    Completion completion = Completion::delivery;
    bool help = false;
};

// A bad command line: main prints the message and the usage, exits 2.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Parses argv into a Config and validates it. Throws UsageError.
Config parse_command_line(int argc, const char* const* argv);

// The usage text, generated from the option table.
std::string usage_text(std::string_view program);

std::string_view op_name(Op op);
std::string_view completion_name(Completion c);

// Operations measured one at a time (latency); they force qd to 1.
bool op_is_latency(Op op);

// Default iteration count when --iters is not given.
std::uint64_t default_iters(Op op, std::size_t size);

}  // namespace rbench
