// meshrun: the launcher of meshrt jobs. `meshrun --help` explains it; launcher/README.md shows
// it next to mpirun and srun.
#include "launcher/agent.h"
#include "launcher/doctor.h"
#include "launcher/options.h"
#include "launcher/signals.h"

int main(int argc, char** argv) {
  meshrt::launcher::ParsedCommandLine parsed = meshrt::launcher::parse_options(argc, argv);
  if (parsed.exit_status) return *parsed.exit_status;
  // No signal handlers for the doctor: Ctrl-C ends it, and its children die with it.
  if (parsed.doctor) return meshrt::launcher::run_doctor(*parsed.doctor);
  meshrt::launcher::install_signal_handlers();
  meshrt::launcher::Agent agent(std::move(parsed.options));
  return agent.run();
}
