#include "deepbind.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "keep_errno.h"

namespace slice::shim {
namespace {

#if defined(__x86_64__)
constexpr unsigned kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr unsigned kMachine = EM_AARCH64;
#endif
constexpr int kMaxObjects = 256;  // a plugin's whole tree, with room to spare
constexpr std::size_t kMaxDynamic = 4096;

bool names_driver(const std::string& needed) {
  return needed.rfind("libcuda.so", 0) == 0 || needed.rfind("libnvidia-ml.so", 0) == 0;
}

bool read_at(int fd, void* out, std::size_t size, std::uint64_t offset) {
  return pread(fd, out, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
}

// What a library file says of its dependencies: DT_NEEDED, and where it asks the loader to look.
struct Dynamic {
  std::vector<std::string> needed;
  std::string runpath;     // DT_RUNPATH, else DT_RPATH
  bool old_rpath = false;  // it is DT_RPATH: searched before LD_LIBRARY_PATH, not after
};

bool read_dynamic(const std::string& path, Dynamic& out) {
  // O_NONBLOCK: a FIFO by a library's name must not block the program's dlopen; only a regular
  // file is read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  Elf64_Ehdr eh{};
  if (!read_at(fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != kMachine || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum > 64)
    return false;
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!read_at(fd, ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff)) return false;
  // Addresses in the dynamic section are virtual: mapped to file offsets through the PT_LOADs.
  const auto offset_of = [&](std::uint64_t vaddr, std::uint64_t& offset) {
    for (const Elf64_Phdr& p : ph)
      if (p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr < p.p_vaddr + p.p_filesz) {
        offset = vaddr - p.p_vaddr + p.p_offset;
        return true;
      }
    return false;
  };
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_DYNAMIC) continue;
    std::vector<Elf64_Dyn> dyn(std::min<std::size_t>(p.p_filesz / sizeof(Elf64_Dyn), kMaxDynamic));
    if (dyn.empty() || !read_at(fd, dyn.data(), dyn.size() * sizeof(Elf64_Dyn), p.p_offset)) return false;
    std::uint64_t strtab = 0, strsz = 0;
    for (const Elf64_Dyn& d : dyn) {
      if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
      if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    }
    std::uint64_t strings_at = 0;
    if (strsz == 0 || strsz > (16u << 20) || !offset_of(strtab, strings_at)) return false;
    std::string strings(strsz, '\0');
    if (!read_at(fd, strings.data(), strsz, strings_at)) return false;
    const auto string_at = [&](std::uint64_t at) { return at < strsz ? std::string(strings.c_str() + at) : ""; };
    std::string rpath;
    for (const Elf64_Dyn& d : dyn) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED) out.needed.push_back(string_at(d.d_un.d_val));
      if (d.d_tag == DT_RUNPATH) out.runpath = string_at(d.d_un.d_val);
      if (d.d_tag == DT_RPATH) rpath = string_at(d.d_un.d_val);
    }
    if (out.runpath.empty() && !rpath.empty()) {
      out.runpath = rpath;
      out.old_rpath = true;
    }
    return true;
  }
  return true;  // no dynamic section: needs nothing
}

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

void split_into(const std::string& list, const std::string& origin, std::vector<std::string>& out) {
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t end = std::min(list.find(':', at), list.size());
    std::string dir = list.substr(at, end - at);
    for (const char* o : {"$ORIGIN", "${ORIGIN}"})
      for (std::size_t p = dir.find(o); p != std::string::npos; p = dir.find(o)) dir.replace(p, std::strlen(o), origin);
    if (!dir.empty()) out.push_back(dir);
    at = end + 1;
  }
}

// The loaded object of this name, if the process has one (the loader reuses it).
int find_loaded(dl_phdr_info* info, std::size_t, void* data) {
  auto* want = static_cast<std::pair<std::string, std::string>*>(data);
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* base = std::strrchr(name, '/');
  if (want->first == (base != nullptr ? base + 1 : name)) {
    want->second = name;
    return 1;
  }
  return 0;
}

// Where the loader would find `name` needed by an object whose search folders are `dirs`: as far as
// libslice can tell (a folder only the loader's cache knows is not searched).
std::string locate(const std::string& name, const std::vector<std::string>& dirs) {
  if (name.find('/') != std::string::npos) return name;
  std::pair<std::string, std::string> loaded{name, ""};
  dl_iterate_phdr(find_loaded, &loaded);
  if (!loaded.second.empty()) return loaded.second;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + name;
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return "";
}

