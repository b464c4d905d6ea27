#include "cli/app.hpp"

int main(int argc, char** argv) { return zerolens::cli::run(argc, argv); }
