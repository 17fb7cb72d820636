// Tests for simgpu's module image parser (tools/simgpu/module_image.h) on what nvcc really
// produces from tests/kernels/sample_kernels.cu (PTX, cubins, fatbins with and without
// compression, the host-side wrapper struct), on hand-made hostile images, and on truncated,
// mutated and random bytes. Skips when the build had no nvcc (SIMGPU_TEST_KERNEL_DIR undefined).
#include "module_image.h"

#include <gtest/gtest.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using simgpu::ImageStatus;
using simgpu::ModuleImage;
using simgpu::parse_module_image;
using Bytes = std::vector<unsigned char>;

const char* const kScale = "_Z5scaleIfEvPT_i6Triple";  // scale<float>(float*, int, Triple)

std::optional<std::string> kernel_dir() {
#ifdef SIMGPU_TEST_KERNEL_DIR
  return std::string(SIMGPU_TEST_KERNEL_DIR);
#else
  return std::nullopt;
#endif
}

std::optional<Bytes> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// The files built by tests/kernels; the compressed fatbin variants only exist when nvcc has
// --compress-mode. A file that should exist but does not is a build failure, not a skip.
enum class Need { required, optional };

#define LOAD_OR_SKIP(var, name, need)                                                            \
  Bytes var;                                                                                     \
  do {                                                                                           \
    const auto dir_ = kernel_dir();                                                              \
    if (!dir_) GTEST_SKIP() << "built without nvcc: no sample kernels";                          \
    auto data_ = read_file(*dir_ + "/" + (name));                                                \
    if (!data_ && (need) == Need::optional) GTEST_SKIP() << (name) << " not built by this nvcc"; \
    ASSERT_TRUE(data_.has_value()) << "missing " << *dir_ << "/" << (name);                      \
    var = std::move(*data_);                                                                     \
  } while (0)

// PTX as cuModuleLoadData receives it: NUL-terminated.
Bytes with_nul(Bytes b) {
  b.push_back(0);
  return b;
}

// Parses from a heap copy of exactly `len` bytes, so AddressSanitizer catches any read past them
// (size == 0 included: then the parser must stop where the image's own headers say).
ImageStatus parse_exact(const unsigned char* data, std::size_t len, std::size_t size_arg, int major, int minor,
                        ModuleImage& out) {
  std::unique_ptr<unsigned char[]> copy(new unsigned char[len == 0 ? 1 : len]);
  if (len != 0) std::memcpy(copy.get(), data, len);
  return parse_module_image(copy.get(), size_arg, major, minor, out);
}

ImageStatus parse_sized(const Bytes& b, int major, int minor, ModuleImage& out) {
  return parse_exact(b.data(), b.size(), b.size(), major, minor, out);
}
ImageStatus parse_unsized(const Bytes& b, int major, int minor, ModuleImage& out) {
  return parse_exact(b.data(), b.size(), 0, major, minor, out);
}

const simgpu::KernelInfo* find_kernel(const ModuleImage& m, const std::string& name) {
  for (const auto& k : m.kernels)
    if (k.name == name) return &k;
  return nullptr;
}

const simgpu::GlobalInfo* find_global(const ModuleImage& m, const std::string& name) {
  for (const auto& g : m.globals)
    if (g.name == name) return &g;
  return nullptr;
}

// What sample_kernels.cu declares, whatever the format it went through.
void expect_sample_module(const ModuleImage& m) {
  std::vector<std::string> names;
  for (const auto& k : m.kernels) names.push_back(k.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{kScale, "noop", "spin"}));

  const auto* spin = find_kernel(m, "spin");
  ASSERT_NE(spin, nullptr);
  EXPECT_TRUE(spin->params_known);
  EXPECT_EQ(spin->param_sizes, (std::vector<std::uint32_t>{8}));
  EXPECT_EQ(spin->param_offsets, (std::vector<std::uint32_t>{0}));

  const auto* noop = find_kernel(m, "noop");
  ASSERT_NE(noop, nullptr);
  EXPECT_TRUE(noop->params_known);
  EXPECT_TRUE(noop->param_sizes.empty());

  const auto* scale = find_kernel(m, kScale);
  ASSERT_NE(scale, nullptr);
  EXPECT_TRUE(scale->params_known);
  EXPECT_EQ(scale->param_sizes, (std::vector<std::uint32_t>{8, 4, 24}));
  EXPECT_EQ(scale->param_offsets, (std::vector<std::uint32_t>{0, 8, 16}));

  const auto* counter = find_global(m, "counter");
  ASSERT_NE(counter, nullptr);
  EXPECT_EQ(counter->size, 16u);
  const auto* coeffs = find_global(m, "coeffs");
  ASSERT_NE(coeffs, nullptr);
  EXPECT_EQ(coeffs->size, 32u);
}

// Both ways the driver can receive an image: with its size, and with size 0 (unknown).
void expect_loads(const Bytes& image, int major, int minor, ModuleImage::Kind kind, ModuleImage::Kind code_kind,
                  int arch) {
  for (const bool sized : {true, false}) {
    SCOPED_TRACE(sized ? "size given" : "size 0");
    ModuleImage m;
    const ImageStatus st = sized ? parse_sized(image, major, minor, m) : parse_unsized(image, major, minor, m);
    ASSERT_EQ(st, ImageStatus::ok) << simgpu::image_status_name(st);
    EXPECT_EQ(m.kind, kind);
    EXPECT_EQ(m.code_kind, code_kind);
    EXPECT_EQ(m.arch, arch);
    expect_sample_module(m);
  }
}

void expect_status(const Bytes& image, int major, int minor, ImageStatus want) {
  ModuleImage m;
  const ImageStatus sized = parse_sized(image, major, minor, m);
  EXPECT_EQ(sized, want) << simgpu::image_status_name(sized);
  EXPECT_TRUE(m.kernels.empty() || want == ImageStatus::ok);
  const ImageStatus unsized = parse_unsized(image, major, minor, m);
  EXPECT_EQ(unsized, want) << simgpu::image_status_name(unsized);
}

