// fuzz/fuzz_dat_registry.cpp - the uDAPL face's registry file (dat.conf,
// named by DAT_OVERRIDE): the line splitter conf_fields, the entry filter
// parse_conf, and what reads their result: provider_names and
// dat_registry_list_providers, and resolve_name for every entry's name and
// for the input's first line taken as an IA name (the "ofi-PROV-IFACE"
// form).
//
// The input is the whole file. It is parsed from memory, then written to a
// memfd that DAT_OVERRIDE names (/proc/self/fd/N), so the library reads it
// the way it reads a real dat.conf and nothing is left on disk.
#include <arpa/inet.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "dat_internal.hpp"
#include "dat_registry.hpp"
#include "fuzz_common.hpp"

using namespace remora_fuzz;

namespace {

int g_conf_fd = -1;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

void write_conf(const std::string& text) {
  FUZZ_CHECK(ftruncate(g_conf_fd, 0) == 0);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = pwrite(g_conf_fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    FUZZ_CHECK(n > 0);
    done += static_cast<std::size_t>(n);
  }
}

void check_resolved(const remora_dat::IaName& n) {
  in_addr a{};
  FUZZ_CHECK(!n.provider.empty() && !n.interface.empty());
  FUZZ_CHECK(inet_pton(AF_INET, n.address.c_str(), &a) == 1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_seeds_if_asked({
      bytes_of("# DAT v1.2 configuration\n"
               "ofi-lo u1.2 nonthreadsafe default libdat-remora.so ri.1.2 \"ofi-tcp-lo\" \"\"\n"),
      bytes_of("tcp0 u1.2 threadsafe default libremora.so.0 ri.1.2 \"tcp lo\" \"\"\n"
               "tcp1 u1.2 threadsafe default libremora.so.0 ri.1.2 \"tcp 127.0.0.1\" \"\"\n"),
      bytes_of("short u1.2 threadsafe default lib.so ri.1.2\n"
               "v2 u2.0 threadsafe default lib.so ri.2.0 \"tcp lo\" \"\"\n"
               "  \t# only a comment\n"
               "unterminated u1.2 a b c d \"tcp lo\n"),
      bytes_of("ofi-tcp-lo\n"),
      bytes_of("ofi-tcp-127.0.0.1\nx u1. a b c d ofi-verbs-eth0\n"),
      bytes_of("u1\n\n\"\" u1.2 \"\" \"\" \"\" \"\" \"\"\n"),
      {},
  });
  g_conf_fd = memfd_create("remora-fuzz-dat.conf", MFD_CLOEXEC);
  if (g_conf_fd < 0) {
    std::perror("memfd_create");
    std::exit(1);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(g_conf_fd);
  setenv("DAT_OVERRIDE", path.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto lines = lines_of(text);

  // Line by line: the fields are pieces of the line, each but the last
  // followed by at least one character of it (a blank or a closing quote).
  std::size_t usable = 0;
  for (const auto& line : lines) {
    const auto fields = remora_dat::conf_fields(line);
    std::size_t chars = 0;
    for (const auto& f : fields) chars += f.size();
    FUZZ_CHECK(chars + fields.size() <= line.size() + 1);
    if (fields.size() >= 7 && fields[1].rfind("u1.", 0) == 0) ++usable;
  }

  // The whole text: one entry per usable line, each of a 1.x API.
  std::istringstream in(text);
  const auto entries = remora_dat::parse_conf(in);
  FUZZ_CHECK(entries.size() == usable);
  for (const auto& e : entries) FUZZ_CHECK(e.api.rfind("u1.", 0) == 0);

  // Through DAT_OVERRIDE, as the library reads it: only when there is
  // something to read (an entry, or a first line that names an IA the
  // ofi-PROV-IFACE way), as this path costs system calls for the interfaces.
  const bool ofi_name = !lines.empty() && lines[0].rfind("ofi-", 0) == 0;
  if (entries.empty() && !ofi_name) return 0;
  write_conf(text);
  const auto names = remora_dat::provider_names();
  FUZZ_CHECK(names.size() >= entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i)
    FUZZ_CHECK(names[names.size() - entries.size() + i] == entries[i].name);

  DAT_PROVIDER_INFO infos[4];
  DAT_PROVIDER_INFO* list[4] = {&infos[0], &infos[1], &infos[2], &infos[3]};
  DAT_COUNT count = -1;
  FUZZ_CHECK(dat_registry_list_providers(4, &count, list) == DAT_SUCCESS);
  FUZZ_CHECK(count == static_cast<DAT_COUNT>(std::min<std::size_t>(4, names.size())));
  for (DAT_COUNT i = 0; i < count; ++i) {
    const auto& ia_name = infos[i].ia_name;
    FUZZ_CHECK(std::memchr(ia_name, '\0', sizeof ia_name) != nullptr);
    FUZZ_CHECK(names[static_cast<std::size_t>(i)].compare(0, std::strlen(ia_name), ia_name) == 0);
  }

  remora_dat::IaName rn;
  for (std::size_t i = 0; i < entries.size() && i < 4; ++i)
    if (remora_dat::resolve_name(entries[i].name, &rn)) check_resolved(rn);
  if (ofi_name && remora_dat::resolve_name(lines[0], &rn)) check_resolved(rn);
  return 0;
}
