#include "backend/plan_cache.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "core/strfmt.h"

namespace mopt {
namespace {

constexpr const char* kMagic = "mopt plan cache 1";
constexpr size_t kMaxFileBytes = size_t{64} << 20;  // far above any real cache; a bigger file is not ours

uint64_t fnv1a(std::string_view s, uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(uint64_t v) { return strfmt("%016llx", static_cast<unsigned long long>(v)); }

// Names and values are written on one line after "name=": control characters would break the line structure.
std::string clean(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

std::vector<std::string_view> split_spaces(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

bool parse_i64(std::string_view s, int64_t& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<section> <name>=<value>" lines of the key, in order.
std::string key_lines(const char* section, const std::vector<PlanCacheField>& fields) {
  std::string out;
  for (const PlanCacheField& f : fields) out += strfmt("%s %s=%s\n", section, clean(f.name).c_str(), clean(f.value).c_str());
  return out;
}

// What differs between the file's key lines and ours, e.g. "platform driver: file 12040, now 12080".
std::string key_diff(const char* section, const std::vector<PlanCacheField>& want,
                     const std::vector<std::string_view>& got) {
  std::vector<std::string> diffs;
  const std::string prefix = std::string(section) + " ";
  auto value_in_file = [&](const std::string& name) -> std::string {
    for (std::string_view l : got) {
      std::string_view rest = l.substr(prefix.size());
      const size_t eq = rest.find('=');
      if (eq != std::string_view::npos && rest.substr(0, eq) == name) return std::string(rest.substr(eq + 1));
    }
    return "(absent)";
  };
  for (const PlanCacheField& f : want) {
    const std::string have = value_in_file(clean(f.name));
    if (have != clean(f.value)) diffs.push_back(strfmt("%s %s: file %s, now %s", section, f.name.c_str(),
                                                       have.c_str(), clean(f.value).c_str()));
  }
  if (diffs.empty()) diffs.push_back(strfmt("the %s fields differ in number or order", section));
  std::string out;
  for (size_t i = 0; i < diffs.size() && i < 4; ++i) out += (i ? "; " : "") + diffs[i];
  return out;
}

PlanCacheLoad rejected(std::string why) {
  PlanCacheLoad r;
  r.outcome = PlanCacheLoad::Outcome::kRejected;
  r.reason = std::move(why);
  return r;
}

}  // namespace

std::string PlanCacheKey::file_name() const {
  return "plans-" + hex64(fnv1a(key_lines("model", model))) + ".txt";
}

std::string default_plan_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return std::string(xdg) + "/mopt";  // the XDG spec ignores relative paths
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/mopt";
  return {};
}

PlanCacheLoad load_plan_cache(const std::string& path, const PlanCacheKey& key,
                              std::span<const PlanRecordSchema> schema) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    if (errno == ENOENT) return {};
    return rejected(strfmt("cannot read it (%s)", std::strerror(errno)));
  }
  std::string text;
  char buf[65536];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxFileBytes) text.append(buf, got);
  const bool read_failed = std::ferror(f) != 0;
  const int read_errno = errno;
  std::fclose(f);
  if (read_failed) return rejected(strfmt("reading it failed (%s)", std::strerror(read_errno)));
  return parse_plan_cache(text, key, schema);
}

PlanCacheLoad parse_plan_cache(std::string_view text, const PlanCacheKey& key,
                               std::span<const PlanRecordSchema> schema) {
  if (text.size() > kMaxFileBytes) return rejected("it is larger than any plan cache");
  // The checksum line ends the file: "end <16 hex>\n". Anything after it, or no such line, is a truncated or
  // overwritten file.
  if (text.size() < 21 || text.back() != '\n') return rejected("it is truncated (no end line)");
  const size_t last = text.rfind('\n', text.size() - 2);
  const size_t end_at = last == std::string::npos ? 0 : last + 1;
  std::string_view end_line(text.data() + end_at, text.size() - 1 - end_at);
  if (end_line.substr(0, 4) != "end " || end_line.size() != 20) return rejected("it is truncated (no end line)");
  const std::string_view body = text.substr(0, end_at);
  if (end_line.substr(4) != hex64(fnv1a(body))) return rejected("its checksum does not match (corrupt file)");

  std::vector<std::string_view> lines;
  for (size_t i = 0; i < body.size();) {
    const size_t nl = body.find('\n', i);
    lines.push_back(body.substr(i, nl - i));
    i = nl + 1;
  }
  size_t li = 0;
  if (lines.empty() || lines[li++] != kMagic) return rejected(strfmt("its first line is not '%s'", kMagic));
  for (const char* section : {"model", "platform"}) {
    const std::vector<PlanCacheField>& want = std::string_view(section) == "model" ? key.model : key.platform;
    const std::string expect = key_lines(section, want);
    std::vector<std::string_view> got;
    const std::string prefix = std::string(section) + " ";
    while (li < lines.size() && lines[li].substr(0, prefix.size()) == prefix) got.push_back(lines[li++]);
    std::string have;
    for (std::string_view l : got) (have += l) += '\n';
    if (have != expect) return rejected("it was written for another key: " + key_diff(section, want, got));
  }
  int64_t n_records = -1;
  if (li >= lines.size() || lines[li].substr(0, 8) != "records " || !parse_i64(lines[li].substr(8), n_records) ||
      n_records < 0)
    return rejected("it has no valid 'records' line");
  ++li;
  if (static_cast<int64_t>(lines.size() - li) != n_records)
    return rejected(strfmt("it announces %lld records and holds %zu lines", static_cast<long long>(n_records),
                           lines.size() - li));

  PlanCacheLoad out;
  out.outcome = PlanCacheLoad::Outcome::kHit;
  out.records.reserve(static_cast<size_t>(n_records));
  for (; li < lines.size(); ++li) {
    const std::vector<std::string_view> tok = split_spaces(lines[li]);
    const PlanRecordSchema* sc = nullptr;
    for (const PlanRecordSchema& s : schema)
      if (!tok.empty() && tok[0] == s.kind) sc = &s;
    const size_t line_no = li + 1;
    if (!sc) return rejected(strfmt("line %zu is not a known record", line_no));
    const size_t want_tokens = 1 + static_cast<size_t>(sc->n_ints) + (sc->blob_bytes > 0 ? 1 : 0);
    if (tok.size() != want_tokens)
      return rejected(strfmt("line %zu: a '%s' record has %zu fields, expected %zu", line_no, sc->kind.c_str(),
                             tok.size() - 1, want_tokens - 1));
    PlanRecord r;
    r.kind = sc->kind;
    r.ints.resize(static_cast<size_t>(sc->n_ints));
    for (int i = 0; i < sc->n_ints; ++i)
      if (!parse_i64(tok[1 + i], r.ints[i])) return rejected(strfmt("line %zu: field %d is not an integer", line_no, i + 1));
    if (sc->blob_bytes > 0) {
      std::string_view hex = tok.back();
      if (hex.size() != 2 * static_cast<size_t>(sc->blob_bytes))
        return rejected(strfmt("line %zu: the blob is %zu hex digits, expected %d", line_no, hex.size(),
                               2 * sc->blob_bytes));
      r.blob.resize(static_cast<size_t>(sc->blob_bytes));
      for (size_t i = 0; i < r.blob.size(); ++i) {
        const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return rejected(strfmt("line %zu: the blob is not lowercase hex", line_no));
        r.blob[i] = static_cast<uint8_t>(hi * 16 + lo);
      }
    }
    out.records.push_back(std::move(r));
  }
  return out;
}

std::string sign_plan_cache(std::string_view body) {
  return std::string(body) + "end " + hex64(fnv1a(body)) + "\n";
}

Status save_plan_cache(const std::string& path, const PlanCacheKey& key, std::span<const PlanRecord> records) {
  std::string body = std::string(kMagic) + "\n" + key_lines("model", key.model) + key_lines("platform", key.platform);
  body += strfmt("records %zu\n", records.size());
  for (const PlanRecord& r : records) {
    if (r.kind.empty() || r.kind.find_first_of(" \n") != std::string::npos)
      return error("plan cache: invalid record kind '%s'", clean(r.kind).c_str());
    body += r.kind;
    for (int64_t v : r.ints) body += strfmt(" %lld", static_cast<long long>(v));
    if (!r.blob.empty()) {
      body += ' ';
      for (uint8_t b : r.blob) body += strfmt("%02x", b);
    }
    body += '\n';
  }
  body = sign_plan_cache(body);

  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) return error("cannot create the directory %s (%s)", p.parent_path().c_str(), ec.message().c_str());
  }
  // Unique per writer: the shards of a tensor-parallel runner may write the same file from threads of one process.
  static std::atomic<unsigned> writes{0};
  const std::string tmp = strfmt("%s.tmp.%d.%u", path.c_str(), static_cast<int>(getpid()), writes.fetch_add(1));
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return error("cannot write %s (%s)", tmp.c_str(), std::strerror(errno));
  const bool wrote = std::fwrite(body.data(), 1, body.size(), f) == body.size();
  const int wrote_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return error("writing %s failed (%s)", tmp.c_str(), std::strerror(wrote ? errno : wrote_errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return error("cannot replace %s (%s)", path.c_str(), std::strerror(e));
  }
  return Status::ok();
}

}  // namespace mopt
