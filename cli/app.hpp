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

}  // namespace zerolens::cli
