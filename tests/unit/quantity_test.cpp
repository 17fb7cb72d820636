// Memory quantities and percentages: every accepted form with its exact byte value, and every
// refused form with the reason the user sees.
#include "quantity.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace {

using slice::MemoryLimit;
using slice::parse_byte_quantity;
using slice::parse_memory_limit;
using slice::parse_percent;

constexpr std::uint64_t kKi = 1024, kMi = kKi * kKi, kGi = kMi * kKi, kTi = kGi * kKi, kPi = kTi * kKi, kEi = kPi * kKi;

// The value, or the reason prefixed with "refused: ", so one EXPECT_EQ shows both sides.
std::string bytes(std::string_view text) {
  const auto r = parse_byte_quantity(text);
  return r ? std::to_string(*r.value) : "refused: " + r.reason;
}

std::string reason(std::string_view text) {
  const auto r = parse_byte_quantity(text);
  return r ? "accepted " + std::to_string(*r.value) : r.reason;
}

TEST(ByteQuantity, PlainBytes) {
  EXPECT_EQ(bytes("0"), "0");
  EXPECT_EQ(bytes("1"), "1");
  EXPECT_EQ(bytes("1073741824"), "1073741824");
  EXPECT_EQ(bytes("007"), "7");
  EXPECT_EQ(bytes("18446744073709551615"), "18446744073709551615");
  EXPECT_EQ(bytes("000000000000000000000018446744073709551615"), "18446744073709551615");
}

TEST(ByteQuantity, BinaryUnits) {
  EXPECT_EQ(bytes("1Ki"), std::to_string(kKi));
  EXPECT_EQ(bytes("512Mi"), std::to_string(512 * kMi));
  EXPECT_EQ(bytes("4Gi"), "4294967296");
  EXPECT_EQ(bytes("2Ti"), std::to_string(2 * kTi));
  EXPECT_EQ(bytes("3Pi"), std::to_string(3 * kPi));
  EXPECT_EQ(bytes("15Ei"), std::to_string(15 * kEi));
  EXPECT_EQ(bytes("1KiB"), std::to_string(kKi));
  EXPECT_EQ(bytes("512MiB"), std::to_string(512 * kMi));
  EXPECT_EQ(bytes("4GiB"), "4294967296");
  EXPECT_EQ(bytes("2TiB"), std::to_string(2 * kTi));
  EXPECT_EQ(bytes("1PiB"), std::to_string(kPi));
  EXPECT_EQ(bytes("1EiB"), std::to_string(kEi));
}

TEST(ByteQuantity, DecimalUnits) {
  EXPECT_EQ(bytes("1k"), "1000");
  EXPECT_EQ(bytes("1K"), "1000");
  EXPECT_EQ(bytes("5M"), "5000000");
  EXPECT_EQ(bytes("4G"), "4000000000");
  EXPECT_EQ(bytes("2T"), "2000000000000");
  EXPECT_EQ(bytes("1P"), "1000000000000000");
  EXPECT_EQ(bytes("18E"), "18000000000000000000");
  EXPECT_EQ(bytes("1KB"), "1000");
  EXPECT_EQ(bytes("5MB"), "5000000");
  EXPECT_EQ(bytes("4GB"), "4000000000");
  EXPECT_EQ(bytes("2TB"), "2000000000000");
  EXPECT_EQ(bytes("1PB"), "1000000000000000");
  EXPECT_EQ(bytes("1EB"), "1000000000000000000");
}

TEST(ByteQuantity, DecimalsRoundDown) {
  EXPECT_EQ(bytes("1.5Gi"), "1610612736");
  EXPECT_EQ(bytes("0.1Ki"), "102");  // 102.4
  EXPECT_EQ(bytes("0.5"), "0");
  EXPECT_EQ(bytes("1.9"), "1");
  EXPECT_EQ(bytes("2.5G"), "2500000000");
  EXPECT_EQ(bytes("0.001K"), "1");
  EXPECT_EQ(bytes("0.0009K"), "0");
  EXPECT_EQ(bytes("1.000000000000000001E"), "1000000000000000001");     // 18 digits after the point
  EXPECT_EQ(bytes("0.999999999999999999Ki"), "1023");                   // never rounds up
  EXPECT_EQ(bytes("15.999999999999999999Ei"), "18446744073709551614");  // floor(2^64 - 1.15)
  EXPECT_EQ(bytes("1.50"), "1");
}

