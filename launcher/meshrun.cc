// meshrun: the launcher of meshrt jobs. `meshrun --help` explains it; launcher/README.md shows
// it next to mpirun and srun.
#include "launcher/agent.h"
#include "launcher/options.h"
#include "launcher/signals.h"

int main(int argc, char** argv) {
  meshrt::launcher::ParsedCommandLine parsed = meshrt::launcher::parse_options(argc, argv);
  if (parsed.exit_status) return *parsed.exit_status;
  meshrt::launcher::install_signal_handlers();
  meshrt::launcher::Agent agent(std::move(parsed.options));
  return agent.run();
}