using K = ModuleImage::Kind;

// ---- PTX and cubin ------------------------------------------------------------------------

TEST(ModuleImage, Ptx) {
  LOAD_OR_SKIP(text, "sample_kernels.ptx", Need::required);
  const Bytes ptx = with_nul(text);
  expect_loads(ptx, 8, 0, K::ptx, K::ptx, 80);
  expect_loads(ptx, 9, 0, K::ptx, K::ptx, 80);  // JIT for a newer device
  expect_loads(ptx, 0, 0, K::ptx, K::ptx, 80);  // no device check
  expect_status(ptx, 7, 5, ImageStatus::no_binary_for_gpu);
  // With a size, the NUL must be within it (cuModuleLoad of a file must append one).
  ModuleImage m;
  EXPECT_EQ(parse_module_image(text.data(), text.size(), 8, 0, m), ImageStatus::invalid_image);
}

TEST(ModuleImage, PtxSyntaxErrorsAreInvalidPtx) {
  LOAD_OR_SKIP(text, "sample_kernels.ptx", Need::required);
  const std::string ptx(text.begin(), text.end());
  // Cut just before the last closing brace: a kernel body never ends.
  const std::size_t last_brace = ptx.rfind('}');
  ASSERT_NE(last_brace, std::string::npos);
  const std::string cut = ptx.substr(0, last_brace);
  ModuleImage m;
  EXPECT_EQ(parse_module_image(cut.c_str(), 0, 8, 0, m), ImageStatus::invalid_ptx);
  // No .target.
  EXPECT_EQ(parse_module_image(".version 9.0\n.address_size 64\n", 0, 8, 0, m), ImageStatus::invalid_ptx);
  // Not PTX at all.
  EXPECT_EQ(parse_module_image("hello world", 0, 8, 0, m), ImageStatus::invalid_image);
  EXPECT_EQ(parse_module_image("", 0, 8, 0, m), ImageStatus::invalid_image);
  EXPECT_EQ(parse_module_image(".version 9.0\n.target sm_80\n/* unterminated", 0, 8, 0, m), ImageStatus::invalid_ptx);
}

TEST(ModuleImage, PtxDeclarationForms) {
  // Forms nvcc emits for other code (and that hand-written PTX uses), checked here without nvcc.
  const char* ptx = R"(//
// comment with .entry fake( and { braces }
.version 8.0
.target sm_90a, debug
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.global .attribute(.managed) .align 4 .u32 managed_val;
.global .align 8 .b8 init_arr[24] = {0, 0, 0, 0, 0, 0, 240, 63, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 8, 64};
.global .u32 a, b[3], c[] = {1, 2, 3, 4};
.global .v4 .f32 vec4;
.const .align 4 .b8 coeffs[32];
.extern .global .align 4 .u32 defined_elsewhere;
.shared .align 4 .b8 not_a_global[64];
.global .texref tex;
.global .align 1 .b8 $str[6] = {104, 101, 108, 108, 111, 0};
.visible .func (.param .b32 r) helper(.param .b32 x)
{
  .reg .b32 %r<2>;
  { // nested block
  }
  ret;
}
.visible .entry k1(
	.param .align 16 .b8 k1_param_0[16],
	.param .u8 k1_param_1,
	.param .u16 k1_param_2,
	.param .f64 k1_param_3,
	.param .u64 .ptr .global .align 16 k1_param_4,
	.param .v2 .f32 k1_param_5
)
.maxntid 256, 1, 1
.minnctapersm 2
{
  ret;
}
.entry k2 ( .param .b32 x ) { ret; }
.section .debug_str { $L__s: .b8 95, 0 }
)";
  ModuleImage m;
  ASSERT_EQ(parse_module_image(ptx, 0, 9, 0, m), ImageStatus::ok);
  EXPECT_EQ(m.arch, 90);
  ASSERT_EQ(m.kernels.size(), 2u);
  EXPECT_EQ(m.kernels[0].name, "k1");
  EXPECT_EQ(m.kernels[0].param_sizes, (std::vector<std::uint32_t>{16, 1, 2, 8, 8, 8}));
  EXPECT_EQ(m.kernels[0].param_offsets, (std::vector<std::uint32_t>{0, 16, 18, 24, 32, 40}));
  EXPECT_EQ(m.kernels[1].name, "k2");
  EXPECT_EQ(m.kernels[1].param_sizes, (std::vector<std::uint32_t>{4}));
  std::vector<std::pair<std::string, std::size_t>> globals;
  for (const auto& g : m.globals) globals.emplace_back(g.name, g.size);
  EXPECT_EQ(globals, (std::vector<std::pair<std::string, std::size_t>>{{"managed_val", 4},
                                                                       {"init_arr", 24},
                                                                       {"a", 4},
                                                                       {"b", 12},
                                                                       {"c", 16},
                                                                       {"vec4", 16},
                                                                       {"coeffs", 32},
                                                                       {"$str", 6}}));
  // sm_90a code runs on exactly 9.0.
  EXPECT_EQ(parse_module_image(ptx, 0, 10, 0, m), ImageStatus::no_binary_for_gpu);
}

TEST(ModuleImage, Cubin) {
  LOAD_OR_SKIP(cubin, "sample_kernels_sm89.cubin", Need::required);
  expect_loads(cubin, 8, 9, K::cubin, K::cubin, 89);
  expect_loads(cubin, 0, 0, K::cubin, K::cubin, 89);
  expect_status(cubin, 9, 0, ImageStatus::no_binary_for_gpu);  // other major
  expect_status(cubin, 8, 6, ImageStatus::no_binary_for_gpu);  // older minor
}

