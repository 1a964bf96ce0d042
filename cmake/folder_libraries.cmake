# braid_folder_library(FOLDER DEPS...): the static library braid_FOLDER from every
# .cpp under src/braid/FOLDER, linking braid_DEP for each DEP (the folders its
# sources include). Usage requirements shared by all (include path, dnnl, OpenMP,
# threads, JSON, zlib, the source directory) are attached to braid_core.
function(braid_folder_library folder)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/braid/${folder}/*.cpp)
  if(NOT BRAID_WITH_MPI)
    list(FILTER srcs EXCLUDE REGEX ".*/backends/mpi.*\\.cpp$")
  endif()
  set(lib braid_${folder})
  if(srcs)
    add_library(${lib} STATIC ${srcs})
    set(scope PUBLIC)
  else()
    add_library(${lib} INTERFACE)
    set(scope INTERFACE)
  endif()
  foreach(dep ${ARGN})
    target_link_libraries(${lib} ${scope} braid_${dep})
  endforeach()
  if(folder STREQUAL "core")
    target_include_directories(${lib} ${scope} ${CMAKE_SOURCE_DIR}/src ${DNNL_INCLUDE_DIR})
    target_link_libraries(${lib} ${scope} ${DNNL_LIBRARY} ${BRAID_OPENMP} Threads::Threads
                          nlohmann_json::nlohmann_json ZLIB::ZLIB)
    target_compile_definitions(${lib} ${scope} BRAID_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  endif()
endfunction()
