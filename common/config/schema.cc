#include "common/config/schema.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/loader.h"
#include "common/config/suggest.h"
#include "common/status_macros.h"

namespace elastrun::config {
namespace {

constexpr absl::string_view kTargetKey = "_target_";

[[noreturn]] void DieDeclaring(const std::string& schema, const std::string& field,
                               absl::string_view why) {
  std::fprintf(stderr, "elastrun::config: bad declaration of %s.%s: %.*s\n",
               schema.c_str(), field.c_str(), static_cast<int>(why.size()),
               why.data());
  std::abort();
}

std::string Owner(const Schema& schema) {
  return schema.name().empty() ? std::string("this section") : schema.name();
}

// Validates `value` against `type` and returns it with struct defaults
// filled in, at every depth.
absl::StatusOr<Node> Normalize(const Type& type, const Node& value,
                               absl::string_view path) {
  auto wrong = [&]() {
    return ErrorAt(value.mark(), path,
                   absl::StrCat("expected ", type.ToString(), ", got ",
                                Describe(value)));
  };
  if (value.is_null()) {
    if (type.nullable() || type.kind() == Type::Kind::kAny) return value;
    return wrong();
  }
  if (value.kind() == Node::Kind::kInterpolation) {
    return ErrorAt(value.mark(), path,
                   absl::StrCat("unresolved interpolation \"", value.as_string(),
                                "\" (resolve the config before checking it)"));
  }
  switch (type.kind()) {
    case Type::Kind::kAny:
      return value;
    case Type::Kind::kBool:
      if (value.kind() != Node::Kind::kBool) return wrong();
      return value;
    case Type::Kind::kInt:
      if (value.kind() != Node::Kind::kInt) return wrong();
      return value;
    case Type::Kind::kDouble:
      if (value.kind() != Node::Kind::kInt && value.kind() != Node::Kind::kDouble) {
        return wrong();
      }
      return value;
    case Type::Kind::kString:
      if (!value.is_scalar()) return wrong();
      return value;
    case Type::Kind::kList: {
      if (!value.is_list()) return wrong();
      Node out = Node::List(value.mark());
      for (size_t i = 0; i < value.items().size(); ++i) {
        ASSIGN_OR_RETURN(Node item, Normalize(type.element(), value.items()[i],
                                              IndexPath(path, i)));
        out.mutable_items().push_back(std::move(item));
      }
      return out;
    }
    case Type::Kind::kMap: {
      if (!value.is_map()) return wrong();
      Node out = Node::Map(value.mark());
      for (const MapEntry& e : value.entries()) {
        ASSIGN_OR_RETURN(Node item, Normalize(type.element(), e.value,
                                              JoinPath(path, e.key)));
        out.mutable_entries().push_back({e.key, e.key_mark, std::move(item)});
      }
      return out;
    }
    case Type::Kind::kObject: {
      const Node* target = value.is_map() ? value.Find(kTargetKey) : nullptr;
      if (target == nullptr) {
        return ErrorAt(value.mark(), path,
                       absl::StrCat("expected an object (a mapping with _target_), got ",
                                    Describe(value)));
      }
      return value;  // Its arguments are checked when it is instantiated.
    }
    case Type::Kind::kStruct:
      return type.schema().Apply(value, path);
  }
  return wrong();
}

}  // namespace

Type Type::List(Type element) {
  Type t(Kind::kList);
  t.element_ = std::make_shared<const Type>(std::move(element));
  return t;
}

Type Type::Map(Type element) {
  Type t(Kind::kMap);
  t.element_ = std::make_shared<const Type>(std::move(element));
  return t;
}

Type Type::Struct(Schema schema) {
  Type t(Kind::kStruct);
  t.schema_ = std::make_shared<const Schema>(std::move(schema));
  return t;
}

Type Type::OrNull() const {
  Type t = *this;
  t.nullable_ = true;
  return t;
}

std::string Type::ToString() const {
  std::string s;
  switch (kind_) {
    case Kind::kAny:
      s = "any";
      break;
    case Kind::kBool:
      s = "bool";
      break;
    case Kind::kInt:
      s = "int";
      break;
    case Kind::kDouble:
      s = "double";
      break;
    case Kind::kString:
      s = "string";
      break;
    case Kind::kList:
      s = absl::StrCat("list<", element_->ToString(), ">");
      break;
    case Kind::kMap:
      s = absl::StrCat("map<", element_->ToString(), ">");
      break;
    case Kind::kObject:
      s = "object";
      break;
    case Kind::kStruct:
      s = schema_->name().empty() ? "struct" : schema_->name();
      break;
  }
  if (nullable_) s += "?";
  return s;
}

absl::Status Type::Check(const Node& value, absl::string_view path) const {
  return Normalize(*this, value, path).status();
}

Schema& Schema::Add(Field field) {
  if (field.name.empty() || field.name == kTargetKey) {
    DieDeclaring(name_, field.name, "empty or reserved name");
  }
  if (Find(field.name) != nullptr) DieDeclaring(name_, field.name, "declared twice");
  fields_.push_back(std::move(field));
  return *this;
}

Schema& Schema::Required(std::string name, Type type, std::string doc) {
  Field field;
  field.name = std::move(name);
  field.type = std::move(type);
  field.required = true;
  field.doc = std::move(doc);
  return Add(std::move(field));
}

Schema& Schema::Optional(std::string name, Type type,
                         absl::string_view default_yaml, std::string doc) {
  absl::StatusOr<Node> value = ParseYamlValue(default_yaml, "");
  if (!value.ok()) DieDeclaring(name_, name, value.status().message());
  absl::StatusOr<Node> checked = Normalize(type, *value, name);
  if (!checked.ok()) DieDeclaring(name_, name, checked.status().message());
  Field field;
  field.name = std::move(name);
  field.type = std::move(type);
  field.default_value = *std::move(checked);
  field.doc = std::move(doc);
  return Add(std::move(field));
}

const Field* Schema::Find(absl::string_view name) const {
  for (const Field& f : fields_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::StatusOr<Node> Schema::Apply(const Node& map, absl::string_view path) const {
  if (!map.is_map()) {
    return ErrorAt(map.mark(), path,
                   absl::StrCat("expected a mapping for ", Owner(*this), ", got ",
                                Describe(map)));
  }
  std::vector<std::string> names;
  for (const Field& f : fields_) names.push_back(f.name);
  Node out = Node::Map(map.mark());
  for (const MapEntry& e : map.entries()) {
    const std::string key_path = JoinPath(path, e.key);
    if (e.key == kTargetKey) {
      out.mutable_entries().push_back(e);
      continue;
    }
    const Field* field = Find(e.key);
    if (field == nullptr) {
      return ErrorAt(e.key_mark, key_path,
                     absl::StrCat("unknown key '", e.key, "' for ", Owner(*this),
                                  "; accepted: ",
                                  names.empty() ? "none" : absl::StrJoin(names, ", "),
                                  DidYouMean(e.key, names)));
    }
    ASSIGN_OR_RETURN(Node value, Normalize(field->type, e.value, key_path));
    out.mutable_entries().push_back({e.key, e.key_mark, std::move(value)});
  }
  for (const Field& f : fields_) {
    if (map.Find(f.name) != nullptr) continue;
    if (f.required) {
      return ErrorAt(map.mark(), path,
                     absl::StrCat("missing required key '", f.name, "' (",
                                  f.type.ToString(), ": ", f.doc, ") for ",
                                  Owner(*this)));
    }
    out.mutable_entries().push_back({f.name, Mark{}, f.default_value});
  }
  return out;
}

}  // namespace elastrun::config
