# Helpers shared by every component's CMakeLists.txt.

# elastrun_test(NAME SOURCES... LIBS ...): a GoogleTest binary registered
# with ctest, one ctest entry per TEST so failures name the test.
function(elastrun_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${ELASTRUN_WARNINGS})
  elastrun_tsan_executable(${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()

set(ELASTRUN_WARNINGS -Wall -Wextra -Wno-unused-parameter)

include(${CMAKE_CURRENT_LIST_DIR}/threads.cmake)
