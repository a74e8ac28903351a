#include "common/config/registry.h"

#include <sstream>
#include <stdexcept>

#include "common/config/config.h"
#include "common/config/test_util.h"

namespace elastrun::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ErrorOf;

// Stand-ins for what the trainer registers (torch modules, optimizers).
struct Mlp {
  int64_t in_features;
  std::vector<int64_t> hidden;
  std::string activation;
  double dropout;
};
struct Sgd {
  std::shared_ptr<Mlp> model;
  double lr;
  double momentum;
};
struct Pipeline {
  std::vector<Object> stages;
};

// Registered once, in the global registry, the way components do it.
ELASTRUN_REGISTER_TARGET(
    "TestMLP", "A multilayer perceptron.",
    Schema()
        .Required("in_features", Type::Int(), "Input size.")
        .Required("hidden", Type::List(Type::Int()), "Hidden layer sizes.")
        .Optional("activation", Type::String(), "relu", "Nonlinearity.")
        .Optional("dropout", Type::Double(), "0.0", "Dropout probability."),
    [](const Args& args) -> absl::StatusOr<Object> {
      if (args.Double("dropout") >= 1) {
        return args.Error("dropout", "must be below 1");
      }
      return Object::Of(Mlp{args.Int("in_features"), args.IntList("hidden"),
                            args.String("activation"), args.Double("dropout")});
    });

ELASTRUN_REGISTER_TARGET(
    "TestSGD", "SGD over a model's parameters.",
    Schema()
        .Required("model", Type::Object(), "The model to optimize.")
        .Required("lr", Type::Double(), "Learning rate.")
        .Optional("momentum", Type::Double(), "0.9", "Momentum."),
    [](const Args& args) -> absl::StatusOr<Object> {
      ASSIGN_OR_RETURN(std::shared_ptr<Mlp> model, args.Get<Mlp>("model"));
      return Object::Of(Sgd{model, args.Double("lr"), args.Double("momentum")});
    });

ELASTRUN_REGISTER_TARGET(
    "TestPipeline", "Stages in order.",
    Schema().Required("stages", Type::List(Type::Object()), "Stages.")
            .Optional("tail", Type::Object().OrNull(), "null", "Optional last stage."),
    [](const Args& args) -> absl::StatusOr<Object> {
      Pipeline p{args.ObjectList("stages")};
      if (args.GetObject("tail").has_value()) p.stages.push_back(args.GetObject("tail"));
      return Object::Of(std::move(p));
    });

ELASTRUN_REGISTER_TARGET(
    "TestThrows", "Always throws, like a LibTorch constructor on bad sizes.", Schema(),
    [](const Args&) -> absl::StatusOr<Object> { throw std::runtime_error("boom"); });

absl::StatusOr<Object> Make(const std::string& yaml, const std::string& path) {
  absl::StatusOr<Node> root = LoadConfigFromString(yaml, "r.yaml");
  if (!root.ok()) return root.status();
  return InstantiateAt(*root, path);
}

TEST(RegistryTest, InstantiatesWithArgumentsAndDefaults) {
  absl::StatusOr<Object> o =
      Make("model:\n  _target_: TestMLP\n  in_features: 784\n  hidden: [256, 128]\n",
           "model");
  ASSERT_TRUE(o.ok()) << o.status();
  absl::StatusOr<std::shared_ptr<Mlp>> mlp = o->Get<Mlp>();
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ((*mlp)->in_features, 784);
  EXPECT_THAT((*mlp)->hidden, ElementsAre(256, 128));
  EXPECT_EQ((*mlp)->activation, "relu");
  EXPECT_EQ(o->target(), "TestMLP");
  EXPECT_EQ(o->mark().ToString(), "r.yaml:2:13");
}

TEST(RegistryTest, NestedObjectsAreInstantiatedFirst) {
  absl::StatusOr<Object> o = Make(
      "opt:\n  _target_: TestSGD\n  lr: 0.1\n"
      "  model: {_target_: TestMLP, in_features: 4, hidden: [2]}\n",
      "opt");
  ASSERT_TRUE(o.ok()) << o.status();
  std::shared_ptr<Sgd> sgd = *o->Get<Sgd>();
  EXPECT_EQ(sgd->model->in_features, 4);
  EXPECT_DOUBLE_EQ(sgd->momentum, 0.9);
}

TEST(RegistryTest, ListsOfObjectsAndNullableObject) {
  absl::StatusOr<Object> o = Make(
      "p:\n  _target_: TestPipeline\n  stages:\n"
      "    - {_target_: TestMLP, in_features: 1, hidden: []}\n"
      "    - {_target_: TestMLP, in_features: 2, hidden: []}\n",
      "p");
  ASSERT_TRUE(o.ok()) << o.status();
  std::shared_ptr<Pipeline> p = *o->Get<Pipeline>();
  ASSERT_EQ(p->stages.size(), 2u);
  EXPECT_EQ((*p->stages[1].Get<Mlp>())->in_features, 2);
  EXPECT_EQ(p->stages[1].path(), "p.stages[1]");
}

