# Writes a man page (section 1) from a binary's own --help and --version, so
# the page says what the binary does, never what it did a release ago.
#
#   cmake -DBINARY=path -DNAME=elastrun -DSUMMARY="one line" -DOUTPUT=x.1
#         -DSEE_ALSO="elastrund(1), ..." [-DSUBCOMMANDS=ON] [-DGZIP=gzip]
#         -P make_man.cmake
#
# The help text goes in verbatim (no fill), escaped for roff. With
# SUBCOMMANDS, every command listed under "Commands:" of `BINARY --help`
# gets a subsection with `BINARY COMMAND --help`, so one page holds them all.

cmake_policy(VERSION 3.22)

foreach(var BINARY NAME SUMMARY OUTPUT SEE_ALSO)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "make_man.cmake: -D${var}= is required")
  endif()
endforeach()

function(run_help out_var)
  execute_process(COMMAND ${BINARY} ${ARGN}
    OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_man.cmake: '${BINARY} ${ARGN}' failed (${rc}): ${err}")
  endif()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# Text as roff with no filling: a backslash as \e, '-' as \- (an ASCII
# minus, so a flag copied from the page works), and a line that starts with
# '.' or '\'' (a roff request) guarded by a zero-width \&.
function(roff_verbatim out_var text)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REPLACE "-" "\\-" text "${text}")
  string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
  string(REGEX REPLACE "\n+$" "" text "${text}")
  set(${out_var} ".nf\n${text}\n.fi\n" PARENT_SCOPE)
endfunction()

run_help(help --help)
run_help(version --version)
string(STRIP "${version}" version)
# "elastrun 0.2.0 (commit abc1234)" -> "0.2.0"
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" number "${version}")
string(TOUPPER "${NAME}" upper)

roff_verbatim(body "${help}")
set(page ".TH ${upper} 1 \"\" \"${NAME} ${number}\" \"User Commands\"\n")
string(APPEND page ".SH NAME\n${NAME} \\- ${SUMMARY}\n")
string(APPEND page ".SH DESCRIPTION\n${body}")

if(SUBCOMMANDS)
  # The "Commands:" section: "  name   summary" lines, until a blank line.
  string(REGEX MATCH "\nCommands:\n([^\n]+\n)+" section "${help}")
  string(REGEX MATCHALL "\n  [a-z][a-z-]*" names "${section}")
  string(APPEND page ".SH COMMANDS\n")
  foreach(name IN LISTS names)
    string(STRIP "${name}" name)
    if(name STREQUAL "help")
      continue()
    endif()
    run_help(sub ${name} --help)
    roff_verbatim(sub_body "${sub}")
    string(APPEND page ".SS ${NAME} ${name}\n${sub_body}")
  endforeach()
endif()

string(APPEND page ".SH VERSION\n${version}\n")
string(APPEND page ".SH SEE ALSO\n${SEE_ALSO}\n")
file(WRITE "${OUTPUT}" "${page}")
# Debian's policy: pages compressed with gzip -9n (no name or time stamp, so
# the same help gives the same bytes).
if(GZIP)
  execute_process(COMMAND ${GZIP} -9nf "${OUTPUT}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "make_man.cmake: ${GZIP} -9nf ${OUTPUT} failed (${rc})")
  endif()
endif()
