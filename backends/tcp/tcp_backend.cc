#include "backends/tcp/tcp_backend.h"

#include <cstdlib>
#include <string>

#include "backends/channel_backend.h"
#include "backends/tcp/tcp_connect.h"
#include "common/units.h"
#include "ops/collectives.h"

namespace kolo {
namespace {

// Overrides `field` from the size-valued variable `name` when it is set.
Status size_override(const char* name, size_t& field) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::Ok();
  Result<uint64_t> v = parse_size(text);
  if (!v.ok()) return v.status().with_context(name);
  if (*v == 0)
    return Status::InvalidArgument(std::string(name) + " must be > 0 bytes, got '" + text + "'");
  field = static_cast<size_t>(*v);
  return Status::Ok();
}

Result<ops::AllreduceTuning> tuning_from_env() {
  ops::AllreduceTuning tuning;
  KOLO_RETURN_IF_ERROR(size_override("KOLO_TCP_SEGMENT", tuning.segment_bytes));
  KOLO_RETURN_IF_ERROR(size_override("KOLO_TCP_SMALL_MESSAGE", tuning.small_message_bytes));
  return tuning;
}

}  // namespace

Result<std::unique_ptr<ops::Channel>> connect_tcp_channel(const BackendContext& context) {
  KOLO_ASSIGN_OR_RETURN(tcp::ConnectOptions options, tcp::connect_options_from_env());
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<tcp::TcpChannel> channel,
                        tcp::connect_channel(context, options));
  return std::unique_ptr<ops::Channel>(std::move(channel));
}

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& context) {
  KOLO_ASSIGN_OR_RETURN(ops::AllreduceTuning tuning, tuning_from_env());
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<ops::Channel> channel, connect_tcp_channel(context));
  return std::unique_ptr<Backend>(
      std::make_unique<ChannelBackend>("tcp", std::move(channel), tuning));
}

BackendEntry backend_entry_tcp() {
  BackendEntry entry;
  entry.name = "tcp";
  entry.factory = &make_tcp_backend;
  entry.devices = {DeviceKind::kCpu};
  return entry;
}

}  // namespace kolo
