#include "kolo/status.h"

namespace kolo {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kUnsupported:
      return "Unsupported";
    case StatusCode::kPreconditionFailed:
      return "PreconditionFailed";
    case StatusCode::kTimeout:
      return "Timeout";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kPeerFailure:
      return "PeerFailure";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kMismatch:
      return "Mismatch";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kWorldChanged:
      return "WorldChanged";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_ = std::make_shared<State>(State{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string out(status_code_name(code()));
  out += ": ";
  out += message();
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message();
  return Status(code(), std::move(msg));
}

Error::Error(Status status) : status_(std::move(status)), what_(status_.to_string()) {}

}  // namespace kolo
