# The detector's augmentations and batch loader (trainer/detect/README.md,
# "Loading and augmentation"), torch-free:
#   elastrun_detect_loader        resample.h (resize, warp), augment.h
#                                 (YOLOv5's augmentations on RGB images) and
#                                 loader.h (threaded batches)
#   elastrun-detect-loader-bench  the loader's images/s alone
add_library(elastrun_detect_loader augment.cc loader.cc resample.cc)
target_include_directories(elastrun_detect_loader PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(elastrun_detect_loader
  PUBLIC elastrun_detect_data absl::status absl::statusor absl::synchronization
  PRIVATE elastrun_common absl::strings Threads::Threads)
target_compile_options(elastrun_detect_loader PRIVATE ${ELASTRUN_WARNINGS})

add_executable(elastrun-detect-loader-bench loader_bench.cc)
target_link_libraries(elastrun-detect-loader-bench PRIVATE elastrun_detect_loader elastrun_flags)
target_compile_options(elastrun-detect-loader-bench PRIVATE ${ELASTRUN_WARNINGS})

if(ELASTRUN_BUILD_TESTS)
  elastrun_test(detect_loader_test
    SOURCES augment_test.cc loader_test.cc  # augment_test covers resample.h too
    LIBS elastrun_detect_loader elastrun_detect_generate)
  target_compile_definitions(detect_loader_test PRIVATE
    ELASTRUN_TRAINER_TEST_DIR="${CMAKE_CURRENT_BINARY_DIR}/test_tmp")
endif()
