# The .deb: `cpack -G DEB` in a build folder (after the build) writes
# elastrun_<version>_<arch>.deb, prefix /usr, with the Depends that
# dpkg-shlibdeps finds for the programs (Debian's dpkg-dev).

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME elastrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "elastrun")
set(CPACK_PACKAGE_CONTACT "elastrun developers <elastrun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "elastic, fault-tolerant distributed PyTorch training from C++")
set(CPACK_PACKAGE_DESCRIPTION
    "elastrun launches and keeps alive elastic distributed PyTorch training:\
 `elastrun run` (torchrun's replacement, on one node or several), the rendezvous service\
 elastrun-rendezvous, the node daemon elastrund and the job commands of\
 elastrun, the LibTorch DDP trainer elastrun-train and the C++ worker library\
 (find_package(elastrun)).")
# Installed with DESTDIR under /usr: install rules that compute paths at
# install time (the job specs) and absolute destinations (/etc) come out
# right in the package.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Python workers import the helper with python3; Debian's libtorch is ~7x
# faster with OpenBLAS than with the reference BLAS (DESIGN.md).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3, libopenblas0-openmp")
# The trainer's data; PyTorch for Python workers; what find_package(elastrun)
# needs to build a C++ worker.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "dataset-fashion-mnist, python3-torch, bash-completion, cmake, libtorch-dev, libabsl-dev, nlohmann-json3-dev")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Every file under /etc is a conffile (cmake/deb_conffiles.cmake; CPACK_*
# variables are the ones CPack passes on to it).
set(CPACK_ELASTRUN_CONFFILES ${CMAKE_BINARY_DIR}/cpack/conffiles)
file(WRITE ${CPACK_ELASTRUN_CONFFILES} "")
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/deb_conffiles.cmake)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CPACK_ELASTRUN_CONFFILES})

include(CPack)
