#include "evolve/evolve_io.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/config/config.h"
#include "common/config/loader.h"

namespace elastrun::evolve {
namespace {

absl::Status At(const config::Node& node, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(node.mark().ToString(), ": ", what));
}

bool IsNumber(const config::Node& node) {
  return node.kind() == config::Node::Kind::kInt || node.kind() == config::Node::Kind::kDouble;
}

absl::StatusOr<config::Node> LoadMapping(const std::string& path) {
  absl::StatusOr<config::Node> root = config::LoadConfig(path);
  if (!root.ok()) return root.status();
  if (!root->is_map()) return At(*root, "expected a mapping of names");
  return root;
}

absl::StatusOr<std::map<std::string, double>> NumbersOf(const config::Node& map) {
  std::map<std::string, double> out;
  for (const config::MapEntry& e : map.entries()) {
    if (!IsNumber(e.value)) {
      return At(e.value, absl::StrCat(e.key, ": ", config::Describe(e.value),
                                      " is not a number"));
    }
    out[e.key] = e.value.as_double();
  }
  return out;
}

// Splits one CSV line (fields may be double-quoted, "" inside for ").
std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

std::string QuoteCsv(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') {
      out += ' ';
    } else {
      if (c == '"') out += '"';
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string FormatNumber(double value) {
  char buffer[64];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, r.ptr);
}

absl::StatusOr<std::vector<GeneBound>> LoadMeta(const std::string& path) {
  absl::StatusOr<config::Node> root = LoadMapping(path);
  if (!root.ok()) return root.status();
  std::vector<GeneBound> meta;
  for (const config::MapEntry& e : root->entries()) {
    const std::vector<config::Node>* items = e.value.is_list() ? &e.value.items() : nullptr;
    if (items == nullptr || items->size() != 3 || !IsNumber((*items)[1]) ||
        !IsNumber((*items)[2]) ||
        ((*items)[0].kind() != config::Node::Kind::kBool && !IsNumber((*items)[0]))) {
      return At(e.value, absl::StrCat(e.key, ": expected [evolve, lower, upper] (evolve a "
                                      "bool or number, the bounds numbers), got ",
                                      config::Describe(e.value)));
    }
    GeneBound g;
    g.name = e.key;
    g.evolve = (*items)[0].kind() == config::Node::Kind::kBool ? (*items)[0].as_bool()
                                                               : (*items)[0].as_double() != 0.0;
    g.lower = (*items)[1].as_double();
    g.upper = (*items)[2].as_double();
    meta.push_back(std::move(g));
  }
  return meta;
}

absl::StatusOr<std::map<std::string, double>> LoadNumbers(const std::string& path) {
  absl::StatusOr<config::Node> root = LoadMapping(path);
  if (!root.ok()) return root.status();
  return NumbersOf(*root);
}

absl::StatusOr<std::vector<std::map<std::string, double>>> LoadIndividuals(
    const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("--evolve-population ", dir, ": not a folder"));
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) {
      files.push_back(entry.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat(dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  std::vector<std::map<std::string, double>> out;
  for (const std::string& file : files) {
    // A mapping or a list: not a config (whose top level is a mapping).
    absl::StatusOr<std::string> text = config::ReadFileFromDisk(file, 64 << 20);
    if (!text.ok()) return text.status();
    absl::StatusOr<config::Node> root = config::ParseYamlValue(*text, file);
    if (!root.ok()) return root.status();
    if (root->is_map()) {
      absl::StatusOr<std::map<std::string, double>> one = NumbersOf(*root);
      if (!one.ok()) return one.status();
      out.push_back(*std::move(one));
      continue;
    }
    if (!root->is_list()) return At(*root, "expected a mapping or a list of mappings");
    for (const config::Node& item : root->items()) {
      if (!item.is_map()) return At(item, "expected a mapping of gene values");
      absl::StatusOr<std::map<std::string, double>> one = NumbersOf(item);
      if (!one.ok()) return one.status();
      out.push_back(*std::move(one));
    }
  }
  return out;
}

std::string EvolveCsvHeader(const std::vector<std::string>& metric_names,
                            const std::vector<std::string>& gene_names) {
  std::vector<std::string> columns = {"generation", "index", "status", "fitness"};
  for (const std::string& m : metric_names) columns.push_back(QuoteCsv(m));
  for (const std::string& g : gene_names) columns.push_back(QuoteCsv(g));
  columns.push_back("reason");
  return absl::StrJoin(columns, ",");
}

std::string EvolveCsvLine(const EvolveRow& row, const std::vector<std::string>& metric_names) {
  std::vector<std::string> fields = {absl::StrCat(row.generation), absl::StrCat(row.index),
                                     row.status, FormatNumber(row.fitness)};
  for (const std::string& m : metric_names) {
    auto it = row.metrics.find(m);
    fields.push_back(it == row.metrics.end() ? "" : FormatNumber(it->second));
  }
  for (double g : row.genes) fields.push_back(FormatNumber(g));
  fields.push_back(QuoteCsv(row.reason));
  return absl::StrJoin(fields, ",");
}

absl::StatusOr<std::vector<EvolveRow>> ReadEvolveCsv(const std::string& path,
                                                     const std::vector<std::string>& metric_names,
                                                     const std::vector<std::string>& gene_names) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines.pop_back();  // after the last newline: empty, or a line cut short
  const std::string header = EvolveCsvHeader(metric_names, gene_names);
  if (lines.empty() || lines[0] != header) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":1: the header is not this run's (\"", header,
        "\"): resume with the --meta, --hyp and --fitness the run was started with"));
  }
  const size_t columns = SplitCsv(header).size();
  std::vector<EvolveRow> rows;
  for (size_t n = 1; n < lines.size(); ++n) {
    const std::vector<std::string> f = SplitCsv(lines[n]);
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", n + 1, ": ", what));
    };
    if (f.size() != columns) {
      return bad(absl::StrCat(f.size(), " fields, the header has ", columns));
    }
    EvolveRow row;
    if (!absl::SimpleAtoi(f[0], &row.generation) || !absl::SimpleAtoi(f[1], &row.index) ||
        row.generation < 0 || row.index < 0) {
      return bad("generation and index must be whole numbers >= 0");
    }
    row.status = f[2];
    if (row.status != "done" && row.status != "failed" && row.status != "pruned") {
      return bad(absl::StrCat("status \"", row.status, "\" is not done, pruned or failed"));
    }
    if (!absl::SimpleAtod(f[3], &row.fitness) || !std::isfinite(row.fitness)) {
      return bad(absl::StrCat("fitness \"", f[3], "\" is not a number"));
    }
    size_t i = 4;
    for (const std::string& m : metric_names) {
      double v = 0.0;
      if (!f[i].empty()) {
        if (!absl::SimpleAtod(f[i], &v)) return bad(absl::StrCat(m, ": not a number"));
        row.metrics[m] = v;
      }
      ++i;
    }
    for (const std::string& g : gene_names) {
      double v = 0.0;
      if (!absl::SimpleAtod(f[i], &v)) return bad(absl::StrCat(g, ": not a number"));
      row.genes.push_back(v);
      ++i;
    }
    row.reason = f[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string HypEvolveYaml(const EvolveRow& best, const std::vector<GeneBound>& meta) {
  std::string out = absl::StrCat("# The best individual of `elastrun evolve`: generation ",
                                 best.generation, ", index ", best.index, ", fitness ",
                                 FormatNumber(best.fitness), "\n");
  for (const auto& [name, value] : best.metrics) {
    absl::StrAppend(&out, "#   ", name, ": ", FormatNumber(value), "\n");
  }
  for (size_t i = 0; i < meta.size() && i < best.genes.size(); ++i) {
    absl::StrAppend(&out, meta[i].name, ": ", FormatNumber(best.genes[i]), "\n");
  }
  return out;
}

std::string PopulationYaml(const std::vector<Individual>& population,
                           const std::vector<GeneBound>& meta, int generation) {
  std::string out =
      absl::StrCat("# The population of generation ", generation,
                   " of `elastrun evolve`, evaluated; --evolve-population reads it.\n");
  for (size_t n = 0; n < population.size(); ++n) {
    absl::StrAppend(&out, "# individual ", n, ": fitness ",
                    FormatNumber(population[n].fitness), "\n");
    for (size_t i = 0; i < meta.size() && i < population[n].genes.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "- " : "  ", meta[i].name, ": ",
                      FormatNumber(population[n].genes[i]), "\n");
    }
  }
  return out;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat(temp, ": cannot be written"));
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace elastrun::evolve
