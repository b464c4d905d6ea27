#pragma once
// zerolens-gui's entry point: the command line, then either the window or a headless screenshot.
namespace zerolens::gui {

// Exit status: 0 success, 2 invalid input (the message names the flag, key or file), 3 internal
// error.
int run_app(int argc, char** argv);

}  // namespace zerolens::gui
