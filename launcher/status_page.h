// The live status page that meshrun's status server sends for "/": a self-contained HTML page
// whose script reads /status.json every second and draws every rank x communicator with its op in
// flight, sequence numbers and time in op, the live verdict, and links to each rank's snapshot
// and stacks. Names from the program are set as text only, never parsed as HTML.
#pragma once

#include <string_view>

namespace meshrt::launcher {

// The page, the same for every job (it learns the job from /status.json).
std::string_view status_page_html();

}  // namespace meshrt::launcher
