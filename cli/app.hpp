#pragma once
// The zerolens command-line tool. Exit codes: 0 success, 1 a checked condition failed (e.g. the
// plan does not fit with --require-fit), 2 invalid input (flags, config, model, cluster files),
// 3 an internal error.
namespace zerolens::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitInvalidInput = 2;
inline constexpr int kExitInternal = 3;

int run(int argc, char** argv);

// Under mpirun every rank parses the same flags and plans the same run, so a refusal of them is
// the same on every rank: the job's first rank prints it and the others exit with its code
// silently, by throwing this (issue 21: "refusal before any output, once").
struct QuietExit {
  int code = kExitInvalidInput;
};

// The rank MPI's launcher gave this process, read before MPI starts (Open MPI's
// OMPI_COMM_WORLD_RANK, PMIx's PMIX_RANK, MPICH's and Slurm's PMI_RANK); 0 outside a launcher.
int launcher_rank();

}  // namespace zerolens::cli
