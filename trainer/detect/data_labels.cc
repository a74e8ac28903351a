#include "trainer/detect/data_labels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace elastrun::trainer::detect {
namespace {

// A box reaching beyond the image by less than this (a fraction of the
// image) is rounding in a label file written with 6 decimals: clipped
// without a warning.
constexpr double kRounding = 1e-4;

constexpr char kWhitespace[] = " \t\r\v\f";

absl::StatusOr<double> ParseNumber(absl::string_view token, const std::string& where) {
  double value = 0;
  if (!absl::SimpleAtod(token, &value) || !std::isfinite(value)) {
    return absl::DataLossError(
        absl::StrCat(where, ": '", DisplayText(token), "' is not a finite number"));
  }
  return value;
}

absl::StatusOr<int32_t> ParseClass(absl::string_view token, const std::string& where,
                                   int num_classes) {
  ASSIGN_OR_RETURN(const double value, ParseNumber(token, where));
  if (value < 0) {
    return absl::DataLossError(
        absl::StrCat(where, ": negative class ", DisplayText(token)));
  }
  if (value != std::floor(value)) {
    return absl::DataLossError(
        absl::StrCat(where, ": class ", DisplayText(token), " is not a whole number"));
  }
  if (value >= num_classes) {
    return absl::OutOfRangeError(
        absl::StrCat(where, ": class ", DisplayText(token),
                     " is not below nc=", num_classes, " (classes are 0-",
                     num_classes - 1, "): fix the label, or nc and names in data.yaml"));
  }
  return static_cast<int32_t>(value);
}

// Clips [*lo, *hi] to [0, limit]; the overshoot beyond it (0 when inside).
double Clip(double* lo, double* hi, double limit) {
  const double over = std::max(-*lo, *hi - limit);
  *lo = std::clamp(*lo, 0.0, limit);
  *hi = std::clamp(*hi, 0.0, limit);
  return std::max(over, 0.0);
}

// The label of corners x1,y1,x2,y2 already inside [0,1]; counted as a
// duplicate instead when `seen` holds it.
void AddLabel(int32_t cls, double x1, double y1, double x2, double y2,
              std::set<std::array<float, 5>>* seen, ImageLabels* out) {
  Label label;
  label.cls = cls;
  label.cx = static_cast<float>((x1 + x2) / 2);
  label.cy = static_cast<float>((y1 + y2) / 2);
  label.w = static_cast<float>(x2 - x1);
  label.h = static_cast<float>(y2 - y1);
  if (!seen->insert({static_cast<float>(cls), label.cx, label.cy, label.w, label.h})
           .second) {
    ++out->duplicates;
    return;
  }
  out->labels.push_back(label);
}

}  // namespace

absl::StatusOr<ImageLabels> ParseYoloLabels(absl::string_view text,
                                            const std::string& file, int num_classes) {
  ImageLabels out;
  std::set<std::array<float, 5>> seen;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::vector<absl::string_view> tokens =
        absl::StrSplit(line, absl::ByAnyChar(kWhitespace), absl::SkipEmpty());
    if (tokens.empty()) continue;
    const std::string where = absl::StrCat(file, ":", line_number);
    const size_t columns = tokens.size();
    if (columns < 5 || columns == 6) {
      return absl::DataLossError(
          absl::StrCat(where, ": ", columns,
                       " columns; a label is `class cx cy w h` (5 columns) or a ",
                       "polygon `class x1 y1 x2 y2 x3 y3 ...`"));
    }
    if (columns > 6 && columns % 2 == 0) {
      return absl::DataLossError(absl::StrCat(where, ": a polygon of ", columns - 1,
                                              " coordinates; it needs x,y pairs"));
    }
    std::vector<double> v;
    for (size_t i = 1; i < columns; ++i) {
      ASSIGN_OR_RETURN(const double value, ParseNumber(tokens[i], where));
      if (value < 0) {
        return absl::DataLossError(
            absl::StrCat(where, ": negative coordinate ", DisplayText(tokens[i])));
      }
      if (value > 1) {
        return absl::DataLossError(
            absl::StrCat(where, ": coordinate ", DisplayText(tokens[i]),
                         " > 1: not normalised or out of bounds ",
                         "(YOLOv5 labels are fractions of the image)"));
      }
      v.push_back(value);
    }
    ASSIGN_OR_RETURN(const int32_t cls, ParseClass(tokens[0], where, num_classes));
    double x1, y1, x2, y2;
    if (columns == 5) {
      x1 = v[0] - v[2] / 2;
      x2 = v[0] + v[2] / 2;
      y1 = v[1] - v[3] / 2;
      y2 = v[1] + v[3] / 2;
    } else {  // a polygon: its bounding box
      x1 = x2 = v[0];
      y1 = y2 = v[1];
      for (size_t i = 0; i + 1 < v.size(); i += 2) {
        x1 = std::min(x1, v[i]);
        x2 = std::max(x2, v[i]);
        y1 = std::min(y1, v[i + 1]);
        y2 = std::max(y2, v[i + 1]);
      }
    }
    const double over = std::max(Clip(&x1, &x2, 1), Clip(&y1, &y2, 1));
    if (over > kRounding && out.clipped++ == 0) out.first_clipped_line = line_number;
    AddLabel(cls, x1, y1, x2, y2, &seen, &out);
  }
  return out;
}

