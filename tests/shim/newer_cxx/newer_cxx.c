/* A stand-in for the libstdc++.so.6 a program carries of its own, newer than the system's (a conda
   environment's, found through the program's RUNPATH): the same soname, with a symbol version the
   system's does not have. */
int newer_cxx_marker(void) { return 42; }
