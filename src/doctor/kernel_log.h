// NVIDIA Xid events in the kernel log (/dev/kmsg, else /var/log/kern.log): "NVRM: Xid (PCI:0000:3b:00): 79, pid=...,
// GPU has fallen off the bus." Reading /dev/kmsg needs root or kernel.dmesg_restrict=0.
#pragma once

#include <string>
#include <vector>

namespace mopt::doctor {

struct XidEvent {
  std::string pci;  // "0000:3b:00"
  int xid = 0;
  std::string line;  // the log line, trimmed
};

struct KernelLog {
  bool readable = false;
  std::string source;  // the file read, or why none could be
  std::vector<XidEvent> xids;
};

KernelLog read_kernel_log();
// Parses Xid events from log text (one record per line, /dev/kmsg's "pri,seq,time,-;message" prefix allowed).
std::vector<XidEvent> parse_xids(const std::string& text);
// Xids that mean a hardware or driver fault (memory errors, fallen off the bus, NVLink, GSP), not an
// application's bad access.
bool xid_is_hardware(int xid);

}  // namespace mopt::doctor