bool IsBoxToken(absl::string_view token) {
  const std::vector<absl::string_view> parts = absl::StrSplit(token, ',');
  if (parts.size() != 5) return false;
  double ignored;
  return std::all_of(parts.begin(), parts.end(),
                     [&](absl::string_view p) { return absl::SimpleAtod(p, &ignored); });
}

absl::StatusOr<AnnotationLine> ParseAnnotationLine(absl::string_view line,
                                                   const std::string& where,
                                                   int num_classes) {
  line = absl::StripAsciiWhitespace(line);
  // Tokens as [begin, end) offsets into `line`.
  std::vector<std::pair<size_t, size_t>> tokens;
  for (size_t i = 0; i < line.size();) {
    const size_t begin = line.find_first_not_of(kWhitespace, i);
    if (begin == absl::string_view::npos) break;
    size_t end = line.find_first_of(kWhitespace, begin);
    if (end == absl::string_view::npos) end = line.size();
    tokens.emplace_back(begin, end);
    i = end;
  }
  if (tokens.empty()) return absl::DataLossError(absl::StrCat(where, ": no image path"));
  size_t first_box = tokens.size();
  while (first_box > 1) {
    const auto [b, e] = tokens[first_box - 1];
    if (line.substr(b, e - b).find(',') == absl::string_view::npos) break;
    --first_box;
  }
  AnnotationLine out;
  out.path = std::string(line.substr(0, tokens[first_box - 1].second));
  for (size_t t = first_box; t < tokens.size(); ++t) {
    const absl::string_view token =
        line.substr(tokens[t].first, tokens[t].second - tokens[t].first);
    const std::string box_where = absl::StrCat(where, ": box ", t - first_box + 1);
    if (!IsBoxToken(token)) {
      return absl::DataLossError(absl::StrCat(box_where, " '", DisplayText(token),
                                              "' is not x1,y1,x2,y2,class (pixels)"));
    }
    const std::vector<absl::string_view> parts = absl::StrSplit(token, ',');
    PixelBox box;
    ASSIGN_OR_RETURN(box.x1, ParseNumber(parts[0], box_where));
    ASSIGN_OR_RETURN(box.y1, ParseNumber(parts[1], box_where));
    ASSIGN_OR_RETURN(box.x2, ParseNumber(parts[2], box_where));
    ASSIGN_OR_RETURN(box.y2, ParseNumber(parts[3], box_where));
    ASSIGN_OR_RETURN(box.cls, ParseClass(parts[4], box_where, num_classes));
    out.boxes.push_back(box);
  }
  return out;
}

absl::StatusOr<ImageLabels> PixelBoxesToLabels(const std::vector<PixelBox>& boxes,
                                               int width, int height,
                                               const std::string& where) {
  ImageLabels out;
  std::set<std::array<float, 5>> seen;
  for (size_t i = 0; i < boxes.size(); ++i) {
    PixelBox b = boxes[i];
    const std::string what = absl::StrFormat("%s: box %d (x1,y1,x2,y2 = %g,%g,%g,%g)",
                                             where, i + 1, b.x1, b.y1, b.x2, b.y2);
    if (!(b.x2 > b.x1 && b.y2 > b.y1)) {
      return absl::DataLossError(
          absl::StrCat(what, ": empty or inverted (x2 must exceed x1, y2 y1)"));
    }
    if (b.x2 <= 0 || b.y2 <= 0 || b.x1 >= width || b.y1 >= height) {
      return absl::DataLossError(
          absl::StrCat(what, ": wholly outside the ", width, "x", height, " image"));
    }
    const double over = std::max(Clip(&b.x1, &b.x2, width), Clip(&b.y1, &b.y2, height));
    if (over > 0 && out.clipped++ == 0) out.first_clipped_line = static_cast<int>(i) + 1;
    AddLabel(b.cls, b.x1 / width, b.y1 / height, b.x2 / width, b.y2 / height, &seen,
             &out);
  }
  return out;
}

std::string DisplayText(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<uint8_t>(text[i]);
    size_t n = 0;  // length of the UTF-8 sequence starting here; 0: invalid
    if (c >= 0x20 && c < 0x7f) {
      n = 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
    }
    for (size_t k = 1; k < n; ++k) {
      if (i + k >= text.size() || (static_cast<uint8_t>(text[i + k]) & 0xc0) != 0x80)
        n = 0;
    }
    if (n == 0) {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
      ++i;
    } else {
      out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace elastrun::trainer::detect
