// parse_config: every variable of the table, per-device forms, names that are wrong, and the one
// error line. The rule under test throughout: bad configuration is an error, never "unlimited".
#include "config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "variables.h"

namespace {

using slice::Config;
using slice::Environment;
using slice::LogLevel;
using slice::MemoryLimit;
using slice::parse_config;
using slice::Priority;

constexpr std::uint64_t kGi = 1ull << 30;

Config parsed(const Environment& env) {
  const auto result = parse_config(env);
  EXPECT_TRUE(result) << result.error.message();
  return result ? *result.config : Config{};
}

// The error line, or "accepted".
std::string error(const Environment& env) {
  const auto result = parse_config(env);
  return result ? "accepted" : result.error.message();
}

std::string error_reason(const Environment& env) {
  const auto result = parse_config(env);
  return result ? "accepted" : result.error.reason;
}

TEST(Config, DefaultsWithNothingSet) {
  const Config c = parsed({});
  EXPECT_FALSE(c.memory_limit.every_device.has_value());
  EXPECT_TRUE(c.memory_limit.by_device.empty());
  EXPECT_EQ(c.compute_share.every_device, 100u);
  EXPECT_EQ(c.compute_limit, 100u);
  EXPECT_EQ(c.priority, Priority::normal);
  EXPECT_EQ(c.tenant, "");
  EXPECT_EQ(c.coordinator_dir, "/dev/shm/libslice");
  EXPECT_EQ(c.log_level, LogLevel::warn);
  EXPECT_EQ(c.log_file, "");
  EXPECT_FALSE(c.disable);
  const Config defaults;
  EXPECT_EQ(c, defaults);
}

TEST(Config, EveryExampleInTheTableIsValid) {
  for (const auto& v : slice::kSliceVariables) {
    const Environment env{{std::string(v.name), std::string(v.example)}};
    EXPECT_TRUE(parse_config(env)) << v.name << "=" << v.example << ": " << parse_config(env).error.message();
    if (v.scope == slice::DeviceScope::per_device) {
      const Environment device_env{{std::string(v.name) + "_0", std::string(v.example)}};
      EXPECT_TRUE(parse_config(device_env)) << v.name << "_0";
    }
  }
}

TEST(Config, EveryVariableSetsItsField) {
  const Config c = parsed({{"SLICE_MEMORY_LIMIT", "4Gi"},
                           {"SLICE_COMPUTE_SHARE", "30%"},
                           {"SLICE_COMPUTE_LIMIT", "80"},
                           {"SLICE_PRIORITY", "high"},
                           {"SLICE_TENANT", "team-a"},
                           {"SLICE_COORDINATOR_DIR", "/run/slice"},
                           {"SLICE_LOG_LEVEL", "debug"},
                           {"SLICE_LOG_FILE", "slice.log"},
                           {"SLICE_DISABLE", "0"},
                           {"PATH", "/usr/bin"}});
  EXPECT_EQ(c.memory_limit.every_device, MemoryLimit::of_bytes(4 * kGi));
  EXPECT_EQ(c.compute_share.every_device, 30u);
  EXPECT_EQ(c.compute_limit, 80u);
  EXPECT_EQ(c.priority, Priority::high);
  EXPECT_EQ(c.tenant, "team-a");
  EXPECT_EQ(c.coordinator_dir, "/run/slice");
  EXPECT_EQ(c.log_level, LogLevel::debug);
  EXPECT_EQ(c.log_file, "slice.log");
  EXPECT_FALSE(c.disable);
}

TEST(Config, PerDeviceFormsWinForTheirDevice) {
  const Config c = parsed({{"SLICE_MEMORY_LIMIT", "4Gi"},
                           {"SLICE_MEMORY_LIMIT_1", "25%"},
                           {"SLICE_MEMORY_LIMIT_12", "1Gi"},
                           {"SLICE_COMPUTE_SHARE_0", "10"},
                           {"SLICE_COMPUTE_SHARE_255", "20%"}});
  EXPECT_EQ(c.memory_limit.for_device(0), MemoryLimit::of_bytes(4 * kGi));
  EXPECT_EQ(c.memory_limit.for_device(1), MemoryLimit::of_device_billionths(250'000'000));
  EXPECT_EQ(c.memory_limit.for_device(12), MemoryLimit::of_bytes(kGi));
  EXPECT_EQ(c.memory_limit.by_device.size(), 2u);
  EXPECT_EQ(c.compute_share.for_device(0), 10u);
  EXPECT_EQ(c.compute_share.for_device(1), 100u);
  EXPECT_EQ(c.compute_share.for_device(255), 20u);

  // A device cap alone leaves the others uncapped, as the user wrote.
  const Config only_one = parsed({{"SLICE_MEMORY_LIMIT_2", "2Gi"}});
  EXPECT_FALSE(only_one.memory_limit.for_device(0).has_value());
  EXPECT_EQ(only_one.memory_limit.for_device(2), MemoryLimit::of_bytes(2 * kGi));
}

TEST(Config, TheErrorLine) {
  EXPECT_EQ(error({{"SLICE_MEMORY_LIMIT", "12X"}}),
            "SLICE_MEMORY_LIMIT='12X' is not valid: unknown unit 'X' (binary: Ki Mi Gi Ti Pi Ei or KiB MiB GiB "
            "TiB PiB EiB; decimal: k K M G T P E or KB MB GB TB PB EB); example: SLICE_MEMORY_LIMIT=4Gi");
  EXPECT_EQ(error({{"SLICE_MEMORY_LIMIT_1", "0"}}),
            "SLICE_MEMORY_LIMIT_1='0' is not valid: the cap must be at least 1 byte (for no cap, unset the "
            "variable); example: SLICE_MEMORY_LIMIT_1=4Gi");
  EXPECT_EQ(error({{"SLICE_COMPUTE_SHARE", "0"}}),
            "SLICE_COMPUTE_SHARE='0' is not valid: must be from 1 to 100; example: SLICE_COMPUTE_SHARE=50");
  EXPECT_EQ(error({{"SLICE_PRIORITY", "urgent"}}),
            "SLICE_PRIORITY='urgent' is not valid: must be high, normal or low; example: SLICE_PRIORITY=high");
  // Whatever the value holds, the line stays one printable line.
  EXPECT_EQ(error({{"SLICE_LOG_LEVEL", "warn\n\x1b[31m'"}}),
            "SLICE_LOG_LEVEL='warn\\x0a\\x1b[31m\\'' is not valid: must be off, error, warn, info, debug or trace; "
            "example: SLICE_LOG_LEVEL=info");
  const auto result = parse_config({{"SLICE_TENANT", std::string(500, 'a')}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error.value.size(), 500u);  // kept whole; only the line is shortened
  EXPECT_LT(result.error.message().size(), 250u);
}

TEST(Config, BadValuesAreNeverUnlimited) {
  for (const char* value :
       {"", "0", "-1", "12X", "4 Gi", "0x100", "1e9", "1.2.3Gi", "16Ei", "0%", "101%", "unlimited", "none", "-"}) {
    const auto result = parse_config({{"SLICE_MEMORY_LIMIT", value}});
    EXPECT_FALSE(result) << "'" << value << "' was accepted";
    EXPECT_FALSE(result.config.has_value());
  }
  for (const char* value : {"", "0", "101", "12.5", "-5", "max"}) {
    EXPECT_FALSE(parse_config({{"SLICE_COMPUTE_SHARE", value}})) << value;
    EXPECT_FALSE(parse_config({{"SLICE_COMPUTE_SHARE_0", value}})) << value;
    EXPECT_FALSE(parse_config({{"SLICE_COMPUTE_LIMIT", value}})) << value;
  }
}

TEST(Config, UnknownNamesAreErrors) {
  EXPECT_EQ(error({{"SLICE_MEMORY_LIMT", "4Gi"}}),
            "SLICE_MEMORY_LIMT='4Gi' is not valid: unknown variable (did you mean SLICE_MEMORY_LIMIT?); example: "
            "SLICE_MEMORY_LIMIT=4Gi");
  EXPECT_EQ(error_reason({{"SLICE_COMPUTE_SHARES", "50"}}), "unknown variable (did you mean SLICE_COMPUTE_SHARE?)");
  EXPECT_EQ(error_reason({{"SLICE_LOGLEVEL", "info"}}), "unknown variable (did you mean SLICE_LOG_LEVEL?)");
  EXPECT_EQ(error_reason({{"SLICE_", ""}}).rfind("unknown variable", 0), 0u);
  EXPECT_FALSE(parse_config({{"SLICE_" + std::string(10'000, 'X'), "1"}}));  // long names are still refused

  // Names that are not ours are not read, including other spellings of the prefix.
  EXPECT_TRUE(parse_config({{"slice_memory_limit", "junk"}, {"SLICEMEMORY", "junk"}, {"SIMGPU_MEMORY", "junk"}}));
  // The table's ignored names: set by the test harness itself.
  EXPECT_TRUE(parse_config({{"SLICE_TEST_TMPDIR", "/tmp/x"}}));
}

TEST(Config, DeviceSuffixes) {
  EXPECT_EQ(error({{"SLICE_MEMORY_LIMIT_x", "4Gi"}}),
            "SLICE_MEMORY_LIMIT_x='4Gi' is not valid: the suffix 'x' is not a device ordinal (0 to 255, no leading "
            "zeros); example: SLICE_MEMORY_LIMIT_0=4Gi");
  for (const char* name : {"SLICE_MEMORY_LIMIT_", "SLICE_MEMORY_LIMIT_01", "SLICE_MEMORY_LIMIT_256",
                           "SLICE_MEMORY_LIMIT_-1", "SLICE_MEMORY_LIMIT_1a", "SLICE_MEMORY_LIMIT_1_2",
                           "SLICE_MEMORY_LIMIT_99999999999", "SLICE_COMPUTE_SHARE_GPU0", "SLICE_COMPUTE_SHARE_+1"}) {
    EXPECT_NE(error_reason({{name, "1Gi"}}).find("is not a device ordinal"), std::string::npos) << name;
  }
  EXPECT_EQ(error({{"SLICE_COMPUTE_LIMIT_0", "50"}}),
            "SLICE_COMPUTE_LIMIT_0='50' is not valid: SLICE_COMPUTE_LIMIT has no per-device form; example: "
            "SLICE_COMPUTE_LIMIT=80");
  EXPECT_EQ(error_reason({{"SLICE_TENANT_1", "a"}}), "SLICE_TENANT has no per-device form");
  EXPECT_EQ(error_reason({{"SLICE_LOG_LEVEL_X", "a"}}), "SLICE_LOG_LEVEL has no per-device form");
}

TEST(Config, TheFirstErrorByNameIsReported) {
  const auto result =
      parse_config({{"SLICE_TENANT", "/etc"}, {"SLICE_COMPUTE_LIMIT", "0"}, {"SLICE_MEMORY_LIMIT", "x"}});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error.variable, "SLICE_COMPUTE_LIMIT");
  EXPECT_EQ(result.error.value, "0");
  EXPECT_EQ(result.error.example, "SLICE_COMPUTE_LIMIT=80");
}

TEST(Config, TenantNames) {
  for (const char* name : {"a", "team-a", "Team_B.2", "0", "_x", "a.b-c_d", "x-"}) {
    EXPECT_EQ(parsed({{"SLICE_TENANT", name}}).tenant, name);
  }
  EXPECT_EQ(parsed({{"SLICE_TENANT", std::string(63, 'n')}}).tenant, std::string(63, 'n'));
  EXPECT_EQ(error_reason({{"SLICE_TENANT", std::string(64, 'n')}}), "longer than 63 characters");
  EXPECT_EQ(error_reason({{"SLICE_TENANT", ""}}), "empty value (for a unique name, unset the variable)");
  EXPECT_EQ(error_reason({{"SLICE_TENANT", ".hidden"}}), "must not start with '.' or '-'");
  EXPECT_EQ(error_reason({{"SLICE_TENANT", "-x"}}), "must not start with '.' or '-'");
  EXPECT_EQ(error_reason({{"SLICE_TENANT", ".."}}), "must not start with '.' or '-'");
  EXPECT_EQ(error_reason({{"SLICE_TENANT", "a/b"}}), "'/' is not allowed: use letters, digits, '.', '_' and '-'");
  EXPECT_EQ(error_reason({{"SLICE_TENANT", "a b"}}), "' ' is not allowed: use letters, digits, '.', '_' and '-'");
  EXPECT_EQ(error_reason({{"SLICE_TENANT", "caf\xc3\xa9"}}),
            "'\\xc3' is not allowed: use letters, digits, '.', '_' and '-'");
}

TEST(Config, Words) {
  EXPECT_EQ(parsed({{"SLICE_PRIORITY", "low"}}).priority, Priority::low);
  EXPECT_EQ(parsed({{"SLICE_PRIORITY", "Normal"}}).priority, Priority::normal);
  EXPECT_EQ(parsed({{"SLICE_PRIORITY", "HIGH"}}).priority, Priority::high);
  EXPECT_FALSE(parse_config({{"SLICE_PRIORITY", ""}}));
  EXPECT_FALSE(parse_config({{"SLICE_PRIORITY", "high "}}));
  const std::pair<const char*, LogLevel> levels[] = {{"off", LogLevel::off},     {"error", LogLevel::error},
                                                     {"warn", LogLevel::warn},   {"info", LogLevel::info},
                                                     {"debug", LogLevel::debug}, {"TRACE", LogLevel::trace}};
  for (const auto& [word, level] : levels) EXPECT_EQ(parsed({{"SLICE_LOG_LEVEL", word}}).log_level, level);
  EXPECT_FALSE(parse_config({{"SLICE_LOG_LEVEL", "warning"}}));
  EXPECT_FALSE(parse_config({{"SLICE_LOG_LEVEL", "3"}}));
  EXPECT_EQ(slice::to_string(Priority::low), "low");
  EXPECT_EQ(slice::to_string(LogLevel::trace), "trace");
}

TEST(Config, Paths) {
  EXPECT_EQ(error_reason({{"SLICE_COORDINATOR_DIR", "shm/slice"}}), "must be an absolute path");
  EXPECT_EQ(error_reason({{"SLICE_COORDINATOR_DIR", ""}}), "empty value");
  EXPECT_EQ(error_reason({{"SLICE_COORDINATOR_DIR", "/" + std::string(4095, 'd')}}), "longer than 4095 characters");
  EXPECT_EQ(parsed({{"SLICE_COORDINATOR_DIR", "/" + std::string(4094, 'd')}}).coordinator_dir.size(), 4095u);
  EXPECT_EQ(error_reason({{"SLICE_LOG_FILE", ""}}), "empty value (for standard error, unset the variable)");
  EXPECT_EQ(parsed({{"SLICE_LOG_FILE", "/var/log/slice.log"}}).log_file, "/var/log/slice.log");
}

TEST(Config, DisableIsTheEscapeHatch) {
  for (const char* yes : {"1", "true", "yes", "TRUE", "Yes"}) {
    // Broken neighbours do not block the escape hatch: nothing but disable is read.
    const Config c = parsed({{"SLICE_DISABLE", yes}, {"SLICE_MEMORY_LIMIT", "garbage"}, {"SLICE_TYPO", "x"}});
    EXPECT_TRUE(c.disable) << yes;
    EXPECT_FALSE(c.memory_limit.every_device.has_value());
  }
  for (const char* no : {"0", "false", "no", "", "NO"}) {
    EXPECT_FALSE(parsed({{"SLICE_DISABLE", no}, {"SLICE_MEMORY_LIMIT", "1Gi"}}).disable) << no;
    EXPECT_FALSE(parse_config({{"SLICE_DISABLE", no}, {"SLICE_MEMORY_LIMIT", "garbage"}})) << no;
  }
  for (const char* bad : {"2", "on", "off", "y", " 1", "-1"}) {
    EXPECT_EQ(error({{"SLICE_DISABLE", bad}}), std::string("SLICE_DISABLE='") + bad +
                                                   "' is not valid: must be 1, 0, true, false, yes or no; example: "
                                                   "SLICE_DISABLE=1");
  }
}

// Off unless asked for: libslice touches no signal disposition of the application's by default.
TEST(Config, CrashHandlerIsOffUnlessTurnedOn) {
  EXPECT_FALSE(parsed({}).crash_handler);
  for (const char* yes : {"1", "true", "YES"}) EXPECT_TRUE(parsed({{"SLICE_CRASH_HANDLER", yes}}).crash_handler) << yes;
  for (const char* no : {"0", "false", "No", ""})  // empty: unset, the default holds
    EXPECT_FALSE(parsed({{"SLICE_CRASH_HANDLER", no}}).crash_handler) << no;
  EXPECT_EQ(error({{"SLICE_CRASH_HANDLER", "off"}}),
            "SLICE_CRASH_HANDLER='off' is not valid: must be 1, 0, true, false, yes or no; example: "
            "SLICE_CRASH_HANDLER=1");
  EXPECT_EQ(error({{"SLICE_CRASH_HANDLER_0", "1"}}),
            "SLICE_CRASH_HANDLER_0='1' is not valid: SLICE_CRASH_HANDLER has no per-device form; example: "
            "SLICE_CRASH_HANDLER=1");
}

TEST(Config, PathsWithAControlCharacterAreRefused) {
  // Issue 29: a newline in a folder or file name would write a line of the value's choosing
  // wherever libslice writes or logs the path.
  for (const char* name : {"SLICE_COORDINATOR_DIR", "SLICE_POLICY_DIR", "SLICE_LOG_FILE"}) {
    const slice::ConfigResult r = parse_config({{name, "/tmp/x\n/etc/ld.so.preload"}});
    ASSERT_FALSE(r) << name;
    EXPECT_NE(r.error.message().find("must not hold a control character"), std::string::npos) << r.error.message();
    EXPECT_EQ(r.error.message().find('\n'), std::string::npos) << "the error line itself stays one line";
  }
}

TEST(Config, SecureExecutionLeavesOutWhereToCreateWriteOrTrust) {
  // Issue 29: in a setuid, setgid or capability program the environment is the caller's.
  const Environment env{{"SLICE_COORDINATOR_DIR", "/home/user/mine"},
                        {"SLICE_POLICY_DIR", "/home/user/policy"},
                        {"SLICE_LOG_FILE", "/etc/cron.d/x"},
                        {"SLICE_MEMORY_LIMIT", "4Gi"}};
  const slice::ConfigResult plain = parse_config(env);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain.config->coordinator_dir, "/home/user/mine");
  EXPECT_TRUE(plain.notice.empty());
  const slice::ConfigResult secure = parse_config(env, true);
  ASSERT_TRUE(secure);
  EXPECT_EQ(secure.config->coordinator_dir, Config{}.coordinator_dir);
  EXPECT_EQ(secure.config->policy_dir, Config{}.policy_dir);
  EXPECT_EQ(secure.config->log_file, Config{}.log_file);
  EXPECT_TRUE(secure.config->memory_limit.every_device.has_value()) << "the limits still hold";
  EXPECT_EQ(secure.notice,
            "secure execution (a setuid, setgid or capability program): SLICE_COORDINATOR_DIR, SLICE_LOG_FILE, "
            "SLICE_POLICY_DIR ignored, the defaults hold");
  EXPECT_FALSE(slice::secure_execution()) << "a test is no setuid program";
}

TEST(Environment, FromAnEnvironmentBlock) {
  const char* const envp[] = {"PATH=/bin",
                              "SLICE_MEMORY_LIMIT=4Gi",
                              "SLICE_MEMORY_LIMIT=8Gi",
                              "SLICE_NO_EQUALS",
                              "SLICE_TENANT=a=b",
                              "SLICE_LOG_FILE=",
                              "HOME=/root",
                              nullptr};
  const Environment env = slice::slice_environment(envp);
  const Environment expected{{"SLICE_MEMORY_LIMIT", "4Gi"}, {"SLICE_TENANT", "a=b"}, {"SLICE_LOG_FILE", ""}};
  EXPECT_EQ(env, expected);
  EXPECT_TRUE(slice::slice_environment(nullptr).empty());
}

TEST(Environment, ThisProcess) {
  ASSERT_EQ(setenv("SLICE_COMPUTE_SHARE_3", "40", 1), 0);
  const Environment env = slice::process_slice_environment();
  EXPECT_EQ(env.at("SLICE_COMPUTE_SHARE_3"), "40");
  for (const auto& [name, value] : env) EXPECT_EQ(name.rfind("SLICE_", 0), 0u) << name;
  unsetenv("SLICE_COMPUTE_SHARE_3");
}

}  // namespace
