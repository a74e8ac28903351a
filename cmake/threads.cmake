# Thread checks: clang's thread-safety analysis.
#
# With clang, ABSL_GUARDED_BY and friends are checked at compile time, as
# errors: an annotation that the code does not honour breaks the build. GCC
# (the default build) has no such analysis: configure with CC=clang
# CXX=clang++ to check them.
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # -Wthread-safety = -analysis, -attributes, -precise and -reference.
  # -beta and -negative are left out: -negative wants every function that
  # takes a lock to declare that it is not held (ABSL_LOCKS_EXCLUDED
  # everywhere), which Abseil's own headers do not do.
  list(APPEND ELASTRUN_WARNINGS -Wthread-safety -Werror=thread-safety)
endif()
