// `meshtrace live`'s text: meshrun's status JSON (launcher/status_server.h, /status.json) drawn
// as the status page draws it, for a terminal: the job, the live verdict, every rank x
// communicator with its op in flight, sequence numbers and time in op, and the recent events.
#pragma once

#include <string>

namespace meshrt::trace {

// The text of one status JSON document. Throws InputError when `json` is not one.
std::string format_live_status(const std::string& json);

}  // namespace meshrt::trace
