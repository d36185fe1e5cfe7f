// The command line's one table: each fusetune command's operands and options, a line of help each.
// Everything that states them is made from it: `fusetune --help` (every command's synopsis and
// summary), `fusetune help COMMAND` (its options, one a line), a command's usage error (its
// synopsis), the options its parser accepts (parse_args), and the synopses of README.md's
// "Commands" block, which the test CommandTable.TheReadmeShowsEverySynopsisAsTheToolPrintsIt
// compares line by line. A command's own checks (operands, options that go together) stay in it.
#pragma once

#include <string>
#include <vector>

#include "tools/cli_args.h"

namespace fusetune::cli {

struct OptionSpec {
  std::string name;   // without "--"
  std::string value;  // its placeholder ("N", "PATH", "model|tf32"); empty: a switch
  std::string help;
  bool required = false;
  bool repeatable = false;
};

struct CommandSpec {
  std::string name;      // "compile"
  std::string operands;  // "MODEL.onnx", "[JOB]", "stats|gc|vacuum|export FILE|import FILE"
  std::string summary;   // what it does, one sentence
  std::vector<OptionSpec> options;
  bool internal = false;  // started by fusetune itself (worker-child): in no help text
};

// Every command, in the order `fusetune --help` lists them.
const std::vector<CommandSpec>& command_table();
// The command named `name`; an Error for a name the table lacks.
const CommandSpec& command_spec(const std::string& name);

// "fusetune compile MODEL.onnx --device NAME --out DIR [--shape NAME=DxD]... [--verify-each]".
std::string synopsis(const CommandSpec& spec);
// The synopsis, the summary and one line per option.
std::string command_help(const CommandSpec& spec);
// `fusetune --help`: every command's synopsis and summary.
std::string overview();

// `argv` parsed with the spec's options (an unknown one is an error naming it); a required option
// missing is an error that gives the synopsis.
Args parse_args(const CommandSpec& spec, const std::vector<std::string>& argv);
// Throws Error("usage: SYNOPSIS") unless `ok`: for a command's own operand checks.
void check_usage(bool ok, const CommandSpec& spec);

}  // namespace fusetune::cli
