#include "common/config/registry.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/config/emitter.h"
#include "common/config/suggest.h"

namespace elastrun::config {
namespace {

constexpr absl::string_view kTargetKey = "_target_";
// Marks a factory error that already names its position, so Instantiate
// does not prefix it a second time.
constexpr absl::string_view kPositionedPayload = "elastrun.config/positioned";

[[noreturn]] void DieMisuse(const std::string& target, absl::string_view name,
                            absl::string_view why) {
  std::fprintf(stderr, "elastrun::config: factory of %s: argument '%.*s': %.*s\n",
               target.c_str(), static_cast<int>(name.size()), name.data(),
               static_cast<int>(why.size()), why.data());
  std::abort();
}

}  // namespace

namespace {
std::string Demangle(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return mangled;
  std::string name(demangled);
  std::free(demangled);
  return name;
}
}  // namespace

std::string TypeName(const std::type_info& type) { return Demangle(type.name()); }

std::string Object::type_name() const {
  return has_value() ? Demangle(type_.name()) : "nothing";
}

absl::Status Object::Mismatch(const std::string& wanted) const {
  if (!has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an object of type ", wanted, ", got nothing (null)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "expected an object of type ", wanted, ", but target '", target_,
      "' (", mark_.ToString(), ") makes ", type_name()));
}

// ---------------------------------------------------------------- Args

const Node& Args::Declared(absl::string_view name, const char* accessor) const {
  const Node* value = values_.Find(name);
  if (value == nullptr) DieMisuse(target_, name, "not declared in the schema");
  if (value->is_null() && std::string(accessor) != "Value") {
    DieMisuse(target_, name, absl::StrCat(accessor, "() on null; check Has() first"));
  }
  return *value;
}

bool Args::Has(absl::string_view name) const {
  const Node* value = values_.Find(name);
  if (value == nullptr) DieMisuse(target_, name, "not declared in the schema");
  return !value->is_null();
}

int64_t Args::Int(absl::string_view name) const {
  const Node& v = Declared(name, "Int");
  if (v.kind() != Node::Kind::kInt) DieMisuse(target_, name, "is not an int");
  return v.as_int();
}

double Args::Double(absl::string_view name) const {
  const Node& v = Declared(name, "Double");
  if (v.kind() != Node::Kind::kInt && v.kind() != Node::Kind::kDouble) {
    DieMisuse(target_, name, "is not a double");
  }
  return v.as_double();
}

bool Args::Bool(absl::string_view name) const {
  const Node& v = Declared(name, "Bool");
  if (v.kind() != Node::Kind::kBool) DieMisuse(target_, name, "is not a bool");
  return v.as_bool();
}

std::string Args::String(absl::string_view name) const {
  const Node& v = Declared(name, "String");
  if (!v.is_scalar()) DieMisuse(target_, name, "is not a string");
  return v.ScalarText();
}

std::vector<int64_t> Args::IntList(absl::string_view name) const {
  std::vector<int64_t> out;
  for (const Node& item : Declared(name, "IntList").items()) {
    if (item.kind() != Node::Kind::kInt) DieMisuse(target_, name, "is not a list<int>");
    out.push_back(item.as_int());
  }
  return out;
}

std::vector<double> Args::DoubleList(absl::string_view name) const {
  std::vector<double> out;
  for (const Node& item : Declared(name, "DoubleList").items()) {
    if (item.kind() != Node::Kind::kInt && item.kind() != Node::Kind::kDouble) {
      DieMisuse(target_, name, "is not a list<double>");
    }
    out.push_back(item.as_double());
  }
  return out;
}

std::vector<std::string> Args::StringList(absl::string_view name) const {
  std::vector<std::string> out;
  for (const Node& item : Declared(name, "StringList").items()) {
    if (!item.is_scalar()) DieMisuse(target_, name, "is not a list<string>");
    out.push_back(item.ScalarText());
  }
  return out;
}

const Node& Args::Value(absl::string_view name) const {
  return Declared(name, "Value");
}

const Object& Args::GetObject(absl::string_view name) const {
  static const Object* const kEmpty = new Object();
  auto it = objects_.find(std::string(name));
  return it == objects_.end() ? *kEmpty : it->second;
}

