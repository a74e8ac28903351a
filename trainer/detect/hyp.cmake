# YOLOv5's hyperparameters (hyp.h): hyp.yaml and the config's `hyp:`
# section, checked key by key; torch-free.
add_library(elastrun_detect_hyp hyp.cc)
target_include_directories(elastrun_detect_hyp PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(elastrun_detect_hyp PUBLIC elastrun_config absl::status absl::statusor
                      PRIVATE absl::strings)
target_compile_options(elastrun_detect_hyp PRIVATE ${ELASTRUN_WARNINGS})

if(ELASTRUN_BUILD_TESTS)
  elastrun_test(hyp_test
    SOURCES hyp_test.cc
    LIBS elastrun_detect_hyp)
  target_compile_definitions(hyp_test PRIVATE
    ELASTRUN_TRAINER_TEST_DIR="${CMAKE_CURRENT_BINARY_DIR}/test_tmp")
endif()
