#include "fabric.hpp"

#include <cstring>

namespace rbench {

namespace {
constexpr std::size_t kMaxCmData = 256;  // FI_OPT_CM_DATA_SIZE on tcp
}  // namespace

void check(long rc, const char* what) {
  if (rc >= 0) return;
  throw BenchError(std::string(what) + ": " + fi_strerror(static_cast<int>(-rc)) + " (" + std::to_string(rc) + ")");
}

Buffer allocate_buffer(std::size_t size) {
  constexpr std::size_t kAlign = 4096;
  const std::size_t rounded = (size + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw BenchError("cannot allocate " + std::to_string(size) + " bytes");
  std::memset(p, 0xA5, rounded);
  return Buffer(static_cast<std::byte*>(p));
}

namespace {

Info try_get_info(const std::string& provider, const std::string& node, const std::string& service, bool source,
                  std::uint64_t caps, int* rc_out) {
  Info hints(fi_allocinfo());
  if (!hints) throw BenchError("fi_allocinfo failed");
  hints->ep_attr->type = FI_EP_MSG;
  hints->caps = caps;
  hints->addr_format = FI_SOCKADDR_IN;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  // Every memory-registration mode this program handles; the provider
  // reports the ones it really needs (tcp: none, i.e. offset addressing
  // and application keys).
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;          // one thread per domain
  hints->fabric_attr->prov_name = strdup(provider.c_str());  // freed by fi_freeinfo

  fi_info* out = nullptr;
  const int rc =
      fi_getinfo(FI_VERSION(1, 17), node.c_str(), service.c_str(), source ? FI_SOURCE : 0, hints.get(), &out);
  *rc_out = rc;
  return Info(rc == 0 ? out : nullptr);
}

}  // namespace

Info get_info(const std::string& provider, const std::string& node, const std::string& service, bool source) {
  int rc = 0;
  Info info = try_get_info(provider, node, service, source, FI_MSG | FI_RMA | FI_RMA_PMEM, &rc);
  if (!info) info = try_get_info(provider, node, service, source, FI_MSG | FI_RMA, &rc);
  if (!info)
    throw BenchError("fi_getinfo(provider " + provider + ", " + node + ":" + service +
                     ", FI_EP_MSG, FI_MSG|FI_RMA): " + fi_strerror(-rc) + " (" + std::to_string(rc) + ")");
  return info;
}

CmEvent wait_cm_event(fid_eq* eq, std::chrono::milliseconds timeout, const char* what) {
  constexpr std::size_t kHead = sizeof(fi_eq_cm_entry);
  alignas(fi_eq_cm_entry) std::byte buf[kHead + kMaxCmData]{};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::uint32_t event = 0;
    const ssize_t rd = fi_eq_sread(eq, &event, &buf, sizeof buf, 100, 0);
    if (rd >= 0) {
      if (rd < static_cast<ssize_t>(sizeof(fid_t))) throw BenchError(std::string(what) + ": short event queue entry");
      CmEvent ev;
      ev.event = event;
      fi_eq_cm_entry entry;
      std::memcpy(&entry, buf, kHead);
      if (event == FI_CONNREQ) ev.info = entry.info;
      const auto extra = rd - static_cast<ssize_t>(kHead);
      if (extra > 0) ev.data.assign(buf + kHead, buf + kHead + extra);
      return ev;
    }
    if (rd == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      check(fi_eq_readerr(eq, &err, 0), "fi_eq_readerr");
      std::string msg = std::string(what) + ": " + fi_strerror(err.err);
      if (err.err == FI_ECONNREFUSED) msg += " (is a server listening on that address and port?)";
      if (err.prov_errno != 0) {
        const char* prov = fi_eq_strerror(eq, err.prov_errno, err.err_data, nullptr, 0);
        if (prov != nullptr && *prov != '\0') msg += std::string(" [provider: ") + prov + "]";
      }
      throw BenchError(msg);
    }
    if (rd != -FI_EAGAIN && rd != -FI_ETIMEDOUT && rd != -FI_EINTR) check(rd, what);
    if (std::chrono::steady_clock::now() >= deadline)
      throw BenchError(std::string(what) + ": timed out after " + std::to_string(timeout.count() / 1000) + " s");
  }
}

bool shutdown_seen(fid_eq* eq) {
  alignas(fi_eq_cm_entry) std::byte buf[sizeof(fi_eq_cm_entry) + kMaxCmData]{};
  std::uint32_t event = 0;
  const ssize_t rd = fi_eq_read(eq, &event, &buf, sizeof buf, 0);
  if (rd == -FI_EAVAIL) {
    fi_eq_err_entry err{};
    (void)fi_eq_readerr(eq, &err, 0);
    return true;
  }
  return rd > 0 && event == FI_SHUTDOWN;
}

std::string cq_error_text(fid_cq* cq, fi_cq_err_entry* err_out) {
  fi_cq_err_entry err{};
  const ssize_t rc = fi_cq_readerr(cq, &err, 0);
  if (rc < 0) return std::string("fi_cq_readerr: ") + fi_strerror(static_cast<int>(-rc));
  if (err_out != nullptr) *err_out = err;
  std::string msg = fi_strerror(err.err);
  msg += " (err " + std::to_string(err.err) + ")";
  if (err.prov_errno != 0) {
    const char* prov = fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0);
    if (prov != nullptr && *prov != '\0') msg += std::string(" [provider: ") + prov + "]";
  }
  return msg;
}

Fid<fid_mr> register_memory(fid_domain* domain, void* buf, std::size_t len, std::uint64_t access, std::uint64_t key) {
  fid_mr* mr = nullptr;
  check(fi_mr_reg(domain, buf, len, access, 0, key, 0, &mr, nullptr), "fi_mr_reg");
  return Fid<fid_mr>(mr);
}

Fid<fid_cq> open_cq(fid_domain* domain, std::size_t size, bool waitable) {
  fi_cq_attr attr{};
  attr.size = size;
  attr.format = FI_CQ_FORMAT_CONTEXT;
  attr.wait_obj = waitable ? FI_WAIT_FD : FI_WAIT_NONE;
  fid_cq* cq = nullptr;
  check(fi_cq_open(domain, &attr, &cq, nullptr), "fi_cq_open");
  return Fid<fid_cq>(cq);
}

Fid<fid_eq> open_eq(fid_fabric* fabric) {
  fi_eq_attr attr{};
  attr.size = 16;
  attr.wait_obj = FI_WAIT_UNSPEC;
  fid_eq* eq = nullptr;
  check(fi_eq_open(fabric, &attr, &eq, nullptr), "fi_eq_open");
  return Fid<fid_eq>(eq);
}

}  // namespace rbench
