// Declared shapes for config sections: which keys a mapping may hold, each
// key's type, default or "required", and a one-line doc. The registry's
// factory arguments are Schemas; so are sections without `_target_` (a job
// spec, the `train` section), checked with Schema::Apply.
#ifndef ELASTRUN_COMMON_CONFIG_SCHEMA_H_
#define ELASTRUN_COMMON_CONFIG_SCHEMA_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/node.h"

namespace elastrun::config {

class Schema;

// The type of one value. Copyable and immutable once built.
class Type {
 public:
  enum class Kind {
    kAny,     // Any value, passed on as a Node.
    kBool,
    kInt,
    kDouble,  // Also accepts an int.
    kString,  // Also accepts a number or bool, as its text.
    kList,    // Every item of element().
    kMap,     // String keys, every value of element().
    kObject,  // A mapping with `_target_`, instantiated before the caller.
    kStruct,  // A mapping checked against schema().
  };

  static Type Any() { return Type(Kind::kAny); }
  static Type Bool() { return Type(Kind::kBool); }
  static Type Int() { return Type(Kind::kInt); }
  static Type Double() { return Type(Kind::kDouble); }
  static Type String() { return Type(Kind::kString); }
  static Type Object() { return Type(Kind::kObject); }
  static Type List(Type element);
  static Type Map(Type element);
  static Type Struct(Schema schema);

  // The same type, also accepting null (e.g. an optional sub-object).
  Type OrNull() const;

  Kind kind() const { return kind_; }
  bool nullable() const { return nullable_; }
  // Item type of a list, value type of a map; requires one of those.
  const Type& element() const { return *element_; }
  // Requires kStruct.
  const Schema& schema() const { return *schema_; }

  // "int", "list<int>", "map<double>", "object", "JobSpec" (a struct's
  // schema name), with a trailing "?" when nullable.
  std::string ToString() const;

  // OK if `value` (at dotted `path`) has this type; otherwise an error at
  // the value's position: "expected list<int>, got string \"a\"".
  absl::Status Check(const Node& value, absl::string_view path) const;

 private:
  explicit Type(Kind kind) : kind_(kind) {}

  Kind kind_;
  bool nullable_ = false;
  // Shared because Types are copied freely and never mutated after
  // construction; a deep copy per copy would buy nothing.
  std::shared_ptr<const Type> element_;
  std::shared_ptr<const Schema> schema_;
};

// One declared key.
struct Field {
  std::string name;
  Type type = Type::Any();
  bool required = false;
  // The value used when the key is absent (optional fields only).
  Node default_value;
  // One line for --list-targets and error messages.
  std::string doc;
};

// The keys a mapping may hold. Built once (usually at static
// initialization) and then only read: safe to share between threads.
class Schema {
 public:
  // `name` appears in messages ("unknown key 'x' for JobSpec").
  explicit Schema(std::string name = "") : name_(std::move(name)) {}

  // Declares a key that must be present. Aborts on a duplicate name (a bug
  // in the declaring code).
  Schema& Required(std::string name, Type type, std::string doc);
  // Declares a key with a default, written as YAML ("0.9", "[64, 64]",
  // "null", "'relu'"). Aborts if the default does not parse or does not
  // have `type`, or on a duplicate name: the declaring code is wrong, and
  // any test that links it finds out at start-up.
  Schema& Optional(std::string name, Type type, absl::string_view default_yaml,
                   std::string doc);

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::vector<Field>& fields() const { return fields_; }
  const Field* Find(absl::string_view name) const;

  // Checks `map` (at dotted `path`; "" for the top) and returns it with the
  // defaults of absent optional keys appended. `_target_` is ignored.
  // Errors, each at the offending value's position with its dotted key:
  // not a mapping; unknown key (listing the accepted ones and the closest);
  // missing required key (with its type and doc); wrong type.
  absl::StatusOr<Node> Apply(const Node& map, absl::string_view path) const;

 private:
  Schema& Add(Field field);

  std::string name_;
  std::vector<Field> fields_;
};

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_SCHEMA_H_
