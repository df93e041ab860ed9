// The option parser of the graphrun subcommands (tools/cli.h, on CLI11), driven directly: the forms
// a value may take, repeated and comma-separated options, the usage errors word for word, and the
// layout of --help.
#include <gtest/gtest.h>

#include <sstream>

#include "tools/cli.h"

namespace graphrun {
namespace {

using cli::Args;
using cli::Command;

const Command& command() {
  static const Command cmd{
      "demo",
      "graphrun demo MODEL.onnx [options]",
      "A command to parse with.",
      {
          {"lr", "RATE", "learning rate (default 0.2)"},
          {"epochs", "E", "epochs (default 10)"},
          {"nesterov", "", "Nesterov momentum"},
          {"freeze", "NAMES", "parameters that are not trained\n"
                              "                            (comma-separated or repeated)", true},
          {"normalize", "MEAN,STD", "feed (pixels - MEAN) / STD"},
          {"output", "FILE", "where to write (also -o FILE)"},
          {"a-name-too-long-for-the-column", "N", "starts on a line of its own\nand goes on here"},
      },
      "examples:\n  graphrun demo m.onnx --lr 0.1"};
  return cmd;
}

Args parse(const std::vector<std::string>& argv) { return Args(command(), argv); }

// A usage error without the "graphrun demo: " and " (see graphrun demo --help)" around it, which
// every one has; checks that it is one line.
std::string message_of(const Error& e) {
  const std::string m = e.what(), head = "graphrun demo: ", tail = " (see graphrun demo --help)";
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  if (m.rfind(head, 0) != 0 || m.size() < head.size() + tail.size() || m.substr(m.size() - tail.size()) != tail) {
    ADD_FAILURE() << "not a usage error of graphrun demo: " << m;
    return m;
  }
  return m.substr(head.size(), m.size() - head.size() - tail.size());
}

std::string error_of(const std::vector<std::string>& argv) {
  try {
    parse(argv);
  } catch (const Error& e) {
    return message_of(e);
  }
  return "(no error)";
}

// The error of reading `--flag value` as an integer or (real) a number.
std::string error_of_value(const std::string& flag, const std::string& value, bool real) {
  Args a = parse({"--" + flag, value});
  try {
    if (real) a.get_double(flag, 0);
    else a.get_int(flag, 0);
  } catch (const Error& e) {
    return message_of(e);
  }
  return "(no error)";
}

TEST(CliArgs, ValuesInEitherFormAndPositionalsInOrder) {
  for (const auto& argv : std::vector<std::vector<std::string>>{{"m.onnx", "--lr", "0.5", "x"},
                                                               {"m.onnx", "--lr=0.5", "x"},
                                                               {"--lr", "0.5", "m.onnx", "x"}}) {
    Args a = parse(argv);
    EXPECT_FALSE(a.help());
    EXPECT_TRUE(a.has("lr"));
    EXPECT_EQ(a.get("lr"), "0.5");
    EXPECT_EQ(a.get_double("lr", 0), 0.5);
    EXPECT_EQ(a.positional(), (std::vector<std::string>{"m.onnx", "x"}));
  }
  Args none = parse({"m.onnx"});
  EXPECT_FALSE(none.has("lr"));
  EXPECT_EQ(none.get("lr", "dflt"), "dflt");
  EXPECT_EQ(none.get_int("epochs", 7), 7);
  EXPECT_TRUE(none.all("freeze").empty());
}

TEST(CliArgs, ValuesMayLookLikeNumbersOrContainEquals) {
  Args a = parse({"--lr", "-0.25", "--epochs=-3", "--normalize", "0.1,0.3", "-o", "a=b.onnx", "-5"});
  EXPECT_EQ(a.get_double("lr", 0), -0.25);
  EXPECT_EQ(a.get_int("epochs", 0), -3);
  EXPECT_EQ(a.all("normalize"), (std::vector<std::string>{"0.1", "0.3"}));
  EXPECT_EQ(a.get("output"), "a=b.onnx");
  EXPECT_EQ(a.positional(), (std::vector<std::string>{"-5"}));  // a negative number is not an option
  EXPECT_EQ(parse({"--output=x.onnx"}).get("output"), "x.onnx");
  EXPECT_EQ(parse({"-ox.onnx"}).get("output"), "x.onnx");
  EXPECT_EQ(parse({"--output", "-"}).get("output"), "-");
}

TEST(CliArgs, SwitchesTakeNoValue) {
  EXPECT_TRUE(parse({"--nesterov"}).has("nesterov"));
  EXPECT_EQ(parse({"--nesterov"}).get("nesterov"), "1");
  EXPECT_FALSE(parse({}).has("nesterov"));
  EXPECT_EQ(error_of({"--nesterov=1"}), "--nesterov takes no value");
  EXPECT_EQ(error_of({"--nesterov=false"}), "--nesterov takes no value");
  EXPECT_EQ(error_of({"--nesterov="}), "--nesterov takes no value");  // CLI11 alone read it as the switch
  // The word after a switch is a positional, not its value.
  EXPECT_EQ(parse({"--nesterov", "m.onnx"}).positional(), (std::vector<std::string>{"m.onnx"}));
}

TEST(CliArgs, RepeatableOptionsCollectCommaSeparatedLists) {
  Args a = parse({"--freeze", "a,b", "--freeze=c", "--freeze", ",d,,e,"});
  EXPECT_EQ(a.all("freeze"), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(a.get("freeze"), ",d,,e,");  // get: the last one as given
}

TEST(CliArgs, UsageErrorsAreOneLineNamingTheFlag) {
  EXPECT_EQ(error_of({"--bogus"}), "unknown option --bogus");
  EXPECT_EQ(error_of({"m.onnx", "--bogus=3"}), "unknown option --bogus");
  EXPECT_EQ(error_of({"-x"}), "unknown option -x");
  EXPECT_EQ(error_of({"--LR", "1"}), "unknown option --LR");        // no case folding
  EXPECT_EQ(error_of({"--ep", "1"}), "unknown option --ep");        // no prefixes
  EXPECT_EQ(error_of({"--lr"}), "--lr needs a value (RATE)");
  EXPECT_EQ(error_of({"--lr", "--epochs", "3"}), "--lr needs a value (RATE)");  // not --lr=--epochs
  EXPECT_EQ(error_of({"--lr="}), "--lr needs a value (RATE)");
  EXPECT_EQ(error_of({"-o"}), "--output needs a value (FILE)");
  EXPECT_EQ(error_of({"--lr", "1", "--lr", "2"}), "--lr given twice");
  EXPECT_EQ(error_of({"--lr=1", "--lr=1"}), "--lr given twice");
  EXPECT_EQ(error_of({"--nesterov", "--nesterov"}), "--nesterov given twice");
  EXPECT_EQ(error_of({"-o", "a", "--output", "b"}), "--output given twice");
}

TEST(CliArgs, BadNumbersNameTheFlagAndTheValue) {
  EXPECT_EQ(error_of_value("epochs", "ten", false), "--epochs must be an integer, got 'ten'");
  EXPECT_EQ(error_of_value("epochs", "3.5", false), "--epochs must be an integer, got '3.5'");
  EXPECT_EQ(error_of_value("epochs", "12abc", false), "--epochs must be an integer, got '12abc'");
  EXPECT_EQ(error_of_value("epochs", "99999999999999999999", false), "--epochs is out of range, got '99999999999999999999'");
  EXPECT_EQ(error_of_value("lr", "fast", true), "--lr must be a number, got 'fast'");
  EXPECT_EQ(error_of_value("lr", "0.1x", true), "--lr must be a number, got '0.1x'");
  EXPECT_EQ(error_of_value("lr", "1e999", true), "--lr is out of range, got '1e999'");
  EXPECT_EQ(parse({"--lr", "1e-3"}).get_double("lr", 0), 1e-3);
  EXPECT_EQ(parse({"--epochs", "+12"}).get_int("epochs", 0), 12);
}

TEST(CliArgs, DoubleDashEndsTheOptions) {
  Args a = parse({"--lr", "1", "--", "--lr", "-m.onnx", "--"});
  EXPECT_EQ(a.get("lr"), "1");
  EXPECT_EQ(a.positional(), (std::vector<std::string>{"--lr", "-m.onnx", "--"}));
  EXPECT_FALSE(parse({"--", "--help"}).help());
}

TEST(CliArgs, HelpWinsOverTheRestOfTheLine) {
  EXPECT_TRUE(parse({"--help"}).help());
  EXPECT_TRUE(parse({"-h"}).help());
  EXPECT_TRUE(parse({"m.onnx", "--lr", "1", "--help"}).help());
  EXPECT_TRUE(parse({"--bogus", "--lr", "1", "--lr", "2", "-h"}).help());
  EXPECT_FALSE(parse({"m.onnx"}).help());
}

TEST(CliArgs, HelpLaysOutEveryOptionInTwoColumns) {
  const std::string want =
      "usage: graphrun demo MODEL.onnx [options]\n"
      "\n"
      "A command to parse with.\n"
      "\n"
      "options:\n"
      "  --lr RATE                 learning rate (default 0.2)\n"
      "  --epochs E                epochs (default 10)\n"
      "  --nesterov                Nesterov momentum\n"
      "  --freeze NAMES            parameters that are not trained\n"
      "                            (comma-separated or repeated)\n"
      "  --normalize MEAN,STD      feed (pixels - MEAN) / STD\n"
      "  --output FILE             where to write (also -o FILE)\n"
      "  --a-name-too-long-for-the-column N\n"
      "                            starts on a line of its own\n"
      "                            and goes on here\n"
      "  --help                    show this help\n"
      "\n"
      "examples:\n"
      "  graphrun demo m.onnx --lr 0.1\n";
  EXPECT_EQ(command().help(), want);
  const Command bare{"bare", "graphrun bare", "Nothing to set.", {}, ""};
  EXPECT_EQ(bare.help(), "usage: graphrun bare\n\nNothing to set.\n");
  try {
    Args(bare, {"--x"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "graphrun bare: unknown option --x (see graphrun bare --help)");
  }
}

}  // namespace
}  // namespace graphrun
