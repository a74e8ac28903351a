#include "trainer/state_image.h"

#include <ATen/CPUGeneratorImpl.h>
// Header-only: the functions are compiled here, nothing to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "trainer/device.h"

namespace elastrun::trainer {
namespace {

constexpr char kMagic[] = "ELASTRUN-STATE";
// Format 2: the position in samples (TrainPosition); 1: in batches per rank.
constexpr char kFormat[] = "2";
constexpr size_t kAlign = 64;
// Bounds what a malformed image makes a reader allocate or index.
constexpr size_t kMaxIndex = size_t{64} << 20;
constexpr int64_t kMaxDims = 16;

// The position's fields by name, so writing and reading share one list.
// `core` ones must agree on every rank that holds the same state (they go
// into its ContentDigest); the others are the rank's own.
struct PositionFields {
  std::vector<std::pair<const char*, int64_t*>> ints;
  std::vector<std::pair<const char*, double*>> doubles;
  size_t core_ints = 0;  // ints[0, core_ints) are core.
};
PositionFields FieldsOf(TrainPosition& p) {
  return {{{"epoch", &p.epoch},
           {"samples_done", &p.samples_done},
           {"lineage", &p.lineage},
           {"branch", &p.branch},
           {"micro_batches", &p.micro_batches},
           {"step_epoch", &p.step_epoch},
           {"step_done", &p.step_done},
           {"world_size", &p.world_size},
           {"warmup_samples", &p.warmup_samples},
           {"tail_from", &p.tail_from},
           {"amp_growth_tracker", &p.amp_growth_tracker}},
          {{"best_acc", &p.best_acc},
           {"loss_sum", &p.loss_sum},
           {"seen", &p.seen},
           {"local_loss_sum", &p.local_loss_sum},
           {"local_seen", &p.local_seen},
           {"amp_scale", &p.amp_scale}},
          10};
}

// Fields of format 1 images (an older build's per-rank position), read
// into TrainPosition::legacy_*.
std::vector<std::pair<const char*, int64_t*>> LegacyFieldsOf(TrainPosition& p) {
  return {{"iteration", &p.legacy_iteration},
          {"last_opt_step", &p.legacy_last_opt_step},
          {"tail_begin", &p.legacy_tail_begin}};
}

// Doubles travel as hexadecimal floats: exact both ways.
std::string HexDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a", v);
  return buf;
}

// torch 1.13 keys optimizer state by the parameter's TensorImpl address as
// a string; later releases by the address itself.
template <typename OptimizerT>
auto StateKey(OptimizerT& o, const at::Tensor& p) {
  using Key = typename std::remove_reference_t<decltype(o.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    return c10::guts::to_string(p.unsafeGetTensorImpl());
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// Every tensor of the state, by name, in a fixed order.
std::vector<std::pair<std::string, at::Tensor>> NamedTensors(
    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
    std::vector<std::string>* steps) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters()) {
    out.emplace_back("m." + item.key(), item.value());
  }
  for (const auto& item : model.named_buffers()) {
    out.emplace_back("u." + item.key(), item.value());
  }
  auto& state = optimizer.state();
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      auto it = state.find(StateKey(optimizer, groups[g].params()[i]));
      if (it == state.end()) continue;
      const std::string base = absl::StrCat("o.", g, ".", i, ".");
      if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
        if (sgd->momentum_buffer().defined()) {
          out.emplace_back(base + "momentum_buffer", sgd->momentum_buffer());
        }
      } else if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
        steps->push_back(absl::StrCat("s ", g, " ", i, " ", adam->step(), "\n"));
        out.emplace_back(base + "exp_avg", adam->exp_avg());
        out.emplace_back(base + "exp_avg_sq", adam->exp_avg_sq());
        if (adam->max_exp_avg_sq().defined()) {
          out.emplace_back(base + "max_exp_avg_sq", adam->max_exp_avg_sq());
        }
      }
    }
  }
  return out;
}

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

