#include "common/flags.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/version.h"

namespace elastrun::flags {
namespace {

// The help layout of every binary: the intro (usage and what it does), the
// flags one per line (their names but the underscored spellings, which are
// aliases), the commands, the footer.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter(std::string intro, std::string footer)
      : intro_(std::move(intro)), footer_(std::move(footer)) {
    column_width(32);
  }

  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    // CLI11 separates groups with two empty lines; one reads better.
    std::string text = CLI::Formatter::make_help(app, std::move(name), mode);
    for (size_t at; (at = text.find("\n\n\n")) != std::string::npos;) text.erase(at, 1);
    return text;
  }
  std::string make_description(const CLI::App* app) const override {
    if (intro_.empty()) return "";
    return absl::StrCat(absl::StripSuffix(intro_, "\n"), "\n");
  }
  std::string make_usage(const CLI::App*, std::string) const override { return ""; }
  std::string make_footer(const CLI::App*) const override {
    return footer_.empty() ? "" : absl::StrCat(absl::StripSuffix(footer_, "\n"), "\n");
  }
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional) return opt->get_name();
    std::vector<std::string> names;
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
    for (const std::string& l : opt->get_lnames()) {
      // An underscored spelling is an alias of the dashed one before it.
      if (l.find('_') == std::string::npos) names.push_back("--" + l);
    }
    return absl::StrJoin(names, ", ");
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0 || opt->get_type_name().empty()) return "";
    return " " + opt->get_type_name();
  }
  // The command list shows each command's one-line summary.
  std::string make_subcommand(const CLI::App* sub) const override {
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(), sub->get_description(),
                             column_width_);
    return out.str();
  }

 private:
  std::string intro_;
  std::string footer_;
};

const CLI::App* Deepest(const CLI::App& app) {
  const CLI::App* at = &app;
  for (;;) {
    std::vector<const CLI::App*> subs = at->get_subcommands([](const CLI::App* s) {
      return s->parsed() > 0;
    });
    if (subs.empty()) return at;
    at = subs.back();
  }
}

}  // namespace

void Configure(CLI::App* app, const std::string& intro, const std::string& footer,
               bool version) {
  app->formatter(std::make_shared<HelpFormatter>(intro, footer));
  // argparse's rule, which torchrun users expect: the last one wins.
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->option_defaults()->group("Flags");
  app->set_help_flag("-h,--help", "show this help");
  if (version) {
    app->set_version_flag("--version", VersionLine(FullName(*app)),
                          "print the version (and git commit) and exit");
  }
}

std::unique_ptr<CLI::App> NewApp(const std::string& binary, const std::string& intro,
                                 const std::string& footer, bool version) {
  auto app = std::make_unique<CLI::App>("", binary);
  Configure(app.get(), intro, footer, version);
  return app;
}

CLI::App* AddCommand(CLI::App* parent, const std::string& name, const std::string& summary,
                     const std::string& intro, const std::string& footer) {
  CLI::App* sub = parent->add_subcommand(name, summary);
  Configure(sub, intro, footer, /*version=*/false);
  sub->group("Commands");
  return sub;
}

std::string WithUnderscores(const std::string& names) {
  std::vector<std::string> out;
  for (absl::string_view n : absl::StrSplit(names, ',')) {
    out.emplace_back(n);
    if (absl::StartsWith(n, "--") && absl::StrContains(n.substr(2), '-')) {
      out.push_back(absl::StrCat("--", absl::StrReplaceAll(n.substr(2), {{"-", "_"}})));
    }
  }
  return absl::StrJoin(out, ",");
}

std::string UsageError(const std::string& binary, const std::string& message) {
  return absl::StrCat(binary, ": ", message, "\nRun '", binary, " --help' for usage.\n");
}

std::string ErrorMessage(const CLI::ParseError& error) {
  const std::string what = error.what();
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr &&
      absl::StrContains(what, ": 1 required") && absl::EndsWith(what, "missing")) {
    return absl::StrCat(what.substr(0, what.find(": ")), " needs a value");
  }
  constexpr absl::string_view kOverride = " was given a disallowed flag override";
  if (absl::EndsWith(what, kOverride)) {
    // "print-config was given a disallowed flag override"
    return absl::StrCat("--", what.substr(0, what.size() - kOverride.size()),
                        " takes no value");
  }
  constexpr absl::string_view kConvert = "Could not convert: ";
  if (absl::StartsWith(what, kConvert) && absl::StrContains(what, " = ")) {
    // "Could not convert: --standby = maybe"
    const std::string rest = what.substr(kConvert.size());
    const size_t eq = rest.find(" = ");
    return absl::StrCat(rest.substr(0, eq), ": \"", rest.substr(eq + 3),
                        "\" is not a valid value");
  }
  return what;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": cannot read: ", std::strerror(errno)));
  }
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " is empty"));
  return token;
}

std::string FullName(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* a = &app; a != nullptr; a = a->get_parent()) {
    names.insert(names.begin(), a->get_name());
  }
  return absl::StrJoin(names, " ");
}

Outcome TryParse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  Outcome o;
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    o.kind = Outcome::kHelp;
  } catch (const CLI::CallForVersion& v) {
    o.kind = Outcome::kVersion;
    o.message = v.what();
  } catch (const CLI::ExtrasError& e) {
    // Named by the first word that was not expected (CLI11 lists them all).
    const CLI::App* at = Deepest(app);
    const std::vector<std::string> extra = at->remaining();
    o.kind = Outcome::kError;
    o.where = FullName(*at);
    o.message = e.what();
    if (!extra.empty()) {
      o.message = absl::StrCat(
          absl::StartsWith(extra[0], "-") ? "unknown flag " : "unexpected argument ", extra[0]);
    }
  } catch (const CLI::ParseError& e) {
    o.kind = Outcome::kError;
    o.where = FullName(*Deepest(app));
    o.message = ErrorMessage(e);
  }
  return o;
}

