// A library of first_open_probe's: its constructor tells the probe it runs (the loader's lock held),
// waits a moment for the probe's own first driver call to start opening the driver, then calls the
// driver itself.
#include <dlfcn.h>
#include <unistd.h>

extern "C" {
__attribute__((visibility("default"))) int first_open_constructor_rc = -1;

__attribute__((constructor)) static void call_the_driver_while_loaded() {
  auto in_constructor = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "first_open_in_constructor"));
  auto count = reinterpret_cast<int (*)(int*)>(dlsym(RTLD_DEFAULT, "cuDeviceGetCount"));
  if (in_constructor == nullptr || count == nullptr) return;
  in_constructor();
  usleep(200'000);
  int n = 0;
  first_open_constructor_rc = count(&n);
}
}
