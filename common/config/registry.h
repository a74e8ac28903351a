// Factories behind `_target_`: a mapping `{_target_: SGD, lr: 0.1}` is a
// call of the factory registered as "SGD" with the other keys as arguments
// (detectron2's LazyCall/instantiate, Hydra's `_target_`).
//
// A component registers itself with one line next to its definition:
//
//   ELASTRUN_REGISTER_TARGET("SGD", "Stochastic gradient descent.",
//       Schema()
//           .Required("lr", Type::Double(), "Learning rate.")
//           .Optional("momentum", Type::Double(), "0.9", "Momentum factor."),
//       [](const Args& args) -> absl::StatusOr<Object> {
//         return Object::Of(SgdOptions{args.Double("lr"), args.Double("momentum")});
//       });
//
// Linking note: a registration lives in a static object; when it sits in a
// static library whose object file nothing else references, the linker
// drops it. Link such libraries as OBJECT libraries or whole-archive.
#ifndef ELASTRUN_COMMON_CONFIG_REGISTRY_H_
#define ELASTRUN_COMMON_CONFIG_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/config/node.h"
#include "common/config/schema.h"
#include "common/status_macros.h"

namespace elastrun::config {

// Readable name of a C++ type ("torch::nn::Sequential").
std::string TypeName(const std::type_info& type);

// The type-erased result of a factory. Copies share the value: an object
// may be handed to several consumers (a model to the trainer and to the
// optimizer factory), and shared_ptr<void> keeps the right deleter.
class Object {
 public:
  Object() = default;

  // Wraps a value (moved into shared storage).
  template <typename T>
  static Object Of(T value) {
    return FromShared(std::make_shared<T>(std::move(value)));
  }
  template <typename T>
  static Object FromShared(std::shared_ptr<T> value) {
    Object o;
    o.type_ = std::type_index(typeid(T));
    o.value_ = std::move(value);
    return o;
  }

  bool has_value() const { return value_ != nullptr; }
  template <typename T>
  bool Is() const {
    return has_value() && type_ == std::type_index(typeid(T));
  }

  // The value as a T. Fails (InvalidArgument) when empty or when it holds
  // another type; the message names the target, where it was written, and
  // both types.
  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Get() const {
    if (!Is<T>()) return Mismatch(TypeName(typeid(T)));
    return std::static_pointer_cast<T>(value_);
  }

  // The factory that made it and where its `_target_` was written; set by
  // Instantiate.
  const std::string& target() const { return target_; }
  const Mark& mark() const { return mark_; }
  const std::string& path() const { return path_; }
  std::string type_name() const;

 private:
  friend class Instantiator;
  absl::Status Mismatch(const std::string& wanted) const;

  // Shared: see the class comment.
  std::shared_ptr<void> value_;
  std::type_index type_ = std::type_index(typeid(void));
  std::string target_;
  std::string path_;
  Mark mark_;
};

// The arguments of one factory call: the config mapping checked against
// the target's schema, defaults filled in, `object` arguments already
// instantiated. Accessors for declared arguments of the declared type
// cannot fail; asking for an undeclared name or the wrong type is a bug in
// the factory and aborts with its name.
class Args {
 public:
  Args(std::string target, std::string path, Node values,
       std::map<std::string, Object> objects)
      : target_(std::move(target)),
        path_(std::move(path)),
        values_(std::move(values)),
        objects_(std::move(objects)) {}

  const std::string& target() const { return target_; }
  // Dotted key of the mapping being instantiated ("model").
  const std::string& path() const { return path_; }

  // False when the argument is null (a nullable type).
  bool Has(absl::string_view name) const;
  int64_t Int(absl::string_view name) const;
  double Double(absl::string_view name) const;
  bool Bool(absl::string_view name) const;
  std::string String(absl::string_view name) const;
  std::vector<int64_t> IntList(absl::string_view name) const;
  std::vector<double> DoubleList(absl::string_view name) const;
  std::vector<std::string> StringList(absl::string_view name) const;
  // The raw value (any, map, struct arguments).
  const Node& Value(absl::string_view name) const;

  // An `object` argument, or an item of a `list<object>` ("layers[1]");
  // an empty Object when null.
  const Object& GetObject(absl::string_view name) const;
  std::vector<Object> ObjectList(absl::string_view name) const;
  // An `object` argument as a T; fails when it holds another type, naming
  // the argument and its position.
  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Get(absl::string_view name) const {
    const Object& o = GetObject(name);
    absl::StatusOr<std::shared_ptr<T>> value = o.Get<T>();
    if (!value.ok()) return Error(name, value.status().message());
    return value;
  }

  // An error about argument `name` at its position in the config, for a
  // factory's own checks ("lr must be positive").
  absl::Status Error(absl::string_view name, absl::string_view message) const;

 private:
  const Node& Declared(absl::string_view name, const char* accessor) const;

  std::string target_;
  std::string path_;
  Node values_;
  std::map<std::string, Object> objects_;
};

using Factory = std::function<absl::StatusOr<Object>(const Args& args)>;

struct Target {
  std::string name;
  // One line for --list-targets.
  std::string doc;
  Schema schema;
  Factory factory;
};

// Name -> factory. Filled during static initialization (or, in tests,
// before use) and read-only afterwards: Register is not thread-safe, Find
// and Names may be called from any thread once registration is over.
class Registry {
 public:
  // The registry that ELASTRUN_REGISTER_TARGET fills.
  static Registry& Global();

  // AlreadyExists on a duplicate name; InvalidArgument on an empty name or
  // missing factory.
  absl::Status Register(Target target);
  const Target* Find(absl::string_view name) const;
  // Sorted.
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, Target, std::less<>> targets_;
};

// Registers into Registry::Global() at static initialization; aborts on a
// duplicate (two components claiming one name is a build bug).
class TargetRegistrar {
 public:
  TargetRegistrar(std::string name, std::string doc, Schema schema,
                  Factory factory);
};

#define ELASTRUN_REGISTER_TARGET(name, doc, schema, factory)         \
  static const ::elastrun::config::TargetRegistrar ELASTRUN_CONCAT_( \
      elastrun_config_target_registrar_, __LINE__)(name, doc, schema, factory)

// Instantiates `node` (at dotted `path`), a mapping with `_target_`:
// checks its arguments against the target's schema, instantiates `object`
// arguments first (depth-first, in config order), then calls the factory.
// Errors, each at the position of the offending value with its dotted key:
// not a mapping with `_target_`; unknown target (the closest registered
// names); unknown argument (the accepted ones); missing required argument;
// wrong type; the factory's own error (or exception, caught here).
absl::StatusOr<Object> Instantiate(const Node& node, absl::string_view path,
                                   const Registry& registry = Registry::Global());

// Instantiates the value at dotted `path` inside `root` ("model"); NotFound
// naming the closest keys when there is none.
absl::StatusOr<Object> InstantiateAt(const Node& root, absl::string_view path,
                                     const Registry& registry = Registry::Global());

// The --list-targets text: each target with its doc, then one line per
// argument: name, type, default or "required", doc.
std::string FormatTargets(const Registry& registry = Registry::Global());
void PrintTargets(std::ostream& out, const Registry& registry = Registry::Global());

}  // namespace elastrun::config

#endif  // ELASTRUN_COMMON_CONFIG_REGISTRY_H_