TEST(ModuleImage, CubinArchFromElfFlags) {
  // CUDA 13 cubins (ELF ABI version 8) keep the SM in e_flags bits 8-15.
  for (const int sm : {75, 80, 89, 90, 120}) {
    SCOPED_TRACE(sm);
    LOAD_OR_SKIP(cubin, "sample_kernels_sm" + std::to_string(sm) + ".cubin", Need::required);
    expect_loads(cubin, sm / 10, sm % 10, K::cubin, K::cubin, sm);
  }
}

// ---- fatbin -----------------------------------------------------------------------------------

struct FatbinEntryView {
  std::uint16_t kind;
  std::uint32_t arch;
  std::uint64_t flags;
};

// Independent walk of the container, to check what nvcc put in the test files.
std::vector<FatbinEntryView> fatbin_entries(const Bytes& f) {
  std::vector<FatbinEntryView> out;
  auto rd = [&](std::size_t off, std::size_t n) {
    std::uint64_t v = 0;
    std::memcpy(&v, f.data() + off, n);
    return v;
  };
  const std::size_t end = 16 + rd(8, 8);
  for (std::size_t off = rd(6, 2); off + 64 <= end && off + 64 <= f.size();) {
    out.push_back(
        {static_cast<std::uint16_t>(rd(off, 2)), static_cast<std::uint32_t>(rd(off + 28, 4)), rd(off + 40, 8)});
    off += rd(off + 4, 4) + rd(off + 8, 8);
  }
  return out;
}

constexpr std::uint64_t kLz4 = 0x2000, kZstd = 0x8000;

TEST(ModuleImage, FatbinCompressionAsNvccWritesIt) {
  // CUDA 13: PTX entries are Zstandard-compressed by default; -compress-all compresses the
  // cubins too; --compress-mode=speed uses LZ4; --compress-mode=none nothing.
  LOAD_OR_SKIP(def, "sample_kernels.fatbin", Need::required);
  LOAD_OR_SKIP(none, "sample_kernels_uncompressed.fatbin", Need::optional);
  LOAD_OR_SKIP(all, "sample_kernels_compressed.fatbin", Need::optional);
  LOAD_OR_SKIP(lz4, "sample_kernels_lz4.fatbin", Need::optional);
  for (const auto& e : fatbin_entries(def)) EXPECT_EQ(e.flags & (kLz4 | kZstd), e.kind == 1 ? kZstd : 0u);
  for (const auto& e : fatbin_entries(none)) EXPECT_EQ(e.flags & (kLz4 | kZstd), 0u);
  for (const auto& e : fatbin_entries(all)) EXPECT_EQ(e.flags & (kLz4 | kZstd), kZstd);
  for (const auto& e : fatbin_entries(lz4)) EXPECT_EQ(e.flags & (kLz4 | kZstd), kLz4);
  EXPECT_EQ(fatbin_entries(def).size(), 3u);
}

// The arch selection every fatbin variant must give.
void expect_fatbin_selection(const Bytes& fatbin) {
  {
    SCOPED_TRACE("cc 8.9: the sm_89 cubin");
    expect_loads(fatbin, 8, 9, K::fatbin, K::cubin, 89);
  }
  {
    SCOPED_TRACE("cc 8.6: the sm_80 cubin");
    expect_loads(fatbin, 8, 6, K::fatbin, K::cubin, 80);
  }
  {
    SCOPED_TRACE("cc 9.0: compute_90 PTX");
    expect_loads(fatbin, 9, 0, K::fatbin, K::ptx, 90);
  }
  {
    SCOPED_TRACE("cc 12.0: compute_90 PTX");
    expect_loads(fatbin, 12, 0, K::fatbin, K::ptx, 90);
  }
  SCOPED_TRACE("cc 7.5: nothing");
  expect_status(fatbin, 7, 5, ImageStatus::no_binary_for_gpu);
}

class FatbinVariant : public ::testing::TestWithParam<const char*> {};

TEST_P(FatbinVariant, SelectsByComputeCapability) {
  LOAD_OR_SKIP(fatbin, GetParam(),
               std::string(GetParam()) == "sample_kernels.fatbin" ? Need::required : Need::optional);
  expect_fatbin_selection(fatbin);
}

// __fatBinC_Wrapper_t, as host code embeds it and passes it to cuModuleLoadFatBinary/LoadData.
struct FatbinWrapper {
  int magic;
  int version;
  const unsigned long long* data;
  void* filename_or_fatbins;
};

TEST_P(FatbinVariant, InsideHostWrapper) {
  LOAD_OR_SKIP(fatbin, GetParam(),
               std::string(GetParam()) == "sample_kernels.fatbin" ? Need::required : Need::optional);
  // The fatbin sits 8-aligned in its own allocation, as in .nv_fatbin.
  std::vector<unsigned long long> storage((fatbin.size() + 7) / 8);
  std::memcpy(storage.data(), fatbin.data(), fatbin.size());
  const FatbinWrapper w{0x466243B1, 1, storage.data(), nullptr};
  Bytes wrapper(sizeof w);
  std::memcpy(wrapper.data(), &w, sizeof w);
  expect_loads(wrapper, 8, 9, K::fatbin, K::cubin, 89);
  expect_loads(wrapper, 9, 0, K::fatbin, K::ptx, 90);
  expect_status(wrapper, 7, 5, ImageStatus::no_binary_for_gpu);

  FatbinWrapper bad = w;
  bad.version = 7;
  ModuleImage m;
  EXPECT_EQ(parse_module_image(&bad, sizeof bad, 8, 9, m), ImageStatus::invalid_image);
  bad = w;
  bad.data = nullptr;
  EXPECT_EQ(parse_module_image(&bad, 0, 8, 9, m), ImageStatus::invalid_image);
  EXPECT_EQ(parse_module_image(&w, 12, 8, 9, m), ImageStatus::invalid_image);  // truncated struct
}

