// Module image parsing for the simulated driver: see module_image.h.
//
// The layouts below were worked out from what the CUDA 13.0 toolchain (nvcc, ptxas, fatbinary)
// writes, checked against readelf, and from the public specification of ELF. Every offset read
// from an image is bounds-checked against the region it must lie in, every count is capped, and
// every loop advances, so hostile input can only produce an error status. Compressed fatbin
// entries are decoded by liblz4 and libzstd (see "Decompression" below).
#include "module_image.h"

#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace simgpu {
namespace {

static_assert(std::endian::native == std::endian::little, "images are little-endian and are read with plain loads");

using u8 = std::uint8_t;
using u16 = std::uint16_t;
using u32 = std::uint32_t;
using u64 = std::uint64_t;

// Nothing real comes close to these; they keep a garbage header from making us read or allocate
// without bound.
constexpr std::size_t kMaxImageBytes = std::size_t{1} << 30;         // one image, when size == 0
constexpr std::size_t kMaxDecompressedBytes = std::size_t{1} << 28;  // one fatbin entry
constexpr std::size_t kMaxFatbinEntries = 4096;
constexpr std::size_t kMaxElfSections = std::size_t{1} << 20;
constexpr std::size_t kMaxElfSymbols = std::size_t{1} << 24;

u16 ld16(const u8* p) {
  u16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
u32 ld32(const u8* p) {
  u32 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
u64 ld64(const u8* p) {
  u64 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// True when [off, off + len) lies within [0, limit), without overflowing.
bool in_bounds(u64 off, u64 len, u64 limit) { return off <= limit && len <= limit - off; }

// Compute capability as the number nvcc uses in arch names: 8.9 -> 89, 10.0 -> 100.
int cc_number(int major, int minor) { return major * 10 + minor; }

// Architecture variants: sm_90a-style code runs only on that exact SM; sm_100f-style code on the
// SMs of the same major ("family").
enum class ArchVariant { plain, specific, family };

bool cubin_runs_on(int arch, ArchVariant v, int major, int minor) {
  if (major <= 0) return true;
  if (v == ArchVariant::specific) return arch == cc_number(major, minor);
  return arch / 10 == major && arch % 10 <= minor;
}

bool ptx_jits_for(int arch, ArchVariant v, int major, int minor) {
  if (major <= 0) return true;
  if (v == ArchVariant::specific) return arch == cc_number(major, minor);
  if (v == ArchVariant::family) return arch / 10 == major && arch % 10 <= minor;
  return arch <= cc_number(major, minor);
}

// ============================================================================================
// Decompression of fatbin entries.
//
// CUDA 13's fatbinary compresses PTX (and debug ELF) entries by default and, with -compress-all,
// every entry. The entry's flags tell the format: 0x2000 marks an LZ4 block ("--compress-mode=
// speed"), 0x8000 a Zstandard frame (the default, and the "size" and "balance" modes). The entry
// header gives both the compressed and the decompressed size.
//
// Both are decoded by Debian's liblz4 and libzstd, whose decoders are built and fuzzed for
// untrusted input: neither reads past the `n` input bytes nor writes past the output buffer, which
// the caller sizes to exactly the decompressed size the entry header gives. Whatever does not fill
// that buffer exactly is refused.
// ============================================================================================

// LZ4 counts in ints; the caps keep every size the fatbin parser passes (a compressed size is at
// most the image's, a decompressed one at most an entry's) well within one.
static_assert(kMaxImageBytes <= std::numeric_limits<int>::max() &&
              kMaxDecompressedBytes <= std::numeric_limits<int>::max());

// An LZ4 block (no frame). LZ4_decompress_safe fails unless the block ends exactly at `n` and fits
// in the buffer; the count it returns must then fill the buffer.
ImageStatus lz4_decompress(const u8* in, std::size_t n, std::vector<u8>& out) {
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in), reinterpret_cast<char*>(out.data()),
                                      static_cast<int>(n), static_cast<int>(out.size()));
  return got >= 0 && static_cast<std::size_t>(got) == out.size() ? ImageStatus::ok : ImageStatus::invalid_image;
}

// One Zstandard frame, exactly `n` bytes long (fatbinary writes the frame's own size as the
// compressed size), whose content fills the buffer exactly. libzstd checks the frame header's
// content size, when it has one, and the content checksum, when it has one, against what it decodes.
ImageStatus zstd_decompress(const u8* in, std::size_t n, std::vector<u8>& out) {
  // Only the frame format of RFC 8878: not the pre-1.0 formats that Debian's libzstd, built with
  // legacy support, would also decode.
  if (n < 4 || ld32(in) != ZSTD_MAGICNUMBER) return ImageStatus::invalid_image;
  // One frame: ZSTD_decompress would go on to decode any frames that follow it.
  if (ZSTD_findFrameCompressedSize(in, n) != n) return ImageStatus::invalid_image;  // also its errors
  // A frame made with a dictionary can only be decoded with that dictionary, which we do not have.
  if (ZSTD_getDictID_fromFrame(in, n) != 0) return ImageStatus::unsupported_compression;
  const std::size_t got = ZSTD_decompress(out.data(), out.size(), in, n);
  return !ZSTD_isError(got) && got == out.size() ? ImageStatus::ok : ImageStatus::invalid_image;
}

// ============================================================================================
// PTX
// ============================================================================================

bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%';
}
bool is_word_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

// Splits PTX into words (".directive", identifier, number), quoted strings and single punctuation
// characters, skipping white space and comments. PTX identifiers never contain '.', so a '.'
// always starts a new word (".param.u64" reads as ".param" ".u64").
class PtxLexer {
 public:
  enum class T { end, word, punct, string, error };
  struct Tok {
    T type = T::end;
    std::string_view text;
    bool is(char c) const { return type == T::punct && text.size() == 1 && text[0] == c; }
    bool is(std::string_view w) const { return type == T::word && text == w; }
    bool is_directive() const { return type == T::word && text.size() > 1 && text[0] == '.'; }
    bool is_identifier() const { return type == T::word && is_ident_start(text[0]); }
  };

