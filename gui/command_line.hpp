#pragma once
// zerolens-gui's command line: the config options of the panel (as `zerolens plan` spells them),
// --walkthrough, --trace FILE, and the headless screenshot (--screenshot FILE --view V --step N,
// --seed-step N, --rank R).
#include <QSize>
#include <QStringList>
#include <optional>
#include <string>

#include "gui/main_window.hpp"
#include "gui/settings.hpp"

namespace zerolens::gui {

struct CommandLine {
  std::optional<std::string> screenshot;  // .png or .svg
  View view = View::Ranks;
  std::optional<std::int64_t> step;  // op index (--step N is op N, 1-based); -1 before the first op
  std::optional<int> seed_step;      // the seed walkthrough's step (1-27): cursor and caption
  std::optional<int> rank;           // the selected rank (global)
  std::optional<std::string> trace;
  QSize size{1600, 1000};
  std::optional<ShowMemory> show;
  std::optional<ScaleMode> scale;
  Settings settings;
};

// Throws InputError naming the flag.
CommandLine parse_command_line(const QStringList& arguments);
std::string usage();
// True when the arguments ask for a screenshot (decided before QApplication exists, to pick the
// offscreen platform).
bool wants_screenshot(int argc, char** argv);
bool wants_help(int argc, char** argv);

}  // namespace zerolens::gui
