#include "doctor/kernel_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "doctor/host_files.h"

namespace mopt::doctor {
namespace {

// /dev/kmsg returns one record per read() and EAGAIN at the end (O_NONBLOCK); a regular file (a test's fake, or
// a copy) reads as text.
bool read_kmsg(const std::string& path, std::string& out, std::string& why) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  const bool is_dev = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode);
  std::string rec(8192, '\0');
  constexpr size_t kMaxBytes = size_t{16} << 20;
  while (out.size() < kMaxBytes) {
    const ssize_t n = read(fd, rec.data(), rec.size());
    if (n > 0) {
      out.append(rec.data(), static_cast<size_t>(n));
      if (is_dev && out.back() != '\n') out.push_back('\n');
      continue;
    }
    if (n < 0 && errno == EPIPE) continue;  // records overwritten while reading: go on with the next
    if (n < 0 && errno != EAGAIN && out.empty()) {
      why = path + ": " + std::strerror(errno);
      close(fd);
      return false;
    }
    break;
  }
  close(fd);
  return true;
}

}  // namespace

bool xid_is_hardware(int xid) {
  switch (xid) {
    case 48:  // double-bit ECC error
    case 61:
    case 62:  // internal micro-controller halt / breakpoint
    case 63:
    case 64:  // page retirement or row remapping event / failure
    case 74:  // NVLink error
    case 79:  // GPU has fallen off the bus
    case 92:  // high single-bit ECC error rate
    case 94:
    case 95:  // contained / uncontained ECC error
    case 119:
    case 120:  // GSP RPC timeout / GSP error
    case 140:  // unrecovered ECC error
      return true;
    default:
      return false;
  }
}

std::vector<XidEvent> parse_xids(const std::string& text) {
  std::vector<XidEvent> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("NVRM: Xid (");
    if (at == std::string::npos) continue;
    XidEvent e;
    const size_t pci = line.find("PCI:", at);
    const size_t close_paren = line.find(')', at);
    if (pci != std::string::npos && close_paren != std::string::npos && pci < close_paren)
      e.pci = line.substr(pci + 4, close_paren - pci - 4);
    if (close_paren == std::string::npos) continue;
    size_t p = line.find(':', close_paren);
    if (p == std::string::npos) continue;
    e.xid = std::atoi(line.c_str() + p + 1);
    if (e.xid <= 0) continue;
    e.line = line.substr(at);
    while (!e.line.empty() && (e.line.back() == '\r' || e.line.back() == ' ')) e.line.pop_back();
    out.push_back(std::move(e));
  }
  return out;
}

KernelLog read_kernel_log() {
  KernelLog log;
  std::string text, why;
  for (const char* p : {"/dev/kmsg", "/var/log/kern.log"}) {
    std::string w;
    text.clear();
    if (read_kmsg(host_path(p), text, w)) {
      log.readable = true;
      log.source = p;
      log.xids = parse_xids(text);
      return log;
    }
    why += why.empty() ? w : "; " + w;
  }
  log.source = why;
  return log;
}

}  // namespace mopt::doctor