  explicit PtxLexer(std::string_view s) : s_(s) {}

  Tok next() {
    skip_blank();
    if (error_) return {T::error, {}};
    if (i_ >= s_.size()) return {T::end, {}};
    const std::size_t start = i_;
    const char c = s_[i_];
    if (c == '"') {
      for (++i_; i_ < s_.size(); ++i_) {
        if (s_[i_] == '\\') {
          ++i_;
        } else if (s_[i_] == '"') {
          ++i_;
          return {T::string, s_.substr(start, i_ - start)};
        }
      }
      error_ = true;
      return {T::error, {}};
    }
    if (c == '.' && i_ + 1 < s_.size() && is_word_char(s_[i_ + 1])) {
      ++i_;
      while (i_ < s_.size() && is_word_char(s_[i_]) && s_[i_] != '%') ++i_;
      return {T::word, s_.substr(start, i_ - start)};
    }
    if (is_word_char(c)) {
      while (i_ < s_.size() && is_word_char(s_[i_])) ++i_;
      return {T::word, s_.substr(start, i_ - start)};
    }
    ++i_;
    return {T::punct, s_.substr(start, 1)};
  }

  // The rest of the current line, without a trailing // comment; moves past the newline.
  std::string_view take_line() {
    const std::size_t start = i_;
    std::size_t end = s_.find('\n', i_);
    if (end == std::string_view::npos) end = s_.size();
    i_ = std::min(end + 1, s_.size());
    std::string_view line = s_.substr(start, end - start);
    if (const std::size_t c = line.find("//"); c != std::string_view::npos) line = line.substr(0, c);
    return line;
  }

 private:
  void skip_blank() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        ++i_;
      } else if (c == '/' && i_ + 1 < s_.size() && s_[i_ + 1] == '/') {
        const std::size_t e = s_.find('\n', i_);
        i_ = e == std::string_view::npos ? s_.size() : e + 1;
      } else if (c == '/' && i_ + 1 < s_.size() && s_[i_ + 1] == '*') {
        const std::size_t e = s_.find("*/", i_ + 2);
        if (e == std::string_view::npos) {
          error_ = true;
          i_ = s_.size();
          return;
        }
        i_ = e + 2;
      } else {
        return;
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
  bool error_ = false;
};

using Tok = PtxLexer::Tok;
using TT = PtxLexer::T;

// PTX integer literal: decimal, 0x hex, 0b binary or 0-prefixed octal, optional U suffix.
std::optional<u64> parse_ptx_int(std::string_view s) {
  if (!s.empty() && (s.back() == 'U' || s.back() == 'u')) s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  unsigned base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
    base = 2;
    s.remove_prefix(2);
  } else if (s.size() > 1 && s[0] == '0') {
    base = 8;
    s.remove_prefix(1);
  }
  u64 v = 0;
  for (char c : s) {
    unsigned d;
    if (c >= '0' && c <= '9')
      d = static_cast<unsigned>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<unsigned>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = static_cast<unsigned>(c - 'A' + 10);
    else
      return std::nullopt;
    if (d >= base || v > (std::numeric_limits<u32>::max() - d) / base) return std::nullopt;
    v = v * base + d;
  }
  return v;
}

// Size in bytes of a PTX fundamental type directive, 0 if it is not one.
unsigned ptx_type_size(std::string_view t) {
  static const std::unordered_map<std::string_view, unsigned> sizes = {
      {".u8", 1},
      {".s8", 1},
      {".b8", 1},
      {".e4m3", 1},
      {".e5m2", 1},
      {".u16", 2},
      {".s16", 2},
      {".b16", 2},
      {".f16", 2},
      {".bf16", 2},
      {".e4m3x2", 2},
      {".e5m2x2", 2},
      {".u32", 4},
      {".s32", 4},
      {".b32", 4},
      {".f32", 4},
      {".f16x2", 4},
      {".bf16x2", 4},
      {".tf32", 4},
      {".u64", 8},
      {".s64", 8},
      {".b64", 8},
      {".f64", 8},
      {".b128", 16},
      // Opaque handles (texture/sampler/surface references) are 64-bit.
      {".texref", 8},
      {".samplerref", 8},
      {".surfref", 8},
  };
  const auto it = sizes.find(t);
  return it == sizes.end() ? 0 : it->second;
}

bool is_handle_type(std::string_view t) { return t == ".texref" || t == ".samplerref" || t == ".surfref"; }

// The type part of a declaration: [.attribute(...)] [.align N] [.vN] .type [.ptr [.space] [.align N]].
struct PtxDeclType {
  u64 align = 0;  // explicit .align, 0 if none
  u64 elem = 0;   // fundamental type size, 0 if unknown
  u64 vec = 1;
  bool handle = false;
  bool bad = false;  // something we cannot size
};