StateImage StateImage::Plan(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const StateExtras& extras) {
  StateImage image;
  std::string index;
  TrainPosition position = extras.position;
  PositionFields fields = FieldsOf(position);
  for (const auto& [name, v] : fields.ints) absl::StrAppend(&index, "p ", name, " ", *v, "\n");
  for (const auto& [name, v] : fields.doubles) {
    absl::StrAppend(&index, "p ", name, " ", HexDouble(*v), "\n");
  }
  absl::StrAppend(&index, "p sums_global ", position.sums_global ? 1 : 0, "\n");
  std::vector<std::string> steps;
  std::vector<std::pair<std::string, at::Tensor>> tensors =
      NamedTensors(model, optimizer, &steps);
  if (extras.rng.cpu.defined()) tensors.emplace_back("rng", extras.rng.cpu);
  if (extras.rng.cuda.defined()) tensors.emplace_back("rng.cuda", extras.rng.cuda);
  {
    // GPU tensors as host copies, taken together (one wait per device).
    std::vector<at::Tensor> dense;
    dense.reserve(tensors.size());
    for (const auto& named : tensors) {
      const at::Tensor t = named.second.detach();
      dense.push_back(t.is_non_overlapping_and_dense() ? t : t.contiguous());
    }
    image.keep_ = ToHost(dense);
    for (size_t k = 0; k < tensors.size(); ++k) tensors[k].second = image.keep_[k];
  }
  for (const std::string& s : steps) index += s;
  // Offsets are relative to the data section; the header's size is known
  // only once the index is complete.
  size_t offset = 0;
  auto add_blob = [&](const char* name, const std::string& blob) {
    absl::StrAppend(&index, "b ", name, " ", offset, " ", blob.size(), "\n");
    image.parts_.push_back({blob.data(), offset, blob.size()});
    offset = AlignUp(offset + blob.size());
  };
  add_blob("config", extras.config_yaml);
  add_blob("rows", extras.metrics_rows);
  for (auto& [name, t] : tensors) {
    const at::Tensor& dense = t;
    const size_t bytes = static_cast<size_t>(dense.numel()) * dense.element_size();
    absl::StrAppend(&index, "t ", name, " ", static_cast<int>(dense.scalar_type()), " ",
                    dense.dim());
    for (int64_t s : dense.sizes()) absl::StrAppend(&index, " ", s);
    for (int64_t s : dense.strides()) absl::StrAppend(&index, " ", s);
    absl::StrAppend(&index, " ", offset, " ", bytes, "\n");
    // A dense tensor's storage span starts at its data pointer whatever
    // its strides (none negative here).
    image.parts_.push_back({dense.data_ptr(), offset, bytes});
    offset = AlignUp(offset + bytes);
  }
  image.head_ = absl::StrCat(kMagic, " ", kFormat, " ", index.size(), "\n", index);
  image.head_.resize(AlignUp(image.head_.size()), '\0');
  for (Part& p : image.parts_) p.offset += image.head_.size();
  image.size_ = image.head_.size() + offset;
  return image;
}

void StateImage::WriteTo(char* dst) const {
  std::memcpy(dst, head_.data(), head_.size());
  for (const Part& p : parts_) {
    if (p.bytes > 0) std::memcpy(dst + p.offset, p.data, p.bytes);
  }
}

std::string StateImage::ToString() const {
  std::string out(size_, '\0');
  WriteTo(out.data());
  return out;
}

