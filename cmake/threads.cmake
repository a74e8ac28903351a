# Thread checks: clang's thread-safety analysis and ThreadSanitizer.
#
# With clang, ABSL_GUARDED_BY and friends are checked at compile time, as
# errors: an annotation that the code does not honour breaks the build. GCC
# (the default build) has no such analysis; scripts/check_threads.sh runs the
# clang build that checks them.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # -Wthread-safety = -analysis, -attributes, -precise and -reference.
  # -beta and -negative are left out: -negative wants every function that
  # takes a lock to declare that it is not held (ABSL_LOCKS_EXCLUDED
  # everywhere), which Abseil's own headers do not do.
  list(APPEND ELASTRUN_WARNINGS -Wthread-safety -Werror=thread-safety)

  # The flags must catch a guarded member written without its lock (with
  # Abseil's macros, as our code uses them); a build where they do not would
  # pass the check without checking anything.
  include(CheckCXXSourceCompiles)
  string(REPLACE ";" " " CMAKE_REQUIRED_FLAGS "${ELASTRUN_WARNINGS}")
  set(CMAKE_REQUIRED_QUIET ON)
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)  # compile only, no link
  set(probe [[
    #include "absl/base/thread_annotations.h"
    #include "absl/synchronization/mutex.h"
    struct S {
      absl::Mutex mu;
      int x ABSL_GUARDED_BY(mu) = 0;
      void Write() { LOCK x = 1; }
    };
    int main() { S s; s.Write(); }
  ]])
  string(REPLACE "LOCK" "absl::MutexLock lock(&mu);" locked "${probe}")
  string(REPLACE "LOCK" "" unlocked "${probe}")
  check_cxx_source_compiles("${locked}" ELASTRUN_LOCKED_WRITE_COMPILES)
  check_cxx_source_compiles("${unlocked}" ELASTRUN_UNLOCKED_WRITE_COMPILES)
  unset(CMAKE_REQUIRED_FLAGS)
  unset(CMAKE_REQUIRED_QUIET)
  unset(CMAKE_TRY_COMPILE_TARGET_TYPE)
  if(NOT ELASTRUN_LOCKED_WRITE_COMPILES)
    message(FATAL_ERROR "cannot compile the thread-safety probe (Abseil's headers?); "
                        "see CMakeFiles/CMakeError.log")
  endif()
  if(ELASTRUN_UNLOCKED_WRITE_COMPILES)
    message(FATAL_ERROR "-Wthread-safety does not reject a write of an ABSL_GUARDED_BY "
                        "member without its lock: the thread-safety check would check nothing")
  endif()
endif()

# ELASTRUN_TSAN (an option of the top-level CMakeLists.txt): everything built
# with ThreadSanitizer (clang only, torch off: LibTorch is not instrumented).
# scripts/check_threads.sh configures it in build-tsan/. Debian's Abseil,
# gRPC and protobuf are not instrumented:
# tests/tsan/absl_sync.cc tells TSan about absl::Mutex, and
# tests/tsan/tsan.supp lists what is left inside those libraries.
if(ELASTRUN_TSAN)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ELASTRUN_TSAN=ON needs clang (CC=clang CXX=clang++), "
                        "not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(ELASTRUN_WITH_TORCH)
    message(FATAL_ERROR "ELASTRUN_TSAN=ON needs -DELASTRUN_WITH_TORCH=OFF "
                        "(LibTorch is not instrumented)")
  endif()
  # Full debug info (-g after the build type's -g1): tests/tsan/tsan.supp
  # names gRPC's inlined frames by their qualified names
  # (grpc::internal::CallbackWithSuccessTag::Set), which line tables alone
  # give only as "Set", so the suppressions would miss.
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=thread)
endif()

# elastrun_tsan_executable(TARGET): in a TSan build, gives an executable the
# absl::Mutex annotations (tests/tsan/absl_sync.cc). They must be in the
# executable itself to come first in symbol lookup; elsewhere this is a no-op.
function(elastrun_tsan_executable target)
  if(ELASTRUN_TSAN)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/tsan/absl_sync.cc)
    target_link_libraries(${target} PRIVATE absl::synchronization absl::time ${CMAKE_DL_LIBS})
  endif()
endfunction()