// The folders of an ld.so.conf file (and of the files it includes), as ldconfig reads them into the
// loader's cache: a library found only through the cache (/usr/local/cuda/lib64, say) is found here.
void conf_folders(const std::string& file, std::vector<std::string>& out, int depth) {
  if (depth > 4) return;
  std::string text;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return;
  char buffer[4096];
  for (ssize_t n; text.size() < (1u << 20) && (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  ::close(fd);
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string line = text.substr(at, end - at);
    at = end + 1;
    line = line.substr(0, line.find('#'));
    const auto b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    line = line.substr(b, line.find_last_not_of(" \t") - b + 1);
    if (line.rfind("include", 0) == 0 && line.size() > 7 && (line[7] == ' ' || line[7] == '\t')) {
      std::string pattern = line.substr(line.find_first_not_of(" \t", 7));
      if (!pattern.empty() && pattern[0] != '/') pattern = folder_of(file) + "/" + pattern;
      glob_t g{};
      if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i) conf_folders(g.gl_pathv[i], out, depth + 1);
      globfree(&g);
    } else if (line[0] == '/') {
      out.push_back(line);
    }
  }
}

// The loader's own folders after an object's: those of its cache (ld.so.conf), the C library's
// (its multiarch folder), the defaults. LD_LIBRARY_PATH comes before them (search_folders).
std::vector<std::string> system_folders() {
  std::vector<std::string> dirs;
  conf_folders("/etc/ld.so.conf", dirs, 0);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&::open), &info) != 0 && info.dli_fname != nullptr) {
    dirs.push_back(folder_of(info.dli_fname));
    dirs.push_back("/usr" + folder_of(info.dli_fname));
  }
  for (const char* d : {"/lib", "/usr/lib", "/lib64", "/usr/lib64"}) dirs.push_back(d);
  return dirs;
}

// Where the loader looks for what `object` needs, in its order: DT_RPATH, LD_LIBRARY_PATH,
// DT_RUNPATH, then the system's folders.
std::vector<std::string> search_folders(const Dynamic& object, const std::string& origin,
                                        const std::vector<std::string>& system) {
  std::vector<std::string> dirs, own;
  split_into(object.runpath, origin, own);
  if (object.old_rpath) dirs = own;
  if (const char* env = std::getenv("LD_LIBRARY_PATH")) split_into(env, ".", dirs);
  if (!object.old_rpath) dirs.insert(dirs.end(), own.begin(), own.end());
  dirs.insert(dirs.end(), system.begin(), system.end());
  return dirs;
}

// The file of the object that `address` lies in; the program's own through /proc (dladdr gives
// its argv[0], which may be relative, or rewritten since).
std::string file_of(const void* address) {
  Dl_info info{};
  struct link_map* map = nullptr;
  if (address == nullptr || dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) return "";
  if (map != nullptr && (map->l_name == nullptr || map->l_name[0] == '\0')) return "/proc/self/exe";
  return info.dli_fname != nullptr ? info.dli_fname : "";
}

}  // namespace

bool deepbind_reaches_driver(const char* file, const void* caller) noexcept {
  if (file == nullptr) return false;  // no file: the program itself, already bound
  const KeepErrno keep;
  try {
    const std::vector<std::string> system = system_folders();
    // The caller's own RUNPATH/RPATH finds the file it names.
    Dynamic caller_dynamic;
    const std::string caller_file = file_of(caller);
    if (!caller_file.empty()) read_dynamic(caller_file, caller_dynamic);
    const std::vector<std::string> first_dirs = search_folders(
        caller_dynamic, caller_file == "/proc/self/exe" ? folder_of(real_path(caller_file)) : folder_of(caller_file),
        system);
    const char* base = std::strrchr(file, '/');
    if (names_driver(base != nullptr ? base + 1 : file)) return true;
    std::vector<std::string> todo{locate(file, first_dirs)}, seen;
    while (!todo.empty() && static_cast<int>(seen.size()) < kMaxObjects) {
      const std::string path = todo.back();
      todo.pop_back();
      if (path.empty() || std::find(seen.begin(), seen.end(), path) != seen.end()) continue;
      seen.push_back(path);
      Dynamic d;
      if (!read_dynamic(path, d)) continue;
      const std::vector<std::string> dirs = search_folders(d, folder_of(path), system);
      for (const std::string& needed : d.needed) {
        if (names_driver(needed)) return true;
        todo.push_back(locate(needed, dirs));
      }
    }
  } catch (...) {
  }
  return false;
}

}  // namespace slice::shim
