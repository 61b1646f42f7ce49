// Atomic outputs: temporary names beside the destination, renamed into place when complete (output.h).
#include "quant/output.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/strfmt.h"

namespace mopt::quant {

namespace {

std::atomic<int64_t> g_fault_budget{-1};  // bytes writable before the simulated full disk; -1: off

std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

std::string base_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The names in a folder (without . and ..); nullopt if it cannot be read.
std::optional<std::vector<std::string>> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return std::nullopt;
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// Removes a folder of plain files (what OutputDir writes). Best effort: used on cleanup paths.
void remove_flat_dir(const std::string& dir) {
  if (auto names = list_dir(dir))
    for (const std::string& n : *names) ::unlink((dir + "/" + n).c_str());
  ::rmdir(dir.c_str());
}

Status write_error(const std::string& path, int err) {
  if (err == ENOSPC || err == EDQUOT)
    return error("writing %s: %s; free space on its file system or choose another -o (nothing was left behind)",
                 path.c_str(), std::strerror(err));
  return error("writing %s: %s (nothing was left behind)", path.c_str(), std::strerror(err));
}

}  // namespace

void set_write_fault_after(std::optional<uint64_t> bytes) {
  g_fault_budget.store(bytes ? static_cast<int64_t>(*bytes) : -1);
}

Status check_destination(const std::string& path, bool is_dir, bool force) {
  if (path.empty()) return error("no output path given (-o)");
  const std::string parent = parent_of(path);
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return error("output %s: the folder %s does not exist; create it first", path.c_str(), parent.c_str());
  if (::access(parent.c_str(), W_OK) != 0)
    return error("output %s: the folder %s is not writable", path.c_str(), parent.c_str());
  if (::lstat(path.c_str(), &st) != 0) return Status::ok();  // a new name
  if (!force) return error("output %s exists; pass --force to replace it, or choose another -o", path.c_str());
  if (!is_dir) {
    if (!S_ISREG(st.st_mode))
      return error("output %s exists and is not a file; this format writes one file, choose another -o",
                   path.c_str());
    return Status::ok();
  }
  if (!S_ISDIR(st.st_mode))
    return error("output %s exists and is not a folder; this format writes a folder, choose another -o", path.c_str());
  const auto names = list_dir(path);
  if (!names) return error("output %s: cannot read the existing folder", path.c_str());
  for (const std::string& n : *names) {
    struct stat e {};
    if (::lstat((path + "/" + n).c_str(), &e) != 0 || !S_ISREG(e.st_mode))
      return error("output %s holds %s, which is not a plain file: --force replaces only a folder of files (a "
                   "model folder); remove it yourself or choose another -o", path.c_str(), n.c_str());
  }
  return Status::ok();
}

Result<uint64_t> free_bytes_near(const std::string& path) {
  struct statvfs vfs {};
  const std::string parent = parent_of(path);
  if (::statvfs(parent.c_str(), &vfs) != 0)
    return error("cannot read the free space of %s: %s", parent.c_str(), std::strerror(errno));
  return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
}

std::string StagedOutput::tmp_template() const {
  return parent_of(final_path_) + "/." + base_of(final_path_) + ".mopt-tmp-XXXXXX";
}

// ---- OutputFile ----

Result<std::unique_ptr<OutputFile>> OutputFile::create(const std::string& final_path) {
  std::unique_ptr<OutputFile> f(new OutputFile(final_path));
  std::string tmpl = f->tmp_template();
  f->fd_ = ::mkstemp(tmpl.data());
  if (f->fd_ < 0) return error("cannot create a file beside %s: %s", final_path.c_str(), std::strerror(errno));
  f->tmp_path_ = tmpl;
  ::fchmod(f->fd_, 0644);
  return f;
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

Status OutputFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t allowed = n;
  int64_t budget = g_fault_budget.load();
  bool fault = false;
  if (budget >= 0) {
    if (static_cast<uint64_t>(budget) < n) allowed = static_cast<size_t>(budget), fault = true;
    g_fault_budget.store(budget - static_cast<int64_t>(allowed));
  }
  while (allowed > 0) {
    const ssize_t w = ::write(fd_, p, allowed);
    if (w < 0) {
      if (errno == EINTR) continue;
      return write_error(final_path_, errno);
    }
    p += w, allowed -= static_cast<size_t>(w), offset_ += static_cast<uint64_t>(w);
  }
  if (fault) return write_error(final_path_, ENOSPC);
  return Status::ok();
}

Status OutputFile::pad_to(uint64_t alignment) {
  static const uint8_t zeros[64] = {};
  uint64_t pad = (alignment - offset_ % alignment) % alignment;
  while (pad > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(zeros)));
    MOPT_TRY(write(zeros, n));
    pad -= n;
  }
  return Status::ok();
}

Status OutputFile::commit() {
  if (::fsync(fd_) != 0) return write_error(final_path_, errno);
  if (::close(fd_) != 0) {
    fd_ = -1;
    return write_error(final_path_, errno);
  }
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), final_path_.c_str()) != 0)
    return error("renaming %s to %s: %s", tmp_path_.c_str(), final_path_.c_str(), std::strerror(errno));
  committed_ = true;
  return Status::ok();
}

// ---- OutputDir ----

Result<std::unique_ptr<OutputDir>> OutputDir::create(const std::string& final_path) {
  std::unique_ptr<OutputDir> d(new OutputDir(final_path));
  std::string tmpl = d->tmp_template();
  if (!::mkdtemp(tmpl.data()))
    return error("cannot create a folder beside %s: %s", final_path.c_str(), std::strerror(errno));
  ::chmod(tmpl.c_str(), 0755);
  d->tmp_path_ = tmpl;
  return d;
}

OutputDir::~OutputDir() {
  if (!committed_ && !tmp_path_.empty()) remove_flat_dir(tmp_path_);
}

Result<std::unique_ptr<OutputFile>> OutputDir::file(const std::string& name) {
  return OutputFile::create(tmp_path_ + "/" + name);
}

Status OutputDir::write_file(const std::string& name, const std::string& content) {
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> f, file(name));
  MOPT_TRY(f->write(content.data(), content.size()));
  return f->commit();
}

Status OutputDir::commit() {
  struct stat st {};
  std::string old;
  if (::lstat(final_path_.c_str(), &st) == 0) {  // replacing (checked by check_destination): move it aside first
    old = tmp_path_ + ".old";
    if (::rename(final_path_.c_str(), old.c_str()) != 0)
      return error("moving the existing %s aside: %s", final_path_.c_str(), std::strerror(errno));
  }
  if (::rename(tmp_path_.c_str(), final_path_.c_str()) != 0) {
    const int err = errno;
    if (!old.empty()) ::rename(old.c_str(), final_path_.c_str());
    return error("renaming %s to %s: %s", tmp_path_.c_str(), final_path_.c_str(), std::strerror(err));
  }
  committed_ = true;
  if (!old.empty()) remove_flat_dir(old);
  return Status::ok();
}

}  // namespace mopt::quant
