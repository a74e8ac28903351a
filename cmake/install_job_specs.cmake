# Installs the job specs (configs/jobs/*.yaml) so that they run as written
# on the installed system. In the source tree a spec names its trainer config
# relative to the checkout (`--config configs/fashion_mnist_mlp.yaml`, run
# from the checkout); installed, the job runs in the submitter's folder, so
# such paths become absolute under the prefix the install uses (known only
# now: `cmake --install --prefix`, or /usr for the .deb). Programs that are
# not on PATH once installed (the test worker, in libexec) get their full
# path too.
#
# Run by `cmake --install` (install(SCRIPT)); set before it:
#   ELASTRUN_JOB_SPECS       the source files
#   ELASTRUN_JOB_SPECS_TMP   a folder of the build tree for the rewritten copies
#   ELASTRUN_DATADIR         share dir relative to the prefix (GNUInstallDirs)
#   ELASTRUN_LIBEXECDIR      libexec dir relative to the prefix
#   ELASTRUN_LIBEXEC_PROGRAMS programs installed in ELASTRUN_LIBEXECDIR/elastrun

function(absolute dir out_var)
  if(IS_ABSOLUTE "${dir}")
    set(${out_var} "${dir}" PARENT_SCOPE)
  else()
    set(${out_var} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

absolute("${ELASTRUN_DATADIR}" datadir)
absolute("${ELASTRUN_LIBEXECDIR}" libexecdir)
file(MAKE_DIRECTORY "${ELASTRUN_JOB_SPECS_TMP}")
set(out_files "")
foreach(spec IN LISTS ELASTRUN_JOB_SPECS)
  file(READ "${spec}" text)
  # "configs/..." as a word of its own (not inside another path).
  string(REGEX REPLACE "(^|[^A-Za-z0-9_./-])configs/" "\\1${datadir}/elastrun/configs/"
         text "${text}")
  foreach(program IN LISTS ELASTRUN_LIBEXEC_PROGRAMS)
    string(REGEX REPLACE "(^|[^A-Za-z0-9_./-])${program}([^A-Za-z0-9_.-]|$)"
           "\\1${libexecdir}/elastrun/${program}\\2" text "${text}")
  endforeach()
  get_filename_component(name "${spec}" NAME)
  file(WRITE "${ELASTRUN_JOB_SPECS_TMP}/${name}" "${text}")
  list(APPEND out_files "${ELASTRUN_JOB_SPECS_TMP}/${name}")
endforeach()
file(INSTALL ${out_files} DESTINATION "${datadir}/elastrun/configs/jobs"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
