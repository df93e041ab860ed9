// CSV and TSV tables parsed (csv_table.h): what pandas reads of them, and one-line errors for what it would not.
#include "runtime/data/csv_table.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>

#include "graph/error.h"
#include "graph/ir.h"

namespace graphrun::runtime::data {
namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return s.substr(a, b - a);
}

// A number as pandas would read it: the whole (trimmed) field, finite.
bool parse_number(const std::string& s, double& v) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(v) && errno != ERANGE;
}

bool parse_integer(const std::string& s, int64_t& v) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + s.size() || errno == ERANGE) return false;
  v = static_cast<int64_t>(x);
  return true;
}

bool is_missing(const std::string& s) {
  static const std::set<std::string> missing = {"", "na", "nan", "n/a", "null", "none", "?", "-nan"};
  std::string l = s;
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return missing.count(l) != 0;
}

// The records of a table: fields split at `delim` outside quotes, each record with the line it starts on.
struct Record {
  int64_t line = 0;
  std::vector<std::string> fields;
};

std::vector<Record> split_records(const std::string& text, char delim, const std::string& what) {
  std::vector<Record> out;
  Record rec;
  std::string field;
  bool quoted = false, in_quotes = false, any = false;
  int64_t line = 1, quote_line = 0;
  rec.line = 1;
  auto end_field = [&] {
    rec.fields.push_back(quoted ? field : trim(field));
    field.clear();
    quoted = false;
  };
  auto end_record = [&] {
    end_field();
    // A blank line is no record (pandas' skip_blank_lines).
    if (!(rec.fields.size() == 1 && rec.fields[0].empty() && !any)) out.push_back(rec);
    rec = Record{};
    any = false;
  };
  size_t i = text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;  // a UTF-8 byte-order mark
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == '"' && trim(field).empty()) {
      in_quotes = quoted = any = true;
      quote_line = line;
      field.clear();
    } else if (c == delim) {
      end_field();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_record();
      rec.line = ++line;
    } else if (quoted) {
      GR_CHECK(c == ' ' || c == '\t',
               what << ": line " << line << ": text after a closing quote (a field is quoted whole or not at all)");
    } else {
      field += c;
      any = any || (c != ' ' && c != '\t');
    }
  }
  GR_CHECK(!in_quotes, what << ": line " << quote_line << ": a quote that is never closed");
  if (any || !field.empty() || quoted) end_record();
  return out;
}

std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + printable(v[i]);
  return v.size() > 8 ? s + ", ... (" + std::to_string(v.size()) + " in all)" : s;
}

}  // namespace