namespace {

at::Tensor StateOf(const at::Generator& g) {
  at::Generator gen = g;
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetStateOf(const at::Generator& g, const at::Tensor& state) {
  at::Generator gen = g;
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

Generators GeneratorStates(const torch::Device& device) {
  Generators g;
  g.cpu = StateOf(at::detail::getDefaultCPUGenerator());
  if (device.is_cuda()) g.cuda = StateOf(at::globalContext().defaultGenerator(device));
  return g;
}

void SetGeneratorStates(const Generators& states, const torch::Device& device) {
  if (states.cpu.defined()) SetStateOf(at::detail::getDefaultCPUGenerator(), states.cpu);
  if (states.cuda.defined() && device.is_cuda()) {
    SetStateOf(at::globalContext().defaultGenerator(device), states.cuda);
  }
}

bool IsStateImage(absl::string_view bytes) {
  return absl::StartsWith(bytes, absl::StrCat(kMagic, " "));
}
namespace {

struct TensorRecord {
  at::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
  size_t offset = 0, bytes = 0;
};

// The parsed index: records by name, and where the data section starts.
struct Index {
  std::map<std::string, TensorRecord> tensors;
  std::map<std::pair<size_t, size_t>, int64_t> adam_steps;
  StateExtras extras;
};

absl::Status Malformed(const std::string& why) {
  return absl::DataLossError(absl::StrCat("state image: ", why));
}

// A well-formed state of another model or optimizer.
absl::Status DoesNotFit(const std::string& why) {
  return absl::DataLossError(
      absl::StrCat("checkpoint does not fit this model or optimizer: ", why));
}

// The element types an image may hold (parameters, optimizer state in any
// precision, generator states as bytes).
bool KnownDtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kLong: case at::kInt: case at::kShort: case at::kChar:
    case at::kByte: case at::kBool:
      return true;
    default:
      return false;
  }
}

// Whether the record's shape and strides address only its own bytes: bytes
// = numel x element size, and the farthest element its strides reach lies
// inside them. Sizes are bounded so no product overflows.
bool FitsItsBytes(const TensorRecord& r) {
  constexpr int64_t kMaxElements = int64_t{1} << 40;
  int64_t numel = 1;
  int64_t last = 0;  // Element offset of the last element.
  for (size_t d = 0; d < r.sizes.size(); ++d) {
    if (r.sizes[d] > kMaxElements || r.strides[d] > kMaxElements) return false;
    if (r.sizes[d] == 0) numel = 0;
    if (numel != 0) {
      if (numel > kMaxElements / std::max<int64_t>(r.sizes[d], 1)) return false;
      numel *= r.sizes[d];
      last += (r.sizes[d] - 1) * r.strides[d];
      if (last > kMaxElements) return false;
    }
  }
  const size_t element = c10::elementSize(r.dtype);
  if (r.bytes != static_cast<size_t>(numel) * element) return false;
  return numel == 0 || static_cast<size_t>(last + 1) * element <= r.bytes;
}

absl::Status ParseTensor(const std::vector<absl::string_view>& f, size_t data_size,
                         Index* index) {
  int dtype = 0;
  int64_t dims = 0;
  if (f.size() < 4 || !absl::SimpleAtoi(f[2], &dtype) || !absl::SimpleAtoi(f[3], &dims) ||
      dims < 0 || dims > kMaxDims || f.size() != static_cast<size_t>(6 + 2 * dims) ||
      dtype < 0 || dtype >= static_cast<int>(at::ScalarType::NumOptions) ||
      !KnownDtype(static_cast<at::ScalarType>(dtype))) {
    return Malformed(absl::StrCat("bad tensor record '", absl::StrJoin(f, " "), "'"));
  }
  TensorRecord r;
  r.dtype = static_cast<at::ScalarType>(dtype);
  for (int64_t k = 0; k < 2 * dims; ++k) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(f[4 + k], &v) || v < 0) return Malformed("bad tensor shape");
    (k < dims ? r.sizes : r.strides).push_back(v);
  }
  if (!absl::SimpleAtoi(f[4 + 2 * dims], &r.offset) ||
      !absl::SimpleAtoi(f[5 + 2 * dims], &r.bytes) || r.offset > data_size ||
      r.bytes > data_size - r.offset) {
    return Malformed(absl::StrCat("tensor ", f[1], " lies outside the image"));
  }
  if (!FitsItsBytes(r)) {
    return Malformed(absl::StrCat("tensor ", f[1], ": its shape [",
                                  absl::StrJoin(r.sizes, ","), "] and strides [",
                                  absl::StrJoin(r.strides, ","), "] do not match its ",
                                  r.bytes, " bytes"));
  }
  if (!index->tensors.emplace(std::string(f[1]), std::move(r)).second) {
    return Malformed(absl::StrCat("tensor ", f[1], " appears twice"));
  }
  return absl::OkStatus();
}

