// The stack of the application's call into libslice, for debug lines. libunwind is loaded only
// when a backtrace is first wanted (libslice.so must not need it at run time); without it, glibc's
// backtrace() is used.
#pragma once

#include <string>

namespace slice::shim {

std::string caller_backtrace();  // one "  #n 0xADDR object(symbol+0xOFF)" line per frame

}  // namespace slice::shim
