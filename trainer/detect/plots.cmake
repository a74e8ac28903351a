# The detector's plots as SVG (included by trainer/detect/CMakeLists.txt).
#   elastrun_detect_plots (torch-free): results.csv's losses and metrics
#     per epoch, the labels' classes, centres and sizes, and the PR curve,
#     drawn with trainer/svg.h (elastrun_trainer_core).
add_library(elastrun_detect_plots plots.cc)
target_include_directories(elastrun_detect_plots PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(elastrun_detect_plots
  PUBLIC absl::status absl::statusor
  PRIVATE elastrun_trainer_core absl::strings absl::str_format)
target_compile_options(elastrun_detect_plots PRIVATE ${ELASTRUN_WARNINGS})

if(ELASTRUN_BUILD_TESTS)
  elastrun_test(detect_plots_test SOURCES plots_test.cc LIBS elastrun_detect_plots)
  target_compile_definitions(detect_plots_test PRIVATE
    ELASTRUN_TRAINER_TEST_DIR="${CMAKE_CURRENT_BINARY_DIR}/plots_test_tmp")
endif()
