// The documentation of the SLICE_* variables: generated from the table, and docs/configuration.md
// carries exactly what the generator prints, between its <!-- variables:begin --> and
// <!-- variables:end --> markers (regenerate with build/bin/slice-vars --markdown).
#include "variables_doc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "variables.h"

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read_file(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string command_output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

TEST(VariablesTable, IsWellFormed) {
  std::set<std::string_view> names, fields;
  for (const auto& v : slice::kSliceVariables) {
    EXPECT_EQ(v.name.rfind("SLICE_", 0), 0u) << v.name;
    EXPECT_TRUE(names.insert(v.name).second) << "duplicate " << v.name;
    EXPECT_TRUE(fields.insert(v.field).second) << "duplicate field " << v.field;
    EXPECT_FALSE(v.example.empty()) << v.name;
    EXPECT_FALSE(v.help.empty()) << v.name;
    EXPECT_EQ(v.help.find('|'), std::string_view::npos) << v.name << ": a | would split the markdown row";
    EXPECT_EQ(v.unset_text.find('|'), std::string_view::npos) << v.name;
  }
  // The contract (docs/ARCHITECTURE.md) names these, with per-device forms for exactly two.
  const std::set<std::string_view> contract{"SLICE_MEMORY_LIMIT",  "SLICE_COMPUTE_SHARE", "SLICE_COMPUTE_LIMIT",
                                            "SLICE_PRIORITY",      "SLICE_TENANT",        "SLICE_COORDINATOR_DIR",
                                            "SLICE_LOG_LEVEL",     "SLICE_LOG_FILE",      "SLICE_DISABLE",
                                            "SLICE_CRASH_HANDLER",  // issue 6: libslice's crash report
                                            "SLICE_POLICY_DIR"};    // issue 13: persistent policies
  EXPECT_EQ(names, contract);
  for (const auto& v : slice::kSliceVariables) {
    const bool per_device = v.name == "SLICE_MEMORY_LIMIT" || v.name == "SLICE_COMPUTE_SHARE";
    EXPECT_EQ(v.scope == slice::DeviceScope::per_device, per_device) << v.name;
  }
  for (const auto ignored : slice::kIgnoredSliceVariables) EXPECT_EQ(slice::find_variable(ignored), nullptr);
}

TEST(VariablesMarkdown, OneRowPerVariableAndPerDeviceForm) {
  const auto lines = lines_of(slice::variables_markdown());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0], "| variable | meaning | default |");
  EXPECT_EQ(lines[1], "| --- | --- | --- |");
  std::vector<std::string> expected_names;
  for (const auto& v : slice::kSliceVariables) {
    expected_names.push_back("`" + std::string(v.name) + "`");
    if (v.scope == slice::DeviceScope::per_device) {
      expected_names.push_back("`" + std::string(v.name) + "_<n>`");
      expected_names.push_back("`" + std::string(v.name) + "_GPU_<uuid>`");  // keyed by UUID (issue 7)
    }
  }
  ASSERT_EQ(lines.size(), 2 + expected_names.size());
  for (std::size_t i = 0; i < expected_names.size(); ++i) {
    const std::string& row = lines[2 + i];
    EXPECT_EQ(row.rfind("| " + expected_names[i] + " | ", 0), 0u) << row;
    EXPECT_EQ(std::count(row.begin(), row.end(), '|'), 4) << row;
  }
  EXPECT_NE(lines[3].find("wins over `SLICE_MEMORY_LIMIT`"), std::string::npos) << lines[3];
  EXPECT_EQ(lines[2],
            "| `SLICE_MEMORY_LIMIT` | VRAM cap on every visible device: bytes (`1073741824`), a "
            "Kubernetes-style quantity (`512Mi`, `4Gi`, `1.5Gi`, `4G` = 4·10⁹), `MiB`/`GiB` forms, or a "
            "percentage of the device (`25%`) | no cap |");
}

TEST(VariablesHelpText, PlainWrappedAndComplete) {
  const std::string text = slice::variables_help_text(100);
  EXPECT_EQ(text.find('`'), std::string::npos);
  // The text with its line breaks undone, so a search does not depend on where a line wrapped.
  std::string unwrapped;
  for (const std::string& line : lines_of(text)) {
    unwrapped += (unwrapped.empty() ? "" : " ") + line.substr(std::min(line.find_first_not_of(' '), line.size()));
  }
  for (const auto& v : slice::kSliceVariables) {
    EXPECT_NE(text.find("\n  " + std::string(v.name) + " "), std::string::npos) << v.name;
    const std::string example = "example: " + std::string(v.name) + "=" + std::string(v.example);
    EXPECT_NE(unwrapped.find(example), std::string::npos) << example;
  }
  EXPECT_NE(text.find("\n  SLICE_MEMORY_LIMIT_<n> "), std::string::npos);
  for (const std::string& line : lines_of(text)) {
    // Characters, not bytes: the text holds 4·10⁹ and 1–100.
    const auto width =
        std::count_if(line.begin(), line.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; });
    EXPECT_LE(width, 100) << line;
  }
}

// The table users read lives in docs/configuration.md (the README links to it).
TEST(ConfigurationDoc, HasTheGeneratedTable) {
  const std::string doc = read_file(SLICE_CONFIGURATION_DOC_PATH);
  const std::string begin = "<!-- variables:begin -->\n", end = "<!-- variables:end -->";
  const auto from = doc.find(begin);
  const auto to = doc.find(end);
  ASSERT_NE(from, std::string::npos) << "docs/configuration.md lacks " << begin;
  ASSERT_NE(to, std::string::npos) << "docs/configuration.md lacks " << end;
  ASSERT_LT(from, to) << "docs/configuration.md's variables markers are out of order";
  EXPECT_EQ(doc.substr(from + begin.size(), to - from - begin.size()), slice::variables_markdown())
      << "docs/configuration.md's variables table is stale: replace it with the output of "
         "build/bin/slice-vars --markdown";
}

TEST(SliceVarsTool, PrintsTheLibraryRendering) {
  EXPECT_EQ(command_output(std::string(SLICE_VARS_PATH) + " --markdown"), slice::variables_markdown());
  EXPECT_EQ(command_output(std::string(SLICE_VARS_PATH) + " --help-text"), slice::variables_help_text());
  EXPECT_EQ(std::system((std::string(SLICE_VARS_PATH) + " --bogus 2>/dev/null").c_str()) >> 8, 2);
}

}  // namespace
