# The cluster presets of `braid plan --cluster`: each TOML file in
# src/braid/plan/clusters/ becomes one {name, text} entry of a generated
# include (build/generated/braid/plan/cluster_presets.inc), so a new preset
# is one data file. Re-run at configure time whenever a preset file changes.
file(GLOB BRAID_CLUSTER_PRESETS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/braid/plan/clusters/*.toml)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${BRAID_CLUSTER_PRESETS})
set(BRAID_CLUSTER_PRESET_ENTRIES "// Generated from src/braid/plan/clusters/*.toml; do not edit.\n")
foreach(preset ${BRAID_CLUSTER_PRESETS})
  get_filename_component(name ${preset} NAME_WLE)
  file(READ ${preset} text)
  string(FIND "${text}" ")braid_toml\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${preset} contains the raw-string delimiter )braid_toml\"")
  endif()
  string(APPEND BRAID_CLUSTER_PRESET_ENTRIES "{\"${name}\", R\"braid_toml(${text})braid_toml\"},\n")
endforeach()
# Copied only when it changes, so a re-configure does not rebuild cluster.cpp
# (COPYONLY: nothing in a preset is substituted).
file(WRITE ${CMAKE_BINARY_DIR}/generated/cluster_presets.inc.tmp "${BRAID_CLUSTER_PRESET_ENTRIES}")
configure_file(${CMAKE_BINARY_DIR}/generated/cluster_presets.inc.tmp
               ${CMAKE_BINARY_DIR}/generated/braid/plan/cluster_presets.inc COPYONLY)
