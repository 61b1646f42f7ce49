// Status / Result<T>: user-facing failures are values with a message that says what was wrong and what to do.
// MOPT_CHECK aborts on broken internal invariants, with file, line and a formatted message.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

#include "core/strfmt.h"

namespace mopt {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message), true); }
  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return message_; }
  // Prefixes context: "loading foo.gguf: <message>".
  Status with_context(const std::string& ctx) const {
    return failed_ ? Status(ctx + ": " + message_, true) : *this;
  }

 private:
  Status(std::string m, bool failed) : message_(std::move(m)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

// printf-style error constructor: return error("tensor %s: shape %d", name, n);
[[gnu::format(printf, 1, 2)]] inline Status error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vstrfmt(fmt, ap);
  va_end(ap);
  return Status::error(std::move(s));
}

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                 // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {           // NOLINT
    if (std::get<Status>(v_).is_ok()) v_ = Status::error("internal: Result built from an ok Status");
  }
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }
  const std::string& message() const {
    static const std::string empty;
    return is_ok() ? empty : std::get<Status>(v_).message();
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  const T* operator->() const { return &std::get<T>(v_); }
  T& operator*() & { return std::get<T>(v_); }
  const T& operator*() const& { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace mopt

#define MOPT_CONCAT_INNER(a, b) a##b
#define MOPT_CONCAT(a, b) MOPT_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) failed.
#define MOPT_TRY(expr)                              \
  do {                                              \
    ::mopt::Status _mopt_s = (expr);                \
    if (!_mopt_s.is_ok()) return _mopt_s;           \
  } while (0)

// auto x = ...; from a Result<T>, returning its Status on failure.
#define MOPT_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto MOPT_CONCAT(_mopt_r, __LINE__) = (expr);                            \
  if (!MOPT_CONCAT(_mopt_r, __LINE__).is_ok())                             \
    return MOPT_CONCAT(_mopt_r, __LINE__).status();                        \
  lhs = std::move(MOPT_CONCAT(_mopt_r, __LINE__)).value()

// Broken internal invariant: abort with file, line, condition and a printf-style message.
#define MOPT_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) [[unlikely]]                                                              \
      ::mopt::check_failed(__FILE__, __LINE__, #cond, ::mopt::strfmt("" __VA_ARGS__));     \
  } while (0)
