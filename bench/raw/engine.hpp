// The two roles of remora-bench-raw, written directly against libfabric.
// Both throw BenchError on failure.
#pragma once

#include "options.hpp"

namespace rbench {

// Listens, accepts one connection, keeps it progressing (asleep in
// fi_cq_sread, or busy-polling fi_cq_read with --busy-poll) until the client
// disconnects.
void run_server(const Config& cfg);

// Connects, runs cfg.op for every size in cfg.sizes, prints the results on
// stdout, disconnects.
void run_client(const Config& cfg);

}  // namespace rbench
