// cli/args.h: a small command-line flag parser for the octet subcommands:
// --name value, --name=value and boolean --flag; unknown flags are errors.
// defines: Args, split_commas
#pragma once

#include <map>
#include <string>
#include <vector>

namespace octet::cli {

class Args {
 public:
  // `args` excludes the program and subcommand names. `flags` lists the flags that
  // take a value, `switches` those that do not; anything else is an error naming the
  // command and the accepted flags.
  Args(std::string command, const std::vector<std::string>& args,
       const std::vector<std::string>& flags, const std::vector<std::string>& switches = {});

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  long long get_int(const std::string& name, long long fallback) const;
  double get_double(const std::string& name, double fallback) const;
  // Comma-separated integers: "256,512,1024".
  std::vector<long long> get_int_list(const std::string& name,
                                      const std::vector<long long>& fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// The non-empty items of a comma-separated list: "a,,b," -> {"a", "b"}.
std::vector<std::string> split_commas(const std::string& s);

}  // namespace octet::cli