TEST(ByteQuantity, OverflowIsExact) {
  const std::string overflow = "more than 18446744073709551615 bytes (2^64 - 1)";
  EXPECT_EQ(reason("18446744073709551616"), overflow);
  EXPECT_EQ(reason("99999999999999999999999"), overflow);
  EXPECT_EQ(reason("16Ei"), overflow);
  EXPECT_EQ(reason("16EiB"), overflow);
  EXPECT_EQ(reason("17179869184Gi"), overflow);  // 2^34 Gi = 2^64
  EXPECT_EQ(bytes("17179869183Gi"), std::to_string(17179869183ull * kGi));
  EXPECT_EQ(reason("18446744073709551616Ki"), overflow);
  EXPECT_EQ(reason("19E"), overflow);
  EXPECT_EQ(bytes("18.446744073709551615E"), "18446744073709551615");
  EXPECT_EQ(reason("18.446744073709551616E"), overflow);
  EXPECT_EQ(bytes("18446744073709551615.999"), "18446744073709551615");
}

TEST(ByteQuantity, RefusedForms) {
  EXPECT_EQ(reason(""), "empty value");
  EXPECT_EQ(reason("-1"), "negative values are not allowed");
  EXPECT_EQ(reason("-1Gi"), "negative values are not allowed");
  EXPECT_EQ(reason("+1"), "a sign is not allowed");
  EXPECT_EQ(reason(" 4Gi"), "whitespace is not allowed");
  EXPECT_EQ(reason("4Gi "), "whitespace is not allowed");
  EXPECT_EQ(reason("4 Gi"), "whitespace is not allowed");
  EXPECT_EQ(reason("4\tGi"), "whitespace is not allowed");
  EXPECT_EQ(reason("4Gi\n"), "whitespace is not allowed");
  EXPECT_EQ(reason("0x10"), "hexadecimal is not accepted");
  EXPECT_EQ(reason("0X10"), "hexadecimal is not accepted");
  EXPECT_EQ(reason("1e9"), "exponent notation is not accepted");
  EXPECT_EQ(reason("1E9"), "exponent notation is not accepted");
  EXPECT_EQ(reason("1.5e+3"), "exponent notation is not accepted");
  EXPECT_EQ(reason("1E-3"), "exponent notation is not accepted");
  EXPECT_EQ(reason("1.2.3"), "more than one decimal point");
  EXPECT_EQ(reason("1..2Gi"), "more than one decimal point");
  EXPECT_EQ(reason(".5Gi"), "a digit must come before the decimal point");
  EXPECT_EQ(reason("1.Gi"), "a digit must follow the decimal point");
  EXPECT_EQ(reason("1."), "a digit must follow the decimal point");
  EXPECT_EQ(reason("Gi"), "not a number");
  EXPECT_EQ(reason("abc"), "not a number");
  EXPECT_EQ(reason("1.0000000000000000001Gi"), "more than 18 digits after the decimal point");
  EXPECT_EQ(reason("25%"), "a percentage is not allowed here");
}

TEST(ByteQuantity, UnknownUnits) {
  for (const char* text : {"12X", "4gi", "4GI", "4gb", "4Gib", "4Gix", "4GiGi", "4Mi5", "1m", "4ki", "4b", "4B", "4Zi",
                           "1e", "4Gi%", "4%%"}) {
    const std::string why = reason(text);
    EXPECT_EQ(why.rfind("unknown unit '", 0), 0u) << text << ": " << why;
  }
  EXPECT_EQ(reason("12X").substr(0, 18), "unknown unit 'X' (");
  // The unit is shown escaped, so the message stays one printable line.
  EXPECT_EQ(reason("1\x01\x7f'").rfind("unknown unit '\\x01\\x7f\\'' (", 0), 0u);
}

// ---- caps ------------------------------------------------------------------------------------

