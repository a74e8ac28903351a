# Man pages generated at build time from each program's --help
# (cmake/make_man.cmake), so they cannot disagree with the binary.
#
# elastrun_man_page(TARGET SUMMARY [SUBCOMMANDS]): builds
# <build>/man/man1/TARGET.1.gz with the `man` target (part of `all`) and
# installs it to share/man/man1. SUBCOMMANDS: one page holds every command's
# --help too. Needs ELASTRUN_PROGRAMS (the pages SEE ALSO names).

find_program(ELASTRUN_GZIP gzip)
if(NOT TARGET man)
  add_custom_target(man ALL)
endif()

function(elastrun_man_page target summary)
  cmake_parse_arguments(ARG "SUBCOMMANDS" "" "" ${ARGN})
  set(see_also "")
  foreach(other IN LISTS ELASTRUN_PROGRAMS)
    if(NOT other STREQUAL target)
      list(APPEND see_also "${other}(1)")
    endif()
  endforeach()
  list(JOIN see_also ", " see_also)
  set(page ${CMAKE_BINARY_DIR}/man/man1/${target}.1)
  set(output ${page})
  set(gzip_arg "")
  if(ELASTRUN_GZIP)
    set(output ${page}.gz)
    set(gzip_arg -DGZIP=${ELASTRUN_GZIP})
  endif()
  add_custom_command(OUTPUT ${output}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man/man1
    COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:${target}> -DNAME=${target}
            -DSUMMARY=${summary} -DOUTPUT=${page} -DSEE_ALSO=${see_also}
            -DSUBCOMMANDS=${ARG_SUBCOMMANDS} ${gzip_arg}
            -P ${PROJECT_SOURCE_DIR}/cmake/make_man.cmake
    DEPENDS ${target} ${PROJECT_SOURCE_DIR}/cmake/make_man.cmake
    COMMENT "Man page ${target}(1) from ${target} --help"
    VERBATIM)
  add_custom_target(man_${target} DEPENDS ${output})
  add_dependencies(man man_${target})
  install(FILES ${output} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endfunction()
