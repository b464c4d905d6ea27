#pragma once
// The timeline flags shared by the commands that simulate a step (trace, sweep).
#include <string>

#include <CLI/CLI.hpp>

#include "sim/timeline/timeline.hpp"

namespace zerolens::cli {

struct TimelineFlags {
  std::string algorithm = "auto";
  double compute_efficiency = TimelineOptions{}.compute_efficiency;
  double memory_efficiency = TimelineOptions{}.memory_efficiency;
  double cpu_efficiency = TimelineOptions{}.cpu_efficiency;
  TimelineOptions options() const;
};

void add_timeline_options(CLI::App& app, TimelineFlags& flags, const std::string& group);

}  // namespace zerolens::cli
