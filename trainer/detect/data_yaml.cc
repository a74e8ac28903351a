#include "trainer/detect/data_yaml.h"

#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config/loader.h"
#include "common/config/node.h"
#include "common/status_macros.h"
#include "trainer/detect/data_labels.h"

namespace elastrun::trainer::detect {
namespace {

namespace fs = std::filesystem;
using config::ErrorAt;
using config::Node;

constexpr int64_t kMaxYamlBytes = 4 << 20;

absl::Status MissingKey(const std::string& file, const std::string& key,
                        const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(DisplayText(file), ": missing key '", key, "': ", what));
}

// The sources of split `key`: a string or a list of strings, each resolved
// against `root` and required to exist. Empty when the key is absent or
// null.
absl::StatusOr<std::vector<std::string>> ReadSources(const Node& top,
                                                     const std::string& key,
                                                     const fs::path& root) {
  const Node* node = top.Find(key);
  std::vector<std::string> out;
  if (node == nullptr || node->is_null()) return out;
  std::vector<const Node*> items;
  if (node->is_list()) {
    for (const Node& item : node->items()) items.push_back(&item);
  } else {
    items.push_back(node);
  }
  for (const Node* item : items) {
    if (item->kind() != Node::Kind::kString || item->as_string().empty()) {
      return ErrorAt(
          item->mark(), key,
          absl::StrCat("expected a folder or .txt file (or a list of them), got ",
                       config::Describe(*item)));
    }
    const fs::path resolved = (root / item->as_string()).lexically_normal();
    std::error_code ec;
    if (!fs::exists(resolved, ec)) {
      return absl::NotFoundError(absl::StrCat(
          item->mark().ToString(), ": ", key, ": '", DisplayText(item->as_string()),
          "' (", DisplayText(resolved.string()), ") does not exist"));
    }
    out.push_back(resolved.string());
  }
  return out;
}

// `names` as a list, or as a map {0: a, 1: b} whose keys are 0..n-1.
absl::StatusOr<std::vector<std::string>> ReadNames(const Node& names) {
  std::vector<std::string> out;
  if (names.is_list()) {
    for (const Node& item : names.items()) {
      if (!item.is_scalar() || item.is_null()) {
        return ErrorAt(
            item.mark(), "names",
            absl::StrCat("a class name must be text, got ", config::Describe(item)));
      }
      out.push_back(item.ScalarText());
    }
    return out;
  }
  if (!names.is_map()) {
    return ErrorAt(
        names.mark(), "names",
        absl::StrCat("expected a list of class names or a map {0: name, ...}, got ",
                     config::Describe(names)));
  }
  std::map<int64_t, std::string> by_id;
  for (const config::MapEntry& e : names.entries()) {
    int64_t id = -1;
    if (!absl::SimpleAtoi(e.key, &id) || id < 0) {
      return ErrorAt(
          e.key_mark, "names",
          absl::StrCat("key '", DisplayText(e.key), "' is not a class id 0, 1, ..."));
    }
    if (!e.value.is_scalar() || e.value.is_null()) {
      return ErrorAt(
          e.value.mark(), config::JoinPath("names", e.key),
          absl::StrCat("a class name must be text, got ", config::Describe(e.value)));
    }
    by_id[id] = e.value.ScalarText();
  }
  int64_t expected = 0;
  for (const auto& [id, name] : by_id) {
    if (id != expected) {
      return ErrorAt(names.mark(), "names",
                     absl::StrCat("class ", expected, " has no name (ids must be 0..",
                                  by_id.size() - 1, ")"));
    }
    out.push_back(name);
    ++expected;
  }
  return out;
}

}  // namespace

absl::StatusOr<DataYaml> ReadDataYaml(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, config::ReadFileFromDisk(path, kMaxYamlBytes));
  ASSIGN_OR_RETURN(const Node top, config::ParseYaml(text, path));
  DataYaml out;
  out.file = path;
  fs::path root = fs::path(path).parent_path();
  if (root.empty()) root = ".";
  if (const Node* p = top.Find("path"); p != nullptr && !p->is_null()) {
    if (p->kind() != Node::Kind::kString) {
      return ErrorAt(
          p->mark(), "path",
          absl::StrCat("expected the dataset's folder, got ", config::Describe(*p)));
    }
    root = (root / p->as_string()).lexically_normal();
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
      return absl::NotFoundError(
          absl::StrCat(p->mark().ToString(), ": path: '", DisplayText(p->as_string()),
                       "' (", DisplayText(root.string()), ") is not an existing folder"));
    }
  }
  out.root = root.string();

  for (const char* key : {"train", "val"}) {
    const Node* node = top.Find(key);
    if (node == nullptr || node->is_null()) {
      return MissingKey(
          path, key,
          absl::StrCat("the ", key, " images, as a folder, a .txt list of images (or ",
                       "annotation lines) or a list of those, relative to 'path'"));
    }
  }
  ASSIGN_OR_RETURN(out.train, ReadSources(top, "train", root));
  ASSIGN_OR_RETURN(out.val, ReadSources(top, "val", root));
  ASSIGN_OR_RETURN(out.test, ReadSources(top, "test", root));

  const Node* nc = top.Find("nc");
  const Node* names = top.Find("names");
  if ((nc == nullptr || nc->is_null()) && (names == nullptr || names->is_null())) {
    return MissingKey(path, "names",
                      "the class names, a list [a, b, ...] or a map {0: a, 1: b, ...} "
                      "(or at least nc, the number of classes)");
  }
  if (names != nullptr && !names->is_null()) {
    ASSIGN_OR_RETURN(out.names, ReadNames(*names));
    if (out.names.empty()) return ErrorAt(names->mark(), "names", "no class names");
  }
  if (nc != nullptr && !nc->is_null()) {
    if (nc->kind() != Node::Kind::kInt || nc->as_int() < 1 || nc->as_int() > 1000000) {
      return ErrorAt(nc->mark(), "nc",
                     absl::StrCat("expected the number of classes (1 or more), got ",
                                  config::Describe(*nc)));
    }
    if (out.names.empty()) {
      for (int64_t i = 0; i < nc->as_int(); ++i)
        out.names.push_back(absl::StrCat("class", i));
    } else if (static_cast<int64_t>(out.names.size()) != nc->as_int()) {
      return ErrorAt(nc->mark(), "nc",
                     absl::StrCat("nc is ", nc->as_int(), " but names lists ",
                                  out.names.size(), " classes: make them agree"));
    }
  }
  return out;
}

}  // namespace elastrun::trainer::detect
