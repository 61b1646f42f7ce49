// Model (-m): the files are readable (with an SELinux hint on EACCES), mopt can parse the model, and how fast its
// filesystem reads: the weights' predicted load time.
#include "doctor/check_model.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "doctor/checks.h"
#include "model/model.h"

namespace mopt::doctor {
namespace {

constexpr const char* kGroup = "Model";  // this file's findings' group, as printed

constexpr double kMiB = 1048576.0;
// Bytes read to measure the filesystem (less when the file is smaller).
constexpr uint64_t kSpeedSampleBytes = uint64_t{256} << 20;
// Below this read speed a multi-GiB model takes minutes to load.
constexpr double kSlowBytesPerSec = 200e6;

struct FileEntry {
  std::string path;
  uint64_t bytes = 0;
  int open_errno = 0;
};

bool is_weight_file(const std::string& name) {
  for (const char* ext : {".safetensors", ".gguf", ".bin", ".pt", ".pth"})
    if (name.size() > strlen(ext) && name.compare(name.size() - strlen(ext), strlen(ext), ext) == 0) return true;
  return false;
}

std::vector<FileEntry> list_files(const std::string& path, int& dir_errno) {
  std::vector<FileEntry> out;
  struct stat st {};
  dir_errno = 0;
  if (stat(path.c_str(), &st) != 0) {
    dir_errno = errno;
    return out;
  }
  std::vector<std::string> names;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = opendir(path.c_str());
    if (!d) {
      dir_errno = errno;
      return out;
    }
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(path + "/" + e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
  } else {
    names.push_back(path);
  }
  for (const std::string& n : names) {
    struct stat fs {};
    if (stat(n.c_str(), &fs) != 0 || !S_ISREG(fs.st_mode)) continue;
    FileEntry f;
    f.path = n;
    f.bytes = static_cast<uint64_t>(fs.st_size);
    const int fd = open(n.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      f.open_errno = errno;
    else
      close(fd);
    out.push_back(f);
  }
  return out;
}

std::string access_fix(const HostFacts& h) {
  if (h.selinux_enforcing.value_or(false))
    return "SELinux is enforcing and the files' label does not let this process read them (typical for a host "
           "folder mounted into a container): mount with :z / :Z (docker -v DIR:/models:z) or relabel with "
           "chcon -Rt container_file_t DIR; 'ausearch -m avc -ts recent' shows the denials.";
  return "Give this user read access (chmod -R a+rX DIR, or chown), and execute access on every parent directory; "
         "in a container, check the user id it runs as against the files' owner.";
}

// Bytes/s reading `path` from its device: the file's cached pages are dropped first (posix_fadvise DONTNEED, which
// needs no privileges; pages other processes have mapped stay cached, so the figure can be high).
double measure_read_speed(const std::string& path, uint64_t& sampled) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::vector<char> buf(size_t{4} << 20);
  const auto t0 = std::chrono::steady_clock::now();
  sampled = 0;
  while (sampled < kSpeedSampleBytes) {
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    sampled += static_cast<uint64_t>(n);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  return s > 0 && sampled > 0 ? static_cast<double>(sampled) / s : 0;
}

}  // namespace

std::vector<Finding> check_model(const std::string& path, const HostFacts& h, bool measure_speed,
                                 ModelSummary* summary) {
  std::vector<Finding> out;
  int dir_errno = 0;
  const std::vector<FileEntry> files = list_files(path, dir_errno);
  const char* tf = "Model files readable";
  if (dir_errno != 0 || files.empty()) {
    const bool denied = dir_errno == EACCES;
    add(out, "model.files", kGroup, tf, Verdict::kFail,
        path + ": " + (dir_errno ? std::strerror(dir_errno) : "no files"),
        denied ? access_fix(h)
               : "Check the path: -m takes a GGUF file, a Hugging Face folder or a llama2.c checkpoint.");
    return out;
  }
  uint64_t total = 0, weights = 0;
  std::string denied, other, largest;
  uint64_t largest_bytes = 0;
  for (const FileEntry& f : files) {
    total += f.bytes;
    if (f.open_errno == EACCES)
      join_to(denied, f.path);
    else if (f.open_errno)
      join_to(other, f.path + ": " + std::strerror(f.open_errno));
    const bool w = files.size() == 1 || is_weight_file(f.path);
    if (!w) continue;
    weights += f.bytes;
    if (f.bytes > largest_bytes && f.open_errno == 0) {
      largest_bytes = f.bytes;
      largest = f.path;
    }
  }
  if (summary) summary->weight_file_bytes = weights;
  const std::string ev = strfmt("%zu file(s), %.1f MiB (weights %.1f MiB)", files.size(), total / kMiB, weights / kMiB);
  if (!denied.empty())
    add(out, "model.files", kGroup, tf, Verdict::kFail, ev + "; permission denied: " + denied, access_fix(h));
  else if (!other.empty())
    add(out, "model.files", kGroup, tf, Verdict::kFail, ev + "; " + other, "Fix the files named above.");
  else
    add(out, "model.files", kGroup, tf, Verdict::kOk, ev);

  auto m = load_model(path);
  if (!m) {
    add(out, "model.parse", kGroup, "Model loads", Verdict::kFail, m.message(),
        "mopt cannot read this model (see the message); mopt inspect shows what it finds.");
  } else {
    const Model& model = **m;
    uint64_t stored = 0;
    for (const TensorView& t : model.tensors) stored += t.nbytes;
    if (summary) summary->tensor_bytes = stored;
    add(out, "model.parse", kGroup, "Model loads", Verdict::kOk,
        strfmt("%s, %s, %.1fM parameters, %.1f MiB of tensors, context %d", model.config.name.c_str(),
               arch_name(model.config.arch), static_cast<double>(model.n_params()) / 1e6, stored / kMiB,
               model.config.context_length));
  }

  const char* ts = "Filesystem read speed";
  if (!measure_speed || largest.empty()) {
    add(out, "model.read_speed", kGroup, ts, Verdict::kSkip,
        measure_speed ? "no readable weight file" : "not measured (--no-read-test)");
    return out;
  }
  uint64_t sampled = 0;
  const double bps = measure_read_speed(largest, sampled);
  if (summary) summary->read_bytes_per_s = bps;
  if (bps <= 0) {
    add(out, "model.read_speed", kGroup, ts, Verdict::kSkip, "could not read " + largest);
    return out;
  }
  const double load_s = static_cast<double>(weights) / bps;
  const std::string ev2 = strfmt("%.0f MB/s reading %.1f MiB of %s; the weights (%.1f MiB) load in ~%.1f s", bps / 1e6,
                                 sampled / kMiB, largest.c_str(), weights / kMiB, load_s);
  if (bps < kSlowBytesPerSec && load_s > 5)
    add(out, "model.read_speed", kGroup, ts, Verdict::kWarn, ev2,
        "A slow (often network) filesystem: copy the model to local NVMe, or keep it in the page cache (vmtouch) "
        "so restarts do not pay the read again.");
  else
    add(out, "model.read_speed", kGroup, ts, Verdict::kOk, ev2);
  return out;
}

}  // namespace mopt::doctor
