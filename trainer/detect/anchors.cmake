# AutoAnchor (autoanchor.h): torch-free, so it builds without LibTorch.
# -ffp-contract=off: no fused multiply-adds, so the anchors found for a
# seed are the same bits on every machine (FMA rounds differently).
add_library(elastrun_detect_anchors autoanchor.cc)
target_include_directories(elastrun_detect_anchors PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(elastrun_detect_anchors PUBLIC
  absl::status absl::statusor absl::strings absl::str_format absl::span)
target_compile_options(elastrun_detect_anchors PRIVATE ${ELASTRUN_WARNINGS} -ffp-contract=off)

if(ELASTRUN_BUILD_TESTS)
  elastrun_test(autoanchor_test
    SOURCES autoanchor_test.cc
    LIBS elastrun_detect_anchors)
  target_compile_definitions(autoanchor_test PRIVATE
    ELASTRUN_TRAINER_TEST_DIR="${CMAKE_CURRENT_BINARY_DIR}/test_tmp")
endif()