absl::Status ParsePosition(const std::vector<absl::string_view>& f, bool legacy,
                           TrainPosition* p) {
  PositionFields fields = FieldsOf(*p);
  std::vector<std::pair<const char*, int64_t*>> ints = fields.ints;
  if (legacy) {
    for (const auto& field : LegacyFieldsOf(*p)) ints.push_back(field);
  }
  for (const auto& [name, v] : ints) {
    if (f[1] == name) {
      if (absl::SimpleAtoi(f[2], v)) return absl::OkStatus();
      return Malformed(absl::StrCat("bad position field ", name, " '", f[2], "'"));
    }
  }
  for (const auto& [name, v] : fields.doubles) {
    if (f[1] == name) {
      // Hexadecimal floats (HexDouble), inf and nan: strtod reads them all.
      const std::string text(f[2]);
      char* end = nullptr;
      *v = std::strtod(text.c_str(), &end);
      if (!text.empty() && end != nullptr && *end == '\0') return absl::OkStatus();
      return Malformed(absl::StrCat("bad position field ", name, " '", f[2], "'"));
    }
  }
  if (f[1] == "sums_global") {
    p->sums_global = f[2] == "1";
    return absl::OkStatus();
  }
  // Fields of format 1 that format 2 dropped are ignored there.
  if (legacy) return absl::OkStatus();
  return Malformed(absl::StrCat("unknown position field ", f[1]));
}

absl::Status ParseLine(absl::string_view line, absl::string_view data, bool legacy,
                       Index* index) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
  if (f[0] == "t") return ParseTensor(f, data.size(), index);
  if (f[0] == "p" && f.size() == 3) return ParsePosition(f, legacy, &index->extras.position);
  size_t a = 0, b = 0;
  int64_t v = 0;
  if (f[0] == "s" && f.size() == 4 && absl::SimpleAtoi(f[1], &a) &&
      absl::SimpleAtoi(f[2], &b) && absl::SimpleAtoi(f[3], &v)) {
    index->adam_steps[{a, b}] = v;
    return absl::OkStatus();
  }
  if (f[0] == "b" && f.size() == 4 && absl::SimpleAtoi(f[2], &a) &&
      absl::SimpleAtoi(f[3], &b) && a <= data.size() && b <= data.size() - a) {
    std::string blob(data.substr(a, b));
    if (f[1] == "config") index->extras.config_yaml = std::move(blob);
    if (f[1] == "rows") index->extras.metrics_rows = std::move(blob);
    return absl::OkStatus();
  }
  return Malformed(absl::StrCat("bad index line '", line.substr(0, 200), "'"));
}

// Parses and checks the index: every record lies inside the image and its
// shape and strides match its bytes. Tensor records' offsets are returned
// from the image's start.
absl::StatusOr<Index> ParseIndex(absl::string_view bytes) {
  const size_t nl = bytes.substr(0, 128).find('\n');
  std::vector<absl::string_view> head =
      absl::StrSplit(bytes.substr(0, nl == absl::string_view::npos ? 0 : nl), ' ');
  size_t index_size = 0;
  if (nl == absl::string_view::npos || head.size() != 3 || head[0] != kMagic ||
      !absl::SimpleAtoi(head[2], &index_size) || index_size > kMaxIndex ||
      index_size > bytes.size() - nl - 1) {
    return Malformed("not a state image (bad header, or truncated)");
  }
  if (head[1] != "1" && head[1] != kFormat) {
    return Malformed(absl::StrCat("format ", head[1], ", this build reads 1 and ", kFormat));
  }
  const bool legacy = head[1] == "1";
  // Record offsets count from the data section, after the padded index.
  const size_t data_start = AlignUp(nl + 1 + index_size);
  if (data_start > bytes.size()) return Malformed("truncated");
  const absl::string_view data = bytes.substr(data_start);
  Index index;
  if (legacy) index.extras.position.legacy_iteration = 0;
  for (absl::string_view line :
       absl::StrSplit(bytes.substr(nl + 1, index_size), '\n', absl::SkipEmpty())) {
    if (absl::Status s = ParseLine(line, data, legacy, &index); !s.ok()) return s;
  }
  for (auto& [name, r] : index.tensors) r.offset += data_start;
  return index;
}

