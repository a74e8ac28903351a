# CPack pre-build script: every file the package installs under /etc is a
# conffile (what debhelper's dh_installdeb does), so an upgrade keeps the
# administrator's edits and `apt purge` removes them. Writes the list to
# CPACK_ELASTRUN_CONFFILES, which CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA names; an
# empty list when nothing is under /etc.
file(GLOB_RECURSE etc_files LIST_DIRECTORIES false
     RELATIVE "${CPACK_TEMPORARY_DIRECTORY}" "${CPACK_TEMPORARY_DIRECTORY}/etc/*")
list(SORT etc_files)
set(text "")
foreach(f IN LISTS etc_files)
  string(APPEND text "/${f}\n")
endforeach()
file(WRITE "${CPACK_ELASTRUN_CONFFILES}" "${text}")
