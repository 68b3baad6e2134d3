// remora-info: which libfabric providers and interfaces Remora can use on
// this machine, and what each of them supports.
//
//   remora-info [--provider NAME] [--json] [--all] [--check] [--help]
//
// Exit status: 0 when at least one usable provider/interface was found,
// 1 when none was (or enumeration failed), 2 on a bad command line.
// --check prints a diagnosis instead of the table: what works, what is
// missing and the command that fixes it.
#include <remora/remora.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"

namespace {

using remora::tools::Option;
using remora::tools::UsageError;

constexpr std::string_view kProgram = "remora-info";

// ---- command line -----------------------------------------------------------

struct Options {
  std::string provider;  // empty: every provider
  bool json = false;
  bool all = false;
  bool check = false;
  bool help = false;
};

constexpr std::array<Option<Options>, 5> kOptions{{
    {"--provider", "NAME", "only this libfabric provider (tcp, verbs, ...)",
     [](Options& o, std::string_view v) {
       if (v.empty()) throw UsageError("--provider: empty name");
       o.provider = v;
     }},
    {"--json", "", "print a JSON array instead of the table", [](Options& o, std::string_view) { o.json = true; }},
    {"--all", "",
     "also list the entries Remora cannot open (e.g. IPv6-only\n"
     "interfaces), with the reason",
     [](Options& o, std::string_view) { o.all = true; }},
    {"--check", "",
     "diagnose instead of listing: what works, what is missing\n"
     "(provider, interfaces, limits) and how to fix it",
     [](Options& o, std::string_view) { o.check = true; }},
    {"--help", "", "show this help", [](Options& o, std::string_view) { o.help = true; }},
}};

std::string usage() {
  std::string out = "usage: " + std::string(kProgram) + " [--provider NAME] [--json] [--all] [--check]\n\n";
  out +=
      "Lists the libfabric provider/interface pairs Remora can use here (FI_EP_MSG\n"
      "with RMA) and what each supports. Every usable entry is opened once to check it.\n\n"
      "options:\n";
  out += remora::tools::options_help<Options>(kOptions);
  return out;
}

// ---- the engine: enumerate and check ------------------------------------------

struct Entry {
  remora::FabricInfo info;
  bool usable = false;
  std::string reason;  // why not, when !usable
};

// Features Remora itself provides on every usable entry, whatever the
// provider has natively: both go through the target agent's control protocol.
struct RemoraFeatures {
  static constexpr bool atomic_write = true;
  static constexpr bool flush_visibility = true;
  static constexpr bool flush_persistent = true;  // to regions declared persistent
  static constexpr std::string_view via = "target_agent";
};

std::vector<Entry> collect(const std::string& provider) {
  auto list = remora::list_fabrics(provider);
  if (!list) throw std::runtime_error("enumerating libfabric providers failed: " + list.error().message());
  std::vector<Entry> out;
  for (auto& info : *list) {
    Entry e;
    e.info = std::move(info);
    if (e.info.address.empty()) {
      e.reason = "no IPv4 address (Remora binds interfaces by IPv4 address)";
    } else {
      remora::FabricOptions fo;
      fo.provider = e.info.provider;
      fo.address = e.info.address;
      auto fabric = remora::Fabric::open(fo);
      if (fabric) {
        e.usable = true;
      } else {
        e.reason = "Fabric::open failed: " + fabric.error().message();
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// ---- rendering ----------------------------------------------------------------

std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string human_bytes(std::size_t n) {
  if (n == std::numeric_limits<std::size_t>::max() || n >= (std::size_t{1} << 62)) return "unlimited";
  static constexpr std::array<const char*, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  std::size_t v = n;
  while (unit + 1 < kUnits.size() && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++unit;
  }
  return std::to_string(v) + (unit == 0 ? "" : std::string(" ") + kUnits[unit]);
}

std::string render_table(const std::vector<Entry>& entries, bool all) {
  const std::vector<std::string> head = {"provider",    "fabric",        "interface", "address",
                                         "segs",        "max msg",       "inject",    "native atomics",
                                         "virt addr",   "requires sync", "odp",       "remora atomic write",
                                         "remora flush"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : entries) {
    if (!e.usable) continue;
    const auto& i = e.info;
    rows.push_back({i.provider, i.fabric_name, i.domain_name, i.address, std::to_string(i.max_segments),
                    human_bytes(i.max_message), human_bytes(i.inject_size), yes_no(i.native_atomics),
                    yes_no(i.virtual_addressing), yes_no(i.requires_sync), yes_no(i.odp), "yes (agent)",
                    "vis+pers (agent)"});
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (std::size_t c = 0; c < r.size(); ++c) {
      s += r[c];
      if (c + 1 < r.size()) s += std::string(width[c] - r[c].size() + 2, ' ');
    }
    return s + "\n";
  };
  std::string out = line(head);
  for (const auto& r : rows) out += line(r);
  out +=
      "\nsegs: gather/scatter entries per operation; max msg: largest message; inject: largest\n"
      "inline send. native atomics: the provider's own FI_ATOMIC. requires sync: memory is not\n"
      "cache coherent (dat_lmr_sync_* needed). odp: registered memory is never pinned.\n"
      "remora atomic write / remora flush: always available through Remora's target agent,\n"
      "whatever the provider offers: 8-byte atomic write, and flush to visibility and to\n"
      "persistence (persistence: regions made with ProtectionZone::map_file or registered\n"
      "as persistent).\n";
  const auto unusable =
      static_cast<std::size_t>(std::count_if(entries.begin(), entries.end(), [](const Entry& e) { return !e.usable; }));
  if (unusable > 0 && !all) {
    out += "\n" + std::to_string(unusable) + " more entr" + (unusable == 1 ? "y" : "ies") +
           " Remora cannot use (--all lists them with the reason).\n";
  } else if (unusable > 0) {
    out += "\nnot usable by Remora:\n";
    for (const auto& e : entries)
      if (!e.usable)
        out += "  " + e.info.provider + " " + e.info.domain_name + " (" + e.info.fabric_name + "): " + e.reason + "\n";
  }
  return out;
}

std::string render_json(const std::vector<Entry>& entries, bool all) {
  using remora::tools::json_escape;
  std::string out = "[";
  bool first = true;
  for (const auto& e : entries) {
    if (!e.usable && !all) continue;
    const auto& i = e.info;
    out += first ? "\n" : ",\n";
    first = false;
    out += "  {\"provider\":\"" + json_escape(i.provider) + "\",\"fabric\":\"" + json_escape(i.fabric_name) +
           "\",\"domain\":\"" + json_escape(i.domain_name) + "\",\"address\":\"" + json_escape(i.address) +
           "\",\"max_segments\":" + std::to_string(i.max_segments) +
           ",\"max_message\":" + std::to_string(i.max_message) + ",\"inject_size\":" + std::to_string(i.inject_size) +
           ",\"native_atomics\":" + (i.native_atomics ? "true" : "false") +
           ",\"virtual_addressing\":" + (i.virtual_addressing ? "true" : "false") +
           ",\"requires_sync\":" + (i.requires_sync ? "true" : "false") + ",\"odp\":" + (i.odp ? "true" : "false") +
           ",\"usable\":" + (e.usable ? "true" : "false");
    if (!e.usable) out += ",\"reason\":\"" + json_escape(e.reason) + "\"";
    if (e.usable) {
      out += ",\"remora\":{\"atomic_write\":" + std::string(RemoraFeatures::atomic_write ? "true" : "false") +
             ",\"flush_visibility\":" + (RemoraFeatures::flush_visibility ? "true" : "false") +
             ",\"flush_persistent\":" + (RemoraFeatures::flush_persistent ? "true" : "false") + ",\"via\":\"" +
             std::string(RemoraFeatures::via) + "\"}";
    }
    out += "}";
  }
  out += first ? "]\n" : "\n]\n";
  return out;
}

// ---- --check: a diagnosis with fixes -------------------------------------------

// The uDAPL face's IA name for a tcp interface (compat/dat names them
// ofi-tcp-<interface>; loopback is ofi-tcp-lo).
std::string dat_ia_name(const remora::FabricInfo& i) { return "ofi-" + i.provider + "-" + i.domain_name; }

struct Finding {
  char level;  // 'o' ok, 'w' warning, 'x' error
  std::string what, fix;
};

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// Returns the process exit status: 0 when Remora can run here (warnings
// allowed), 1 when nothing usable was found.
int check(const std::string& provider) {
  std::vector<Finding> out;
  const char* env_prov = std::getenv("FI_PROVIDER");
  std::vector<Entry> entries;
  try {
    entries = collect(provider);
  } catch (const std::exception& e) {
    out.push_back({'x', e.what(), "install libfabric (apt-get install libfabric1) and run again"});
  }
  std::size_t usable = 0, usable_tcp = 0;
  bool loopback = false, other_iface = false;
  for (const auto& e : entries) {
    if (!e.usable) continue;
    ++usable;
    if (e.info.provider == "tcp") ++usable_tcp;
    if (e.info.address.rfind("127.", 0) == 0)
      loopback = true;
    else
      other_iface = true;
  }
  if (entries.empty() && out.empty()) {
    std::string what = provider.empty() ? "libfabric offers no provider Remora can use (FI_EP_MSG with RMA)"
                                        : "libfabric has no usable provider named '" + provider + "'";
    std::string fix = "install libfabric1 with its tcp provider (Debian: apt-get install libfabric1)";
    if (env_prov != nullptr) {
      what += "; FI_PROVIDER is set to '" + std::string(env_prov) + "'";
      fix = "unset FI_PROVIDER (or include tcp in it), then run again";
    } else if (!provider.empty()) {
      fix = "check the name with remora-info (no --provider): tcp, verbs, ...";
    }
    out.push_back({'x', what, fix});
  }
  if (usable > 0) {
    out.push_back({'o', std::to_string(usable) + " provider/interface pair(s) usable", ""});
    for (const auto& e : entries)
      if (e.usable)
        out.push_back({'o',
                       e.info.provider + " on " + e.info.domain_name + " (" + e.info.address + "): C++ and librpma " +
                           "address " + e.info.address + ", DAT IA name " + dat_ia_name(e.info),
                       ""});
  } else if (!entries.empty()) {
    out.push_back({'x', "libfabric lists interfaces but Remora can open none of them",
                   "see remora-info --all for the reason of each; an interface needs an IPv4 address "
                   "(ip addr add ADDR/LEN dev IFACE)"});
  }
  if (provider.empty() && usable > 0 && usable_tcp == 0)
    out.push_back({'w', "the tcp provider is not usable: only other providers will be used",
                   env_prov ? "FI_PROVIDER='" + std::string(env_prov) + "' excludes it: unset FI_PROVIDER"
                            : "install libfabric1 with its tcp provider"});
  if (usable > 0 && !loopback)
    out.push_back({'w', "no loopback interface: 127.0.0.1 (the tests, the examples) cannot be used",
                   "bring it up: ip link set lo up"});
  if (usable > 0 && !other_iface)
    out.push_back({'w', "only loopback is usable: other hosts cannot connect to this one",
                   "give an interface an IPv4 address (ip addr add ADDR/LEN dev IFACE)"});
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    // About 4 descriptors per tcp connection and side (socket, queue wait
    // objects): bench/README.md, remora-bench-scale.
    const auto conns = nofile.rlim_cur == RLIM_INFINITY ? ~rlim_t{0} : nofile.rlim_cur / 4;
    Finding f{'o',
              "open files limit " + std::to_string(nofile.rlim_cur) + ": about " + std::to_string(conns) +
                  " connections per process",
              ""};
    if (nofile.rlim_cur < 4096) {
      f.level = 'w';
      f.fix = "raise it for many connections: ulimit -n " + std::to_string(nofile.rlim_max);
    }
    out.push_back(f);
  }
  // The same-host direct path (docs/design.md, "Same-host direct path"):
  // RMA between processes of this host by cross-memory attach, which needs
  // ptrace rights over the peer (pidfd_getfd, process_vm_writev/readv).
  const std::string scope = read_first_line("/proc/sys/kernel/yama/ptrace_scope");
  // On unless the program (FabricOptions::same_host) or REMORA_SAMEHOST
  // turns it off; the library reports a value it does not know and ignores it.
  // The library reads its switches alike (direct::switch_from_environment):
  // "1", "on", "yes" or "true" is on; "0", "off", "no" or "false" off; unset
  // or empty is the switch's default (`unset`: on for all but
  // REMORA_RING_WRITES); any other value is reported on stderr and ignored.
  struct Switch {
    const char* name;
    std::string value;
    bool on = true;
    bool known = true;
  };
  auto read_switch = [](const char* name, bool unset = true) {
    Switch s{name, {}, unset};
    const char* v = std::getenv(name);
    if (v == nullptr) return s;
    s.value = v;
    if (s.value == "0" || s.value == "off" || s.value == "no" || s.value == "false")
      s.on = false;
    else if (s.value == "1" || s.value == "on" || s.value == "yes" || s.value == "true")
      s.on = true;
    else
      s.known = s.value.empty();
    return s;
  };
  const Switch samehost = read_switch("REMORA_SAMEHOST");
  const Switch gather = read_switch("REMORA_GATHER_WRITES");
  const Switch helper = read_switch("REMORA_COPY_HELPER");
  const Switch huge = read_switch("REMORA_HUGEPAGES");
  const Switch ring_writes = read_switch("REMORA_RING_WRITES", false);
  const Switch peer_helper = read_switch("REMORA_PEER_HELPER");
  for (const Switch* s : {&samehost, &gather, &helper, &huge, &ring_writes, &peer_helper})
    if (!s->known)
      out.push_back(
          {'w',
           std::string(s->name) + "=" + s->value + " is not a value Remora knows: ignored (" + (s->on ? "on" : "off") +
               ")",
           std::string(s->on ? "set it to 0 to turn it off, or unset it" : "set it to 1 to turn it on, or unset it")});
  const std::string_view sh = samehost.value;
  const bool direct_on = samehost.on;
  const std::string scope_note = scope.empty() ? std::string() : " (kernel.yama.ptrace_scope = " + scope + ")";
  if (!direct_on) {
    out.push_back({'o',
                   "same-host direct path: off (REMORA_SAMEHOST=" + std::string(sh) +
                       "); every connection uses libfabric" + scope_note,
                   ""});
  } else if (scope == "3") {
    out.push_back(
        {'w', "same-host direct path: on, but the kernel forbids it" + scope_note + ": every connection uses libfabric",
         "ptrace_scope 3 cannot be lowered until reboot; boot with kernel.yama.ptrace_scope <= 1"});
  } else if (scope == "2") {
    out.push_back({'w', "same-host direct path: on, but only processes with CAP_SYS_PTRACE may use it" + scope_note,
                   "sysctl kernel.yama.ptrace_scope=1 (then a process reaches its descendants and peers of one user "
                   "that allow it), or 0"});
  } else if (scope == "1") {
    out.push_back({'o',
                   "same-host direct path: on; the kernel allows it only towards a process's descendants (or with "
                   "CAP_SYS_PTRACE)" +
                       scope_note + ", other peers use libfabric",
                   ""});
  } else {
    out.push_back(
        {'o', "same-host direct path: on towards peers of this user" + scope_note + " (REMORA_SAMEHOST=0 turns it off)",
         ""});
  }
  // Two ways the direct path moves ordinary (not shared) memory faster
  // (docs/design.md, "Writes posted back to back", "Large transfers on two
  // threads"): each has its own switch, read when a zone is created.
  if (direct_on && scope != "3") {
    out.push_back({'o',
                   std::string("same-host writes (and reads) posted back to back while a thread polls: ") +
                       (gather.on ? "placed together by one call (REMORA_GATHER_WRITES=0 turns it off)"
                                  : "each placed by its own call (REMORA_GATHER_WRITES=" + gather.value + ")"),
                   ""});
    out.push_back({'o',
                   std::string("same-host transfers of 256 KiB and more (one, a copy through a mapping, or a batch of "
                               "writes, through a mapping too, or of reads): ") +
                       (helper.on ? "split over the posting thread and a helper thread (REMORA_COPY_HELPER=0 turns "
                                    "it off)"
                                  : "moved by the posting thread alone (REMORA_COPY_HELPER=" + helper.value + ")"),
                   ""});
    if (helper.on)
      out.push_back({'o',
                     std::string("the second part of such a transfer: ") +
                         (peer_helper.on ? "offered to the peer process, which moves it from its side where its "
                                           "ring takes it (REMORA_PEER_HELPER=0 turns it off)"
                                         : "moved by this process (REMORA_PEER_HELPER=" + peer_helper.value + ")"),
                     ""});
    out.push_back({'o',
                   std::string("same-host writes of 16 KiB and more into memory the peer does not share: ") +
                       (ring_writes.on ? "copied into the connection's message ring and out of it by the peer, where "
                                         "the peer set it too (REMORA_RING_WRITES=1)"
                                       : "placed by cross-memory attach (REMORA_RING_WRITES=1 on both sides sends "
                                         "them over the message ring)"),
                   ""});
    // Regions of ordinary memory moved into huge pages after registration
    // (docs/design.md, "Huge pages for regions reached by cross-memory
    // attach"): the kernel's setting decides whether it can.
    const std::string thp_line = read_first_line("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string thp;  // the bracketed choice: always, madvise or never
    if (const auto open = thp_line.find('['), close = thp_line.find(']'); open != std::string::npos && close > open)
      thp = thp_line.substr(open + 1, close - open - 1);
    const std::string what = "same-host regions of ordinary memory: ";
    if (!huge.on)
      out.push_back({'o', what + "left in the pages they have (REMORA_HUGEPAGES=" + huge.value + ")", ""});
    else if (thp.empty())
      out.push_back({'o', what + "left in 4 KiB pages: this kernel has no transparent huge pages", ""});
    else if (thp == "never")
      out.push_back({'w',
                     what + "left in 4 KiB pages: transparent huge pages are off (never), and cross-memory attach "
                            "into them is about half as fast",
                     "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (as root)"});
    else
      out.push_back({'o',
                     what +
                         "moved into huge pages after registration by a thread of the process (transparent huge "
                         "pages: " +
                         thp + "; REMORA_HUGEPAGES=0 turns it off)",
                     ""});
  }
  std::size_t errors = 0, warnings = 0;
  for (const auto& f : out) {
    const char* tag = f.level == 'o' ? "ok  " : f.level == 'w' ? "warn" : "FAIL";
    std::printf("%s  %s\n", tag, f.what.c_str());
    if (!f.fix.empty()) std::printf("      fix: %s\n", f.fix.c_str());
    errors += f.level == 'x';
    warnings += f.level == 'w';
  }
  std::printf("%s: %zu problem(s), %zu warning(s)\n", errors == 0 ? "Remora can run here" : "Remora cannot run here",
              errors, warnings);
  return errors == 0 && usable > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opts;
  try {
    remora::tools::parse_options<Options>(kOptions, argc, argv, opts);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", kProgram.data(), e.what());
    return 2;
  }
  if (opts.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (opts.check) {
    if (opts.json || opts.all) {
      std::fprintf(stderr, "%s: --check prints a diagnosis; it takes no --json or --all (see --help)\n",
                   kProgram.data());
      return 2;
    }
    return check(opts.provider);
  }
  try {
    const std::vector<Entry> entries = collect(opts.provider);
    const bool any_usable = std::any_of(entries.begin(), entries.end(), [](const Entry& e) { return e.usable; });
    if (opts.json) {
      std::fputs(render_json(entries, opts.all).c_str(), stdout);
    } else if (any_usable || opts.all) {
      std::fputs(render_table(entries, opts.all).c_str(), stdout);
    }
    if (!any_usable) {
      std::fprintf(stderr, "%s: no usable libfabric provider/interface found%s%s%s\n", kProgram.data(),
                   opts.provider.empty() ? "" : " for provider '", opts.provider.c_str(),
                   opts.provider.empty() ? " (is libfabric installed with the tcp provider? try FI_LOG_LEVEL=warn)"
                                         : "' (check the name; try without --provider)");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", kProgram.data(), e.what());
    return 1;
  }
  return 0;
}
