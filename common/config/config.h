// The one call most users need: read a config file the way elastrun-train
// and `elastrun submit` do.
//
//   ASSIGN_OR_RETURN(Node cfg, LoadConfig("configs/fashion_mnist_mlp.yaml",
//                                         {"optimizer.lr0=0.02"}));
//   ASSIGN_OR_RETURN(Object model, InstantiateAt(cfg, "model"));
//   std::cout << ToYaml(cfg);  // --print-config; saved in the run folder.
//
// Order: `_base_` files are merged, then overrides applied in order, then
// `${...}` resolved, so an override reaches every reference to its key.
#ifndef ELASTRUN_COMMON_CONFIG_CONFIG_H_
#define ELASTRUN_COMMON_CONFIG_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/emitter.h"
#include "common/config/interpolate.h"
#include "common/config/loader.h"
#include "common/config/node.h"
#include "common/config/override.h"
#include "common/config/registry.h"
#include "common/config/schema.h"

namespace elastrun::config {

// LoadFile + ApplyOverrides + ResolveInterpolations; the result holds no
// `_base_` and no interpolation, and ToYaml of it reproduces it exactly.
// Errors are those of the three steps.
absl::StatusOr<Node> LoadConfig(const std::string& path,
                                const std::vector<std::string>& overrides = {},
                                const LoadOptions& options = {});

// The same for text already in memory (`name` stands for the file name in
// messages; `_base_` paths resolve relative to it via options.read_file).
absl::StatusOr<Node> LoadConfigFromString(absl::string_view text,
                                          const std::string& name,
                                          const std::vector<std::string>& overrides = {},
                                          const LoadOptions& options = {});

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_CONFIG_H_
