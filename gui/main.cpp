// zerolens-gui: the interactive ZeRO-DP step visualizer and planner (gui/app.cpp).
#include "gui/app.hpp"

int main(int argc, char** argv) {
  return zerolens::gui::run_app(argc, argv);
}