INSTANTIATE_TEST_SUITE_P(Nvcc, FatbinVariant,
                         ::testing::Values("sample_kernels.fatbin", "sample_kernels_uncompressed.fatbin",
                                           "sample_kernels_compressed.fatbin", "sample_kernels_lz4.fatbin"),
                         [](const auto& info) {
                           std::string n = info.param;
                           n = n.substr(0, n.find('.'));
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

// ---- hand-made fatbins ---------------------------------------------------------------------

struct EntrySpec {
  std::uint16_t kind = 1;
  std::uint32_t header_size = 64;
  std::uint32_t arch = 80;
  std::uint64_t flags = 0x11;
  Bytes payload;
  std::uint32_t compressed_size = 0;
  std::uint64_t decompressed_size = 0;
  std::optional<std::uint64_t> payload_size;  // default: payload.size()
};

template <typename T>
void put(Bytes& b, std::size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}

EntrySpec entry(std::uint16_t kind, std::uint32_t arch, std::uint64_t flags, Bytes payload) {
  EntrySpec e;
  e.kind = kind;
  e.arch = arch;
  e.flags = flags;
  e.payload = std::move(payload);
  return e;
}

// A PTX entry whose payload went through a compressor (flags 0x2000 LZ4, 0x8000 Zstandard).
EntrySpec compressed_ptx(std::uint64_t flags, Bytes payload, std::uint64_t decompressed_size) {
  EntrySpec e = entry(1, 80, flags, std::move(payload));
  e.compressed_size = static_cast<std::uint32_t>(e.payload.size());
  e.decompressed_size = decompressed_size;
  return e;
}

Bytes make_fatbin(const std::vector<EntrySpec>& entries) {
  Bytes f(16, 0);
  for (const auto& e : entries) {
    Bytes h(std::max<std::size_t>(e.header_size, 64), 0);  // cut back to header_size below
    put<std::uint16_t>(h, 0, e.kind);
    put<std::uint16_t>(h, 2, 0x0101);
    put<std::uint32_t>(h, 4, e.header_size);
    put<std::uint64_t>(h, 8, e.payload_size.value_or(e.payload.size()));
    put<std::uint32_t>(h, 16, e.compressed_size);
    put<std::uint32_t>(h, 28, e.arch);
    put<std::uint64_t>(h, 40, e.flags);
    put<std::uint64_t>(h, 56, e.decompressed_size);
    h.resize(e.header_size);
    f.insert(f.end(), h.begin(), h.end());
    f.insert(f.end(), e.payload.begin(), e.payload.end());
  }
  put<std::uint32_t>(f, 0, 0xBA55ED50u);
  put<std::uint16_t>(f, 4, 1);
  put<std::uint16_t>(f, 6, 16);
  put<std::uint64_t>(f, 8, f.size() - 16);
  return f;
}

const char* const kTinyPtx =
    ".version 9.0\n.target sm_80\n.address_size 64\n.visible .entry tiny(.param .u32 x)\n{\nret;\n}\n";

Bytes bytes_of(const char* s) { return Bytes(s, s + std::strlen(s)); }

// A Zstandard frame holding `content` in one raw block; `dict_id` != 0 adds a dictionary ID.
Bytes zstd_raw_frame(const Bytes& content, std::uint8_t dict_id) {
  Bytes f = {0x28, 0xB5, 0x2F, 0xFD};
  f.push_back(static_cast<std::uint8_t>(0xA0 | (dict_id ? 1 : 0)));  // 4-byte content size, single segment
  if (dict_id) f.push_back(dict_id);
  const auto n = static_cast<std::uint32_t>(content.size());
  for (int i = 0; i < 4; ++i) f.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  const std::uint32_t block = (n << 3) | 1;  // raw, last
  for (int i = 0; i < 3; ++i) f.push_back(static_cast<std::uint8_t>(block >> (8 * i)));
  f.insert(f.end(), content.begin(), content.end());
  return f;
}

TEST(ModuleImage, HandMadeFatbins) {
  ModuleImage m;
  const Bytes ptx = bytes_of(kTinyPtx);

  // Plain PTX entry, and the same as a (raw-block) Zstandard frame.
  EXPECT_EQ(parse_sized(make_fatbin({entry(1, 80, 0x11, ptx)}), 8, 0, m), ImageStatus::ok);
  ASSERT_EQ(m.kernels.size(), 1u);
  EXPECT_EQ(m.kernels[0].param_sizes, (std::vector<std::uint32_t>{4}));
  EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(0x8011, zstd_raw_frame(ptx, 0), ptx.size())}), 8, 0, m),
            ImageStatus::ok);
  EXPECT_EQ(m.kernels.size(), 1u);

  // A frame that needs a dictionary cannot be decoded.
  EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(0x8011, zstd_raw_frame(ptx, 7), ptx.size())}), 8, 0, m),
            ImageStatus::unsupported_compression);

  // Lying sizes.
  EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(0x8011, zstd_raw_frame(ptx, 0), std::uint64_t{1} << 40)}), 8, 0, m),
            ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(0x8011, zstd_raw_frame(ptx, 0), ptx.size() + 1)}), 8, 0, m),
            ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(0x2011, ptx, 1000000)}), 8, 0, m), ImageStatus::invalid_image);
  EntrySpec e = compressed_ptx(0x2011, ptx, 10);
  e.compressed_size = 4000;  // more than the payload
  EXPECT_EQ(parse_sized(make_fatbin({e}), 8, 0, m), ImageStatus::invalid_image);
  e = entry(1, 80, 0x11, ptx);
  e.payload_size = ~std::uint64_t{0} - 8;
  EXPECT_EQ(parse_sized(make_fatbin({e}), 8, 0, m), ImageStatus::invalid_image);
  e = entry(1, 80, 0x11, ptx);
  e.header_size = 8;
  EXPECT_EQ(parse_sized(make_fatbin({e}), 8, 0, m), ImageStatus::invalid_image);
  Bytes f = make_fatbin({entry(1, 80, 0x11, ptx)});
  put<std::uint64_t>(f, 8, f.size());  // claims more than there is
  EXPECT_EQ(parse_sized(f, 8, 0, m), ImageStatus::invalid_image);
  put<std::uint64_t>(f, 8, ~std::uint64_t{0});
  EXPECT_EQ(parse_sized(f, 8, 0, m), ImageStatus::invalid_image);
  EXPECT_EQ(parse_unsized(f, 8, 0, m), ImageStatus::invalid_image);

  // Too many entries.
  EXPECT_EQ(parse_sized(make_fatbin(std::vector<EntrySpec>(5000)), 8, 0, m), ImageStatus::invalid_image);
  // No entries, or only kinds that are not code: nothing to run.
  EXPECT_EQ(parse_sized(make_fatbin({}), 8, 0, m), ImageStatus::no_binary_for_gpu);
  EXPECT_EQ(parse_sized(make_fatbin({entry(8, 80, 0x11, ptx)}), 8, 0, m), ImageStatus::no_binary_for_gpu);
  // A PTX entry that is not PTX.
  EXPECT_EQ(parse_sized(make_fatbin({entry(1, 80, 0x11, bytes_of("garbage"))}), 8, 0, m), ImageStatus::invalid_image);
}