std::vector<Object> Args::ObjectList(absl::string_view name) const {
  std::vector<Object> out;
  const size_t n = Declared(name, "ObjectList").items().size();
  for (size_t i = 0; i < n; ++i) out.push_back(GetObject(IndexPath(name, i)));
  return out;
}

absl::Status Args::Error(absl::string_view name, absl::string_view message) const {
  const Node* value = values_.Find(name);
  // A default has no position in the file: point at the mapping instead.
  const Mark& mark = value != nullptr && value->mark().line > 0 ? value->mark()
                                                                : values_.mark();
  absl::Status status = ErrorAt(mark, JoinPath(path_, name),
                                absl::StrCat(target_, ": ", message));
  status.SetPayload(kPositionedPayload, absl::Cord("1"));
  return status;
}

// ---------------------------------------------------------------- Registry

Registry& Registry::Global() {
  static Registry* const registry = new Registry();  // Never destroyed.
  return *registry;
}

absl::Status Registry::Register(Target target) {
  if (target.name.empty() || !target.factory) {
    return absl::InvalidArgumentError("a target needs a name and a factory");
  }
  if (target.schema.name().empty()) target.schema.set_name(target.name);
  const std::string name = target.name;
  if (!targets_.emplace(name, std::move(target)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("target '", name, "' is registered twice"));
  }
  return absl::OkStatus();
}

const Target* Registry::Find(absl::string_view name) const {
  auto it = targets_.find(name);
  return it == targets_.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, target] : targets_) names.push_back(name);
  return names;
}

TargetRegistrar::TargetRegistrar(std::string name, std::string doc,
                                 Schema schema, Factory factory) {
  absl::Status status = Registry::Global().Register(
      Target{std::move(name), std::move(doc), std::move(schema), std::move(factory)});
  if (!status.ok()) {
    std::fprintf(stderr, "elastrun::config: %s\n", std::string(status.message()).c_str());
    std::abort();
  }
}

// ---------------------------------------------------------------- Instantiate

class Instantiator {
 public:
  explicit Instantiator(const Registry& registry) : registry_(registry) {}

  absl::StatusOr<Object> Run(const Node& node, const std::string& path) {
    const Node* target_node = node.is_map() ? node.Find(kTargetKey) : nullptr;
    if (target_node == nullptr) {
      return ErrorAt(node.mark(), path,
                     absl::StrCat("expected a mapping with _target_, got ",
                                  Describe(node)));
    }
    if (target_node->kind() != Node::Kind::kString) {
      return ErrorAt(target_node->mark(), JoinPath(path, kTargetKey),
                     absl::StrCat("_target_ must be a registered name, got ",
                                  Describe(*target_node)));
    }
    const std::string& name = target_node->as_string();
    const Target* target = registry_.Find(name);
    if (target == nullptr) {
      const std::vector<std::string> names = registry_.Names();
      std::vector<std::string> close = ClosestNames(name, names);
      return ErrorAt(
          target_node->mark(), JoinPath(path, kTargetKey),
          absl::StrCat("unknown target '", name, "'",
                       close.empty() ? "" : absl::StrCat("; closest registered: ",
                                                         absl::StrJoin(close, ", ")),
                       " (--list-targets prints all ", names.size(), ")"));
    }
    ASSIGN_OR_RETURN(Node values, target->schema.Apply(node, path));
    values.Erase(kTargetKey);
    std::map<std::string, Object> objects;
    for (const MapEntry& e : values.entries()) {
      const Field* field = target->schema.Find(e.key);
      RETURN_IF_ERROR(Collect(field->type, e.value, e.key, JoinPath(path, e.key),
                              &objects));
    }
    Args args(name, path, std::move(values), std::move(objects));
    absl::StatusOr<Object> result;
    try {
      result = target->factory(args);
    } catch (const std::exception& e) {
      return ErrorAt(node.mark(), path,
                     absl::StrCat(name, " failed: ", e.what()));
    }
    if (!result.ok()) {
      if (result.status().GetPayload(kPositionedPayload).has_value()) {
        return result.status();
      }
      return ErrorAt(node.mark(), path,
                     absl::StrCat(name, " failed: ", result.status().message()));
    }
    result->target_ = name;
    result->path_ = path;
    result->mark_ = target_node->mark();
    return result;
  }