// Consumes the leading directives of `toks` from index i. Returns false on malformed syntax.
bool parse_decl_type(const std::vector<Tok>& toks, std::size_t& i, PtxDeclType& t) {
  while (i < toks.size() && toks[i].is_directive()) {
    const std::string_view d = toks[i].text;
    ++i;
    if (d == ".attribute") {  // .attribute(.managed) etc.: not part of the size
      if (i >= toks.size() || !toks[i].is('(')) return false;
      int depth = 0;
      for (; i < toks.size(); ++i) {
        if (toks[i].is('('))
          ++depth;
        else if (toks[i].is(')') && --depth == 0)
          break;
      }
      if (i >= toks.size()) return false;
      ++i;
    } else if (d == ".align") {
      if (i >= toks.size()) return false;
      const auto a = parse_ptx_int(toks[i].text);
      ++i;
      if (!a || *a == 0 || (*a & (*a - 1)) != 0) {
        t.bad = true;
      } else if (t.elem == 0) {
        t.align = *a;  // a .align after .ptr describes the pointee: ignore it
      }
    } else if (d == ".v2" || d == ".v4" || d == ".v8") {
      t.vec = static_cast<u64>(d[2] - '0');
    } else if (const unsigned sz = ptx_type_size(d); sz != 0) {
      if (t.elem != 0) return false;
      t.elem = sz;
      t.handle = is_handle_type(d);
    }
    // Anything else (.param, .reg, .ptr, state spaces, linkage) does not change the size.
  }
  if (t.elem == 0) t.bad = true;
  return true;
}

// "[N]" dimensions after a name. `unsized_first` is set for "[]" as the first dimension.
bool parse_dims(const std::vector<Tok>& toks, std::size_t& i, u64& count, bool& unsized_first) {
  count = 1;
  unsized_first = false;
  bool first = true;
  while (i < toks.size() && toks[i].is('[')) {
    ++i;
    if (i < toks.size() && toks[i].is(']')) {
      if (!first) return false;
      unsized_first = true;
      ++i;
    } else {
      if (i + 1 >= toks.size() || !toks[i + 1].is(']')) return false;
      const auto n = parse_ptx_int(toks[i].text);
      if (!n) return false;
      count *= *n;
      if (count > (u64{1} << 40)) return false;
      i += 2;
    }
    first = false;
  }
  return true;
}

class PtxParser {
 public:
  PtxParser(std::string_view text, ModuleImage& out) : lex_(text), out_(out) {}

  // invalid_image when the text is not PTX at all (no leading .version), invalid_ptx when it
  // is but does not parse.
  ImageStatus run(ArchVariant& variant) {
    const Tok first = lex_.next();
    if (!first.is(".version")) return ImageStatus::invalid_image;
    lex_.take_line();
    bool have_target = false;
    bool is_extern = false;  // linkage prefixes apply to the next declaration only
    for (;;) {
      const Tok t = lex_.next();
      if (t.type == TT::end) break;
      if (t.type == TT::error) return ImageStatus::invalid_ptx;
      bool keep_prefix = false;
      if (t.is(".target")) {
        if (!have_target) {
          if (!parse_target(lex_.take_line(), variant)) return ImageStatus::invalid_ptx;
          have_target = true;
        } else {
          lex_.take_line();
        }
      } else if (t.is(".version") || t.is(".address_size") || t.is(".file") || t.is(".loc")) {
        lex_.take_line();
      } else if (t.is(".visible") || t.is(".weak") || t.is(".common")) {
        keep_prefix = true;
      } else if (t.is(".extern")) {
        is_extern = true;
        keep_prefix = true;
      } else if (t.is(".entry")) {
        if (!parse_entry(is_extern)) return ImageStatus::invalid_ptx;
      } else if (t.is(".func")) {
        if (!skip_function()) return ImageStatus::invalid_ptx;
      } else if (t.is(".global") || t.is(".const") || t.is(".shared") || t.is(".local") || t.is(".tex")) {
        if (!parse_variable(t.text, is_extern)) return ImageStatus::invalid_ptx;
      } else if (t.is(';')) {
        // an empty statement
      } else if (t.is_directive()) {
        // .section (debug info), .pragma, .alias, ... : nothing we need.
        if (!skip_statement()) return ImageStatus::invalid_ptx;
      } else {
        return ImageStatus::invalid_ptx;
      }
      if (!keep_prefix) is_extern = false;
    }
    if (!have_target) return ImageStatus::invalid_ptx;
    return ImageStatus::ok;
  }

 private:
  // ".target sm_90a, debug" -> arch 90, specific.
  bool parse_target(std::string_view line, ArchVariant& variant) {
    PtxLexer l(line);
    const Tok t = l.next();
    if (t.type != TT::word) return false;
    std::string_view s = t.text;
    if (s.starts_with("sm_"))
      s.remove_prefix(3);
    else if (s.starts_with("compute_"))
      s.remove_prefix(8);
    else
      return false;
    int arch = 0;
    std::size_t k = 0;
    for (; k < s.size() && s[k] >= '0' && s[k] <= '9' && k < 4; ++k) arch = arch * 10 + (s[k] - '0');
    if (k < 2) return false;
    const std::string_view suffix = s.substr(k);
    if (suffix.empty())
      variant = ArchVariant::plain;
    else if (suffix == "a")
      variant = ArchVariant::specific;
    else if (suffix == "f")
      variant = ArchVariant::family;
    else
      return false;
    out_.arch = arch;
    return true;
  }