// A frame from the reference zstd encoder (zstd -19, with its default content checksum) of a
// generated PTX module: 24 kernels k<i>(u64, u32) and globals g<i> of 4 * (i + 1) bytes. It
// exercises encoder choices nvcc's output may not (FSE-compressed tables, the checksum) without
// needing the zstd tool at test time.
const char* const kZstdPtxFrameHex =
    "28b52ffd645209550a0046953a1d606d730cf968071da8b388de8182204041429b2449629ba6ad418800073f0034002a"
    "000f86a392a3303cd113510ba1908b88a406953231108fa25149d1181a0a845ab22567f2444c1439d0e1d0a805955944"
    "e9e120a0e6a116549a188d27829c880aee6b5d6b4dbf8d31965f9699f8cdb556f3aefff7deb6ae2b0be1e1408085b208"
    "fc9506c8309848d9202a2d1aa871a8002692040adbcccccc9c6d99d3e934b64d2f2f2f37b6cbf77d9fed6ddbb6e6da68"
    "343a73d1ef3dcc7daadad6aa7301ebebebededfaffff7ffbfbbeafba3e1e8f4f5dfcf3f333ea3eabd5eae656edecec7c"
    "b7cecdcdcdda0260a811307572dddaefe0a531124810502008f809ee135486ff3e345465f2d645ace5de4da0c5bf9b91"
    "e99bbab3fabd9b808b7f173396c092afa4eb63c5fbd7a7ee894013f5df63b24851f1fe4b6fa7ee19a5b343cd74bba791"
    "1a805d056fc78ad5";
constexpr std::size_t kZstdPtxSize = 2642;

Bytes from_hex(const char* hex) {
  Bytes out;
  for (std::size_t i = 0; hex[i] != 0 && hex[i + 1] != 0; i += 2)
    out.push_back(static_cast<unsigned char>(std::stoi(std::string(hex + i, 2), nullptr, 16)));
  return out;
}

TEST(ModuleImage, ZstdFrameFromReferenceEncoder) {
  const Bytes frame = from_hex(kZstdPtxFrameHex);
  ASSERT_EQ(frame[4] & 0x04, 0x04);  // has a content checksum
  ModuleImage m;
  ASSERT_EQ(parse_sized(make_fatbin({compressed_ptx(0x8011, frame, kZstdPtxSize)}), 8, 0, m), ImageStatus::ok);
  ASSERT_EQ(m.kernels.size(), 24u);
  EXPECT_EQ(m.kernels[23].name, "k23");
  EXPECT_EQ(m.kernels[23].param_sizes, (std::vector<std::uint32_t>{8, 4}));
  ASSERT_EQ(m.globals.size(), 24u);
  EXPECT_EQ(m.globals[23].name, "g23");
  EXPECT_EQ(m.globals[23].size, 96u);

  // A wrong checksum, or any other damage, must not go unnoticed. (Some bits carry no
  // information, e.g. the unused high bits of a table description: flipping those is harmless.)
  Bytes bad = frame;
  bad.back() ^= 1;
  EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(0x8011, bad, kZstdPtxSize)}), 8, 0, m), ImageStatus::invalid_image);
  for (std::size_t i = 0; i < frame.size(); ++i) {
    for (const int bit : {0, 3, 7}) {
      bad = frame;
      bad[i] ^= static_cast<unsigned char>(1u << bit);
      const ImageStatus st = parse_sized(make_fatbin({compressed_ptx(0x8011, bad, kZstdPtxSize)}), 8, 0, m);
      if (st == ImageStatus::ok) {
        EXPECT_EQ(m.kernels.size(), 24u) << "byte " << i << " bit " << bit;
      } else {
        EXPECT_TRUE(st == ImageStatus::invalid_image || st == ImageStatus::unsupported_compression)
            << simgpu::image_status_name(st);
      }
    }
  }
}

// ---- entries compressed by liblz4 and libzstd ----------------------------------------------

// A PTX module of `n` kernels k<i>(u64, u32) and globals g<i> of 4 * (i + 1) bytes.
Bytes generated_ptx(int n) {
  std::string s = ".version 8.0\n.target sm_80\n.address_size 64\n";
  for (int i = 0; i < n; ++i) {
    const std::string k = "k" + std::to_string(i);
    s += ".global .align 4 .b8 g" + std::to_string(i) + "[" + std::to_string(4 * (i + 1)) + "];\n";
    s += ".visible .entry " + k + "(.param .u64 " + k + "_param_0, .param .u32 " + k + "_param_1)\n{\n\tret;\n}\n";
  }
  return Bytes(s.begin(), s.end());
}

