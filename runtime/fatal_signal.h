// A rank that dies of a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) still leaves its
// flight-recorder dump, then dies of that signal as it would have (same exit status, core file).
#pragma once

namespace meshrt {

// Installs the dump for each fatal signal whose action is still the default (a program's own
// handler is kept); `rank` is named in the dump's trigger. init() calls it; later calls only
// update the rank.
void install_fatal_signal_dump(int rank);

// Gives the calling thread a signal stack of its own (256 KiB, freed when the thread ends) unless
// it has one, so that a stack overflow's SIGSEGV on it still runs the dump. meshrt's own threads
// (watchdog, communicator workers) call it when they start; init() does it for its caller.
void use_signal_stack_on_this_thread();

}  // namespace meshrt