  bool skip_block() {  // after '{'
    std::size_t depth = 1;
    for (;;) {
      const Tok t = lex_.next();
      if (t.type == TT::end || t.type == TT::error) return false;
      if (t.is('{'))
        ++depth;
      else if (t.is('}') && --depth == 0)
        return true;
    }
  }

  bool skip_statement() {  // up to ';' or through a { } block
    for (;;) {
      const Tok t = lex_.next();
      if (t.type == TT::end || t.type == TT::error) return false;
      if (t.is(';')) return true;
      if (t.is('{')) return skip_block();
    }
  }

  // .func [(return params)] name [(params)] [attributes] { body } | ;
  bool skip_function() { return skip_statement(); }

  // .entry name ( .param ..., ... ) [performance directives] { body } | ;
  bool parse_entry(bool is_extern) {
    const Tok name = lex_.next();
    if (!name.is_identifier()) return false;
    KernelInfo k;
    k.name = std::string(name.text);
    k.params_known = true;
    Tok t = lex_.next();
    if (t.is('(')) {
      std::vector<std::vector<Tok>> params(1);
      for (;;) {
        t = lex_.next();
        if (t.type == TT::end || t.type == TT::error || t.is('{') || t.is(';')) return false;
        if (t.is(')')) break;
        if (t.is(','))
          params.emplace_back();
        else
          params.back().push_back(t);
      }
      if (params.size() == 1 && params[0].empty()) params.clear();
      u64 offset = 0;
      for (const auto& p : params) {
        if (p.empty()) return false;
        std::size_t i = 0;
        PtxDeclType type;
        if (!parse_decl_type(p, i, type)) return false;
        if (i >= p.size() || !p[i].is_identifier()) return false;
        ++i;
        u64 count = 1;
        bool unsized = false;
        if (!parse_dims(p, i, count, unsized) || i != p.size()) return false;
        if (type.bad || unsized) {
          k.params_known = false;  // e.g. a type this parser does not know
          continue;
        }
        const u64 size = type.elem * type.vec * count;
        const u64 align = type.align != 0 ? type.align : type.elem * type.vec;
        offset = (offset + align - 1) / align * align;
        if (size > std::numeric_limits<u32>::max() || offset > std::numeric_limits<u32>::max()) return false;
        k.param_sizes.push_back(static_cast<u32>(size));
        k.param_offsets.push_back(static_cast<u32>(offset));
        offset += size;
      }
      t = lex_.next();
    }
    if (!k.params_known) {
      k.param_sizes.clear();
      k.param_offsets.clear();
    }
    for (;; t = lex_.next()) {
      if (t.type == TT::end || t.type == TT::error) return false;
      if (t.is(';')) return true;  // a prototype: the kernel is defined elsewhere
      if (t.is('{')) break;
    }
    if (!skip_block()) return false;
    if (!is_extern) out_.kernels.push_back(std::move(k));
    return true;
  }

  // .global/.const/... [.attribute(...)] [.align N] [.vN] .type name[dims] [= init] [, name...] ;
  bool parse_variable(std::string_view space, bool is_extern) {
    std::vector<Tok> toks;
    int depth = 0;
    for (;;) {
      const Tok t = lex_.next();
      if (t.type == TT::end || t.type == TT::error) return false;
      if (t.is(';') && depth == 0) break;
      if (t.is('{') || t.is('(')) ++depth;
      if ((t.is('}') || t.is(')')) && --depth < 0) return false;
      toks.push_back(t);
    }
    std::size_t i = 0;
    PtxDeclType type;
    if (!parse_decl_type(toks, i, type)) return false;
    const bool wanted = (space == ".global" || space == ".const") && !is_extern && !type.handle && !type.bad;
    for (;;) {
      if (i >= toks.size() || !toks[i].is_identifier()) return false;
      const std::string_view name = toks[i++].text;
      bool parameterized = false;  // name<N>: N numbered variables; not something we look up
      if (i < toks.size() && toks[i].is('<')) {
        if (i + 2 >= toks.size() || !toks[i + 2].is('>')) return false;
        parameterized = true;
        i += 3;
      }
      u64 count = 1;
      bool unsized = false;
      if (!parse_dims(toks, i, count, unsized)) return false;
      u64 init_elems = 0;
      if (i < toks.size() && toks[i].is('=')) {
        ++i;
        // The initializer runs to the next top-level ','. For "x[] = {a, b, {c}}" its
        // outermost braces hold the element count: commas at depth 1, plus one.
        const bool braced = i < toks.size() && toks[i].is('{');
        int d = 0;
        bool any = false;
        u64 commas = 0;
        for (; i < toks.size(); ++i) {
          const Tok& t = toks[i];
          if (d == 0 && t.is(',')) break;
          if (d >= 1 && !t.is('}') && !t.is(')')) {
            if (d == 1 && t.is(','))
              ++commas;
            else
              any = true;
          }
          if (t.is('{') || t.is('('))
            ++d;
          else if (t.is('}') || t.is(')'))
            --d;
        }
        init_elems = braced ? (any ? commas + 1 : 0) : 1;
      }
      if (wanted && !parameterized) {
        if (unsized) count *= init_elems;
        const u64 size = type.elem * type.vec * count;
        if (size != 0) add_global(name, static_cast<std::size_t>(size));
      }
      if (i == toks.size()) return true;
      if (!toks[i].is(',')) return false;
      ++i;
    }
  }

  void add_global(std::string_view name, std::size_t size) {
    // A name declared twice keeps its last size (a hash lookup: PTX can be huge).
    const auto [it, inserted] = global_index_.emplace(std::string(name), out_.globals.size());
    if (inserted)
      out_.globals.push_back(GlobalInfo{std::string(name), size});
    else
      out_.globals[it->second].size = size;
  }