// Level 19 with the content checksum, as the zstd tool writes by default; `content_size` false
// leaves the content size out of the frame header (as a streaming compressor does).
Bytes zstd_compress(const Bytes& in, bool content_size) {
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 19);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_contentSizeFlag, content_size ? 1 : 0);
  Bytes out(ZSTD_compressBound(in.size()));
  const std::size_t n = ZSTD_compress2(cctx.get(), out.data(), out.size(), in.data(), in.size());
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

Bytes zstd_compress(const Bytes& in) { return zstd_compress(in, true); }

Bytes lz4_compress(const Bytes& in) {
  Bytes out(static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(in.size()))));
  const int n = LZ4_compress_default(reinterpret_cast<const char*>(in.data()), reinterpret_cast<char*>(out.data()),
                                     static_cast<int>(in.size()), static_cast<int>(out.size()));
  EXPECT_GT(n, 0);
  out.resize(static_cast<std::size_t>(std::max(n, 0)));
  return out;
}

void expect_same_module(const ModuleImage& a, const ModuleImage& b) {
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  for (std::size_t i = 0; i < a.kernels.size(); ++i) {
    EXPECT_EQ(a.kernels[i].name, b.kernels[i].name);
    EXPECT_EQ(a.kernels[i].param_sizes, b.kernels[i].param_sizes);
    EXPECT_EQ(a.kernels[i].param_offsets, b.kernels[i].param_offsets);
  }
  ASSERT_EQ(a.globals.size(), b.globals.size());
  for (std::size_t i = 0; i < a.globals.size(); ++i) {
    EXPECT_EQ(a.globals[i].name, b.globals[i].name);
    EXPECT_EQ(a.globals[i].size, b.globals[i].size);
  }
}

struct Codec {
  const char* name;
  std::uint64_t flags;
  Bytes (*compress)(const Bytes&);
};
const Codec kCodecs[] = {{"zstd", 0x8011, zstd_compress}, {"lz4", 0x2011, lz4_compress}};

TEST(ModuleImage, LibraryCompressedEntriesDecodeToTheOriginal) {
  // 2000 kernels: some 200 KB of PTX, more than one 128 KiB Zstandard block.
  for (const int n : {1, 24, 2000}) {
    const Bytes ptx = generated_ptx(n);
    ModuleImage plain;
    ASSERT_EQ(parse_sized(make_fatbin({entry(1, 80, 0x11, ptx)}), 8, 0, plain), ImageStatus::ok);
    ASSERT_EQ(plain.kernels.size(), static_cast<std::size_t>(n));
    for (const Codec& c : kCodecs) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(n) + " kernels");
      const Bytes packed = c.compress(ptx);
      ASSERT_LT(packed.size(), ptx.size() + 64);
      ModuleImage m;
      ASSERT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags, packed, ptx.size())}), 8, 0, m), ImageStatus::ok);
      expect_same_module(m, plain);
      // The exact decompressed size, and not a byte more or less.
      EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags, packed, ptx.size() - 1)}), 8, 0, m),
                ImageStatus::invalid_image);
      EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags, packed, ptx.size() + 1)}), 8, 0, m),
                ImageStatus::invalid_image);
      // The compressed size covers the compressed data exactly: not a padding byte more.
      Bytes padded = packed;
      padded.push_back(0);
      EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags, padded, ptx.size())}), 8, 0, m),
                ImageStatus::invalid_image);
      // ...but the payload around it may be padded, as fatbinary pads it.
      EntrySpec e = compressed_ptx(c.flags, padded, ptx.size());
      e.compressed_size = static_cast<std::uint32_t>(packed.size());
      ASSERT_EQ(parse_sized(make_fatbin({e}), 8, 0, m), ImageStatus::ok);
      expect_same_module(m, plain);
      if (c.flags & 0x8000) {
        // Without the content size in the frame header, the entry header's size is the
        // only one, and still exact.
        const Bytes unsized = zstd_compress(ptx, false);
        ASSERT_EQ(ZSTD_getFrameContentSize(unsized.data(), unsized.size()), ZSTD_CONTENTSIZE_UNKNOWN);
        ASSERT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags, unsized, ptx.size())}), 8, 0, m), ImageStatus::ok);
        expect_same_module(m, plain);
        EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags, unsized, ptx.size() + 1)}), 8, 0, m),
                  ImageStatus::invalid_image);
        // One frame: two that together hold the content are not what fatbinary writes.
        const auto half = static_cast<std::ptrdiff_t>(ptx.size() / 2);
        Bytes two = zstd_compress(Bytes(ptx.begin(), ptx.begin() + half), false);
        const Bytes second = zstd_compress(Bytes(ptx.begin() + half, ptx.end()), false);
        two.insert(two.end(), second.begin(), second.end());
        EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags, two, ptx.size())}), 8, 0, m),
                  ImageStatus::invalid_image);
      }
      // The other format's flag.
      EXPECT_EQ(parse_sized(make_fatbin({compressed_ptx(c.flags ^ 0xA000, packed, ptx.size())}), 8, 0, m),
                ImageStatus::invalid_image);
    }
  }
}

