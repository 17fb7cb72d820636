/* A program that needs its own newer libstdc++.so.6 (tests/shim/newer_cxx): it must start under
   libslice as it does without it. A preloaded library that needs the system's libstdc++.so.6 loads
   that one first, and the program's then fails: "version `GLIBCXX_3.4.99' not found". */
#include <stdio.h>

int newer_cxx_marker(void);

int main(void) {
  if (newer_cxx_marker() != 42) return 1;
  puts("started with its own libstdc++.so.6");
  return 0;
}