  PtxLexer lex_;
  ModuleImage& out_;
  std::unordered_map<std::string, std::size_t> global_index_;
};

ImageStatus parse_ptx(std::string_view text, int cc_major, int cc_minor, ModuleImage& out) {
  ArchVariant variant = ArchVariant::plain;
  PtxParser parser(text, out);
  const ImageStatus st = parser.run(variant);
  if (st != ImageStatus::ok) return st;
  if (!ptx_jits_for(out.arch, variant, cc_major, cc_minor)) return ImageStatus::no_binary_for_gpu;
  out.kind = ModuleImage::Kind::ptx;
  out.code_kind = ModuleImage::Kind::ptx;
  return ImageStatus::ok;
}

// ============================================================================================
// cubin (ELF64, e_machine EM_CUDA)
// ============================================================================================

constexpr u16 kEmCuda = 190;
constexpr u32 kShtSymtab = 2, kShtSymtabShndx = 18;
constexpr u16 kShnUndef = 0, kShnLoReserve = 0xff00, kShnXindex = 0xffff;
constexpr unsigned kSttObject = 1, kSttFunc = 2;
// CUDA 13 relocatable cubins type their variables with this processor-specific symbol type.
constexpr unsigned kSttCudaObject = 13;
constexpr unsigned kStoCudaEntry = 0x10;  // st_other bit marking a kernel entry point

// .nv.info attribute records: [format u8][attribute u8][u16 value or payload size][payload].
constexpr u8 kEifmtSval = 4;                // payload of the given size follows
constexpr u8 kEiattrKparamInfo = 0x17;      // u32 index, u16 ordinal, u16 offset, u32 (size << 18 | flags)
constexpr u8 kEiattrKparamInfoV2 = 0x45;    // same, size in the low bits: for parameters >= 16 KiB
constexpr u8 kEiattrCbankParamSize = 0x19;  // u16 total parameter bytes

struct Section {
  u32 name = 0;
  u32 type = 0;
  u64 offset = 0;
  u64 size = 0;
  u32 link = 0;
  u64 entsize = 0;
};

// The arch from e_flags: CUDA 13 (ELF ABI version 8) keeps the SM in bits 8-15 (sm_89: 0x6005904);
// earlier toolkits (ABI version 7) in bits 0-7 (sm_80: 0x500550).
int elf_arch(const u8* ident, u32 e_flags) {
  return ident[8] >= 8 ? static_cast<int>((e_flags >> 8) & 0xff) : static_cast<int>(e_flags & 0xff);
}

// NUL-terminated string at `off` in section `s`, within the image.
std::optional<std::string_view> elf_string(const u8* base, const Section& s, u64 off) {
  if (off >= s.size) return std::nullopt;
  const char* p = reinterpret_cast<const char*>(base + s.offset + off);
  const std::size_t max = static_cast<std::size_t>(s.size - off);
  const void* nul = std::memchr(p, 0, max);
  if (nul == nullptr) return std::nullopt;
  return std::string_view(p, static_cast<std::size_t>(static_cast<const char*>(nul) - p));
}

// Fills k.param_* from a kernel's .nv.info.<name> section. false: structurally broken.
bool parse_kernel_info(const u8* p, std::size_t n, KernelInfo& k) {
  struct Param {
    u32 ordinal, offset, size;
  };
  std::vector<Param> params;
  bool cbank_size_seen = false;
  u32 cbank_size = 0;
  bool understood = true;
  std::size_t off = 0;
  while (n - off >= 4) {
    const u8 format = p[off], attr = p[off + 1];
    const u16 value = ld16(p + off + 2);
    if (format == kEifmtSval) {
      if (value > n - off - 4) return false;
      const u8* payload = p + off + 4;
      if ((attr == kEiattrKparamInfo || attr == kEiattrKparamInfoV2) && value >= 12) {
        const u32 word = ld32(payload + 8);
        const u32 size = attr == kEiattrKparamInfo ? word >> 18 : word & 0xffffff;
        params.push_back(Param{ld16(payload + 4), ld16(payload + 6), size});
      }
      off += 4 + std::size_t{value};
    } else if (format >= 1 && format <= 3) {  // no value, byte value, half-word value
      if (attr == kEiattrCbankParamSize && format == 3) {
        cbank_size_seen = true;
        cbank_size = value;
      }
      off += 4;
    } else {
      understood = false;  // a record format we do not know: stop, parameters unknown
      break;
    }
  }
  // ptxas writes the records last parameter first; order by ordinal, which must be 0..n-1.
  std::sort(params.begin(), params.end(), [](const Param& a, const Param& b) { return a.ordinal < b.ordinal; });
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].ordinal != i) understood = false;
  if (params.empty() && cbank_size_seen && cbank_size != 0) understood = false;
  k.params_known = understood;
  if (understood) {
    for (const Param& prm : params) {
      k.param_sizes.push_back(prm.size);
      k.param_offsets.push_back(prm.offset);
    }
  }
  return true;
}

