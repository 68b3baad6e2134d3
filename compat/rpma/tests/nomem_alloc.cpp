// nomem_alloc.cpp - an out-of-memory switch for test_nomem.c.
//
// The librpma layer allocates its handles with `new (std::nothrow) T`. This
// file replaces the nothrow forms of the global operator new in the test
// executable; exported dynamically, the definitions here are the ones
// librpma.so.0 binds to (the executable comes first in the global lookup
// scope). Armed, they refuse allocations of the arming thread only (the
// Remora agents may allocate on their own threads meanwhile); otherwise they
// forward to the throwing operator new, so that sanitizers see ordinary
// new/delete pairs.
#include <cstddef>
#include <new>

#include "nomem_alloc.h"

namespace {
thread_local int g_skip = 0;     // nothrow allocations still to let through
thread_local int g_fail = 0;     // then: how many to refuse
thread_local int g_refused = 0;  // refused since the last arming
thread_local int g_seen = 0;     // nothrow allocations seen since the last arming

void* nothrow_alloc(std::size_t n, bool array) noexcept {
  ++g_seen;
  if (g_skip > 0) {
    --g_skip;
  } else if (g_fail > 0) {
    --g_fail;
    ++g_refused;
    return nullptr;
  }
  try {
    return array ? ::operator new[](n) : ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
}  // namespace

extern "C" void nomem_arm(int skip, int fail) {
  g_skip = skip;
  g_fail = fail;
  g_refused = 0;
  g_seen = 0;
}

extern "C" int nomem_refused(void) { return g_refused; }

extern "C" int nomem_seen(void) { return g_seen; }

void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return nothrow_alloc(n, false); }

void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return nothrow_alloc(n, true); }
