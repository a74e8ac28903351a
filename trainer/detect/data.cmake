# The detector's data (trainer/detect/README.md, "Data"), torch-free:
#   elastrun_detect_data      image decoding and encoding (stb_image), data.yaml,
#                             YOLOv5 label files and seed 004's annotation lines,
#                             the dataset index (data.h)
#   elastrun_detect_generate  the Fashion-MNIST detection dataset generator
#   elastrun-detect-data      its command line
# Debian's libstb-dev ships stb_image and stb_image_write built into libstb.
find_path(STB_INCLUDE_DIR stb_image.h PATH_SUFFIXES stb REQUIRED)
find_library(STB_LIBRARY stb REQUIRED)

add_library(elastrun_detect_data
  data.cc
  data_labels.cc
  data_list.cc
  data_yaml.cc
  image.cc
)
target_include_directories(elastrun_detect_data PUBLIC ${PROJECT_SOURCE_DIR}
                                               PRIVATE ${STB_INCLUDE_DIR})
target_link_libraries(elastrun_detect_data
  PUBLIC absl::status absl::statusor absl::strings
  PRIVATE elastrun_config absl::cleanup absl::str_format ${STB_LIBRARY} Threads::Threads)
target_compile_options(elastrun_detect_data PRIVATE ${ELASTRUN_WARNINGS})

add_library(elastrun_detect_generate generate.cc generate_render.cc)
target_link_libraries(elastrun_detect_generate
  PUBLIC elastrun_detect_data
  PRIVATE elastrun_trainer_core elastrun_common absl::str_format absl::synchronization
          Threads::Threads)
target_compile_options(elastrun_detect_generate PRIVATE ${ELASTRUN_WARNINGS})

add_executable(elastrun-detect-data generate_main.cc)
target_link_libraries(elastrun-detect-data PRIVATE elastrun_detect_generate elastrun_flags)
target_compile_options(elastrun-detect-data PRIVATE ${ELASTRUN_WARNINGS})

if(ELASTRUN_BUILD_TESTS)
  find_package(JPEG REQUIRED)  # libjpeg-turbo: a second decoder to check ours against
  set(ELASTRUN_DETECT_DATA_TEST_DIR "${CMAKE_CURRENT_BINARY_DIR}/test_tmp")
  elastrun_test(detect_data_test
    SOURCES data_test.cc data_labels_test.cc data_reference_test.cc data_yaml_test.cc image_test.cc
            generate_test.cc
    LIBS elastrun_detect_generate elastrun_trainer_core JPEG::JPEG nlohmann_json::nlohmann_json)
  target_compile_definitions(detect_data_test PRIVATE
    ELASTRUN_TRAINER_TEST_DIR="${ELASTRUN_DETECT_DATA_TEST_DIR}"
    ELASTRUN_DETECT_DATA_REFERENCE="${CMAKE_CURRENT_SOURCE_DIR}/data_reference.py"
    ELASTRUN_DETECT_DATA_BINARY="$<TARGET_FILE:elastrun-detect-data>")
  add_dependencies(detect_data_test elastrun-detect-data)
endif()
