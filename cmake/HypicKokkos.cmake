# Kokkos discovery with a fix-up for Debian 12's Trilinos build of Kokkos 3.4.1, whose
# imported targets carry a non-existent include directory (/usr/lib/include).
# A user's own Kokkos 4 (OpenMP or CUDA) found through -DKokkos_ROOT is used as it is.
# Result: the INTERFACE target hypic::kokkos, with Kokkos headers as SYSTEM includes, and
# HYPIC_KOKKOS_VERSION / HYPIC_KOKKOS_BACKENDS for the configure summary.

find_package(Kokkos CONFIG REQUIRED)

add_library(hypic_kokkos INTERFACE)
add_library(hypic::kokkos ALIAS hypic_kokkos)

set(_hypic_kokkos_target_ok FALSE)
if(TARGET Kokkos::kokkos)
  set(_hypic_kokkos_target_ok TRUE)
  get_target_property(_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  if(_kk_inc)
    foreach(_dir IN LISTS _kk_inc)
      if(NOT _dir MATCHES "^\\$<" AND NOT EXISTS "${_dir}")
        message(STATUS "Kokkos::kokkos lists a missing include dir '${_dir}': using fix-up")
        set(_hypic_kokkos_target_ok FALSE)
      endif()
    endforeach()
  endif()
  # The Trilinos-packaged config defines Kokkos::kokkos in terms of trilinos_* libraries.
  if(Kokkos_LIBRARIES MATCHES "trilinos_kokkoscore")
    set(_hypic_kokkos_target_ok FALSE)
  endif()
endif()

if(_hypic_kokkos_target_ok)
  target_link_libraries(hypic_kokkos INTERFACE Kokkos::kokkos)
  get_target_property(_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
  set(_hypic_kokkos_headers "")
  foreach(_dir IN LISTS _kk_inc)
    if(EXISTS "${_dir}/KokkosCore_config.h")
      set(_hypic_kokkos_headers "${_dir}")
    endif()
  endforeach()
  set(HYPIC_KOKKOS_FLAVOUR "Kokkos::kokkos target")
else()
  # Build the target by hand from the variables the config file does get right.
  find_path(_hypic_kokkos_headers KokkosCore_config.h
            HINTS ${Kokkos_INCLUDE_DIRS} /usr/include/trilinos REQUIRED)
  set(_kk_libs "")
  foreach(_lib IN LISTS Kokkos_LIBRARIES)
    find_library(_kk_lib_${_lib} NAMES ${_lib} HINTS ${Kokkos_LIBRARY_DIRS} REQUIRED)
    list(APPEND _kk_libs "${_kk_lib_${_lib}}")
  endforeach()
  target_include_directories(hypic_kokkos SYSTEM INTERFACE "${_hypic_kokkos_headers}")
  target_link_libraries(hypic_kokkos INTERFACE ${_kk_libs} ${CMAKE_DL_LIBS})
  set(HYPIC_KOKKOS_FLAVOUR "fix-up of the Trilinos package (headers ${_hypic_kokkos_headers})")
endif()

# Version and backends, read from the installed configuration header.
set(HYPIC_KOKKOS_VERSION "unknown")
set(HYPIC_KOKKOS_BACKENDS "")
if(_hypic_kokkos_headers AND EXISTS "${_hypic_kokkos_headers}/KokkosCore_config.h")
  file(STRINGS "${_hypic_kokkos_headers}/KokkosCore_config.h" _kk_cfg
       REGEX "#define KOKKOS_(VERSION|ENABLE_(SERIAL|OPENMP|THREADS|CUDA|HIP|SYCL|HPX))[ \t]*")
  foreach(_line IN LISTS _kk_cfg)
    if(_line MATCHES "#define KOKKOS_VERSION[ \t]+([0-9]+)")
      math(EXPR _maj "${CMAKE_MATCH_1} / 10000")
      math(EXPR _min "${CMAKE_MATCH_1} / 100 % 100")
      math(EXPR _pat "${CMAKE_MATCH_1} % 100")
      set(HYPIC_KOKKOS_VERSION "${_maj}.${_min}.${_pat}")
    elseif(_line MATCHES "#define KOKKOS_ENABLE_([A-Z]+)")
      list(APPEND HYPIC_KOKKOS_BACKENDS "${CMAKE_MATCH_1}")
    endif()
  endforeach()
elseif(DEFINED Kokkos_VERSION)
  set(HYPIC_KOKKOS_VERSION "${Kokkos_VERSION}")
  set(HYPIC_KOKKOS_BACKENDS "${Kokkos_DEVICES}")
endif()
list(REMOVE_DUPLICATES HYPIC_KOKKOS_BACKENDS)
