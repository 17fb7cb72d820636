# Writes a short manual page from a tool's own --help text, gzipped for installing (cmake -P).
# The page says nothing the tool does not say itself: NAME from SUMMARY, then the help verbatim.
#   -DTOOL=path -DNAME=slice-run -DSECTION=1 -DSUMMARY="..." -DVERSION=0.1.0 -DGZIP=path -DOUT=file.gz
#   -DHELP_ARGS=--help             the arguments that print the help (default --help)
#   -DMORE_ARGS=--help-text        optional: a second text, printed under MORE_TITLE
#   -DSUBCOMMANDS=ON               also each subcommand's "TOOL SUB --help", the subcommands being
#                                  the words indented by two spaces under "subcommands:"
#   -DSEE_ALSO="slicectl(1), ..."  the SEE ALSO line
foreach(v TOOL NAME SECTION SUMMARY VERSION GZIP OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "man_page.cmake: ${v} is not set")
  endif()
endforeach()
if(NOT DEFINED HELP_ARGS)
  set(HELP_ARGS --help)
endif()

# The text a run of the tool prints; a failure stops the page, unless OPTIONAL (then "" and a warning).
function(run_tool out_var)
  cmake_parse_arguments(R "OPTIONAL" "" "" ${ARGN})
  execute_process(COMMAND ${TOOL} ${R_UNPARSED_ARGUMENTS} OUTPUT_VARIABLE text ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR text STREQUAL "")
    set(text "")
    if(R_OPTIONAL)
      message(WARNING "man_page.cmake: '${TOOL} ${R_UNPARSED_ARGUMENTS}' failed (${rc}), left out: ${err}")
    else()
      message(FATAL_ERROR "man_page.cmake: '${TOOL} ${R_UNPARSED_ARGUMENTS}' failed (${rc}): ${err}")
    endif()
  endif()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# Text as it is, in no-fill mode: backslashes and minus signs escaped, and a line that starts with
# a control character (. or ') protected with \&.
function(verbatim out_var text)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REPLACE "-" "\\-" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  string(REGEX REPLACE "\n+$" "" text "${text}")
  set(${out_var} ".nf\n${text}\n.fi\n" PARENT_SCOPE)
endfunction()

string(TOUPPER "${NAME}" title)
string(REPLACE "-" "\\-" name_escaped "${NAME}")
set(page ".\\\" Generated from `${NAME} ${HELP_ARGS}` by packaging/man_page.cmake.\n")
string(APPEND page ".TH \"${title}\" \"${SECTION}\" \"\" \"libslice ${VERSION}\" \"libslice\"\n")
string(APPEND page ".SH NAME\n${name_escaped} \\- ${SUMMARY}\n.SH DESCRIPTION\n")
run_tool(help ${HELP_ARGS})
verbatim(block "${help}")
string(APPEND page "${block}")
if(DEFINED MORE_ARGS)
  run_tool(more ${MORE_ARGS})
  string(TOUPPER "${MORE_TITLE}" more_title)
  verbatim(block "${more}")
  string(APPEND page ".SH ${more_title}\n${block}")
endif()
if(SUBCOMMANDS)
  string(REGEX MATCH "\nsubcommands:\n(.*)" list "${help}")
  string(FIND "${CMAKE_MATCH_1}" "\n\n" end)  # the list ends at the first blank line
  string(SUBSTRING "${CMAKE_MATCH_1}" 0 ${end} list)
  string(REGEX MATCHALL "\n  [a-z][a-z-]*" names "\n${list}")
  string(APPEND page ".SH SUBCOMMANDS\n")
  foreach(sub IN LISTS names)
    string(STRIP "${sub}" sub)
    run_tool(sub_help ${sub} --help OPTIONAL)
    if(NOT sub_help STREQUAL "")
      verbatim(block "${sub_help}")
      string(APPEND page ".SS ${sub}\n${block}")
    endif()
  endforeach()
endif()
if(DEFINED SEE_ALSO)
  string(REPLACE "-" "\\-" see_also "${SEE_ALSO}")
  string(APPEND page ".SH SEE ALSO\n${see_also}\n")
endif()

get_filename_component(dir "${OUT}" DIRECTORY)
get_filename_component(page_name "${OUT}" NAME_WLE)
file(MAKE_DIRECTORY "${dir}")
file(WRITE "${dir}/${page_name}" "${page}")
# -n: no name or time stamp in the header, so the file depends on its text alone; -9 as Debian wants.
execute_process(COMMAND ${GZIP} -9nf "${dir}/${page_name}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man_page.cmake: gzip failed on ${dir}/${page_name}")
endif()
