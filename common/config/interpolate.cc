#include "common/config/interpolate.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/suggest.h"
#include "common/status_macros.h"

namespace elastrun::config {
namespace {

class Resolver {
 public:
  Resolver(Node* root, const Limits& limits) : root_(root), limits_(limits) {}

  // Resolves every interpolation under `node` (at `path`, `depth` levels
  // below the top).
  absl::Status ResolveTree(Node* node, const std::string& path, int depth) {
    if (node->kind() == Node::Kind::kInterpolation) {
      return ResolveValue(node, path, depth);
    }
    if (node->is_scalar()) return absl::OkStatus();
    RETURN_IF_ERROR(Enter(*node, path));
    if (node->is_list()) {
      for (size_t i = 0; i < node->items().size(); ++i) {
        RETURN_IF_ERROR(ResolveTree(&node->mutable_items()[i],
                                    IndexPath(path, i), depth + 1));
      }
    } else {
      for (MapEntry& e : node->mutable_entries()) {
        RETURN_IF_ERROR(ResolveTree(&e.value, JoinPath(path, e.key), depth + 1));
      }
    }
    stack_.pop_back();
    return absl::OkStatus();
  }

 private:
  // Marks `path` as being resolved; a second entry is a cycle.
  absl::Status Enter(const Node& node, const std::string& path) {
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i] == path && !path.empty()) {
        std::vector<std::string> chain(stack_.begin() + i, stack_.end());
        chain.push_back(path);
        return ErrorAt(node.mark(), path,
                       absl::StrCat("interpolation cycle: ",
                                    absl::StrJoin(chain, " -> ")));
      }
    }
    stack_.push_back(path);
    return absl::OkStatus();
  }

  absl::Status ResolveValue(Node* node, const std::string& path, int depth) {
    RETURN_IF_ERROR(Enter(*node, path));
    if (++chain_ > limits_.max_interpolation_depth) {
      return ErrorAt(node->mark(), path,
                     absl::StrCat("interpolation chain longer than ",
                                  limits_.max_interpolation_depth, ": ",
                                  absl::StrJoin(stack_, " -> ")));
    }
    const std::vector<InterpolationPart> parts = node->parts();
    const Mark mark = node->mark();
    if (parts.size() == 1 && parts[0].is_reference) {
      ASSIGN_OR_RETURN(const Node* target, Lookup(parts[0].text, mark, path));
      nodes_added_ += target->CountNodes();
      if (nodes_added_ > limits_.max_nodes) {
        return ErrorAt(mark, path,
                       absl::StrCat("interpolation copies more than ",
                                    limits_.max_nodes, " values"));
      }
      if (depth + target->Depth() > limits_.max_depth + 1) {
        return ErrorAt(mark, path,
                       absl::StrCat("interpolation nests deeper than ",
                                    limits_.max_depth, " levels"));
      }
      *node = *target;
      node->set_mark(mark);
    } else {
      std::string text;
      for (const InterpolationPart& part : parts) {
        if (!part.is_reference) {
          text += part.text;
        } else {
          ASSIGN_OR_RETURN(const Node* target, Lookup(part.text, mark, path));
          if (!target->is_scalar()) {
            return ErrorAt(mark, path,
                           absl::StrCat("${", part.text, "} is a ", Describe(*target),
                                        " (", target->mark().ToString(),
                                        "); only a scalar can be part of a "
                                        "string (use the whole value: \"${",
                                        part.text, "}\")"));
          }
          text += target->ScalarText();
        }
        if (static_cast<int64_t>(text.size()) > limits_.max_string_bytes) {
          return ErrorAt(mark, path,
                         absl::StrCat("interpolated string longer than ",
                                      limits_.max_string_bytes, " bytes"));
        }
      }
      *node = Node::String(std::move(text), mark);
    }
    --chain_;
    stack_.pop_back();
    return absl::OkStatus();
  }

  // The fully resolved value at dotted `ref`, resolving on the way.
  absl::StatusOr<const Node*> Lookup(const std::string& ref, const Mark& mark,
                                     const std::string& from) {
    absl::StatusOr<std::vector<std::string>> segments = SplitPath(ref);
    if (!segments.ok()) {
      return ErrorAt(mark, from,
                     absl::StrCat("${", ref, "}: ", segments.status().message()));
    }
    Node* node = root_;
    std::string walked;
    for (size_t i = 0; i < segments->size(); ++i) {
      const std::string& segment = (*segments)[i];
      Node* next = nullptr;
      std::string here;
      size_t index = 0;
      if (node->is_list() && absl::SimpleAtoi(segment, &index)) {
        here = IndexPath(walked, index);
        if (index < node->items().size()) next = &node->mutable_items()[index];
      } else {
        here = JoinPath(walked, segment);
        next = node->Find(segment);
      }
      if (next == nullptr) {
        return ErrorAt(mark, from,
                       absl::StrCat("${", ref, "}: no key '", here, "' in the config",
                                    DidYouMean(ref, AllPaths(*root_))));
      }
      // Resolve what the rest of the walk, or the caller, will read.
      if (next->kind() == Node::Kind::kInterpolation ||
          i + 1 == segments->size()) {
        RETURN_IF_ERROR(ResolveTree(next, here, static_cast<int>(i) + 1));
      }
      node = next;
      walked = std::move(here);
    }
    return node;
  }

  Node* root_;
  const Limits& limits_;
  std::vector<std::string> stack_;  // Paths being resolved, outermost first.
  int chain_ = 0;                   // Interpolations being resolved.
  int64_t nodes_added_ = 0;
};

}  // namespace

absl::Status ResolveInterpolations(Node* root, const Limits& limits) {
  Resolver resolver(root, limits);
  return resolver.ResolveTree(root, "", 0);
}

}  // namespace elastrun::config
