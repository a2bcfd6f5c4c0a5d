// cli/command.cpp
#include "cli/command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/strings.h"

namespace octet::cli {
namespace {

// "octet bench gemm" for the bench gemm subcommand.
std::string path_of(const CLI::App* app) {
  std::string path;
  for (; app != nullptr; app = app->get_parent()) {
    path = path.empty() ? app->get_name() : app->get_name() + " " + path;
  }
  return path;
}

// The command the parse reached: the deepest subcommand that was given.
const CLI::App* chosen(const CLI::App& app) {
  const CLI::App* a = &app;
  for (auto subs = a->get_subcommands(); !subs.empty(); subs = a->get_subcommands()) {
    a = subs.front();
  }
  return a;
}

int usage_error(const CLI::App* app, const std::string& message) {
  const std::string path = path_of(app);
  std::fprintf(stderr, "%s: error: %s\nrun '%s --help' for its usage\n", path.c_str(),
               message.c_str(), path.c_str());
  return 2;
}

std::vector<std::string> subcommand_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  return all;
}

// An argument no flag or command of `app` took: the error names the nearest one.
std::string leftover_message(const CLI::App* app, const std::string& arg) {
  if (arg.starts_with("-")) {
    std::vector<std::string> flags;
    const std::string typed = arg.substr(0, arg.find('='));
    for (const CLI::Option* opt : app->get_options()) {
      for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
      for (const std::string& name : opt->get_snames()) flags.push_back("-" + name);
    }
    const std::string near = closest_name(typed, flags);
    return "unknown flag '" + typed + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?");
  }
  const std::vector<std::string> commands = subcommand_names(app);
  if (commands.empty()) return "unexpected argument '" + arg + "'";
  const std::string near = closest_name(arg, commands);
  return "unknown command '" + arg + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
         " (commands: " + joined(commands) + ")";
}

// A flag that takes a value, written with another flag (or nothing) after it:
// `--steps --lr 1e-2` reads as --steps with no number. Empty when there is none.
std::string missing_value_message(const CLI::App* app, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!arg.starts_with("--") || arg.find('=') != std::string::npos) continue;
    const CLI::Option* opt = nullptr;
    for (const CLI::Option* o : app->get_options()) {
      if (o->check_lname(arg.substr(2))) opt = o;
    }
    if (opt == nullptr || opt->get_type_size() == 0) continue;  // unknown, or a plain flag
    const std::string type = opt->get_type_name();
    const std::string what =
        type.starts_with("INT") || type.starts_with("FLOAT") ? "a number" : "a value";
    if (i + 1 == args.size()) return arg + " needs " + what + ", and none follows it";
    const std::string& next = args[i + 1];
    char* end = nullptr;
    std::strtod(next.c_str(), &end);
    const bool is_number = !next.empty() && end != nullptr && *end == '\0';
    if (next.starts_with("-") && !is_number) {
      return arg + " needs " + what + ", but '" + next + "' follows it";
    }
  }
  return {};
}

}  // namespace

namespace {

// A check that the value is a number for which `holds(x)` is true; `rule` says which, as in
// "expected a number > 0, got 'abc'" and "must be > 0, got 0".
template <class Holds>
CLI::Validator number_check(const std::string& rule, const char* name, Holds holds) {
  return CLI::Validator(
      [holds, rule](std::string& value) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(value.c_str(), &end);
        if (value.empty() || end == nullptr || *end != '\0' || std::isnan(x)) {
          return "expected a number " + rule + ", got '" + value + "'";
        }
        if (!holds(x)) return "must be " + rule + ", got " + value;
        return {};
      },
      rule, name);
}

std::string rule_text(const char* relation, double bound) {
  char text[48];
  std::snprintf(text, sizeof text, "%s %g", relation, bound);
  return text;
}

}  // namespace

CLI::Validator above(double bound) {
  return number_check(rule_text(">", bound), "ABOVE", [bound](double x) { return x > bound; });
}

CLI::Validator at_least(double min) {
  return number_check(rule_text(">=", min), "AT_LEAST", [min](double x) { return x >= min; });
}

CLI::Validator at_least_and_below(double min, double bound) {
  return number_check(rule_text(">=", min) + " and " + rule_text("<", bound), "AT_LEAST_BELOW",
                      [min, bound](double x) { return x >= min && x < bound; });
}

CLI::App* Commands::add(CLI::App& parent, const std::string& name, const std::string& description,
                        std::function<int()> run) {
  CLI::App* app = parent.add_subcommand(name, description);
  // Unknown arguments are kept, so that run_command_line names their nearest match.
  app->allow_extras();
  if (run) runs_.emplace(app, std::move(run));
  return app;
}

const std::function<int()>* Commands::find(const CLI::App* app) const {
  const auto it = runs_.find(app);
  return it == runs_.end() ? nullptr : &it->second;
}

int run_command_line(CLI::App& app, const Commands& commands, std::vector<std::string> args) {
  if (args.empty()) {
    std::fputs(app.help().c_str(), stdout);
    return 1;
  }
  if (args.size() == 1 && args[0] == "help") args[0] = "--help";
  app.allow_extras();
  const std::vector<std::string> given = args;
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
  } catch (const CLI::Success& e) {  // --help (the help of the command asked) or --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unknown flag explains the rest ("--imput" leaves --input missing): it goes first.
    const CLI::App* command = chosen(app);
    const std::string missing = missing_value_message(command, given);
    if (!missing.empty()) return usage_error(command, missing);
    const std::vector<std::string> leftover = command->remaining();
    return usage_error(command, leftover.empty() ? std::string(e.what())
                                                 : leftover_message(command, leftover.front()));
  }
  const CLI::App* command = chosen(app);
  const std::vector<std::string> leftover = command->remaining();
  if (!leftover.empty()) {
    const std::string missing = missing_value_message(command, given);
    return usage_error(command,
                       missing.empty() ? leftover_message(command, leftover.front()) : missing);
  }
  const std::function<int()>* run = commands.find(command);
  if (run == nullptr) {  // a group, such as bench, without one of its commands
    return usage_error(command, "name a command: " + joined(subcommand_names(command)));
  }
  try {
    return (*run)();
  } catch (const Error& e) {
    std::fprintf(stderr, "octet: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet: internal error: %s\n", e.what());
    return 3;
  }
}

}  // namespace octet::cli
