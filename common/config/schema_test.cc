#include "common/config/schema.h"

#include "common/config/loader.h"
#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

using ::testing::HasSubstr;
using testing::ErrorOf;

// The shape of an `elastrun submit` job spec, as the CLI will declare it.
Schema JobSpec() {
  return Schema("JobSpec")
      .Required("name", Type::String(), "Job name.")
      .Required("nnodes", Type::String(), "Node count or MIN:MAX.")
      .Optional("nproc_per_node", Type::Int(), "1", "Workers per node.")
      .Optional("max_restarts", Type::Int(), "3", "Restarts before giving up.")
      .Required("command", Type::List(Type::String()), "Worker command line.")
      .Optional("env", Type::Map(Type::String()), "{}", "Extra environment.")
      .Optional("resources",
                Type::Struct(Schema("Resources")
                                 .Optional("cpus", Type::Int(), "1", "CPUs per worker.")
                                 .Optional("memory_gb", Type::Double(), "2", "Memory.")),
                "{}", "Per-worker resources.");
}

absl::StatusOr<Node> Check(const std::string& yaml) {
  absl::StatusOr<Node> n = ParseYaml(yaml, "job.yaml");
  if (!n.ok()) return n;
  return JobSpec().Apply(*n, "");
}

TEST(SchemaTest, AcceptsValidSpecAndFillsDefaults) {
  absl::StatusOr<Node> n =
      Check("name: j\nnnodes: 2\ncommand: [python, train.py]\nresources: {cpus: 4}\n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->Find("nnodes")->ScalarText(), "2");  // A number is fine as a string.
  EXPECT_EQ(n->Find("max_restarts")->as_int(), 3);
  EXPECT_EQ(n->Find("resources")->Find("cpus")->as_int(), 4);
  EXPECT_DOUBLE_EQ(n->Find("resources")->Find("memory_gb")->as_double(), 2.0);
}

TEST(SchemaTest, UnknownKeyListsAcceptedAndClosest) {
  const std::string error =
      ErrorOf(Check("name: j\nnnodes: 1\ncommand: [x]\nmax_restart: 2\n"));
  EXPECT_THAT(error, HasSubstr("job.yaml:4:1: max_restart: unknown key 'max_restart' "
                               "for JobSpec; accepted: name, nnodes, nproc_per_node, "
                               "max_restarts, command, env, resources; did you mean: "
                               "max_restarts?"));
}

TEST(SchemaTest, WrongTypeNamesFieldAndPosition) {
  EXPECT_THAT(ErrorOf(Check("name: j\nnnodes: 1\ncommand: [x]\nnproc_per_node: two\n")),
              HasSubstr("job.yaml:4:17: nproc_per_node: expected int, got string \"two\""));
  EXPECT_THAT(ErrorOf(Check("name: j\nnnodes: 1\ncommand: [x, [y]]\n")),
              HasSubstr("job.yaml:3:14: command[1]: expected string, got list of 1"));
  EXPECT_THAT(ErrorOf(Check("name: j\nnnodes: 1\ncommand: x\n")),
              HasSubstr("command: expected list<string>, got string \"x\""));
}

TEST(SchemaTest, NestedStructErrorsUseDottedKey) {
  EXPECT_THAT(ErrorOf(Check("name: j\nnnodes: 1\ncommand: [x]\nresources:\n  gpus: 1\n")),
              HasSubstr("job.yaml:5:3: resources.gpus: unknown key 'gpus' for Resources"));
  EXPECT_THAT(ErrorOf(Check("name: j\nnnodes: 1\ncommand: [x]\nresources:\n  cpus: 1.5\n")),
              HasSubstr("resources.cpus: expected int, got double 1.5"));
}

TEST(SchemaTest, MissingRequiredNamesTypeAndDoc) {
  EXPECT_THAT(ErrorOf(Check("name: j\ncommand: [x]\n")),
              HasSubstr("job.yaml:1:1: missing required key 'nnodes' (string: Node "
                        "count or MIN:MAX.) for JobSpec"));
}

TEST(SchemaTest, NullOnlyWhereNullable) {
  Schema s = Schema("S")
                 .Optional("a", Type::Int().OrNull(), "null", "Maybe an int.")
                 .Optional("b", Type::Int(), "1", "An int.");
  absl::StatusOr<Node> ok = s.Apply(*ParseYaml("a: null\n", "s.yaml"), "sec");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ErrorOf(s.Apply(*ParseYaml("b: null\n", "s.yaml"), "sec")),
              HasSubstr("sec.b: expected int, got null"));
  EXPECT_EQ(Type::Int().OrNull().ToString(), "int?");
}

TEST(SchemaTest, TypeNames) {
  EXPECT_EQ(Type::List(Type::Map(Type::Double())).ToString(), "list<map<double>>");
  EXPECT_EQ(Type::Object().ToString(), "object");
  EXPECT_EQ(Type::Struct(Schema("Res")).ToString(), "Res");
}

TEST(SchemaTest, DoubleAcceptsInt) {
  EXPECT_TRUE(Type::Double().Check(Node::Int(3), "x").ok());
  EXPECT_FALSE(Type::Int().Check(Node::Double(3), "x").ok());
}

TEST(SchemaDeathTest, BadDefaultIsAProgrammingError) {
  EXPECT_DEATH(Schema("S").Optional("a", Type::Int(), "oops", "doc"),
               "bad declaration of S.a");
  EXPECT_DEATH(Schema("S").Optional("a", Type::Int(), "1", "").Required("a", Type::Int(), ""),
               "declared twice");
}

}  // namespace
}  // namespace elastrun::config
