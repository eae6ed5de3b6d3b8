# libkolo: the core (common, ops, rendezvous, timeline, backends, coordinator) as one library,
# Kolo::kolo, whose interface is the public API of include/kolo/ and nothing else.
get_property(kolo_built_backends GLOBAL PROPERTY KOLO_BUILT_BACKENDS)
set(kolo_core_parts kolo_common kolo_ops kolo_rendezvous kolo_timeline kolo_backend_api
    kolo_channel_backend kolo_backends kolo_coordinator)
foreach(b ${kolo_built_backends})
  list(APPEND kolo_core_parts kolo_backend_${b})
endforeach()
set(kolo_core_link Threads::Threads ZLIB::ZLIB)  # zlib: gzip timelines (KOLO_TIMELINE=*.gz)
if(KOLO_HAVE_MPI)
  list(APPEND kolo_core_link MPI::MPI_CXX)
endif()
if(KOLO_HAVE_CUDA)
  list(APPEND kolo_core_link CUDA::cudart)
endif()
kolo_umbrella_library(kolo PARTS ${kolo_core_parts} LINK ${kolo_core_link})
add_library(Kolo::kolo ALIAS kolo)
target_include_directories(kolo PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                       $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
if(BUILD_SHARED_LIBS)
  target_link_options(kolo PRIVATE LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/libkolo.map)
  set_property(TARGET kolo APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/libkolo.map)
endif()
