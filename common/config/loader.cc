#include "common/config/loader.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace elastrun::config {
namespace {

constexpr absl::string_view kBaseKey = "_base_";
constexpr absl::string_view kTargetKey = "_target_";

Mark ToMark(const YAML::Mark& m, const std::string& file, const Mark& fallback) {
  if (m.is_null() || m.line < 0) return fallback;
  return Mark{file, m.line + 1, m.column + 1};
}

bool AllOf(absl::string_view s, bool (*pred)(unsigned char)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool IsOctal(unsigned char c) { return c >= '0' && c <= '7'; }
bool IsDigit(unsigned char c) { return absl::ascii_isdigit(c); }
bool IsHex(unsigned char c) { return absl::ascii_isxdigit(c); }

// YAML 1.2 core float syntax, without the specials:
// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool LooksLikeFloat(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && IsDigit(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i, ++frac_digits;
    if (int_digits == 0 && frac_digits == 0) return false;
  } else if (int_digits == 0) {
    return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && IsDigit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

absl::StatusOr<Node> ParseInteger(absl::string_view digits, int base,
                                  bool negative, const std::string& text,
                                  const Mark& mark) {
  uint64_t magnitude = 0;
  auto [ptr, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  const uint64_t max = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  if (ec != std::errc() || ptr != digits.data() + digits.size() || magnitude > max) {
    return ErrorAt(mark, "",
                   absl::StrCat("integer ", text,
                                " is out of range (64-bit); quote it for a string"));
  }
  const int64_t value = negative ? static_cast<int64_t>(0 - magnitude)
                                 : static_cast<int64_t>(magnitude);
  return Node::Int(value, mark);
}

class Converter {
 public:
  Converter(const std::string& file, const Limits& limits)
      : file_(file), limits_(limits) {}

  absl::StatusOr<Node> Convert(const YAML::Node& y, const Mark& parent_mark,
                               const std::string& path, int depth) {
    if (depth > limits_.max_depth) {
      return ErrorAt(parent_mark, path,
                     absl::StrCat("nested deeper than ", limits_.max_depth,
                                  " levels"));
    }
    if (++nodes_ > limits_.max_nodes) {
      return ErrorAt(parent_mark, path,
                     absl::StrCat("more than ", limits_.max_nodes,
                                  " values (aliases expanded)"));
    }
    const Mark mark = ToMark(y.Mark(), file_, parent_mark);
    switch (y.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return Node::Null(mark);
      case YAML::NodeType::Scalar:
        return Scalar(y, mark, path);
      case YAML::NodeType::Sequence: {
        Node list = Node::List(mark);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSIGN_OR_RETURN(Node item,
                           Convert(y[i], mark, IndexPath(path, i), depth + 1));
          list.mutable_items().push_back(std::move(item));
        }
        return list;
      }
      case YAML::NodeType::Map: {
        Node map = Node::Map(mark);
        std::unordered_set<std::string> seen;
        for (auto it = y.begin(); it != y.end(); ++it) {
          const Mark key_mark = ToMark(it->first.Mark(), file_, mark);
          if (!it->first.IsScalar() || it->first.Scalar().empty()) {
            return ErrorAt(key_mark, path, "a key must be a non-empty string");
          }
          const std::string& key = it->first.Scalar();
          if (static_cast<int>(key.size()) > limits_.max_key_bytes) {
            return ErrorAt(key_mark, path,
                           absl::StrCat("key longer than ", limits_.max_key_bytes,
                                        " bytes"));
          }
          const std::string child_path = JoinPath(path, key);
          if (!seen.insert(key).second) {
            return ErrorAt(key_mark, child_path,
                           absl::StrCat("duplicate key; first written at ",
                                        FindKeyMark(map, key)));
          }
          if (key == kBaseKey && depth > 0) {
            return ErrorAt(key_mark, child_path,
                           "_base_ is only allowed at the top level of a file");
          }
          ASSIGN_OR_RETURN(Node value, Convert(it->second, key_mark, child_path,
                                               depth + 1));
          map.mutable_entries().push_back({key, key_mark, std::move(value)});
        }
        return map;
      }
    }
    return Node::Null(mark);
  }

 private:
  static std::string FindKeyMark(const Node& map, const std::string& key) {
    for (const MapEntry& e : map.entries()) {
      if (e.key == key) return e.key_mark.ToString();
    }
    return "?";
  }

  absl::StatusOr<Node> Scalar(const YAML::Node& y, const Mark& mark,
                              const std::string& path) {
    const std::string& text = y.Scalar();
    if (static_cast<int64_t>(text.size()) > limits_.max_string_bytes) {
      return ErrorAt(mark, path,
                     absl::StrCat("string longer than ", limits_.max_string_bytes,
                                  " bytes"));
    }
    const std::string& tag = y.Tag();
    absl::StatusOr<Node> node;
    if (tag == "?") {
      node = ResolvePlainScalar(text, mark);
    } else if (tag == "!" || tag == "tag:yaml.org,2002:str") {
      node = Node::FromConfigString(text, mark);
    } else if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
               tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
      node = ResolvePlainScalar(text, mark);
      const char* want = tag.c_str() + tag.rfind(':') + 1;
      if (node.ok() && KindName(node->kind()) != absl::string_view(want) &&
          !(absl::string_view(want) == "float" && node->kind() == Node::Kind::kDouble)) {
        return ErrorAt(mark, path,
                       absl::StrCat("'", text, "' is not a valid !!", want));
      }
    } else {
      return ErrorAt(mark, path,
                     absl::StrCat("unsupported YAML tag '", tag,
                                  "'; only !!str, !!int, !!float, !!bool, !!null"));
    }
    if (!node.ok()) {
      // Add the key path that the scalar-level error could not know.
      return ErrorAt(mark, path,
                     absl::StripPrefix(node.status().message(),
                                       absl::StrCat(mark.ToString(), ": ")));
    }
    return node;
  }

  const std::string& file_;
  const Limits& limits_;
  int64_t nodes_ = 0;
};

// Parses without building anything; remembers where a second document
// starts.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ == 2) second_document_mark = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  YAML::Mark second_document_mark = YAML::Mark::null_mark();