TEST(ModuleImage, LibraryCompressedEntriesTruncatedOrCorrupted) {
  const Bytes ptx = generated_ptx(24);
  ModuleImage plain;
  ASSERT_EQ(parse_sized(make_fatbin({entry(1, 80, 0x11, ptx)}), 8, 0, plain), ImageStatus::ok);
  for (const Codec& c : kCodecs) {
    SCOPED_TRACE(c.name);
    const Bytes packed = c.compress(ptx);
    // Every truncation, the sizes saying so.
    for (std::size_t len = 1; len < packed.size(); ++len) {
      ModuleImage m;
      const Bytes cut(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(len));
      const ImageStatus st = parse_sized(make_fatbin({compressed_ptx(c.flags, cut, ptx.size())}), 8, 0, m);
      ASSERT_EQ(st, ImageStatus::invalid_image) << len << " bytes: " << simgpu::image_status_name(st);
    }
    // Every byte with one of its bits flipped. The Zstandard frame has a content checksum, so
    // what decodes is the original (some bits carry no information); LZ4 has none, so a
    // flipped literal gives other text, which may still parse.
    int refused = 0;
    for (std::size_t i = 0; i < packed.size(); ++i) {
      Bytes bad = packed;
      bad[i] ^= static_cast<unsigned char>(1u << (i % 8));
      ModuleImage m;
      const ImageStatus st = parse_sized(make_fatbin({compressed_ptx(c.flags, bad, ptx.size())}), 8, 0, m);
      if (st != ImageStatus::ok) {
        ++refused;
        ASSERT_TRUE(m.kernels.empty() && m.globals.empty());
        if (c.flags & 0x8000) {
          EXPECT_TRUE(st == ImageStatus::invalid_image || st == ImageStatus::unsupported_compression)
              << "byte " << i << ": " << simgpu::image_status_name(st);
        } else {
          EXPECT_NE(st, ImageStatus::unsupported_compression) << "byte " << i;
        }
      } else if (c.flags & 0x8000) {
        expect_same_module(m, plain);
      }
    }
    EXPECT_GT(refused, static_cast<int>(packed.size()) / 4);
  }
}

// The sample cubin as an ELF entry compressed by each library (-compress-all, with either mode).
TEST(ModuleImage, LibraryCompressedCubin) {
  LOAD_OR_SKIP(cubin, "sample_kernels_sm89.cubin", Need::required);
  for (const Codec& c : kCodecs) {
    SCOPED_TRACE(c.name);
    EntrySpec e = entry(2, 89, c.flags, c.compress(cubin));
    e.compressed_size = static_cast<std::uint32_t>(e.payload.size());
    e.decompressed_size = cubin.size();
    ModuleImage m;
    ASSERT_EQ(parse_sized(make_fatbin({e}), 8, 9, m), ImageStatus::ok);
    EXPECT_EQ(m.code_kind, K::cubin);
    expect_sample_module(m);
  }
}

TEST(ModuleImage, FatbinArchVariants) {
  LOAD_OR_SKIP(cubin, "sample_kernels_sm89.cubin", Need::required);
  ModuleImage m;
  // Arch-specific ("a", flag 0x100000): exactly that SM.
  const Bytes specific = make_fatbin({entry(2, 86, 0x100011, cubin)});
  EXPECT_EQ(parse_sized(specific, 8, 6, m), ImageStatus::ok);
  EXPECT_EQ(parse_sized(specific, 8, 9, m), ImageStatus::no_binary_for_gpu);
  // Family ("f", flag 0x200000): PTX only for the same major.
  const Bytes family = make_fatbin({entry(1, 80, 0x200011, bytes_of(kTinyPtx))});
  EXPECT_EQ(parse_sized(family, 8, 9, m), ImageStatus::ok);
  EXPECT_EQ(parse_sized(family, 9, 0, m), ImageStatus::no_binary_for_gpu);
  // A cubin is preferred to PTX even for an older SM; the highest fitting cubin wins.
  const Bytes mixed =
      make_fatbin({entry(1, 89, 0x11, bytes_of(kTinyPtx)), entry(2, 80, 0x11, cubin), entry(2, 86, 0x11, cubin)});
  ASSERT_EQ(parse_sized(mixed, 8, 9, m), ImageStatus::ok);
  EXPECT_EQ(m.code_kind, K::cubin);
  EXPECT_EQ(m.arch, 86);
}

// ---- hand-made cubins ----------------------------------------------------------------------

TEST(ModuleImage, HostileElfHeaders) {
  LOAD_OR_SKIP(cubin, "sample_kernels_sm89.cubin", Need::required);
  ModuleImage m;
  auto with = [&](auto edit) {
    Bytes b = cubin;
    edit(b);
    return b;
  };
  // e_shoff past the end, e_shnum huge, e_shentsize too small, e_shstrndx out of range,
  // section offsets/sizes past the end, a wrong machine, 32-bit class.
  EXPECT_EQ(parse_sized(with([](Bytes& b) { put<std::uint64_t>(b, 40, b.size()); }), 8, 9, m),
            ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(with([](Bytes& b) { put<std::uint64_t>(b, 40, ~std::uint64_t{0} - 10); }), 8, 9, m),
            ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(with([](Bytes& b) { put<std::uint16_t>(b, 60, 0xfff0); }), 8, 9, m),
            ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(with([](Bytes& b) { put<std::uint16_t>(b, 58, 8); }), 8, 9, m), ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(with([](Bytes& b) { put<std::uint16_t>(b, 62, 0xfff0); }), 8, 9, m),
            ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(with([](Bytes& b) { put<std::uint16_t>(b, 18, 62); }), 8, 9, m), ImageStatus::invalid_image);
  EXPECT_EQ(parse_sized(with([](Bytes& b) { b[4] = 1; }), 8, 9, m), ImageStatus::invalid_image);
  // Every section's offset and size pointed far away.
  std::uint64_t shoff;
  std::memcpy(&shoff, cubin.data() + 40, 8);
  std::uint16_t shnum;
  std::memcpy(&shnum, cubin.data() + 60, 2);
  for (std::uint16_t i = 1; i < shnum; ++i) {
    for (const std::size_t field : {24, 32}) {
      const Bytes bad = with([&](Bytes& b) { put<std::uint64_t>(b, shoff + 64u * i + field, std::uint64_t{1} << 62); });
      const ImageStatus st = parse_sized(bad, 8, 9, m);
      EXPECT_TRUE(st == ImageStatus::invalid_image || st == ImageStatus::ok) << i << " " << field;
    }
  }
}

// ---- truncated, mutated and random input ---------------------------------------------------

