#include "common/flags.h"

#include <sstream>

#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::flags {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  std::optional<int> code;
  std::string out, err;
};

class FlagsTest : public ::testing::Test {
 protected:
  FlagsTest() : app_(NewApp("tool", "usage: tool [flags]\n\nDoes things.", "The end.")) {
    app_->add_option(WithUnderscores("--max-restarts"), restarts_, "restarts")
        ->type_name("K");
    app_->add_flag("--standby", standby_, "keep standbys");
    CLI::App* sub = AddCommand(app_.get(), "go", "go somewhere", "usage: tool go [flags]");
    sub->add_option("--speed", speed_, "how fast")->type_name("N");
  }

  Result Parse(std::vector<std::string> args) {
    std::ostringstream out, err;
    Result r;
    r.code = flags::Parse(*app_, std::move(args), out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  std::unique_ptr<CLI::App> app_;
  std::string restarts_, speed_;
  bool standby_ = false;
};

TEST_F(FlagsTest, BothSpellingsAndTheLastValueWins) {
  Result r = Parse({"--max_restarts", "1", "--max-restarts=3", "--standby"});
  EXPECT_EQ(r.code, std::nullopt) << r.err;
  EXPECT_EQ(restarts_, "3");
  EXPECT_TRUE(standby_);
}

TEST_F(FlagsTest, UsageErrorsNameTheFlagAndExit2) {
  Result unknown = Parse({"--max-restart", "1"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_EQ(unknown.err,
            "tool: unknown flag --max-restart\nRun 'tool --help' for usage.\n");
  Result missing = Parse({"--max-restarts"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_THAT(missing.err, HasSubstr("tool: --max-restarts needs a value\n"));
  Result extra = Parse({"word"});
  EXPECT_EQ(extra.code, kExitUsage);
  EXPECT_THAT(extra.err, HasSubstr("tool: unexpected argument word\n"));
  // A subcommand's error names the subcommand.
  Result sub = Parse({"go", "--speed"});
  EXPECT_EQ(sub.code, kExitUsage);
  EXPECT_EQ(sub.err,
            "tool go: --speed needs a value\nRun 'tool go --help' for usage.\n");
  EXPECT_TRUE(unknown.out.empty());
}

TEST_F(FlagsTest, HelpShowsIntroFlagsFooterOnce) {
  Result r = Parse({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, ::testing::StartsWith("usage: tool [flags]\n\nDoes things.\n"));
  EXPECT_THAT(r.out, HasSubstr("--max-restarts K"));
  EXPECT_THAT(r.out, Not(HasSubstr("--max_restarts")));  // an alias, not shown
  EXPECT_THAT(r.out, HasSubstr("--version"));
  EXPECT_THAT(r.out, HasSubstr("go"));
  EXPECT_THAT(r.out, HasSubstr("go somewhere"));
  EXPECT_THAT(r.out, HasSubstr("The end.\n"));
  EXPECT_TRUE(r.err.empty());

  Result sub = Parse({"go", "--help"});
  EXPECT_EQ(sub.code, 0);
  EXPECT_THAT(sub.out, ::testing::StartsWith("usage: tool go [flags]\n"));
  EXPECT_THAT(sub.out, HasSubstr("--speed N"));
  EXPECT_THAT(sub.out, Not(HasSubstr("--max-restarts")));
}

TEST_F(FlagsTest, VersionNamesTheProjectVersion) {
  Result r = Parse({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, VersionLine("tool") + "\n");
  EXPECT_THAT(r.out, ::testing::MatchesRegex("tool [0-9]+\\.[0-9]+\\.[0-9]+ \\((commit [0-9a-f]+; )?"
                                             "(CUDA off|CUDA [0-9.a-z]+, NCCL on)\\)\n"));
  EXPECT_EQ(std::string(ProjectVersion()), "0.2.0");
  // What this build can do, as configured (cmake/cuda.cmake).
#if ELASTRUN_WITH_CUDA
  EXPECT_THAT(r.out, HasSubstr(", NCCL on)"));
#else
  EXPECT_THAT(r.out, HasSubstr("CUDA off)"));
#endif
}

}  // namespace
}  // namespace elastrun::flags