 private:
  int documents_ = 0;
};

absl::StatusOr<Node> ParseAny(absl::string_view text, const std::string& file,
                              const Limits& limits) {
  const Mark file_mark{file, 1, 1};
  if (static_cast<int64_t>(text.size()) > limits.max_file_bytes) {
    return ErrorAt(file_mark, "",
                   absl::StrCat("larger than ", limits.max_file_bytes, " bytes"));
  }
  // yaml-cpp 0.7's LoadAll never ends on a document followed by a stray
  // ',' (it yields null documents forever), so count the documents with the
  // event parser, stopping at the second, then build the first with Load.
  YAML::Node doc;
  try {
    std::istringstream stream{std::string(text)};
    YAML::Parser parser(stream);
    DocumentCounter counter;
    if (!parser.HandleNextDocument(counter)) return Node::Null(file_mark);
    if (parser.HandleNextDocument(counter)) {
      return ErrorAt(counter.second_document_mark.is_null()
                         ? file_mark
                         : ToMark(counter.second_document_mark, file, file_mark),
                     "",
                     "content after the end of the document (a second '---' "
                     "document, or a stray ','); a config is one YAML document");
    }
    doc = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return ErrorAt(ToMark(e.mark, file, file_mark), "",
                   absl::StrCat("YAML syntax error: ", e.msg));
  }
  Converter converter(file, limits);
  try {
    return converter.Convert(doc, file_mark, "", 0);
  } catch (const YAML::Exception& e) {  // Not expected after parsing; be safe.
    return ErrorAt(ToMark(e.mark, file, file_mark), "", e.msg);
  }
}

struct BaseLoader {
  const LoadOptions& options;
  std::vector<std::string> chain;  // Files being loaded, outermost first.
  int files_read = 0;

  absl::StatusOr<std::string> Read(const std::string& path) {
    if (options.read_file) return options.read_file(path);
    return ReadFileFromDisk(path, options.limits.max_file_bytes);
  }

  // `requested_at`: the `_base_` entry naming `path` (or an empty mark).
  absl::StatusOr<Node> Load(const std::string& path, const Mark& requested_at) {
    const Limits& limits = options.limits;
    if (++files_read > limits.max_files) {
      return ErrorAt(requested_at, "_base_",
                     absl::StrCat("more than ", limits.max_files,
                                  " files read through _base_"));
    }
    if (static_cast<int>(chain.size()) >= limits.max_base_depth) {
      return ErrorAt(requested_at, "_base_",
                     absl::StrCat("_base_ chain longer than ", limits.max_base_depth,
                                  ": ", absl::StrJoin(chain, " -> "), " -> ", path));
    }
    absl::StatusOr<std::string> text = Read(path);
    if (!text.ok()) {
      if (chain.empty()) return text.status();
      return ErrorAt(requested_at, "_base_",
                     absl::StrCat("cannot read '", path, "': ", text.status().message()));
    }
    ASSIGN_OR_RETURN(Node root, ParseYaml(*text, path, limits));
    const Node* base = root.Find(kBaseKey);
    if (base == nullptr) return root;

    std::vector<const Node*> names;
    if (base->kind() == Node::Kind::kString) {
      names.push_back(base);
    } else if (base->is_list()) {
      for (const Node& item : base->items()) names.push_back(&item);
    } else if (!base->is_null()) {
      return ErrorAt(base->mark(), "_base_",
                     absl::StrCat("expected a file name or a list of them, got ",
                                  Describe(*base)));
    }
    chain.push_back(path);
    Node merged = Node::Map(root.mark());
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    for (const Node* name : names) {
      if (name->kind() != Node::Kind::kString || name->as_string().empty()) {
        return ErrorAt(name->mark(), "_base_",
                       absl::StrCat("expected a file name, got ", Describe(*name)));
      }
      const std::string base_path =
          (dir / name->as_string()).lexically_normal().string();
      for (const std::string& open : chain) {
        if (open == base_path) {
          return ErrorAt(name->mark(), "_base_",
                         absl::StrCat("cyclic _base_: ", absl::StrJoin(chain, " -> "),
                                      " -> ", base_path));
        }
      }
      ASSIGN_OR_RETURN(Node loaded, Load(base_path, name->mark()));
      merged = Merge(std::move(merged), std::move(loaded));
    }
    chain.pop_back();
    root.Erase(kBaseKey);
    merged = Merge(std::move(merged), std::move(root));
    if (merged.CountNodes() > limits.max_nodes) {
      return ErrorAt(Mark{path, 1, 1}, "",
                     absl::StrCat("more than ", limits.max_nodes,
                                  " values after merging _base_ files"));
    }
    return merged;
  }
};

}  // namespace

