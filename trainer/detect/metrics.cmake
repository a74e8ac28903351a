# Boxes, NMS, AP / mAP and fitness (included by trainer/detect/CMakeLists.txt).
#   elastrun_detect_ap (torch-free): YOLOv5's matching of predictions to
#     labels, AP per class, fitness, and the evaluation's accumulator.
#   elastrun_detect_coco (torch-free): the val set and the predictions as
#     COCO JSON.
#   elastrun_detect_boxes (torch): IoU, GIoU, DIoU, CIoU, NMS.
# The tests compare both against python3-torchvision and a Python
# transcription of YOLOv5's ops and metrics (skipped where /usr/bin/python3
# lacks them).
# -ffp-contract=off: no fused multiply-adds, so the arithmetic is that of
# the references (numpy, torchvision's CPU kernels) on every machine.
add_library(elastrun_detect_ap ap.cc)
target_link_libraries(elastrun_detect_ap PUBLIC elastrun_common absl::status absl::statusor
                                                absl::span absl::strings)
target_compile_options(elastrun_detect_ap PRIVATE ${ELASTRUN_WARNINGS} -ffp-contract=off)

add_library(elastrun_detect_coco coco.cc)
target_link_libraries(elastrun_detect_coco PUBLIC elastrun_common absl::status absl::statusor
                                                  absl::span absl::strings
                                           PRIVATE nlohmann_json::nlohmann_json)
target_compile_options(elastrun_detect_coco PRIVATE ${ELASTRUN_WARNINGS})

if(ELASTRUN_WITH_TORCH)
  add_library(elastrun_detect_boxes boxes.cc)
  target_link_libraries(elastrun_detect_boxes PUBLIC elastrun_common absl::status absl::statusor
                                                     absl::strings ${TORCH_LIBRARIES})
  target_compile_options(elastrun_detect_boxes PRIVATE ${ELASTRUN_WARNINGS} -ffp-contract=off)
endif()

set(ELASTRUN_DETECT_METRICS_TEST_DIR "${CMAKE_CURRENT_BINARY_DIR}/metrics_test_tmp")
if(ELASTRUN_BUILD_TESTS)
  elastrun_test(detect_metrics_test
    SOURCES ap_test.cc coco_test.cc
    LIBS elastrun_detect_ap elastrun_detect_coco)
  target_compile_definitions(detect_metrics_test PRIVATE
    ELASTRUN_TRAINER_TEST_DIR="${ELASTRUN_DETECT_METRICS_TEST_DIR}")
endif()
if(ELASTRUN_BUILD_TESTS AND ELASTRUN_WITH_TORCH)
  elastrun_test(detect_boxes_test SOURCES boxes_test.cc LIBS elastrun_detect_boxes)
  target_compile_definitions(detect_boxes_test PRIVATE
    ELASTRUN_TRAINER_TEST_DIR="${ELASTRUN_DETECT_METRICS_TEST_DIR}")
endif()