std::vector<std::pair<std::string, Bytes>> all_images() {
  std::vector<std::pair<std::string, Bytes>> out;
  const auto dir = kernel_dir();
  if (!dir) return out;
  for (const char* name :
       {"sample_kernels.ptx", "sample_kernels_sm89.cubin", "sample_kernels.fatbin",
        "sample_kernels_uncompressed.fatbin", "sample_kernels_compressed.fatbin", "sample_kernels_lz4.fatbin"}) {
    auto b = read_file(*dir + "/" + name);
    if (!b) continue;
    if (std::string(name).ends_with(".ptx")) b = with_nul(*b);
    out.emplace_back(name, std::move(*b));
  }
  return out;
}

TEST(ModuleImage, EveryPrefixIsInvalid) {
  const auto images = all_images();
  if (images.empty()) GTEST_SKIP() << "built without nvcc: no sample kernels";
  for (const auto& [name, image] : images) {
    SCOPED_TRACE(name);
    for (std::size_t len = 1; len < image.size(); ++len) {
      ModuleImage m;
      const ImageStatus st = parse_exact(image.data(), len, len, 8, 9, m);
      ASSERT_EQ(st, ImageStatus::invalid_image) << "prefix of " << len << " bytes: " << simgpu::image_status_name(st);
      ASSERT_TRUE(m.kernels.empty());
    }
  }
}

TEST(ModuleImage, MutatedImagesNeverCrash) {
  // Random byte changes, many aimed at the headers, run through every parsing path (several
  // compute capabilities reach every fatbin entry and both decompressors). Run under
  // -fsanitize=address,undefined to make "never crash" mean "never touch a wrong byte".
  const auto images = all_images();
  if (images.empty()) GTEST_SKIP() << "built without nvcc: no sample kernels";
  // SIMGPU_FUZZ_ITERATIONS (per image) and SIMGPU_FUZZ_SEED allow a longer run by hand.
  const char* iterations_env = std::getenv("SIMGPU_FUZZ_ITERATIONS");
  const char* seed_env = std::getenv("SIMGPU_FUZZ_SEED");
  const long iterations = iterations_env ? std::atol(iterations_env) : 1500;
  std::mt19937_64 rng(seed_env ? std::strtoull(seed_env, nullptr, 10) : 12345);
  int ok = 0, failed = 0;
  for (const auto& [name, image] : images) {
    SCOPED_TRACE(name);
    for (long iter = 0; iter < iterations; ++iter) {
      Bytes b = image;
      const int edits = 1 + static_cast<int>(rng() % 8);
      for (int e = 0; e < edits; ++e) {
        // Half the edits in the first 512 bytes (headers), the rest anywhere.
        const std::size_t span = (rng() % 2) ? std::min<std::size_t>(512, b.size()) : b.size();
        const std::size_t pos = rng() % span;
        switch (rng() % 4) {
          case 0:
            b[pos] = static_cast<unsigned char>(rng());
            break;
          case 1:
            b[pos] ^= static_cast<unsigned char>(1u << (rng() % 8));
            break;
          case 2:
            b[pos] = 0xff;
            break;
          default:
            b[pos] = 0;
            break;
        }
      }
      static const int ccs[][2] = {{8, 9}, {8, 6}, {9, 0}, {7, 5}};
      const auto& cc = ccs[iter % 4];
      ModuleImage m;
      const ImageStatus st = parse_sized(b, cc[0], cc[1], m);
      (st == ImageStatus::ok ? ok : failed)++;
      if (st != ImageStatus::ok) {
        ASSERT_TRUE(m.kernels.empty() && m.globals.empty());
      }
      for (const auto& k : m.kernels) {
        ASSERT_FALSE(k.name.empty());
        ASSERT_EQ(k.param_sizes.size(), k.param_offsets.size());
      }
    }
  }
  // Both outcomes must occur, or the mutations are not reaching the interesting paths.
  EXPECT_GT(ok, 0);
  EXPECT_GT(failed, 0);
}

TEST(ModuleImage, RandomBytesAreInvalid) {
  std::mt19937_64 rng(777);
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b(1 + rng() % 4096);
    for (auto& c : b) c = static_cast<unsigned char>(rng());
    ModuleImage m;
    ASSERT_EQ(parse_sized(b, 8, 9, m), ImageStatus::invalid_image) << iter;
    // With the size unknown, the parser may only read up to a NUL (as text), so give it one.
    b.push_back(0);
    ASSERT_EQ(parse_unsized(b, 8, 9, m), ImageStatus::invalid_image) << iter;
  }
  // Random bytes behind each magic number.
  for (const std::uint32_t magic : {0x464C457Fu, 0xBA55ED50u}) {
    for (int iter = 0; iter < 2000; ++iter) {
      Bytes b(4 + rng() % 2048);
      for (auto& c : b) c = static_cast<unsigned char>(rng());
      std::memcpy(b.data(), &magic, 4);
      if (iter % 2 && b.size() >= 8)
        put<std::uint16_t>(b, 4, magic == 0xBA55ED50u ? 1 : 0x0102);  // pass the first checks
      ModuleImage m;
      const ImageStatus st = parse_sized(b, 8, 9, m);
      ASSERT_TRUE(st == ImageStatus::invalid_image || st == ImageStatus::no_binary_for_gpu)
          << simgpu::image_status_name(st);
    }
  }
  ModuleImage m;
  EXPECT_EQ(parse_module_image(nullptr, 0, 8, 9, m), ImageStatus::invalid_image);
}

TEST(ModuleImage, StatusNames) {
  EXPECT_STREQ(simgpu::image_status_name(ImageStatus::ok), "ok");
  EXPECT_STREQ(simgpu::image_status_name(ImageStatus::invalid_image), "invalid_image");
  EXPECT_STREQ(simgpu::image_status_name(ImageStatus::invalid_ptx), "invalid_ptx");
  EXPECT_STREQ(simgpu::image_status_name(ImageStatus::no_binary_for_gpu), "no_binary_for_gpu");
  EXPECT_STREQ(simgpu::image_status_name(ImageStatus::unsupported_compression), "unsupported_compression");
}

}  // namespace
