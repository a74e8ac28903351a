#include "common/config/config.h"

#include <filesystem>

#include "common/status_macros.h"

namespace elastrun::config {

absl::StatusOr<Node> LoadConfig(const std::string& path,
                                const std::vector<std::string>& overrides,
                                const LoadOptions& options) {
  ASSIGN_OR_RETURN(Node root, LoadFile(path, options));
  RETURN_IF_ERROR(ApplyOverrides(overrides, &root, options.limits));
  RETURN_IF_ERROR(ResolveInterpolations(&root, options.limits));
  return root;
}

absl::StatusOr<Node> LoadConfigFromString(absl::string_view text,
                                          const std::string& name,
                                          const std::vector<std::string>& overrides,
                                          const LoadOptions& options) {
  // Serve `name` from memory and everything else as `options` would.
  LoadOptions in_memory = options;
  const std::string content(text);
  // LoadFile asks for the normalized path.
  const std::string key = std::filesystem::path(name).lexically_normal().string();
  const FileReader fallback = options.read_file;
  const int64_t max_bytes = options.limits.max_file_bytes;
  in_memory.read_file = [&](const std::string& path) -> absl::StatusOr<std::string> {
    if (path == key) return content;
    if (fallback) return fallback(path);
    return ReadFileFromDisk(path, max_bytes);
  };
  return LoadConfig(name, overrides, in_memory);
}

}  // namespace elastrun::config
