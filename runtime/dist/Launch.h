// `tsr run --devices N` (docs/distributed.md): N rank processes of the same command line, each
// with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in its environment as torchrun
// sets them, supervised: the first rank that exits non-zero or dies ends the others, with a
// message naming it.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace tsr::rt::dist {

/// Whether this process is already a rank of a launch (RANK and WORLD_SIZE are set): then `tsr
/// run` runs as that rank and starts none.
bool launchedAsRank();

/// Starts `n` ranks running `exe` with `args` (argv[1..]) and waits for them. MASTER_ADDR
/// (default 127.0.0.1) and MASTER_PORT (default: a free port) come from the environment when set.
/// The standard output of ranks other than 0 is discarded unless TSR_DIST_OUTPUT=all; standard
/// errors are all kept. Returns 0 when every rank exits 0; else the first failing rank's exit
/// code (128 + signal for a rank killed by a signal), after ending the others (SIGTERM, then
/// SIGKILL after 5 s) and printing to `err` which rank failed and how.
int launchRanks(int n, const std::string &exe, const std::vector<std::string> &args, std::ostream &err);

} // namespace tsr::rt::dist
