// cli/command.h: the `octet` command line on CLI11: subcommands registered with what they
// run, flags declared once each (help text, default, check), and one place that turns
// usage errors into a message naming the flag (and its nearest match) with exit code 2.
// defines: Commands, add_parsed, parses_with, at_least, above, run_command_line
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace octet::cli {

// The subcommands of the octet command and what each runs once its flags are parsed.
class Commands {
 public:
  // Adds `name` under `parent` (the octet app or a group such as `bench`). `run` is called
  // after a successful parse when this is the command the user chose; it returns the exit
  // code. A group (no `run`) only holds subcommands.
  CLI::App* add(CLI::App& parent, const std::string& name, const std::string& description,
                std::function<int()> run = nullptr);
  // The run function of `app`, or nullptr.
  const std::function<int()>* find(const CLI::App* app) const;

 private:
  std::map<const CLI::App*, std::function<int()>> runs_;
};

// A flag whose text `parse` turns into `target` when the flag is given; `parse` throws
// octet::Error for a bad value, which becomes a usage error naming the flag. Parsing once,
// into the type the program uses (a Device, a Precision, a Recipe).
template <typename T, typename Parse>
CLI::Option* add_parsed(CLI::App& app, const std::string& name, T& target, Parse parse,
                        const std::string& help) {
  return app
      .add_option_function<std::string>(
          name,
          [&target, parse, name](const std::string& text) {
            try {
              target = parse(text);
            } catch (const Error& e) {
              throw CLI::ValidationError(name, e.what());
            }
          },
          help)
      ->type_name("TEXT");
}

// A check that `parse` (throwing octet::Error) accepts the value, for flags whose text is
// kept as given: its message becomes the usage error.
template <typename Parse>
CLI::Validator parses_with(Parse parse, const std::string& name) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      },
      "", name);
}

// A check that the value is a number >= `min`: "--steps: expected a number >= 0, got 'abc'".
// (Whether it must be an integer is the option's type: CLI11 converts after the checks.)
CLI::Validator at_least(double min);
// A check that the value is a number > `bound`: "--lr: must be > 0, got 0".
CLI::Validator above(double bound);
// A check that `min` <= value < `bound`: "--adam-beta2: must be >= 0 and < 1, got 1".
CLI::Validator at_least_and_below(double min, double bound);

// Parses `args` (without the program name) for `app` and runs the chosen command. Returns
// the exit code: the command's, 0 for --help, 1 when no command was given (the usage is
// printed), 2 for a usage error (an unknown flag or command, with its nearest match; a bad
// value; a missing one, also where the next flag took its place: "--steps needs a number, but
// '--lr' follows it") and for an octet::Error the command throws, 3 for anything else.
int run_command_line(CLI::App& app, const Commands& commands, std::vector<std::string> args);

}  // namespace octet::cli
