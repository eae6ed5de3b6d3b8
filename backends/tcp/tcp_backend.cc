#include "backends/tcp/tcp_backend.h"

#include "backends/channel_backend.h"
#include "backends/tcp/tcp_connect.h"
#include "ops/collectives.h"

namespace kolo {

Result<std::unique_ptr<ops::Channel>> connect_tcp_channel(const BackendContext& context) {
  if (context.knobs == nullptr)
    return Status::InvalidArgument(
        "tcp: context.knobs is not set (the KnobSet that kolo::init() parsed)");
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<tcp::TcpChannel> channel,
                        tcp::connect_channel(context, tcp::connect_options(*context.knobs)));
  return std::unique_ptr<ops::Channel>(std::move(channel));
}

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& context) {
  KOLO_ASSIGN_OR_RETURN(std::unique_ptr<ops::Channel> channel, connect_tcp_channel(context));
  // connect_tcp_channel checked the knobs.
  auto backend =
      std::make_unique<ChannelBackend>("tcp", std::move(channel), allreduce_tuning(*context.knobs));
  KOLO_RETURN_IF_ERROR(backend->init_status());
  return std::unique_ptr<Backend>(std::move(backend));
}

BackendEntry backend_entry_tcp() {
  BackendEntry entry;
  entry.name = "tcp";
  entry.factory = &make_tcp_backend;
  entry.devices = {DeviceKind::kCpu};
  entry.rank_order = true;  // a ChannelBackend: KOLO_DETERMINISTIC selects the rank-order ops
  return entry;
}

}  // namespace kolo
