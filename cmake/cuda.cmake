# ELASTRUN_WITH_CUDA: the worker library's NCCL group (and the trainer's
# CUDA path). Included after find_package(Torch); sets
#   ELASTRUN_WITH_CUDA        ON/OFF (cache; defaults to what LibTorch has)
#   ELASTRUN_BUILD_FEATURES   "CUDA off" or "CUDA 12.8, NCCL on", for --version
#
# LibTorch tells both through its exported targets, the same in Debian's and
# pip's TorchConfig: a CUDA LibTorch has the torch_cuda target, and c10d was
# built with NCCL when torch_cuda passes USE_C10D_NCCL to its users (which is
# also what makes ProcessGroupNCCL.hpp declare anything).

set(_elastrun_torch_cuda OFF)
set(_elastrun_torch_nccl OFF)
set(_elastrun_cuda_version "")
if(ELASTRUN_WITH_TORCH AND TARGET torch_cuda)
  set(_elastrun_torch_cuda ON)
  get_target_property(_elastrun_cuda_defs torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  if(_elastrun_cuda_defs AND "USE_C10D_NCCL" IN_LIST _elastrun_cuda_defs)
    set(_elastrun_torch_nccl ON)
  endif()
  # Caffe2's cuda.cmake finds the toolkit with FindCUDAToolkit (LibTorch 2.x)
  # or the older FindCUDA (1.x).
  if(CUDAToolkit_VERSION)
    set(_elastrun_cuda_version "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
  elseif(CUDA_VERSION)
    set(_elastrun_cuda_version "${CUDA_VERSION}")
  endif()
endif()

if(_elastrun_torch_cuda AND _elastrun_torch_nccl)
  set(_elastrun_cuda_default ON)
else()
  set(_elastrun_cuda_default OFF)
endif()
set(ELASTRUN_WITH_CUDA ${_elastrun_cuda_default} CACHE BOOL
    "Build the NCCL process group and the CUDA path (default: ON when LibTorch has CUDA and NCCL)")

if(ELASTRUN_WITH_CUDA)
  if(NOT ELASTRUN_WITH_TORCH)
    message(FATAL_ERROR "ELASTRUN_WITH_CUDA=ON needs ELASTRUN_WITH_TORCH=ON (the CUDA "
                        "path is LibTorch's)")
  elseif(NOT _elastrun_torch_cuda)
    message(FATAL_ERROR "ELASTRUN_WITH_CUDA=ON, but the LibTorch found (${Torch_DIR}) "
                        "has no CUDA (no torch_cuda target): point Torch_DIR at a CUDA "
                        "build of LibTorch, or configure with -DELASTRUN_WITH_CUDA=OFF")
  elseif(NOT _elastrun_torch_nccl)
    message(FATAL_ERROR "ELASTRUN_WITH_CUDA=ON, but the LibTorch found (${Torch_DIR}) "
                        "was built without NCCL (torch_cuda does not define "
                        "USE_C10D_NCCL): use a LibTorch with NCCL, or configure with "
                        "-DELASTRUN_WITH_CUDA=OFF")
  endif()
  if(_elastrun_cuda_version)
    set(ELASTRUN_BUILD_FEATURES "CUDA ${_elastrun_cuda_version}, NCCL on")
  else()
    set(ELASTRUN_BUILD_FEATURES "CUDA on, NCCL on")
  endif()
else()
  set(ELASTRUN_BUILD_FEATURES "CUDA off")
endif()
message(STATUS "elastrun: ${ELASTRUN_BUILD_FEATURES}")