std::optional<int> Parse(CLI::App& app, std::vector<std::string> args, std::ostream& out,
                         std::ostream& err) {
  const Outcome o = TryParse(app, std::move(args));
  switch (o.kind) {
    case Outcome::kOk:
      return std::nullopt;
    case Outcome::kHelp:
      out << app.help();  // the help of the (sub)command asked about
      return 0;
    case Outcome::kVersion:
      out << o.message << "\n";
      return 0;
    case Outcome::kError:
      break;
  }
  err << UsageError(o.where, o.message);
  return kExitUsage;
}

std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  return Parse(app, std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}

// ---- --config FILE ----

namespace {

// Larger than any sensible config; the bound keeps a wrong path (a log, a
// device) from being read whole.
constexpr size_t kMaxConfigBytes = 1 << 20;

// The names a config file may set: every long flag but these three.
bool Settable(const CLI::Option* opt) {
  return !opt->get_lnames().empty() && !opt->check_lname("help") &&
         !opt->check_lname("version") && !opt->check_lname("config");
}

}  // namespace

ConfigFile::ConfigFile(CLI::App* app) : app_(app) {
  app->add_option("--config", path_,
                  "read flags from FILE: `name = value` lines, names\n"
                  "as the long flags (token-file = /etc/elastrun/token),\n"
                  "`#` comments; flags on the command line win.")
      ->type_name("FILE");
}

absl::StatusOr<std::vector<ConfigFile::Line>> ConfigFile::Read() const {
  std::ifstream in(path_, std::ios::binary);
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad() || (!in && !in.eof())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path_, ": cannot read: ", std::strerror(errno)));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path_, ": larger than ", kMaxConfigBytes, " bytes"));
  }
  std::vector<Line> lines;
  int number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++number;
    absl::string_view s = absl::StripAsciiWhitespace(raw);
    if (s.empty() || s[0] == '#' || s[0] == ';') continue;
    const std::string at = absl::StrCat(path_, ":", number, ": ");
    const size_t eq = s.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "expected `name = value`, got \"", s, "\""));
    }
    Line line;
    line.number = number;
    line.key = std::string(absl::StripAsciiWhitespace(s.substr(0, eq)));
    absl::string_view value = absl::StripAsciiWhitespace(s.substr(eq + 1));
    const bool quoted = value.size() >= 2 && value.front() == '"' && value.back() == '"';
    if (quoted) value = value.substr(1, value.size() - 2);
    line.value = std::string(value);
    line.option = line.key.empty() ? nullptr : app_->get_option_no_throw("--" + line.key);
    if (line.option == nullptr || !Settable(line.option)) {
      std::vector<std::string> known;
      for (const CLI::Option* opt : app_->get_options()) {
        if (Settable(opt)) known.push_back(opt->get_lnames()[0]);
      }
      return absl::InvalidArgumentError(absl::StrCat(at, "unknown key \"", line.key,
                                                     "\" (known: ", absl::StrJoin(known, ", "),
                                                     ")"));
    }
    if (line.value.empty() && !quoted) {
      return absl::InvalidArgumentError(absl::StrCat(at, line.key, " needs a value"));
    }
    for (const Line& before : lines) {
      if (before.option == line.option) {
        return absl::InvalidArgumentError(absl::StrCat(at, line.key, " is already set on line ",
                                                       before.number));
      }
      if (line.option->get_excludes().count(before.option) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(at, line.key, " and ", before.key,
                                                       " (line ", before.number,
                                                       ") exclude each other"));
      }
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

absl::Status ConfigFile::Apply() {
  if (path_.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<Line>> lines = Read();
  if (!lines.ok()) return lines.status();
  // What the command line gave, before the file adds to it.
  std::set<const CLI::Option*> given;
  for (const CLI::Option* opt : app_->get_options()) {
    if (opt->count() > 0) given.insert(opt);
  }
  for (Line& line : *lines) {
    bool overridden = given.count(line.option) > 0;
    for (const CLI::Option* ex : line.option->get_excludes()) overridden |= given.count(ex) > 0;
    if (overridden) continue;
    try {
      line.option->add_result(line.value);
      line.option->run_callback();  // converts and checks, as parsing would
    } catch (const CLI::ParseError& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ":", line.number, ": ", ErrorMessage(e)));
    }
    set_.push_back(std::move(line));
  }
  return absl::OkStatus();
}

std::string ConfigFile::Locate(const std::string& message) const {
  // The first flag the message names decides.
  size_t first = std::string::npos;
  const Line* from = nullptr;
  for (const Line& line : set_) {
    for (const std::string& name : line.option->get_lnames()) {
      const std::string flag = "--" + name;
      for (size_t at = message.find(flag); at != std::string::npos;
           at = message.find(flag, at + 1)) {
        const size_t end = at + flag.size();
        const bool whole = end == message.size() ||
                           !(absl::ascii_isalnum(message[end]) || message[end] == '-' ||
                             message[end] == '_');
        if (whole && at < first) {
          first = at;
          from = &line;
        }
      }
    }
  }
  if (from == nullptr) return message;
  return absl::StrCat(path_, ":", from->number, ": ", message);
}

}  // namespace elastrun::flags
