// src/core/direct/fault_guard.hpp - copies through a mapping of a peer's
// file that survive the file being cut short under them (docs/design.md,
// "Same-host direct path", "A file cut short under a mapping").
//
// A copy through this process's mapping of a peer's region touches pages of
// the peer's file. Should the file be truncated below them (by its owner, or
// by anyone allowed to write it), the kernel raises SIGBUS in the thread
// that touches them, and its default action ends this process: a peer
// could end its initiators. So those copies (and the atomic store through a
// mapping) run guarded: a process-wide SIGBUS handler, installed on first
// use, returns a guarded thread that faults on a page past its file's end to
// the guard, which reports the copy as failed; every other SIGBUS goes where
// it went before (the handler installed before this one, else the default
// action).
#pragma once

#include <cstddef>

namespace remora::detail::direct {

/// Runs `copy(arg)` with SIGBUS from a page past the end of a mapped file
/// caught: false when one was raised (the copy stopped part way; the bytes
/// before the faulting page may have been copied). `copy` must hold no lock
/// and own no resource while it copies: it is left where it faulted.
bool copy_guarded(void (*copy)(void*), void* arg) noexcept;

/// Installs the handler, if it is not yet (copy_guarded does so on its
/// first call). False when sigaction refused it: copies are then unguarded,
/// as before.
bool guard_faults() noexcept;

/// Whether the handler is installed in this process.
bool fault_guard_installed() noexcept;

/// Copies that faulted in guarded copies since the process started.
std::size_t faults_caught() noexcept;

}  // namespace remora::detail::direct