CsvTable parse_csv(const std::string& text, char delim, const std::string& what, const std::string& labels_name,
                   bool targets, const std::vector<std::string>& given, std::vector<CsvGroup> groups) {
  std::vector<Record> recs = split_records(text, delim, what);
  GR_CHECK(!recs.empty(), what << ": the table is empty (a header of column names comes first)");
  const std::vector<std::string>& header = recs[0].fields;
  const size_t cols = header.size();
  auto col = [&](size_t c) { return printable(header[c]); };
  std::map<std::string, size_t> seen;
  for (size_t c = 0; c < cols; ++c) {
    GR_CHECK(!header[c].empty(), what << ": column " << c + 1 << " of the header has no name");
    GR_CHECK(seen.emplace(header[c], c).second, what << ": the header names column '" << col(c) << "' twice");
  }
  auto it = seen.find(labels_name);
  GR_CHECK(it != seen.end() || !targets, what << ": no column '" << printable(labels_name)
                                              << "' of targets (its columns: " << list(header)
                                              << "; name the target column with --labels NAME)");
  const size_t label_col = it == seen.end() ? cols : it->second;
  CsvTable t;
  if (label_col < cols) t.target_name = header[label_col];
  // Each column's group and place in it (none: not read).
  if (groups.empty()) {
    groups.emplace_back();
    groups.back().name = "features";
  }
  std::vector<std::pair<int, size_t>> place(cols, {-1, 0});
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    CsvGroup& g = groups[gi];
    if (g.columns.empty() && !g.named_by_input) {
      for (size_t c = 0; c < cols; ++c)
        if (c != label_col) g.columns.push_back(header[c]);
      GR_CHECK(!g.columns.empty(),
               what << ": no column of features beside the targets '" << printable(labels_name) << "'");
    }
    for (size_t k = 0; k < g.columns.size(); ++k) {
      const auto c = seen.find(g.columns[k]);
      if (c == seen.end() && g.named_by_input)
        GR_FAIL(what << ": no column '" << printable(g.columns[k])
                     << "' for the model input of that name (its columns: " << list(header)
                     << "; say which columns feed each input with --columns INPUT=COL,...)");
      GR_CHECK(c != seen.end(), what << ": no column '" << printable(g.columns[k]) << "' (--columns "
                                     << printable(g.name) << "=...; its columns: " << list(header) << ")");
      GR_CHECK(c->second != label_col, what << ": column '" << col(c->second) << "' holds the targets (--labels); it "
                                            << "cannot feed input '" << printable(g.name) << "' too");
      GR_CHECK(place[c->second].first < 0, what << ": column '" << col(c->second) << "' feeds two inputs ('"
                                                << printable(groups[static_cast<size_t>(place[c->second].first)].name)
                                                << "' and '" << printable(g.name) << "')");
      place[c->second] = {static_cast<int>(gi), k};
    }
  }
  t.rows = static_cast<int64_t>(recs.size()) - 1;
  GR_CHECK(t.rows >= 1, what << ": the table has a header but no rows");
  for (CsvGroup& g : groups) {
    const size_t values = static_cast<size_t>(t.rows) * g.columns.size();
    if (g.integers)
      g.ints.assign(values, 0);
    else
      g.reals.assign(values, 0);
  }
  std::vector<std::string> labels;
  for (size_t r = 1; r < recs.size(); ++r) {
    const Record& rec = recs[r];
    GR_CHECK(rec.fields.size() == cols, what << ": line " << rec.line << " has " << rec.fields.size() << " field"
                                             << (rec.fields.size() == 1 ? "" : "s") << ", the header " << cols);
    for (size_t c = 0; c < cols; ++c) {
      const std::string& v = rec.fields[c];
      if (c == label_col) {
        GR_CHECK(!is_missing(v), what << ": line " << rec.line << ": the target '" << col(c) << "' is missing");
        labels.push_back(v);
        continue;
      }
      if (place[c].first < 0) continue;
      CsvGroup& g = groups[static_cast<size_t>(place[c].first)];
      const size_t at = (r - 1) * g.columns.size() + place[c].second;
      GR_CHECK(!is_missing(v), what << ": line " << rec.line << ": column '" << col(c)
                                    << "' is missing (graphrun does not impute: fill or drop it first)");
      const std::string shown = printable(v.size() > 40 ? v.substr(0, 40) + "..." : v);
      if (g.integers) {
        GR_CHECK(parse_integer(v, g.ints[at]), what << ": line " << rec.line << ": column '" << col(c) << "' holds '"
                                                    << shown << "', not an integer (it feeds the integer input '"
                                                    << printable(g.name) << "')");
        GR_CHECK(!g.int32 || (g.ints[at] >= std::numeric_limits<int32_t>::min() &&
                              g.ints[at] <= std::numeric_limits<int32_t>::max()),
                 what << ": line " << rec.line << ": column '" << col(c) << "' holds " << g.ints[at]
                      << ", beyond the int32 input '" << printable(g.name) << "'");
      } else {
        GR_CHECK(parse_number(v, g.reals[at]), what << ": line " << rec.line << ": column '" << col(c) << "' holds '"
                                                    << shown
                                                    << "', not a finite number (encode categories as numbers first)");
      }
    }
  }
  t.groups = std::move(groups);
  if (label_col == cols) return t;
  // The targets: class ids, numbers, or class names (the given numbering, else sorted).
  bool ints = given.empty(), numbers = given.empty();
  for (const std::string& v : labels) {
    int64_t i = 0;
    double d = 0;
    ints = ints && parse_integer(v, i);
    numbers = numbers && parse_number(v, d);
  }
  if (ints) {
    t.class_ids = true;
    for (const std::string& v : labels) parse_integer(v, t.ids.emplace_back());
    return t;
  }
  if (numbers) {
    for (const std::string& v : labels) parse_number(v, t.targets.emplace_back());
    return t;
  }
  t.class_ids = true;
  t.classes = given;
  if (t.classes.empty()) {
    t.classes = labels;
    std::sort(t.classes.begin(), t.classes.end());
    t.classes.erase(std::unique(t.classes.begin(), t.classes.end()), t.classes.end());
  }
  std::map<std::string, int64_t> id;
  for (size_t k = 0; k < t.classes.size(); ++k) id[t.classes[k]] = static_cast<int64_t>(k);
  for (size_t r = 0; r < labels.size(); ++r) {
    auto found = id.find(labels[r]);
    GR_CHECK(found != id.end(), what << ": line " << recs[r + 1].line << ": class '" << printable(labels[r])
                                     << "' is not among the training data's classes (" << list(t.classes) << ")");
    t.ids.push_back(found->second);
  }
  return t;
}

}  // namespace graphrun::runtime::data
