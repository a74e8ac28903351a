# What `cmake --install` puts where (GNUInstallDirs, relative to the prefix),
# and the .deb built from it (cmake/cpack.cmake):
#
#   bin/                      elastrun, elastrund, elastrun-rendezvous,
#                             elastrun-train (torch builds)
#   libexec/elastrun/         elastrun-test-worker (torch builds with tests):
#                             the C++ worker the test_worker job spec runs
#   lib/                      the worker library (static) and
#   lib/cmake/elastrun/       its package config: find_package(elastrun)
#   include/elastrun/worker/  the worker library's headers
#   share/elastrun/configs/   trainer configs; jobs/: job specs whose paths
#                             point into the installation
#   share/elastrun/python/    the workers' Python helper (`import elastrun`),
#                             found by the launcher as bin/../share/elastrun/python
#   share/man/man1/           a page per program, from its --help
#   share/bash-completion/completions/  completion for the three programs
#
# Included by the top-level CMakeLists.txt after every component.

include(CMakePackageConfigHelpers)

# --- programs ---------------------------------------------------------------
set(ELASTRUN_PROGRAMS elastrun elastrund elastrun-rendezvous)
if(TARGET elastrun-train)
  list(APPEND ELASTRUN_PROGRAMS elastrun-train)
endif()
install(TARGETS ${ELASTRUN_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The test worker is not a user command: libexec, named by full path in the
# installed job spec.
set(ELASTRUN_LIBEXEC_PROGRAMS "")
if(TARGET elastrun-test-worker)
  install(TARGETS elastrun-test-worker
          RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/elastrun)
  list(APPEND ELASTRUN_LIBEXEC_PROGRAMS elastrun-test-worker)
endif()

# --- the worker library and find_package(elastrun) --------------------------
# elastrun::worker_env (torch-free: env contract, error files, RunRecorded,
# progress, standby, snapshot area) and, with torch, elastrun::worker (adds
# the c10d process group). elastrun_common is exported only because
# worker_env's static archive needs it at link time.
set(ELASTRUN_EXPORTED elastrun_common elastrun_worker_env)
set_target_properties(elastrun_common PROPERTIES EXPORT_NAME common)
set_target_properties(elastrun_worker_env PROPERTIES EXPORT_NAME worker_env)
set(ELASTRUN_WORKER_HEADERS env.h error_file.h progress.h record.h snapshot_area.h standby.h)
if(TARGET elastrun_worker)
  list(APPEND ELASTRUN_EXPORTED elastrun_worker)
  set_target_properties(elastrun_worker PROPERTIES EXPORT_NAME worker)
  list(APPEND ELASTRUN_WORKER_HEADERS process_group.h torch_pch.h)
endif()
install(TARGETS ${ELASTRUN_EXPORTED} EXPORT elastrunTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/elastrun)
list(TRANSFORM ELASTRUN_WORKER_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/worker/)
install(FILES ${ELASTRUN_WORKER_HEADERS}
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/elastrun/worker)

set(ELASTRUN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/elastrun)
install(EXPORT elastrunTargets NAMESPACE elastrun:: DESTINATION ${ELASTRUN_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/elastrunConfig.cmake.in
  ${CMAKE_BINARY_DIR}/cmake/elastrunConfig.cmake
  INSTALL_DESTINATION ${ELASTRUN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/elastrunConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/cmake/elastrunConfig.cmake
              ${CMAKE_BINARY_DIR}/cmake/elastrunConfigVersion.cmake
        DESTINATION ${ELASTRUN_CMAKE_DIR})

# --- configs, job specs, the Python helper ----------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/elastrun/configs
        FILES_MATCHING PATTERN "*.yaml" PATTERN "jobs" EXCLUDE)
# A job spec is installed only with the program it runs.
set(ELASTRUN_JOB_SPECS ${PROJECT_SOURCE_DIR}/configs/jobs/hello.yaml)
if(TARGET elastrun-train)
  list(APPEND ELASTRUN_JOB_SPECS ${PROJECT_SOURCE_DIR}/configs/jobs/fashion_mnist_mlp.yaml)
endif()
if(TARGET elastrun-test-worker)
  list(APPEND ELASTRUN_JOB_SPECS ${PROJECT_SOURCE_DIR}/configs/jobs/test_worker.yaml)
endif()
install(CODE "
  set(ELASTRUN_JOB_SPECS \"${ELASTRUN_JOB_SPECS}\")
  set(ELASTRUN_JOB_SPECS_TMP \"${CMAKE_BINARY_DIR}/install_job_specs\")
  set(ELASTRUN_DATADIR \"${CMAKE_INSTALL_DATADIR}\")
  set(ELASTRUN_LIBEXECDIR \"${CMAKE_INSTALL_LIBEXECDIR}\")
  set(ELASTRUN_LIBEXEC_PROGRAMS \"${ELASTRUN_LIBEXEC_PROGRAMS}\")")
install(SCRIPT ${PROJECT_SOURCE_DIR}/cmake/install_job_specs.cmake)

# The launcher looks for the helper at <its bin>/../share/elastrun/python
# (FindPythonHelperDir), which is where this puts it.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/elastrun
        DESTINATION ${CMAKE_INSTALL_DATADIR}/elastrun/python
        FILES_MATCHING PATTERN "*.py")

# --- man pages and completion -----------------------------------------------
include(${PROJECT_SOURCE_DIR}/cmake/man.cmake)
elastrun_man_page(elastrun "elastic distributed PyTorch training: run a worker group, submit and watch jobs" SUBCOMMANDS)
elastrun_man_page(elastrund "the elastrun node daemon: runs and supervises a job's workers on this node")
elastrun_man_page(elastrun-rendezvous "the elastrun rendezvous service: nodes, jobs, rounds, barriers")
if(TARGET elastrun-train)
  elastrun_man_page(elastrun-train "the elastrun LibTorch DDP trainer")
endif()

foreach(program elastrun elastrund elastrun-rendezvous)
  install(FILES ${PROJECT_SOURCE_DIR}/scripts/completion/elastrun
          DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
          RENAME ${program})
endforeach()

install(FILES ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

include(${PROJECT_SOURCE_DIR}/cmake/cpack.cmake)