TEST(MemoryLimit, BytesAndFractions) {
  EXPECT_EQ(*parse_memory_limit("4Gi").value, MemoryLimit::of_bytes(4 * kGi));
  EXPECT_EQ(*parse_memory_limit("1").value, MemoryLimit::of_bytes(1));
  EXPECT_EQ(*parse_memory_limit("25%").value, MemoryLimit::of_device_billionths(250'000'000));
  EXPECT_EQ(*parse_memory_limit("12.5%").value, MemoryLimit::of_device_billionths(125'000'000));
  EXPECT_EQ(*parse_memory_limit("100%").value, MemoryLimit::of_device_billionths(1'000'000'000));
  EXPECT_EQ(*parse_memory_limit("100.0000000%").value, MemoryLimit::of_device_billionths(1'000'000'000));
  EXPECT_EQ(*parse_memory_limit("0.0000001%").value, MemoryLimit::of_device_billionths(1));
  EXPECT_EQ(*parse_memory_limit("0.5%").value, MemoryLimit::of_device_billionths(5'000'000));
}

TEST(MemoryLimit, ResolvesAgainstTheDevice) {
  const std::uint64_t device = 24 * kGi;
  EXPECT_EQ(parse_memory_limit("25%").value->bytes_on(device), 6 * kGi);
  EXPECT_EQ(parse_memory_limit("100%").value->bytes_on(device), device);
  EXPECT_EQ(parse_memory_limit("12.5%").value->bytes_on(device), 3 * kGi);
  EXPECT_EQ(parse_memory_limit("33.3333333%").value->bytes_on(100), 33u);         // rounds down
  EXPECT_EQ(parse_memory_limit("100%").value->bytes_on(UINT64_MAX), UINT64_MAX);  // no overflow inside
  EXPECT_EQ(parse_memory_limit("4Gi").value->bytes_on(device), 4 * kGi);          // bytes are bytes
}

TEST(MemoryLimit, Refusals) {
  const auto why = [](std::string_view text) {
    const auto r = parse_memory_limit(text);
    return r ? std::string("accepted") : r.reason;
  };
  EXPECT_EQ(why("0"), "the cap must be at least 1 byte (for no cap, unset the variable)");
  EXPECT_EQ(why("0Gi"), "the cap must be at least 1 byte (for no cap, unset the variable)");
  EXPECT_EQ(why("0.5"), "the cap must be at least 1 byte (for no cap, unset the variable)");
  EXPECT_EQ(why("0%"), "a percentage of the device must be more than 0%");
  EXPECT_EQ(why("0.00000000%"), "more than 7 digits after the decimal point in a percentage");
  EXPECT_EQ(why("0.0000000%"), "a percentage of the device must be more than 0%");
  EXPECT_EQ(why("100.0000001%"), "a percentage of the device is at most 100%");
  EXPECT_EQ(why("101%"), "a percentage of the device is at most 100%");
  EXPECT_EQ(why("99999999999999999999999%"), "a percentage of the device is at most 100%");
  EXPECT_EQ(why("12.12345678%"), "more than 7 digits after the decimal point in a percentage");
  EXPECT_EQ(why("-5%"), "negative values are not allowed");
  EXPECT_EQ(why("25 %"), "whitespace is not allowed");
  EXPECT_EQ(why("%"), "not a number");
  EXPECT_EQ(why("16Ei"), "more than 18446744073709551615 bytes (2^64 - 1)");
  EXPECT_EQ(why("12X").rfind("unknown unit 'X'", 0), 0u);
}

// ---- shares ----------------------------------------------------------------------------------

TEST(Percent, WholePercentsOneToHundred) {
  for (unsigned p = 1; p <= 100; ++p) {
    EXPECT_EQ(*parse_percent(std::to_string(p)).value, p);
    EXPECT_EQ(*parse_percent(std::to_string(p) + "%").value, p);
  }
  EXPECT_EQ(*parse_percent("050").value, 50u);
}

TEST(Percent, Refusals) {
  const auto why = [](std::string_view text) {
    const auto r = parse_percent(text);
    return r ? "accepted " + std::to_string(*r.value) : r.reason;
  };
  EXPECT_EQ(why("0"), "must be from 1 to 100");
  EXPECT_EQ(why("0%"), "must be from 1 to 100");
  EXPECT_EQ(why("101"), "must be from 1 to 100");
  EXPECT_EQ(why("18446744073709551617"), "must be from 1 to 100");
  EXPECT_EQ(why("12.5"), "must be a whole percent, without a decimal point");
  EXPECT_EQ(why("50.0%"), "must be a whole percent, without a decimal point");
  EXPECT_EQ(why("50%%"), "must be a whole percent from 1 to 100");
  EXPECT_EQ(why("50x"), "must be a whole percent from 1 to 100");
  EXPECT_EQ(why("%"), "a number must come before '%'");
  EXPECT_EQ(why(""), "empty value");
  EXPECT_EQ(why("-50"), "negative values are not allowed");
  EXPECT_EQ(why(" 50"), "whitespace is not allowed");
  EXPECT_EQ(why("0x32"), "hexadecimal is not accepted");
  EXPECT_EQ(why("5e1"), "exponent notation is not accepted");
  EXPECT_EQ(why("half"), "not a number");
}

}  // namespace
