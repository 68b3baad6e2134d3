// Copies that survive a mapped file cut short under them (fault_guard.hpp).
#include "core/direct/fault_guard.hpp"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <mutex>

namespace remora::detail::direct {
namespace {

// The guard of the copy this thread is in, if any. Initial-exec: the signal
// handler reads it, where a thread's first access to a shared library's
// dynamic TLS could allocate.
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* guarded = nullptr;

// What SIGBUS did before this handler: where a fault outside a guarded copy
// goes. Written once, before the handler is installed.
struct sigaction before {};
std::atomic<int> installed{0};  // 0: not yet; 1: installed; -1: sigaction refused
std::mutex install_mu;
std::atomic<std::size_t> caught{0};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  // A fault (si_code > 0: raised by the kernel for an access, not sent)
  // inside a guarded copy: back to its guard, which reports the copy as
  // failed. SA_NODEFER left SIGBUS unblocked, so nothing is to restore.
  if (sigjmp_buf* env = guarded; env != nullptr && info != nullptr && info->si_code > 0) {
    guarded = nullptr;
    siglongjmp(*env, 1);
  }
  if ((before.sa_flags & SA_SIGINFO) != 0) {
    if (before.sa_sigaction != nullptr) before.sa_sigaction(sig, info, context);
    return;
  }
  if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
    before.sa_handler(sig);
    return;
  }
  // The default action, as without this handler: restored, then the
  // faulting access runs again and ends the process; a SIGBUS sent by a
  // process (kill, raise) is sent again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)sigaction(SIGBUS, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) (void)raise(sig);
}

}  // namespace

bool guard_faults() noexcept {
  if (const int state = installed.load(std::memory_order_acquire); state != 0) return state > 0;
  std::lock_guard<std::mutex> lock(install_mu);
  if (const int state = installed.load(std::memory_order_relaxed); state != 0) return state > 0;
  // The action in place first, then this one: a SIGBUS between the two
  // calls finds `before` complete.
  bool ok = sigaction(SIGBUS, nullptr, &before) == 0;
  if (ok) {
    struct sigaction mine {};
    mine.sa_sigaction = on_sigbus;
    mine.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
    sigemptyset(&mine.sa_mask);
    ok = sigaction(SIGBUS, &mine, nullptr) == 0;
  }
  installed.store(ok ? 1 : -1, std::memory_order_release);
  return ok;
}

bool copy_guarded(void (*copy)(void*), void* arg) noexcept {
  if (installed.load(std::memory_order_acquire) == 0) (void)guard_faults();
  sigjmp_buf env;
  // The mask is not saved: the handler runs with SIGBUS unblocked
  // (SA_NODEFER), so the jump back leaves it as it was.
  if (sigsetjmp(env, 0) != 0) {
    caught.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  guarded = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  copy(arg);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  guarded = nullptr;
  return true;
}

bool fault_guard_installed() noexcept { return installed.load(std::memory_order_acquire) > 0; }

std::size_t faults_caught() noexcept { return caught.load(std::memory_order_relaxed); }

}  // namespace remora::detail::direct