absl::StatusOr<std::string> ReadFileFromDisk(const std::string& path,
                                             int64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
  if (static_cast<int64_t>(size) > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": larger than ", max_bytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in.good() && !in.eof()) {
    return absl::UnavailableError(absl::StrCat(path, ": read failed"));
  }
  return out.str();
}

absl::StatusOr<Node> ParseYamlValue(absl::string_view text,
                                    const std::string& file,
                                    const Limits& limits) {
  return ParseAny(text, file, limits);
}

absl::StatusOr<Node> ParseYaml(absl::string_view text, const std::string& file,
                               const Limits& limits) {
  ASSIGN_OR_RETURN(Node root, ParseAny(text, file, limits));
  if (root.is_null()) return Node::Map(Mark{file, 1, 1});
  if (!root.is_map()) {
    return ErrorAt(root.mark(), "",
                   absl::StrCat("the top level of a config must be a mapping "
                                "(key: value lines), got ",
                                Describe(root)));
  }
  return root;
}

absl::StatusOr<Node> ResolvePlainScalar(const std::string& text,
                                        const Mark& mark) {
  absl::string_view s = text;
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    return Node::Null(mark);
  }
  if (s == "true" || s == "True" || s == "TRUE") return Node::Bool(true, mark);
  if (s == "false" || s == "False" || s == "FALSE") return Node::Bool(false, mark);
  const bool negative = s[0] == '-';
  absl::string_view unsigned_part = s;
  if (s[0] == '-' || s[0] == '+') unsigned_part.remove_prefix(1);
  if (AllOf(unsigned_part, IsDigit)) {
    return ParseInteger(unsigned_part, 10, negative, text, mark);
  }
  if (absl::StartsWith(s, "0o") && AllOf(s.substr(2), IsOctal)) {
    return ParseInteger(s.substr(2), 8, false, text, mark);
  }
  if (absl::StartsWith(s, "0x") && AllOf(s.substr(2), IsHex)) {
    return ParseInteger(s.substr(2), 16, false, text, mark);
  }
  if (unsigned_part == ".inf" || unsigned_part == ".Inf" || unsigned_part == ".INF") {
    return Node::Double(negative ? -HUGE_VAL : HUGE_VAL, mark);
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return Node::Double(NAN, mark);
  if (LooksLikeFloat(s)) {
    double value = 0;
    absl::string_view digits = s[0] == '+' ? s.substr(1) : s;
    auto [ptr, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec == std::errc::result_out_of_range) {
      return ErrorAt(mark, "",
                     absl::StrCat("number ", text,
                                  " is out of range for a double; quote it for a string"));
    }
    if (ec == std::errc() && ptr == digits.data() + digits.size()) {
      return Node::Double(value, mark);
    }
  }
  return Node::FromConfigString(text, mark);
}

absl::StatusOr<Node> LoadFile(const std::string& path, const LoadOptions& options) {
  BaseLoader loader{options, {}, 0};
  return loader.Load(std::filesystem::path(path).lexically_normal().string(),
                     Mark{});
}

Node Merge(Node base, Node child) {
  if (!base.is_map() || !child.is_map()) return child;
  const Node* base_target = base.Find(kTargetKey);
  const Node* child_target = child.Find(kTargetKey);
  if (base_target != nullptr && child_target != nullptr &&
      *base_target != *child_target) {
    return child;
  }
  for (MapEntry& e : child.mutable_entries()) {
    if (Node* existing = base.Find(e.key)) {
      *existing = Merge(std::move(*existing), std::move(e.value));
    } else {
      base.mutable_entries().push_back(std::move(e));
    }
  }
  // The merged map is written where the child wrote it.
  base.set_mark(child.mark());
  return base;
}

}  // namespace elastrun::config