// The record's bytes as a tensor (no copy; valid while `bytes` lives).
at::Tensor View(absl::string_view bytes, const TensorRecord& r) {
  return at::from_blob(const_cast<char*>(bytes.data() + r.offset), r.sizes, r.strides,
                       at::TensorOptions().dtype(r.dtype));
}

// Checks that record `name` exists with `like`'s shape and dtype.
absl::Status CheckLike(const Index& index, const std::string& name, const at::Tensor& like) {
  auto it = index.tensors.find(name);
  if (it == index.tensors.end()) return DoesNotFit(absl::StrCat("no tensor ", name));
  const TensorRecord& r = it->second;
  if (like.sizes() != at::IntArrayRef(r.sizes) || like.scalar_type() != r.dtype) {
    return DoesNotFit(absl::StrCat(name, " is ", c10::toString(r.dtype), " [",
                                   absl::StrJoin(r.sizes, ","), "] there, ",
                                   c10::toString(like.scalar_type()), " [",
                                   absl::StrJoin(like.sizes(), ","), "] in this model"));
  }
  return absl::OkStatus();
}

// A new tensor on `device` holding record `name`, with its strides.
at::Tensor Clone(const Index& index, absl::string_view bytes, const std::string& name,
                 const torch::Device& device = torch::kCPU) {
  at::Tensor src = View(bytes, index.tensors.at(name));
  at::Tensor out = at::empty_strided(src.sizes(), src.strides(), src.options().device(device));
  out.copy_(src);
  return out;
}

// What the optimizer's state for one parameter is made of in the image.
struct OptimizerSlot {
  size_t group = 0, param = 0;
  std::vector<std::string> fields;  // Record names, each the parameter's shape.
  const int64_t* adam_step = nullptr;
};

// Checks the optimizer's records against its parameters; returns what to
// restore. Nothing is changed.
absl::StatusOr<std::vector<OptimizerSlot>> PlanOptimizer(const Index& index,
                                                         torch::optim::Optimizer& optimizer) {
  const bool adam = dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr;
  std::vector<OptimizerSlot> plan;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      const std::string base = absl::StrCat("o.", g, ".", i, ".");
      const at::Tensor& param = groups[g].params()[i];
      OptimizerSlot slot{g, i, {}, nullptr};
      if (adam) {
        auto step = index.adam_steps.find({g, i});
        if (step == index.adam_steps.end()) continue;  // Never stepped.
        slot.adam_step = &step->second;
        slot.fields = {base + "exp_avg", base + "exp_avg_sq"};
        if (index.tensors.count(base + "max_exp_avg_sq") > 0) {
          slot.fields.push_back(base + "max_exp_avg_sq");
        }
      } else if (index.tensors.count(base + "momentum_buffer") > 0) {
        slot.fields = {base + "momentum_buffer"};
      } else {
        continue;
      }
      for (const std::string& name : slot.fields) {
        if (absl::Status s = CheckLike(index, name, param); !s.ok()) return s;
      }
      plan.push_back(std::move(slot));
    }
  }
  return plan;
}

void RestoreOptimizer(const Index& index, absl::string_view bytes,
                      const std::vector<OptimizerSlot>& plan,
                      torch::optim::Optimizer& optimizer) {
  auto& state = optimizer.state();
  state.clear();
  const auto& groups = optimizer.param_groups();
  for (const OptimizerSlot& slot : plan) {
    const at::Tensor& param = groups[slot.group].params()[slot.param];
    const auto key = StateKey(optimizer, param);
    const torch::Device device = param.device();
    if (slot.adam_step != nullptr) {
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(*slot.adam_step);
      s->exp_avg(Clone(index, bytes, slot.fields[0], device));
      s->exp_avg_sq(Clone(index, bytes, slot.fields[1], device));
      if (slot.fields.size() > 2) s->max_exp_avg_sq(Clone(index, bytes, slot.fields[2], device));
      state[key] = std::move(s);
    } else {
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(Clone(index, bytes, slot.fields[0], device));
      state[key] = std::move(s);
    }
  }
}

}  // namespace