// `limit`: bytes available at `base` (the size given, a fatbin entry's size, or kMaxImageBytes
// when unknown); the ELF header tables must fit in it. `check_arch`: a lone cubin must run on the
// device; one picked from a fatbin was already checked through the entry header.
ImageStatus parse_cubin(const u8* base, std::size_t limit, int cc_major, int cc_minor, bool check_arch,
                        ModuleImage& out) {
  if (limit < 64) return ImageStatus::invalid_image;
  const u8* ident = base;
  if (std::memcmp(ident,
                  "\x7f"
                  "ELF",
                  4) != 0)
    return ImageStatus::invalid_image;
  if (ident[4] != 2 || ident[5] != 1) return ImageStatus::invalid_image;  // ELFCLASS64, little-endian
  if (ld16(base + 18) != kEmCuda) return ImageStatus::invalid_image;
  const u32 e_flags = ld32(base + 48);
  const u64 shoff = ld64(base + 40), phoff = ld64(base + 32);
  const u16 phentsize = ld16(base + 54), phnum = ld16(base + 56);
  const u16 shentsize = ld16(base + 58);
  u64 shnum = ld16(base + 60);
  u32 shstrndx = ld16(base + 62);
  if (shoff == 0 || shentsize < 64) return ImageStatus::invalid_image;
  if (!in_bounds(shoff, 64, limit)) return ImageStatus::invalid_image;
  // Extended numbering: section 0 holds the real count and string-table index.
  if (shnum == 0) shnum = ld64(base + shoff + 32);
  if (shstrndx == kShnXindex) shstrndx = ld32(base + shoff + 40);
  if (shnum == 0 || shnum > kMaxElfSections || !in_bounds(shoff, shnum * shentsize, limit))
    return ImageStatus::invalid_image;
  // The image ends where its last header table does: anything shorter is truncated.
  if (phnum != 0 && (phoff == 0 || phentsize < 56 || !in_bounds(phoff, u64{phnum} * phentsize, limit)))
    return ImageStatus::invalid_image;

  std::vector<Section> sections(static_cast<std::size_t>(shnum));
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const u8* sh = base + shoff + i * shentsize;
    Section& s = sections[i];
    s.name = ld32(sh);
    s.type = ld32(sh + 4);
    s.offset = ld64(sh + 24);
    s.size = ld64(sh + 32);
    s.link = ld32(sh + 40);
    s.entsize = ld64(sh + 56);
  }
  // Sections we read must lie within the image (others, like the NOBITS-like .nv.global of a
  // relocatable cubin, can point anywhere and are never read).
  auto readable = [&](std::size_t idx) {
    return idx < sections.size() && in_bounds(sections[idx].offset, sections[idx].size, limit);
  };
  if (!readable(shstrndx)) return ImageStatus::invalid_image;
  const Section& shstr = sections[shstrndx];
  std::vector<std::string_view> section_names(sections.size());
  std::unordered_map<std::string_view, std::size_t> section_by_name;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const auto name = elf_string(base, shstr, sections[i].name);
    if (!name) return ImageStatus::invalid_image;
    section_names[i] = *name;
    section_by_name.emplace(*name, i);
  }

  out.arch = elf_arch(ident, e_flags);
  out.kind = ModuleImage::Kind::cubin;
  out.code_kind = ModuleImage::Kind::cubin;
  if (check_arch && !cubin_runs_on(out.arch, ArchVariant::plain, cc_major, cc_minor))
    return ImageStatus::no_binary_for_gpu;

  std::size_t symtab = sections.size();
  for (std::size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].type == kShtSymtab) {
      symtab = i;
      break;
    }
  }
  if (symtab == sections.size()) return ImageStatus::ok;  // no symbols: an empty module
  const Section& sym = sections[symtab];
  if (!readable(symtab) || sym.entsize < 24 || !readable(sym.link)) return ImageStatus::invalid_image;
  const Section& strtab = sections[sym.link];
  const u64 nsyms = sym.size / sym.entsize;
  if (nsyms > kMaxElfSymbols) return ImageStatus::invalid_image;
  // Section indexes >= 0xff00 of symbols live in a SHT_SYMTAB_SHNDX table.
  const Section* shndx_table = nullptr;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].type == kShtSymtabShndx && sections[i].link == symtab) {
      if (!readable(i)) return ImageStatus::invalid_image;
      shndx_table = &sections[i];
      break;
    }
  }

  // Names already reported (hash sets: a hostile symbol table can hold millions of entries).
  std::unordered_set<std::string_view> kernel_names, global_names;
  for (u64 si = 1; si < nsyms; ++si) {
    const u8* s = base + sym.offset + si * sym.entsize;
    const u32 name_off = ld32(s);
    const u8 info = s[4], other = s[5];
    u32 shndx = ld16(s + 6);
    const u64 size = ld64(s + 16);
    const unsigned type = info & 0xf;
    if (type != kSttFunc && type != kSttObject && type != kSttCudaObject) continue;
    if (shndx == kShnXindex) {
      if (shndx_table == nullptr || !in_bounds(si * 4, 4, shndx_table->size)) return ImageStatus::invalid_image;
      shndx = ld32(base + shndx_table->offset + si * 4);
    } else if (shndx >= kShnLoReserve) {
      continue;  // absolute or common: not in a section of this module
    }
    if (shndx == kShnUndef) continue;  // defined elsewhere
    if (shndx >= sections.size()) return ImageStatus::invalid_image;
    const auto name = elf_string(base, strtab, name_off);
    if (!name) return ImageStatus::invalid_image;
    if (name->empty()) continue;
    const std::string_view sec = section_names[shndx];

    if (type == kSttFunc) {
      // Kernels carry STO_CUDA_ENTRY; device functions do not (and have no parameter bank).
      const bool entry = (other & kStoCudaEntry) != 0 ||
                         section_by_name.count(std::string(".nv.constant0.") + std::string(*name)) != 0;
      if (!entry) continue;
      if (!kernel_names.insert(*name).second) continue;
      KernelInfo k;
      k.name = std::string(*name);
      const auto info_it = section_by_name.find(std::string(".nv.info.") + k.name);
      if (info_it != section_by_name.end()) {
        if (!readable(info_it->second)) return ImageStatus::invalid_image;
        const Section& is = sections[info_it->second];
        if (!parse_kernel_info(base + is.offset, static_cast<std::size_t>(is.size), k))
          return ImageStatus::invalid_image;
      }
      out.kernels.push_back(std::move(k));
    } else {
      // Module variables: __device__/__managed__ in .nv.global(.init), __constant__ in
      // .nv.constantN (bank 0 holds kernel parameters, never variables).
      const bool global_section =
          sec.starts_with(".nv.global") || (sec.starts_with(".nv.constant") && !sec.starts_with(".nv.constant0"));
      if (!global_section) continue;
      if (!global_names.insert(*name).second) continue;
      out.globals.push_back(GlobalInfo{std::string(*name), static_cast<std::size_t>(size)});
    }
  }
  return ImageStatus::ok;
}

