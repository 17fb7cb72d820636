# Runs at install time (install(CODE) in packaging/CMakeLists.txt): installs libslice's systemd units
# from examples/systemd, their /usr/bin/ and /usr/share/doc/libslice/ paths rewritten to where this
# install puts the tools and the documentation (the same paths for the Debian package, whose prefix
# is /usr). Set before including: SLICE_UNIT_SOURCES, SLICE_UNIT_DIR, SLICE_UNIT_BINDIR,
# SLICE_UNIT_DOCDIR (each relative to the prefix or absolute) and SLICE_UNIT_STAGING (a build folder).
foreach(v SLICE_UNIT_DIR SLICE_UNIT_BINDIR SLICE_UNIT_DOCDIR)
  if(IS_ABSOLUTE "${${v}}")
    set(_${v} "${${v}}")
  else()
    set(_${v} "${CMAKE_INSTALL_PREFIX}/${${v}}")
  endif()
endforeach()
# One staging folder per destination, so that two installs at once cannot mix their paths.
string(MD5 _key "$ENV{DESTDIR}|${CMAKE_INSTALL_PREFIX}")
set(_stage "${SLICE_UNIT_STAGING}-${_key}")
file(MAKE_DIRECTORY "${_stage}")
set(_staged)
foreach(_unit IN LISTS SLICE_UNIT_SOURCES)
  get_filename_component(_name "${_unit}" NAME)
  file(READ "${_unit}" _text)
  string(REPLACE "/usr/bin/" "${_SLICE_UNIT_BINDIR}/" _text "${_text}")
  string(REPLACE "/usr/share/doc/libslice/" "${_SLICE_UNIT_DOCDIR}/" _text "${_text}")
  file(WRITE "${_stage}/${_name}" "${_text}")
  list(APPEND _staged "${_stage}/${_name}")
endforeach()
# file(INSTALL) adds DESTDIR and records the files in install_manifest.txt.
file(INSTALL DESTINATION "${_SLICE_UNIT_DIR}" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ FILES ${_staged})
file(REMOVE_RECURSE "${_stage}")
