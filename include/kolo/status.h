// Status: the result of every core operation. An OK status carries no allocation; an error
// carries a code and a message that names what was wrong (argument, tensor, rank, expected vs got).
// Thread-safety: a Status is a value; copies are independent.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

// Exported from libkolo.so (Note [Visibility] in docs/architecture.md).
#pragma GCC visibility push(default)

namespace kolo {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed something wrong; the message names it
  kUnsupported,         // "backend X does not support Y"
  kPreconditionFailed,  // e.g. used before init or after shutdown
  kTimeout,             // a bounded wait ran out
  kIoError,             // a socket, file or library call failed
  kPeerFailure,         // another rank died, disconnected or reported an error
  kAborted,             // cancelled, e.g. by shutdown with pending operations
  kMismatch,            // ranks disagree about an operation (shape, dtype, op, ...)
  kInternal,            // an invariant broke: a bug in Kolo
  kWorldChanged,        // elastic: the launcher formed a new world (kolo/elastic.h); re-form
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status Unsupported(std::string msg) { return {StatusCode::kUnsupported, std::move(msg)}; }
  static Status PreconditionFailed(std::string msg) {
    return {StatusCode::kPreconditionFailed, std::move(msg)};
  }
  static Status Timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status PeerFailure(std::string msg) { return {StatusCode::kPeerFailure, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
  static Status Mismatch(std::string msg) { return {StatusCode::kMismatch, std::move(msg)}; }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status WorldChanged(std::string msg) {
    return {StatusCode::kWorldChanged, std::move(msg)};
  }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message without the code; empty when OK.
  const std::string& message() const;
  // "CodeName: message", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is "context: message" (same code). OK stays OK.
  Status with_context(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;  // null means OK; shared so copies are cheap
};

// Result<T>: a value or an error Status (never both, never an OK status without a value).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be OK
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

// Exception carrying a Status, thrown by the user-facing C++ layers (the training stack,
// blocking wrappers that document it). The core itself returns Status.
class Error : public std::exception {
 public:
  explicit Error(Status status);
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

}  // namespace kolo
#pragma GCC visibility pop

// Propagate a non-OK Status to the caller.
#define KOLO_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kolo::Status kolo_status_ = (expr);        \
    if (!kolo_status_.ok()) return kolo_status_; \
  } while (0)

#define KOLO_CONCAT_INNER_(a, b) a##b
#define KOLO_CONCAT_(a, b) KOLO_CONCAT_INNER_(a, b)
// auto x = KOLO_ASSIGN_OR_RETURN(lhs, expr): assigns the value of a Result or returns its error.
#define KOLO_ASSIGN_OR_RETURN(lhs, expr)                  \
  auto KOLO_CONCAT_(kolo_result_, __LINE__) = (expr);     \
  if (!KOLO_CONCAT_(kolo_result_, __LINE__).ok())         \
    return KOLO_CONCAT_(kolo_result_, __LINE__).status(); \
  lhs = std::move(KOLO_CONCAT_(kolo_result_, __LINE__)).value()
