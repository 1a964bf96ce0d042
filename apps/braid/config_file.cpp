#include "config_file.h"

#include <fstream>
#include <set>

#include "braid/core/error.h"

namespace braid::cli {

namespace {

// The sub-command argv names (the first argument that is one), or null.
const CLI::App* find_subcommand(const CLI::App& app, int argc, char** argv, int* at) {
  for (int i = 1; i < argc; ++i) {
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == argv[i]) {
        *at = i;
        return s;
      }
  }
  return nullptr;
}

// The value of `--config` among the sub-command's arguments ("" when absent);
// words after "--" are another command's (braid run's launch command).
std::string config_path(int from, int argc, char** argv) {
  std::string path;
  for (int i = from; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--config") {
      BRAID_CONFIG_CHECK(i + 1 < argc, "--config needs a file name");
      path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      path = a.substr(9);
    }
  }
  return path;
}

// The sub-command's option for TOML key `key` (dashes or underscores), or null.
const CLI::Option* option_for(const CLI::App& sub, std::string key) {
  if (const CLI::Option* o = sub.get_option_no_throw("--" + key)) return o;
  for (char& c : key)
    if (c == '_') c = '-';
  return sub.get_option_no_throw("--" + key);
}

}  // namespace

void add_config_option(CLI::App& app) {
  for (CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) {
    // Read before parsing (expand_config); here it only has to be accepted and documented.
    s->add_option("--config", [](const CLI::results_t&) { return true; },
                  "TOML file of " + s->get_name() + "'s options under [" + s->get_name() +
                      "] (keys as the flags without --); flags given here override it")
        ->type_name("FILE")
        ->check(CLI::ExistingFile);
    for (CLI::Option* o : s->get_options()) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

std::vector<std::string> expand_config(const CLI::App& app, int argc, char** argv, std::string* path_out) {
  std::vector<std::string> out(argv, argv + argc);
  int at = 0;
  const CLI::App* sub = find_subcommand(app, argc, argv, &at);
  if (!sub) return out;
  const std::string path = config_path(at + 1, argc, argv);
  if (path_out) *path_out = path;
  if (path.empty()) return out;
  std::ifstream in(path);
  BRAID_CONFIG_CHECK(in.good(), "--config ", path, " cannot be read");
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(in);
  } catch (const CLI::ParseError& e) {
    throw ConfigError(detail::concat("--config ", path, ": ", e.what()));
  }
  std::set<std::string> commands;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) commands.insert(s->get_name());
  std::vector<std::string> args;
  for (const CLI::ConfigItem& it : items) {
    if (it.name == "++" || it.name == "--") continue;  // CLI11's section markers
    BRAID_CONFIG_CHECK(!it.parents.empty(), "--config ", path, ": key '", it.name, "' is outside any section; put it ",
                       "under [", sub->get_name(), "] (or the section of the command it is for)");
    BRAID_CONFIG_CHECK(it.parents.size() == 1 && commands.count(it.parents[0]), "--config ", path, ": section [",
                       CLI::detail::join(it.parents, "."), "] names no braid command; use one of [",
                       CLI::detail::join(commands, "], ["), "]");
    if (it.parents[0] != sub->get_name()) continue;  // another command's options
    const CLI::Option* o = option_for(*sub, it.name);
    BRAID_CONFIG_CHECK(o != nullptr && it.name != "config", "--config ", path, ": [", sub->get_name(), "] has no option '",
                       it.name, "'; `braid ", sub->get_name(), " --help` lists them");
    const std::string flag = o->get_name();  // the long name, "--key"
    if (o->get_expected_max() == 0) {
      // A flag: true sets it; false leaves its default.
      BRAID_CONFIG_CHECK(it.inputs.size() == 1 && (it.inputs[0] == "true" || it.inputs[0] == "false"), "--config ",
                         path, ": [", sub->get_name(), "] ", it.name, " is a flag; give it true or false");
      if (it.inputs[0] == "true") args.push_back(flag);
      continue;
    }
    for (const std::string& v : it.inputs) {
      if (v.empty()) {
        args.push_back(flag);  // "--key=" would leave the value to the next argument
        args.push_back(v);
      } else {
        args.push_back(flag + "=" + v);
      }
    }
  }
  out.insert(out.begin() + at + 1, args.begin(), args.end());
  return out;
}

}  // namespace braid::cli