absl::Status ReadImageExtras(absl::string_view bytes, StateExtras* extras) {
  absl::StatusOr<Index> index = ParseIndex(bytes);
  if (!index.ok()) return index.status();
  *extras = std::move(index->extras);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ContentDigest(absl::string_view bytes) {
  absl::StatusOr<Index> index = ParseIndex(bytes);
  if (!index.ok()) return index.status();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  TrainPosition& p = index->extras.position;
  const PositionFields fields = FieldsOf(p);
  std::string core;
  for (size_t k = 0; k < fields.core_ints; ++k) {
    absl::StrAppend(&core, fields.ints[k].first, "=", *fields.ints[k].second, "\n");
  }
  for (const auto& [at, step] : index->adam_steps) {
    absl::StrAppend(&core, "s ", at.first, " ", at.second, " ", step, "\n");
  }
  XXH3_64bits_update(state, core.data(), core.size());
  // Parameters and optimizer state: the same on every rank after a step.
  // Buffers (BatchNorm statistics) are not: each rank updates its own in
  // its forward, and DDP makes them equal only before the next one.
  for (const auto& [name, r] : index->tensors) {
    if (!absl::StartsWith(name, "m.") && !absl::StartsWith(name, "o.")) continue;
    XXH3_64bits_update(state, name.data(), name.size() + 1);
    XXH3_64bits_update(state, bytes.data() + r.offset, r.bytes);
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

absl::Status RestoreImage(absl::string_view bytes, torch::nn::Module& model,
                          torch::optim::Optimizer& optimizer, StateExtras* extras) {
  absl::StatusOr<Index> index = ParseIndex(bytes);
  if (!index.ok()) return index.status();
  // Everything is checked before anything is copied: a state that does not
  // fit leaves the model and the optimizer as they were.
  size_t expected = 0;
  for (const auto& item : model.named_parameters()) {
    ++expected;
    if (absl::Status s = CheckLike(*index, "m." + item.key(), item.value()); !s.ok()) return s;
  }
  for (const auto& item : model.named_buffers()) {
    ++expected;
    if (absl::Status s = CheckLike(*index, "u." + item.key(), item.value()); !s.ok()) return s;
  }
  size_t model_records = 0;
  for (const auto& [name, r] : index->tensors) {
    if (absl::StartsWith(name, "m.") || absl::StartsWith(name, "u.")) ++model_records;
  }
  if (model_records != expected) {
    return DoesNotFit(absl::StrCat("it holds ", model_records,
                                   " model tensors, this model has ", expected));
  }
  absl::StatusOr<std::vector<OptimizerSlot>> plan = PlanOptimizer(*index, optimizer);
  if (!plan.ok()) return plan.status();
  for (const char* name : {"rng", "rng.cuda"}) {
    auto it = index->tensors.find(name);
    if (it != index->tensors.end() &&
        (it->second.dtype != at::kByte || it->second.sizes.size() != 1)) {
      return Malformed(absl::StrCat("generator state ", name, " is not a byte vector"));
    }
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& item : model.named_parameters()) {
      item.value().copy_(View(bytes, index->tensors.at("m." + item.key())));
      item.value().mutable_grad() = at::Tensor();
    }
    for (auto& item : model.named_buffers()) {
      item.value().copy_(View(bytes, index->tensors.at("u." + item.key())));
    }
  }
  RestoreOptimizer(*index, bytes, *plan, optimizer);
  for (const auto& [name, state] : {std::pair{"rng", &index->extras.rng.cpu},
                                    std::pair{"rng.cuda", &index->extras.rng.cuda}}) {
    if (index->tensors.count(name) > 0) *state = Clone(*index, bytes, name);
  }
  *extras = std::move(index->extras);
  return absl::OkStatus();
}

}  // namespace elastrun::trainer
