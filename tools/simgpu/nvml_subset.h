// NVML's types now live in include/slice/nvml_subset.h, shared with libslice's NVML hooks.
#pragma once
#include "../../include/slice/nvml_subset.h"
