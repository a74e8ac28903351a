// libFuzzer target over the whole config pipeline: parse, `_base_` merge,
// overrides, interpolation, schema checks, instantiation, and the ToYaml
// round trip. Run with common/config/run_fuzzer.sh.
//
// Input: sections separated by a line "%%".
//   section 0: main.yaml
//   section 1: command-line overrides, one per line
//   section N >= 2: the file fN.yaml, reachable through `_base_: fN.yaml`
//
// Properties checked (a violation aborts, which libFuzzer reports):
//   - nothing crashes, hangs or leaks, whatever the input (sanitizers);
//   - every config that loads survives ToYaml -> ParseYaml unchanged, both
//     before and after interpolation.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/config/config.h"

namespace elastrun::config {
namespace {

struct Linear {
  int64_t in, out;
  bool bias;
};
struct Sequential {
  std::vector<Object> layers;
};
struct Optimizer {
  std::shared_ptr<Linear> model;
  double lr;
  std::vector<double> betas;
  std::string name;
};

const Registry& FuzzRegistry() {
  static const Registry* const registry = [] {
    auto* r = new Registry();
    auto must = [](absl::Status s) {
      if (!s.ok()) std::abort();
    };
    must(r->Register(Target{
        "Lin", "A linear layer.",
        Schema()
            .Required("in", Type::Int(), "Inputs.")
            .Required("out", Type::Int(), "Outputs.")
            .Optional("bias", Type::Bool(), "true", "Add a bias."),
        [](const Args& a) -> absl::StatusOr<Object> {
          if (a.Int("in") <= 0) return a.Error("in", "must be positive");
          return Object::Of(Linear{a.Int("in"), a.Int("out"), a.Bool("bias")});
        }}));
    must(r->Register(Target{
        "Seq", "Layers in order.",
        Schema()
            .Required("layers", Type::List(Type::Object()), "Layers.")
            .Optional("tail", Type::Object().OrNull(), "null", "Last layer."),
        [](const Args& a) -> absl::StatusOr<Object> {
          Sequential s{a.ObjectList("layers")};
          for (const Object& layer : s.layers) {
            absl::StatusOr<std::shared_ptr<Linear>> lin = layer.Get<Linear>();
            if (!lin.ok()) return a.Error("layers", lin.status().message());
          }
          if (a.Has("tail")) s.layers.push_back(a.GetObject("tail"));
          return Object::Of(std::move(s));
        }}));
    must(r->Register(Target{
        "Opt", "An optimizer.",
        Schema()
            .Required("model", Type::Object(), "What to optimize.")
            .Optional("lr", Type::Double(), "0.1", "Learning rate.")
            .Optional("betas", Type::List(Type::Double()), "[0.9, 0.999]", "Betas.")
            .Optional("name", Type::String(), "sgd", "Name.")
            .Optional("extra", Type::Map(Type::Any()), "{}", "Anything.")
            .Optional("limits",
                      Type::Struct(Schema("Limits")
                                       .Optional("lo", Type::Double(), "0", "Low.")
                                       .Optional("hi", Type::Double().OrNull(), "null",
                                                 "High.")),
                      "{}", "Bounds."),
        [](const Args& a) -> absl::StatusOr<Object> {
          ASSIGN_OR_RETURN(std::shared_ptr<Linear> model, a.Get<Linear>("model"));
          return Object::Of(
              Optimizer{model, a.Double("lr"), a.DoubleList("betas"), a.String("name")});
        }}));
    return r;
  }();
  return *registry;
}

[[noreturn]] void Fail(const char* what, const Node& n, const std::string& yaml,
                       const absl::Status& status) {
  std::fprintf(stderr, "config_fuzzer: %s\n--- emitted ---\n%s\n--- status ---\n%s\n",
               what, yaml.c_str(), std::string(status.message()).c_str());
  std::abort();
}

// ToYaml must read back as the same tree.
void CheckRoundTrip(const Node& n, const Limits& limits) {
  const std::string yaml = ToYaml(n);
  absl::StatusOr<Node> back = ParseYaml(yaml, "emitted.yaml", limits);
  if (!back.ok()) Fail("emitted YAML does not parse", n, yaml, back.status());
  if (*back != n) Fail("emitted YAML reads back differently", n, yaml, absl::OkStatus());
}

void InstantiateTargets(const Node& node, const std::string& path, int depth) {
  if (depth > 3) return;
  if (node.is_map() && node.Find("_target_") != nullptr) {
    (void)Instantiate(node, path, FuzzRegistry());
  }
  for (const MapEntry& e : node.entries()) {
    InstantiateTargets(e.value, JoinPath(path, e.key), depth + 1);
  }
}

}  // namespace
}  // namespace elastrun::config

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastrun::config;  // NOLINT: a fuzzer entry point.
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> sections = absl::StrSplit(input, "\n%%\n");
  std::map<std::string, std::string> files;
  files["main.yaml"] = sections[0];
  std::vector<std::string> overrides;
  if (sections.size() > 1) {
    for (absl::string_view line : absl::StrSplit(sections[1], '\n')) {
      if (!line.empty()) overrides.emplace_back(line);
    }
  }
  for (size_t i = 2; i < sections.size(); ++i) {
    files["f" + std::to_string(i) + ".yaml"] = sections[i];
  }

  LoadOptions options;
  // Small limits keep each input fast; the code paths are the same.
  options.limits.max_nodes = 20000;
  options.limits.max_string_bytes = 1 << 16;
  options.limits.max_files = 16;
  options.read_file = [&files](const std::string& path) -> absl::StatusOr<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return absl::NotFoundError(path + ": no such file");
    return it->second;
  };

  absl::StatusOr<Node> root = LoadFile("main.yaml", options);
  if (!root.ok()) return 0;
  CheckRoundTrip(*root, options.limits);
  if (!ApplyOverrides(overrides, &*root, options.limits).ok()) return 0;
  CheckRoundTrip(*root, options.limits);
  if (!ResolveInterpolations(&*root, options.limits).ok()) return 0;
  CheckRoundTrip(*root, options.limits);
  InstantiateTargets(*root, "", 0);
  (void)ToFlowYaml(*root);
  (void)Schema("Top")
      .Optional("model", Type::Object().OrNull(), "null", "Model.")
      .Optional("train", Type::Map(Type::Any()), "{}", "Train.")
      .Apply(*root, "");
  return 0;
}
