// attncheck's entry point; the commands are in commands.cpp.

#include "commands.h"

int main(int argc, char** argv) { return attncheck::cli::run_cli(argc, argv); }
