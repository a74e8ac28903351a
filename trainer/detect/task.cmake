# The detector task of elastrun-train (trainer/task.h): an OBJECT library,
# so that its registration for `_target_: YoloV5` is never dropped by the
# linker; elastrun-train links it.
if(ELASTRUN_WITH_TORCH)
  add_library(elastrun_detect_task OBJECT task.cc)
  target_link_libraries(elastrun_detect_task PUBLIC
    elastrun_detect_model elastrun_detect_data elastrun_detect_anchors elastrun_detect_ap
    elastrun_detect_coco elastrun_detect_hyp elastrun_detect_loader elastrun_detect_plots)
  target_compile_options(elastrun_detect_task PRIVATE ${ELASTRUN_WARNINGS})
  target_precompile_headers(elastrun_detect_task REUSE_FROM elastrun_trainer)
  target_link_libraries(elastrun-train PRIVATE elastrun_detect_task elastrun_detect_model)
endif()
