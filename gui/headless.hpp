#pragma once
// Headless rendering: the window, sized and set up as the command line asks, drawn to a PNG or SVG
// file on the offscreen platform (for documentation, tests and servers without a display).
#include "gui/command_line.hpp"

namespace zerolens::gui {

// Sets the window up as `line` asks (trace, view options, step, view). Throws InputError naming the
// flag or file when that fails.
void prepare_window(MainWindow& window, const CommandLine& line);
// The part of it that places the cursor and selects the rank (--rank, --step, --seed-step), also
// used by the interactive window. Throws InputError naming the flag.
void place_cursor(MainWindow& window, const CommandLine& line);
// Renders and writes line.screenshot; returns the exit status. Throws InputError.
int render_screenshot(const CommandLine& line);

}  // namespace zerolens::gui