TEST(RegistryTest, TypeMismatchOnGetIsClear) {
  absl::StatusOr<Object> o =
      Make("m: {_target_: TestMLP, in_features: 1, hidden: [1]}\n", "m");
  ASSERT_TRUE(o.ok());
  EXPECT_THAT(ErrorOf(o->Get<Sgd>()),
              HasSubstr("expected an object of type elastrun::config::(anonymous "
                        "namespace)::Sgd, but target 'TestMLP' (r.yaml:1:15) makes "
                        "elastrun::config::(anonymous namespace)::Mlp"));
  // The same mistake in the config: an SGD where a model is expected.
  EXPECT_THAT(ErrorOf(Make("opt:\n  _target_: TestSGD\n  lr: 1\n  model:\n"
                           "    _target_: TestSGD\n    lr: 1\n"
                           "    model: {_target_: TestMLP, in_features: 1, hidden: []}\n",
                           "opt")),
              HasSubstr("r.yaml:5:5: opt.model: TestSGD: expected an object of type"));
}

TEST(RegistryTest, UnknownTargetListsClosestNames) {
  EXPECT_THAT(ErrorOf(Make("model:\n  _target_: TestMPL\n", "model")),
              HasSubstr("r.yaml:2:13: model._target_: unknown target 'TestMPL'; closest "
                        "registered: TestMLP"));
}

TEST(RegistryTest, UnknownArgumentListsAcceptedOnes) {
  EXPECT_THAT(ErrorOf(Make("model:\n  _target_: TestMLP\n  in_features: 1\n"
                           "  hiden: [1]\n",
                           "model")),
              HasSubstr("r.yaml:4:3: model.hiden: unknown key 'hiden' for TestMLP; "
                        "accepted: in_features, hidden, activation, dropout; did you "
                        "mean: hidden?"));
}

TEST(RegistryTest, WrongArgumentTypeNamesKeyAndLine) {
  EXPECT_THAT(ErrorOf(Make("model:\n  _target_: TestMLP\n  in_features: 1\n"
                           "  hidden: [1, x]\n",
                           "model")),
              HasSubstr("r.yaml:4:15: model.hidden[1]: expected int, got string \"x\""));
}

TEST(RegistryTest, MissingRequiredArgument) {
  EXPECT_THAT(ErrorOf(Make("model:\n  _target_: TestMLP\n  in_features: 1\n", "model")),
              HasSubstr("r.yaml:2:3: model: missing required key 'hidden' (list<int>: "
                        "Hidden layer sizes.) for TestMLP"));
}

TEST(RegistryTest, FactoryErrorsPointAtTheArgument) {
  EXPECT_THAT(ErrorOf(Make("model:\n  _target_: TestMLP\n  in_features: 1\n"
                           "  hidden: []\n  dropout: 1.5\n",
                           "model")),
              HasSubstr("r.yaml:5:12: model.dropout: TestMLP: must be below 1"));
  EXPECT_THAT(ErrorOf(Make("t: {_target_: TestThrows}\n", "t")),
              HasSubstr("r.yaml:1:4: t: TestThrows failed: boom"));
}

TEST(RegistryTest, ObjectArgumentMustHaveTarget) {
  EXPECT_THAT(ErrorOf(Make("o: {_target_: TestSGD, lr: 1, model: {in_features: 1}}\n",
                           "o")),
              HasSubstr("o.model: expected an object (a mapping with _target_)"));
  EXPECT_THAT(ErrorOf(Make("o: {lr: 1}\n", "o")),
              HasSubstr("o: expected a mapping with _target_"));
  EXPECT_THAT(ErrorOf(Make("o: {lr: 1}\n", "oo")), HasSubstr("no key 'oo'"));
}

TEST(RegistryTest, DuplicateRegistrationFails) {
  Registry registry;
  Target t{"X", "", Schema(), [](const Args&) { return Object::Of(1); }};
  EXPECT_TRUE(registry.Register(t).ok());
  EXPECT_EQ(registry.Register(t).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register(Target{"", "", Schema(), nullptr}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, PrivateRegistryIsIndependent) {
  Registry registry;
  ASSERT_TRUE(registry
                  .Register(Target{"Const", "A constant.",
                                   Schema().Optional("v", Type::Int(), "7", "Value."),
                                   [](const Args& a) { return Object::Of(a.Int("v")); }})
                  .ok());
  Node n = *ParseYaml("c: {_target_: Const}\n", "p.yaml");
  absl::StatusOr<Object> o = InstantiateAt(n, "c", registry);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(**o->Get<int64_t>(), 7);
  EXPECT_FALSE(InstantiateAt(n, "c").ok());  // Not in the global registry.
}

TEST(RegistryTest, ListTargetsPrintsArgumentsTypesDefaults) {
  std::ostringstream out;
  PrintTargets(out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("TestMLP  A multilayer perceptron.\n"));
  EXPECT_THAT(text, HasSubstr("    in_features  int        (required)  Input size.\n"));
  EXPECT_THAT(text, HasSubstr("    hidden       list<int>  (required)  Hidden layer sizes.\n"));
  EXPECT_THAT(text, HasSubstr("    activation   string     = relu      Nonlinearity.\n"));
  EXPECT_THAT(text, HasSubstr("    dropout      double     = 0.0       Dropout probability.\n"));
  EXPECT_THAT(text, HasSubstr("    tail    object?       = null      Optional last stage.\n"));
  EXPECT_THAT(text, HasSubstr("TestThrows  Always throws"));
  EXPECT_THAT(text, HasSubstr("    (no arguments)\n"));
}

}  // namespace
}  // namespace elastrun::config