// ============================================================================================
// fatbin
//
// Container header (16 bytes): u32 magic 0xBA55ED50, u16 version (1), u16 header size, u64 size
// of the entries that follow. Each entry header (>= 64 bytes):
//   0x00 u16 kind (1 PTX, 2 ELF; others, e.g. 8 = LTO IR, are not loadable code)
//   0x04 u32 header size            0x08 u64 payload size (padded)
//   0x10 u32 compressed size (0 if not compressed)
//   0x18 u16 minor, u16 major version of the payload format
//   0x1c u32 arch (e.g. 89)
//   0x28 u64 flags: 0x2000 LZ4, 0x8000 Zstandard, 0x100000 arch-specific ("a"), 0x200000 family ("f")
//   0x38 u64 decompressed size
// The payload follows the entry header.
// ============================================================================================

constexpr u32 kFatbinMagic = 0xBA55ED50u;
constexpr u32 kFatbinWrapperMagic = 0x466243B1u;
constexpr u16 kFatbinKindPtx = 1, kFatbinKindElf = 2;
constexpr u64 kFatbinFlagLz4 = 0x2000, kFatbinFlagZstd = 0x8000;
constexpr u64 kFatbinFlagArchSpecific = 0x100000, kFatbinFlagFamily = 0x200000;

struct FatbinEntry {
  u16 kind = 0;
  int arch = 0;
  u64 flags = 0;
  const u8* payload = nullptr;
  u64 payload_size = 0;
  u32 compressed_size = 0;
  u64 decompressed_size = 0;

  ArchVariant variant() const {
    if (flags & kFatbinFlagArchSpecific) return ArchVariant::specific;
    if (flags & kFatbinFlagFamily) return ArchVariant::family;
    return ArchVariant::plain;
  }
};

ImageStatus parse_fatbin(const u8* base, std::size_t size, int cc_major, int cc_minor, ModuleImage& out) {
  if (size != 0 && size < 16) return ImageStatus::invalid_image;
  if (ld32(base) != kFatbinMagic) return ImageStatus::invalid_image;
  const u16 version = ld16(base + 4), header_size = ld16(base + 6);
  const u64 body_size = ld64(base + 8);
  if (version != 1 || header_size < 16 || body_size > kMaxImageBytes) return ImageStatus::invalid_image;
  const u64 total = header_size + body_size;
  if (total > kMaxImageBytes || (size != 0 && total > size)) return ImageStatus::invalid_image;

  std::vector<FatbinEntry> entries;
  for (u64 off = header_size; off < total;) {
    if (entries.size() >= kMaxFatbinEntries || !in_bounds(off, 64, total)) return ImageStatus::invalid_image;
    const u8* e = base + off;
    FatbinEntry entry;
    entry.kind = ld16(e);
    const u32 eh_size = ld32(e + 4);
    entry.payload_size = ld64(e + 8);
    entry.compressed_size = ld32(e + 16);
    entry.arch = static_cast<int>(ld32(e + 28));
    entry.flags = ld64(e + 40);
    entry.decompressed_size = ld64(e + 56);
    if (eh_size < 64 || !in_bounds(off, eh_size, total) || !in_bounds(off + eh_size, entry.payload_size, total))
      return ImageStatus::invalid_image;
    entry.payload = e + eh_size;
    off += eh_size + entry.payload_size;
    if (entry.arch < 0 || entry.arch > 10000) continue;  // not an arch: not loadable
    entries.push_back(entry);
  }

  // Prefer the highest-SM cubin that runs on the device, else the highest PTX it can JIT.
  const FatbinEntry* pick = nullptr;
  for (const auto& kind : {kFatbinKindElf, kFatbinKindPtx}) {
    for (const FatbinEntry& e : entries) {
      if (e.kind != kind) continue;
      const bool fits = kind == kFatbinKindElf ? cubin_runs_on(e.arch, e.variant(), cc_major, cc_minor)
                                               : ptx_jits_for(e.arch, e.variant(), cc_major, cc_minor);
      if (fits && (pick == nullptr || e.arch > pick->arch)) pick = &e;
    }
    if (pick != nullptr) break;
  }
  if (pick == nullptr) return ImageStatus::no_binary_for_gpu;

  const u8* payload = pick->payload;
  std::size_t payload_size = static_cast<std::size_t>(pick->payload_size);
  std::vector<u8> inflated;
  const bool lz4 = pick->flags & kFatbinFlagLz4, zstd_frame = pick->flags & kFatbinFlagZstd;
  if (lz4 || zstd_frame) {
    if (lz4 && zstd_frame) return ImageStatus::invalid_image;
    const u64 csize = pick->compressed_size, dsize = pick->decompressed_size;
    if (csize == 0 || csize > pick->payload_size || dsize == 0 || dsize > kMaxDecompressedBytes)
      return ImageStatus::invalid_image;
    // Neither format can expand a byte into more than this, so a larger claim is a lie and
    // must not cost an allocation.
    const u64 max_ratio = lz4 ? 256 : 32768;
    if (dsize > csize * max_ratio) return ImageStatus::invalid_image;
    inflated.resize(static_cast<std::size_t>(dsize));
    const ImageStatus r = lz4 ? lz4_decompress(payload, static_cast<std::size_t>(csize), inflated)
                              : zstd_decompress(payload, static_cast<std::size_t>(csize), inflated);
    if (r != ImageStatus::ok) return r;
    payload = inflated.data();
    payload_size = inflated.size();
  }

  ImageStatus st;
  if (pick->kind == kFatbinKindElf) {
    st = parse_cubin(payload, payload_size, cc_major, cc_minor, /*check_arch=*/false, out);
  } else {
    // PTX entries are padded with NULs; the text ends at the first one.
    const void* nul = std::memchr(payload, 0, payload_size);
    const std::size_t len = nul ? static_cast<std::size_t>(static_cast<const u8*>(nul) - payload) : payload_size;
    // The entry header's arch and flags already decided that this PTX fits the device.
    ArchVariant ignored = ArchVariant::plain;
    st = PtxParser(std::string_view(reinterpret_cast<const char*>(payload), len), out).run(ignored);
  }
  if (st != ImageStatus::ok) return st;
  out.kind = ModuleImage::Kind::fatbin;
  out.code_kind = pick->kind == kFatbinKindElf ? ModuleImage::Kind::cubin : ModuleImage::Kind::ptx;
  out.arch = pick->arch;
  return ImageStatus::ok;
}