 private:
  // Instantiates the objects inside an argument value of type `type`,
  // recording them under their path relative to the arguments.
  absl::Status Collect(const Type& type, const Node& value, const std::string& rel,
                       const std::string& abs, std::map<std::string, Object>* out) {
    if (value.is_null()) return absl::OkStatus();
    switch (type.kind()) {
      case Type::Kind::kObject: {
        ASSIGN_OR_RETURN(Object o, Run(value, abs));
        (*out)[rel] = std::move(o);
        return absl::OkStatus();
      }
      case Type::Kind::kList:
        for (size_t i = 0; i < value.items().size(); ++i) {
          RETURN_IF_ERROR(Collect(type.element(), value.items()[i], IndexPath(rel, i),
                                  IndexPath(abs, i), out));
        }
        return absl::OkStatus();
      case Type::Kind::kMap:
        for (const MapEntry& e : value.entries()) {
          RETURN_IF_ERROR(Collect(type.element(), e.value, JoinPath(rel, e.key),
                                  JoinPath(abs, e.key), out));
        }
        return absl::OkStatus();
      case Type::Kind::kStruct:
        for (const Field& f : type.schema().fields()) {
          if (const Node* v = value.Find(f.name)) {
            RETURN_IF_ERROR(Collect(f.type, *v, JoinPath(rel, f.name),
                                    JoinPath(abs, f.name), out));
          }
        }
        return absl::OkStatus();
      default:
        return absl::OkStatus();
    }
  }

  const Registry& registry_;
};

absl::StatusOr<Object> Instantiate(const Node& node, absl::string_view path,
                                   const Registry& registry) {
  return Instantiator(registry).Run(node, std::string(path));
}

absl::StatusOr<Object> InstantiateAt(const Node& root, absl::string_view path,
                                     const Registry& registry) {
  ASSIGN_OR_RETURN(std::vector<std::string> segments, SplitPath(path));
  const Node* node = &root;
  for (const std::string& segment : segments) {
    const Node* next = nullptr;
    size_t index = 0;
    if (node->is_list() && absl::SimpleAtoi(segment, &index) &&
        index < node->items().size()) {
      next = &node->items()[index];
    } else {
      next = node->Find(segment);
    }
    if (next == nullptr) {
      return absl::NotFoundError(absl::StrCat("no key '", path, "' in the config",
                                              DidYouMean(path, AllPaths(root))));
    }
    node = next;
  }
  return Instantiate(*node, path, registry);
}

std::string FormatTargets(const Registry& registry) {
  std::string out;
  for (const std::string& name : registry.Names()) {
    const Target& t = *registry.Find(name);
    absl::StrAppend(&out, name, t.doc.empty() ? "" : "  ", t.doc, "\n");
    size_t name_width = 0, type_width = 0, default_width = 0;
    std::vector<std::string> defaults;
    for (const Field& f : t.schema.fields()) {
      defaults.push_back(f.required ? "(required)"
                                    : absl::StrCat("= ", ToFlowYaml(f.default_value)));
      name_width = std::max(name_width, f.name.size());
      type_width = std::max(type_width, f.type.ToString().size());
      default_width = std::max(default_width, defaults.back().size());
    }
    for (size_t i = 0; i < t.schema.fields().size(); ++i) {
      const Field& f = t.schema.fields()[i];
      absl::StrAppend(&out, absl::StrFormat("    %-*s  %-*s  %-*s  %s\n",
                                            static_cast<int>(name_width), f.name,
                                            static_cast<int>(type_width),
                                            f.type.ToString(),
                                            static_cast<int>(default_width),
                                            defaults[i], f.doc));
    }
    if (t.schema.fields().empty()) out += "    (no arguments)\n";
  }
  return out;
}

void PrintTargets(std::ostream& out, const Registry& registry) {
  out << FormatTargets(registry);
}

}  // namespace elastrun::config
