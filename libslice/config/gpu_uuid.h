// A GPU's UUID in the three spellings libslice meets: the driver's 16 bytes, the text NVML and
// libslice print ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", hex digits lowercase), and the suffix
// of a variable's name (NAME_GPU_xxxxxxxx_xxxx_..., since names cannot hold '-'). A UUID names one
// card everywhere, where an ordinal depends on the process's CUDA_VISIBLE_DEVICES.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace slice {

// The driver's 16 bytes as text: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string uuid_text(const std::uint8_t uuid[16]);

// The text of a UUID typed by a user, hex digits and the GPU prefix in either case, as uuid_text
// writes it; nullopt when it is not one.
std::optional<std::string> canonical_gpu_uuid(std::string_view text);

// The UUID a NAME_GPU_<uuid> suffix names ("GPU_516d696d_6770_4075_8000_000000000000"
// -> "GPU-516d696d-6770-4075-8000-000000000000"); nullopt when it is none.
std::optional<std::string> gpu_uuid_of_suffix(std::string_view suffix);

// The suffix that names a GPU by UUID, the inverse of gpu_uuid_of_suffix ("GPU-516d…" -> "GPU_516d…").
std::string gpu_uuid_suffix(std::string_view uuid);

}  // namespace slice