// Compares the leading bytes with a magic number one byte at a time, so that a short
// NUL-terminated string is never read past its terminator.
bool starts_with_magic(const u8* p, std::size_t size, u32 magic) {
  for (int i = 0; i < 4; ++i) {
    if (size != 0 && static_cast<std::size_t>(i) >= size) return false;
    if (p[i] != static_cast<u8>(magic >> (8 * i))) return false;
  }
  return true;
}

ImageStatus parse_any(const u8* p, std::size_t size, int cc_major, int cc_minor, ModuleImage& out) {
  if (starts_with_magic(p, size, 0x464C457Fu)) {  // "\x7fELF"
    if (size == 0) {
      // Unknown size: the image ends where its header tables do, which the checks in
      // parse_cubin establish before anything else is read.
      return parse_cubin(p, kMaxImageBytes, cc_major, cc_minor, true, out);
    }
    return parse_cubin(p, size, cc_major, cc_minor, true, out);
  }
  if (starts_with_magic(p, size, kFatbinMagic)) return parse_fatbin(p, size, cc_major, cc_minor, out);
  if (starts_with_magic(p, size, kFatbinWrapperMagic)) {
    // struct { int magic; int version; const unsigned long long* data; void* filename_or_fatbins; }
    if (size != 0 && size < 16) return ImageStatus::invalid_image;
    const u32 version = ld32(p + 4);
    if (version != 1 && version != 2) return ImageStatus::invalid_image;
    const u8* data = nullptr;
    std::memcpy(&data, p + 8, sizeof data);
    if (data == nullptr || data == p) return ImageStatus::invalid_image;
    if (!starts_with_magic(data, 0, kFatbinMagic)) return ImageStatus::invalid_image;
    return parse_fatbin(data, 0, cc_major, cc_minor, out);
  }
  // Otherwise it can only be PTX: text up to its NUL.
  const std::size_t limit = size != 0 ? size : kMaxImageBytes;
  const void* nul = std::memchr(p, 0, limit);
  if (nul == nullptr) return ImageStatus::invalid_image;
  const auto len = static_cast<std::size_t>(static_cast<const u8*>(nul) - p);
  return parse_ptx(std::string_view(reinterpret_cast<const char*>(p), len), cc_major, cc_minor, out);
}

}  // namespace

ImageStatus parse_module_image(const void* data, std::size_t size, int cc_major, int cc_minor, ModuleImage& out) {
  out = ModuleImage{};
  if (data == nullptr) return ImageStatus::invalid_image;
  ImageStatus st;
  try {
    st = parse_any(static_cast<const u8*>(data), size, cc_major, cc_minor, out);
  } catch (const std::exception&) {
    // Only allocation can throw; bounded sizes make that a sign of a lying header.
    st = ImageStatus::invalid_image;
  }
  if (st != ImageStatus::ok) out = ModuleImage{};
  return st;
}

const char* image_status_name(ImageStatus status) {
  switch (status) {
    case ImageStatus::ok:
      return "ok";
    case ImageStatus::invalid_image:
      return "invalid_image";
    case ImageStatus::invalid_ptx:
      return "invalid_ptx";
    case ImageStatus::no_binary_for_gpu:
      return "no_binary_for_gpu";
    case ImageStatus::unsupported_compression:
      return "unsupported_compression";
  }
  return "unknown";
}

}  // namespace simgpu
