// SIGINT and SIGTERM sent to meshrun: counted by a handler, acted on by the agent's loop (the
// first is passed to the ranks, a second one kills them).
#pragma once

namespace meshrt::launcher {

// Installs the handlers for SIGINT and SIGTERM and ignores SIGPIPE (a closed console must not
// kill the agent that supervises the ranks). Call once, before starting threads.
void install_signal_handlers();
// How many SIGINT/SIGTERM arrived so far.
int interrupt_count();
// The first of them (SIGINT or SIGTERM); 0 when none arrived.
int first_interrupt_signal();

}  // namespace meshrt::launcher
