# The model and its loss (LibTorch): an OBJECT library, so that its
# `_target_` registrations are never dropped by the linker.
if(ELASTRUN_WITH_TORCH)
  add_library(elastrun_detect_model OBJECT model.cc loss.cc sync_bn.cc ema.cc)
  target_link_libraries(elastrun_detect_model PUBLIC elastrun_trainer elastrun_detect_boxes)
  target_compile_options(elastrun_detect_model PRIVATE ${ELASTRUN_WARNINGS})
  target_precompile_headers(elastrun_detect_model REUSE_FROM elastrun_trainer)
  if(ELASTRUN_BUILD_TESTS)
    elastrun_test(detect_model_test
      SOURCES model_test.cc loss_test.cc ema_test.cc
      LIBS elastrun_detect_model)
    target_precompile_headers(detect_model_test REUSE_FROM elastrun_trainer)
    # Two ranks as threads with Gloo groups (trainer_test_util.h).
    elastrun_test(detect_sync_bn_test
      SOURCES sync_bn_test.cc
      LIBS elastrun_detect_model elastrun_worker)
    target_precompile_headers(detect_sync_bn_test REUSE_FROM elastrun_trainer)
    target_compile_definitions(detect_sync_bn_test PRIVATE
      ELASTRUN_TRAINER_TEST_DIR="${CMAKE_CURRENT_BINARY_DIR}/test_tmp")
  endif()
endif()
