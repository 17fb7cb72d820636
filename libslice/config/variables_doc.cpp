#include "variables_doc.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <vector>

#include "config.h"
#include "variables.h"

namespace slice {
namespace {

// One line of documentation: a variable, or the per-device form of one.
struct DocRow {
  std::string name;
  std::string meaning;       // markdown
  std::string default_text;  // markdown; empty for a per-device form (it has no default of its own)
  std::string example;       // plain, e.g. SLICE_MEMORY_LIMIT=4Gi
};

// ---- a default as users read it: the initial value of Config's member, printed ----------------
// An empty value prints as "" and the table's UNSET words are shown instead (config.h checks at
// compile time that every empty default has them, and no other default does).

std::string shown(const std::optional<MemoryLimit>& limit) {
  if (!limit) return "";
  if (limit->form == MemoryLimit::Form::bytes) return "`" + std::to_string(limit->bytes) + "`";
  return "`" + std::to_string(limit->device_billionths / (MemoryLimit::kWholeDevice / 100)) + "%`";
}
std::string shown(unsigned percent) { return std::to_string(percent); }
std::string shown(Priority priority) { return "`" + std::string(to_string(priority)) + "`"; }
std::string shown(LogLevel level) { return "`" + std::string(to_string(level)) + "`"; }
std::string shown(bool flag) { return flag ? "`1`" : "`0`"; }
std::string shown(const std::string& text) { return text.empty() ? "" : "`" + text + "`"; }
template <typename T, typename Fallback>
std::string shown(const PerDevice<T, Fallback>& field) {
  return shown(field.every_device);
}

// The default column of a row: what holds when the variable is unset (markdown).
std::string default_text(VariableId id) {
  static const Config defaults;
  switch (id) {
#define SLICE_VARIABLE(NAME, FIELD, KIND, DEVICES, DEFAULT, UNSET, EXAMPLE, HELP) \
  case VariableId::NAME:                                                          \
    return std::string_view(UNSET).empty() ? shown(defaults.FIELD) : std::string(UNSET);
#include "variables.inc"
  }
  return "";
}

std::vector<DocRow> doc_rows() {
  std::vector<DocRow> rows;
  for (std::size_t i = 0; i < std::size(kSliceVariables); ++i) {
    const VariableInfo& v = kSliceVariables[i];
    const std::string name(v.name);
    rows.push_back(
        {name, std::string(v.help), default_text(static_cast<VariableId>(i)), name + "=" + std::string(v.example)});
    if (v.scope == DeviceScope::per_device) {
      rows.push_back({name + "_<n>",
                      "the same for device ordinal n as this process numbers it; wins over `" + name + "`", "",
                      name + "_1=" + std::string(v.example)});
      rows.push_back({name + "_GPU_<uuid>",
                      "the same for the GPU of that UUID, its dashes written as underscores "
                      "(`GPU_516d696d_6770_4075_8000_000000000000`); wins over `" +
                          name + "_<n>` and `" + name + "`",
                      "", name + "_GPU_516d696d_6770_4075_8000_000000000000=" + std::string(v.example)});
    }
  }
  return rows;
}

// Markdown `code` spans read as plain text in a terminal.
std::string plain(std::string_view markdown) {
  std::string out;
  std::copy_if(markdown.begin(), markdown.end(), std::back_inserter(out), [](char c) { return c != '`'; });
  return out;
}

// Characters, not bytes: the help text has UTF-8 in it (4·10⁹, 1–100).
std::size_t display_width(std::string_view text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

// Appends text word by word, starting at column `indent` of a fresh line, breaking before `width`.
void append_wrapped(std::string& out, std::string_view text, std::size_t indent, std::size_t width) {
  std::size_t column = indent;
  bool line_empty = true;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view{} : text.substr(space + 1);
    if (word.empty()) continue;
    if (!line_empty && column + 1 + display_width(word) > width) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += display_width(word);
    line_empty = false;
  }
  out += '\n';
}

}  // namespace

std::string variables_markdown() {
  std::string out = "| variable | meaning | default |\n| --- | --- | --- |\n";
  for (const DocRow& row : doc_rows()) {
    out += "| `" + row.name + "` | " + row.meaning + " |";
    out += row.default_text.empty() ? " |\n" : " " + row.default_text + " |\n";
  }
  return out;
}

std::string variables_help_text(std::size_t width) {
  const auto rows = doc_rows();
  std::size_t name_width = 0;
  for (const DocRow& row : rows) name_width = std::max(name_width, row.name.size());
  const std::size_t indent = 2 + name_width + 2;

  std::string out = "Variables (read once, at the first CUDA or NVML call):\n";
  for (const DocRow& row : rows) {
    out += "  " + row.name;
    out.append(name_width - row.name.size() + 2, ' ');
    append_wrapped(out, plain(row.meaning), indent, width);
    // Default and example on a line of their own, where the eye looks for them.
    std::string usage = "example: " + row.example;
    if (!row.default_text.empty()) usage = "default: " + plain(row.default_text) + "; " + usage;
    out.append(indent, ' ');
    append_wrapped(out, usage, indent, width);
  }
  return out;
}

}  // namespace slice
