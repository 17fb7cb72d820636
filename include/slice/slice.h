/* libslice's interface for the programs it serves: a process learns its own slice (its tenant, its
   memory cap and usage, its compute share) from the libslice.so preloaded in front of it.

   libslice.so is preloaded, never linked: look the functions up at run time, so that the same
   program runs with and without libslice:

     #include <dlfcn.h>
     #include <slice/slice.h>
     slice_get_info_fn get = (slice_get_info_fn)dlsym(RTLD_DEFAULT, "slice_get_info");
     slice_info info = {.size = sizeof info};
     if (get != NULL && get(0, &info) == SLICE_OK) printf("cap %llu\n", (unsigned long long)info.memory_limit);

   A null answer from dlsym means no libslice in this process. The functions are versioned
   (LIBSLICE_0.1); a later version only adds fields at the end of slice_info, and fills no more of
   it than `size` says. */
#ifndef SLICE_SLICE_H
#define SLICE_SLICE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* slice_get_info's answers. */
#define SLICE_OK 0
#define SLICE_ERROR_ARGUMENT (-1) /* info is null, or info->size is smaller than version 1's */
#define SLICE_ERROR_NOT_RUNNING                                                                 \
  (-2)                          /* libslice is not running here: the driver not initialised yet \
                                   (call cuInit first), SLICE_DISABLE, or it failed closed */
#define SLICE_ERROR_DEVICE (-3) /* no such device in this process */

#define SLICE_NO_LIMIT UINT64_MAX /* memory_limit when the tenant has no cap on the device */

typedef struct slice_info {
  uint32_t size; /* set by the caller: sizeof(slice_info) */
  uint32_t reserved;
  char tenant[64];        /* the tenant's name, NUL-terminated */
  uint64_t memory_limit;  /* bytes the tenant may hold on the device (an administrator's policy
                             applied); SLICE_NO_LIMIT: no cap */
  uint64_t memory_used;   /* bytes the tenant holds there now, all its processes together */
  uint64_t memory_mine;   /* of them, this process's */
  uint32_t compute_share; /* percent of the device's time when others want it too */
  uint32_t compute_limit; /* percent of the device's time at most, even alone */
  int32_t priority;       /* 0: low, 1: normal, 2: high */
  uint32_t reserved2;
} slice_info;

/* libslice's version, e.g. "0.1.0". */
const char* slice_version(void);
typedef const char* (*slice_version_fn)(void);

/* Fills *info for CUDA device `device`, numbered as this process numbers devices (after
   CUDA_VISIBLE_DEVICES). SLICE_OK, or one of the SLICE_ERROR_* above. Any thread, any time. */
int slice_get_info(int device, slice_info* info);
typedef int (*slice_get_info_fn)(int device, slice_info* info);

#ifdef __cplusplus
}
#endif

#endif /* SLICE_SLICE_H */
